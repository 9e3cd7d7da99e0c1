"""Tokens: numbers, names, operators and parentheses."""
from collections import namedtuple

Token = namedtuple("Token", "kind text pos")

OPERATORS = ("**", "//", "+", "-", "*", "/", "%", "^", "(", ")", ",")


class LexError(ValueError):
    def __init__(self, message, pos):
        super().__init__(f"{message} at position {pos}")
        self.pos = pos


def tokenize(text):
    tokens = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch.isdigit() or (ch == "." and i + 1 < n and text[i + 1].isdigit()):
            start = i
            seen_dot = False
            while i < n and (text[i].isdigit() or (text[i] == "." and not seen_dot)):
                if text[i] == ".":
                    seen_dot = True
                i += 1
            if i < n and text[i] in "eE":
                j = i + 1
                if j < n and text[j] in "+-":
                    j += 1
                if j < n and text[j].isdigit():
                    i = j
                    while i < n and text[i].isdigit():
                        i += 1
            tokens.append(Token("number", text[start:i], start))
            continue
        if ch.isalpha() or ch == "_":
            start = i
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
            tokens.append(Token("name", text[start:i], start))
            continue
        for op in OPERATORS:
            if text.startswith(op, i):
                kind = "op" if op not in "()," else op
                tokens.append(Token(kind, op, i))
                i += len(op)
                break
        else:
            raise LexError(f"unexpected character {ch!r}", i)
    tokens.append(Token("end", "", n))
    return tokens
