"""Serializing Python values to JSON text."""
import math

_ESCAPE_MAP = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
               "\f": "\\f"}


def encode_string(s, ensure_ascii=True):
    out = ['"']
    for ch in s:
        if ch in _ESCAPE_MAP:
            out.append(_ESCAPE_MAP[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        elif ensure_ascii and ord(ch) > 0x7E:
            code = ord(ch)
            if code > 0xFFFF:
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def encode_number(x, allow_nan=False):
    if isinstance(x, bool):
        raise TypeError("booleans are not numbers here")
    if isinstance(x, int):
        return str(x)
    if math.isnan(x) or math.isinf(x):
        if not allow_nan:
            raise ValueError(f"{x!r} is not JSON compliant")
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    text = repr(x)
    return text


class Encoder:
    def __init__(self, indent=None, sort_keys=False, ensure_ascii=True, allow_nan=False,
                 separators=None):
        self.indent = indent
        self.sort_keys = sort_keys
        self.ensure_ascii = ensure_ascii
        self.allow_nan = allow_nan
        if separators is None:
            separators = (", ", ": ") if indent is None else (",", ": ")
        self.item_sep, self.key_sep = separators

    def encode(self, value, level=0):
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if isinstance(value, str):
            return encode_string(value, self.ensure_ascii)
        if isinstance(value, (int, float)):
            return encode_number(value, self.allow_nan)
        if isinstance(value, (list, tuple)):
            return self.encode_list(value, level)
        if isinstance(value, dict):
            return self.encode_dict(value, level)
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    def _newline(self, level):
        if self.indent is None:
            return ""
        return "\n" + " " * (self.indent * level)

    def encode_list(self, items, level):
        if not items:
            return "[]"
        parts = [self.encode(v, level + 1) for v in items]
        if self.indent is None:
            return "[" + self.item_sep.join(parts) + "]"
        inner = self._newline(level + 1)
        sep = self.item_sep.rstrip() + inner
        return "[" + inner + sep.join(parts) + self._newline(level) + "]"

    def encode_dict(self, mapping, level):
        if not mapping:
            return "{}"
        keys = list(mapping)
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"keys must be str, got {type(k).__name__}")
        if self.sort_keys:
            keys.sort()
        parts = [encode_string(k, self.ensure_ascii) + self.key_sep +
                 self.encode(mapping[k], level + 1) for k in keys]
        if self.indent is None:
            return "{" + self.item_sep.join(parts) + "}"
        inner = self._newline(level + 1)
        sep = self.item_sep.rstrip() + inner
        return "{" + inner + sep.join(parts) + self._newline(level) + "}"


def dumps(value, indent=None, sort_keys=False, ensure_ascii=True, allow_nan=False,
          separators=None):
    return Encoder(indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii,
                   allow_nan=allow_nan, separators=separators).encode(value)
