"""A recursive-descent JSON parser (RFC 8259) with line/column error positions."""

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
            "t": "\t"}
_WHITESPACE = " \t\n\r"


class JSONDecodeError(ValueError):
    def __init__(self, message, text, pos):
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        super().__init__(f"{message}: line {line} column {column} (char {pos})")
        self.msg = message
        self.pos = pos
        self.line = line
        self.column = column


class Parser:
    def __init__(self, text, max_depth=100):
        self.text = text
        self.pos = 0
        self.depth = 0
        self.max_depth = max_depth

    def error(self, message, pos=None):
        return JSONDecodeError(message, self.text, self.pos if pos is None else pos)

    def skip_ws(self):
        n = len(self.text)
        while self.pos < n and self.text[self.pos] in _WHITESPACE:
            self.pos += 1

    def peek(self):
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, literal):
        if not self.text.startswith(literal, self.pos):
            raise self.error(f"expected {literal!r}")
        self.pos += len(literal)

    def parse_value(self):
        self.skip_ws()
        ch = self.peek()
        if ch == "{":
            return self.parse_object()
        if ch == "[":
            return self.parse_array()
        if ch == '"':
            return self.parse_string()
        if ch == "t":
            self.expect("true")
            return True
        if ch == "f":
            self.expect("false")
            return False
        if ch == "n":
            self.expect("null")
            return None
        if ch == "-" or ch.isdigit():
            return self.parse_number()
        if not ch:
            raise self.error("unexpected end of input")
        raise self.error(f"unexpected character {ch!r}")

    def enter(self):
        self.depth += 1
        if self.depth > self.max_depth:
            raise self.error("maximum nesting depth exceeded")

    def parse_object(self):
        self.enter()
        self.pos += 1
        result = {}
        self.skip_ws()
        if self.peek() == "}":
            self.pos += 1
            self.depth -= 1
            return result
        while True:
            self.skip_ws()
            if self.peek() != '"':
                raise self.error("expected a string key")
            key = self.parse_string()
            self.skip_ws()
            self.expect(":")
            result[key] = self.parse_value()
            self.skip_ws()
            ch = self.peek()
            if ch == ",":
                self.pos += 1
                continue
            if ch == "}":
                self.pos += 1
                break
            raise self.error("expected ',' or '}'")
        self.depth -= 1
        return result

    def parse_array(self):
        self.enter()
        self.pos += 1
        result = []
        self.skip_ws()
        if self.peek() == "]":
            self.pos += 1
            self.depth -= 1
            return result
        while True:
            result.append(self.parse_value())
            self.skip_ws()
            ch = self.peek()
            if ch == ",":
                self.pos += 1
                continue
            if ch == "]":
                self.pos += 1
                break
            raise self.error("expected ',' or ']'")
        self.depth -= 1
        return result

    def parse_string(self):
        start = self.pos
        self.pos += 1
        chunks = []
        text = self.text
        while True:
            if self.pos >= len(text):
                raise self.error("unterminated string", start)
            ch = text[self.pos]
            if ch == '"':
                self.pos += 1
                return "".join(chunks)
            if ch == "\\":
                self.pos += 1
                esc = self.peek()
                if esc == "u":
                    chunks.append(self.parse_unicode_escape())
                    continue
                if esc not in _ESCAPES:
                    raise self.error(f"invalid escape {esc!r}")
                chunks.append(_ESCAPES[esc])
                self.pos += 1
                continue
            if ord(ch) < 0x20:
                raise self.error("control character in string")
            chunks.append(ch)
            self.pos += 1

    def read_hex4(self):
        digits = self.text[self.pos + 1:self.pos + 5]
        if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
            raise self.error("invalid \\u escape")
        self.pos += 5
        return int(digits, 16)

    def parse_unicode_escape(self):
        code = self.read_hex4()
        if 0xD800 <= code <= 0xDBFF and self.text.startswith("\\u", self.pos):
            self.pos += 1
            low = self.read_hex4()
            if 0xDC00 <= low <= 0xDFFF:
                return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))
            return chr(code) + chr(low)
        return chr(code)

    def parse_number(self):
        text = self.text
        start = self.pos
        if self.peek() == "-":
            self.pos += 1
        if self.peek() == "0":
            self.pos += 1
        elif self.peek().isdigit():
            while self.peek().isdigit():
                self.pos += 1
        else:
            raise self.error("expected a digit")
        is_float = False
        if self.peek() == ".":
            is_float = True
            self.pos += 1
            if not self.peek().isdigit():
                raise self.error("expected a digit after '.'")
            while self.peek().isdigit():
                self.pos += 1
        if self.peek() in ("e", "E"):
            is_float = True
            self.pos += 1
            if self.peek() in ("+", "-"):
                self.pos += 1
            if not self.peek().isdigit():
                raise self.error("expected a digit in the exponent")
            while self.peek().isdigit():
                self.pos += 1
        literal = text[start:self.pos]
        return float(literal) if is_float else int(literal)


def loads(text, max_depth=100):
    """Parses one JSON document; trailing non-whitespace is an error."""
    if not isinstance(text, str):
        raise TypeError("loads expects a str")
    parser = Parser(text, max_depth=max_depth)
    value = parser.parse_value()
    parser.skip_ws()
    if parser.pos != len(text):
        raise parser.error("extra data")
    return value
