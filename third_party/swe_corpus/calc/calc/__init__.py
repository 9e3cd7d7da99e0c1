"""calc: arithmetic expressions with variables and functions."""
from calc.evaluator import CalcError, Evaluator, evaluate
from calc.lexer import LexError, Token, tokenize
from calc.parser import ParseError, parse, to_rpn

__all__ = ["CalcError", "Evaluator", "evaluate", "LexError", "Token", "tokenize", "ParseError",
           "parse", "to_rpn"]
