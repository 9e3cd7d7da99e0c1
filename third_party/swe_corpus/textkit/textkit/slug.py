"""Slugs and truncation."""
import unicodedata

_SEPARATORS = " _-./\\"


def strip_accents(text):
    """Removes combining accents: 'Crème' -> 'Creme'."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def slugify(text, sep="-", max_length=None, lowercase=True):
    """A URL slug: accents removed, runs of separators and punctuation collapsed to ``sep``.

    >>> slugify("Hello, World!")
    'hello-world'
    """
    if not isinstance(text, str):
        raise TypeError("slugify expects a string")
    text = strip_accents(text)
    if lowercase:
        text = text.lower()
    parts = []
    word = []
    for ch in text:
        if ch.isalnum():
            word.append(ch)
        elif ch in _SEPARATORS or not ch.isalnum():
            if word:
                parts.append("".join(word))
                word = []
    if word:
        parts.append("".join(word))
    slug = sep.join(parts)
    if max_length is not None and len(slug) > max_length:
        cut_in_word = slug[max_length] != sep
        slug = slug[:max_length]
        if cut_in_word:
            cut = slug.rfind(sep)
            if cut > 0:
                slug = slug[:cut]
        slug = slug.rstrip(sep)
    return slug


def truncate(text, width, ellipsis="...", whole_words=False):
    """Shortens ``text`` to at most ``width`` characters, ending with ``ellipsis`` if cut."""
    if width < 0:
        raise ValueError("width must be non-negative")
    if len(text) <= width:
        return text
    if width <= len(ellipsis):
        return ellipsis[:width]
    keep = width - len(ellipsis)
    head = text[:keep]
    if whole_words and " " in head:
        if text[keep] != " ":
            head = head[:head.rfind(" ")]
        head = head.rstrip()
    return head + ellipsis


def count_words(text):
    """Number of whitespace-separated words."""
    return len(text.split())


def initials(name, max_letters=3):
    """'Ada Lovelace King' -> 'ALK' (at most ``max_letters``)."""
    letters = [w[0].upper() for w in name.split() if w]
    return "".join(letters[:max_letters])
