"""Wrapping and alignment."""


def wrap(text, width=70, break_long_words=True):
    """Greedy word wrap into lines of at most ``width`` characters."""
    if width <= 0:
        raise ValueError("width must be positive")
    lines = []
    line = ""
    for word in text.split():
        while break_long_words and len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if not word:
            continue
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line = line + " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def center(text, width, fill=" "):
    """Centres ``text``; an odd leftover goes to the right."""
    if len(fill) != 1:
        raise ValueError("fill must be one character")
    if len(text) >= width:
        return text
    total = width - len(text)
    left = total // 2
    right = total - left
    return fill * left + text + fill * right


def indent_lines(text, prefix="    ", skip_blank=True):
    """Prefixes every line (blank lines untouched when ``skip_blank``)."""
    out = []
    for line in text.split("\n"):
        if skip_blank and not line.strip():
            out.append(line)
        else:
            out.append(prefix + line)
    return "\n".join(out)


def dedent(text):
    """Removes the common leading spaces of the non-blank lines."""
    lines = text.split("\n")
    margins = [len(l) - len(l.lstrip(" ")) for l in lines if l.strip()]
    if not margins:
        return text
    cut = min(margins)
    return "\n".join(l[cut:] if l.strip() else l for l in lines)


def columns(rows, sep="  "):
    """Left-aligns a table of strings into columns."""
    if not rows:
        return []
    ncols = max(len(r) for r in rows)
    widths = [0] * ncols
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    out = []
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        out.append(sep.join(cells).rstrip())
    return out
