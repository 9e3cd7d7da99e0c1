"""Recursive-descent parser producing a small tuple AST.

Grammar (lowest precedence first):
    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '/' | '//' | '%') unary)*
    unary   := ('-' | '+') unary | power
    power   := call (('**' | '^') unary)?          # right associative
    call    := NAME '(' [expr (',' expr)*] ')' | atom
    atom    := NUMBER | NAME | '(' expr ')'
AST nodes: ('num', value) ('var', name) ('neg', node) ('bin', op, left, right)
           ('call', name, [args])
"""
from calc.lexer import tokenize


class ParseError(ValueError):
    def __init__(self, message, pos):
        super().__init__(f"{message} at position {pos}")
        self.pos = pos


class Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.i = 0

    @property
    def tok(self):
        return self.tokens[self.i]

    def advance(self):
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def accept(self, kind, text=None):
        tok = self.tok
        if tok.kind == kind and (text is None or tok.text == text):
            self.i += 1
            return tok
        return None

    def expect(self, kind, text=None):
        tok = self.accept(kind, text)
        if tok is None:
            want = text or kind
            raise ParseError(f"expected {want!r}, found {self.tok.text or 'end'!r}", self.tok.pos)
        return tok

    def parse(self):
        node = self.expr()
        if self.tok.kind != "end":
            raise ParseError(f"unexpected {self.tok.text!r}", self.tok.pos)
        return node

    def expr(self):
        node = self.term()
        while self.tok.kind == "op" and self.tok.text in ("+", "-"):
            op = self.advance().text
            node = ("bin", op, node, self.term())
        return node

    def term(self):
        node = self.unary()
        while self.tok.kind == "op" and self.tok.text in ("*", "/", "//", "%"):
            op = self.advance().text
            node = ("bin", op, node, self.unary())
        return node

    def unary(self):
        if self.accept("op", "-"):
            return ("neg", self.unary())
        if self.accept("op", "+"):
            return self.unary()
        return self.power()

    def power(self):
        base = self.call()
        if self.tok.kind == "op" and self.tok.text in ("**", "^"):
            self.advance()
            return ("bin", "**", base, self.unary())
        return base

    def call(self):
        tok = self.tok
        if tok.kind == "name" and self.tokens[self.i + 1].kind == "(":
            self.i += 2
            args = []
            if not self.accept(")"):
                args.append(self.expr())
                while self.accept(","):
                    args.append(self.expr())
                self.expect(")")
            return ("call", tok.text, args)
        return self.atom()

    def atom(self):
        tok = self.tok
        if tok.kind == "number":
            self.advance()
            text = tok.text
            if "." in text or "e" in text or "E" in text:
                return ("num", float(text))
            return ("num", int(text))
        if tok.kind == "name":
            self.advance()
            return ("var", tok.text)
        if self.accept("("):
            node = self.expr()
            self.expect(")")
            return node
        raise ParseError(f"unexpected {tok.text or 'end of input'!r}", tok.pos)


def parse(text):
    return Parser(tokenize(text)).parse()


def to_rpn(node):
    """Reverse Polish notation of an AST, tokens separated by spaces."""
    kind = node[0]
    if kind == "num":
        return str(node[1])
    if kind == "var":
        return node[1]
    if kind == "neg":
        return to_rpn(node[1]) + " neg"
    if kind == "bin":
        return f"{to_rpn(node[2])} {to_rpn(node[3])} {node[1]}"
    if kind == "call":
        args = " ".join(to_rpn(a) for a in node[2])
        return f"{args} {node[1]}/{len(node[2])}".strip()
    raise ValueError(f"unknown node {kind!r}")
