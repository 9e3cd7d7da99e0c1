"""Evaluating parsed expressions."""
import math

from calc.parser import parse


class CalcError(ValueError):
    pass


def _clamp(x, lo, hi):
    if lo > hi:
        raise CalcError("clamp: lower bound above upper bound")
    return max(lo, min(x, hi))


FUNCTIONS = {
    "abs": (abs, 1),
    "sqrt": (math.sqrt, 1),
    "min": (min, -1),
    "max": (max, -1),
    "round": (round, -1),
    "clamp": (_clamp, 3),
    "hypot": (math.hypot, 2),
}

CONSTANTS = {"pi": math.pi, "e": math.e}


class Evaluator:
    def __init__(self, variables=None, max_exponent=1000):
        self.variables = dict(CONSTANTS)
        self.variables.update(variables or {})
        self.max_exponent = max_exponent

    def eval(self, node):
        kind = node[0]
        if kind == "num":
            return node[1]
        if kind == "var":
            name = node[1]
            if name not in self.variables:
                raise CalcError(f"unknown variable {name!r}")
            return self.variables[name]
        if kind == "neg":
            return -self.eval(node[1])
        if kind == "bin":
            return self.binary(node[1], self.eval(node[2]), self.eval(node[3]))
        if kind == "call":
            return self.call(node[1], [self.eval(a) for a in node[2]])
        raise CalcError(f"unknown node {kind!r}")

    def binary(self, op, a, b):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op in ("/", "//", "%"):
            if b == 0:
                raise CalcError("division by zero")
            if op == "/":
                result = a / b
                if isinstance(result, float) and result.is_integer() and isinstance(a, int) \
                        and isinstance(b, int):
                    return int(result)
                return result
            if op == "//":
                return a // b
            return a % b
        if op == "**":
            if abs(b) > self.max_exponent:
                raise CalcError("exponent too large")
            return a ** b
        raise CalcError(f"unknown operator {op!r}")

    def call(self, name, args):
        if name not in FUNCTIONS:
            raise CalcError(f"unknown function {name!r}")
        fn, arity = FUNCTIONS[name]
        if arity >= 0 and len(args) != arity:
            raise CalcError(f"{name}() takes {arity} argument(s), got {len(args)}")
        if arity < 0 and not args:
            raise CalcError(f"{name}() needs at least one argument")
        try:
            return fn(*args)
        except (ValueError, TypeError) as e:
            raise CalcError(f"{name}(): {e}") from e

    def assign(self, statement):
        """'x = 2 * y' stores and returns the value; anything else is just evaluated."""
        if "=" in statement:
            name, _, expression = statement.partition("=")
            name = name.strip()
            if not name.isidentifier():
                raise CalcError(f"cannot assign to {name!r}")
            if name in CONSTANTS:
                raise CalcError(f"cannot assign to constant {name!r}")
            value = self.evaluate(expression)
            self.variables[name] = value
            return value
        return self.evaluate(statement)

    def evaluate(self, text):
        return self.eval(parse(text))


def evaluate(text, **variables):
    return Evaluator(variables).evaluate(text)
