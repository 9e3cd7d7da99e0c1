"""Case conversion."""

SMALL_WORDS = frozenset({"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on",
                         "or", "the", "to", "via"})


def camel_to_snake(name):
    """'parseHTTPResponse' -> 'parse_http_response'."""
    out = []
    n = len(name)
    for i, ch in enumerate(name):
        if ch.isupper():
            prev_lower = i > 0 and (name[i - 1].islower() or name[i - 1].isdigit())
            next_lower = i + 1 < n and name[i + 1].islower()
            prev_upper = i > 0 and name[i - 1].isupper()
            if i > 0 and (prev_lower or (prev_upper and next_lower)):
                out.append("_")
            out.append(ch.lower())
        else:
            out.append(ch)
    return "".join(out)


def snake_to_camel(name, upper_first=False):
    """'parse_http_response' -> 'parseHttpResponse' (or 'ParseHttpResponse')."""
    parts = [p for p in name.split("_") if p]
    if not parts:
        return ""
    head = parts[0].capitalize() if upper_first else parts[0].lower()
    return head + "".join(p.capitalize() for p in parts[1:])


def title_case(text):
    """Title case that keeps short function words lowercase, except first and last."""
    words = text.split()
    out = []
    last = len(words) - 1
    for i, word in enumerate(words):
        lower = word.lower()
        if 0 < i < last and lower in SMALL_WORDS:
            out.append(lower)
        elif word.isupper() and len(word) > 1:
            out.append(word)
        else:
            out.append(lower[:1].upper() + lower[1:])
    return " ".join(out)


def swap_case_words(text, min_length=4):
    """Upper-cases words of at least ``min_length`` characters, lower-cases the others."""
    return " ".join(w.upper() if len(w) >= min_length else w.lower() for w in text.split(" "))
