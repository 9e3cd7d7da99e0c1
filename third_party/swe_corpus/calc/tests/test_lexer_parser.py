import pytest

from calc.lexer import LexError, tokenize
from calc.parser import ParseError, parse, to_rpn


def kinds(text):
    return [(t.kind, t.text) for t in tokenize(text)]


def test_tokenize_simple():
    assert kinds("1 + x2") == [("number", "1"), ("op", "+"), ("name", "x2"), ("end", "")]


def test_tokenize_floats_and_exponents():
    assert [t.text for t in tokenize("3.5 .25 1e3 2E-2")][:-1] == ["3.5", ".25", "1e3", "2E-2"]


def test_tokenize_two_char_operators():
    assert [t.text for t in tokenize("2**3//4")][:-1] == ["2", "**", "3", "//", "4"]


def test_tokenize_positions():
    toks = tokenize("  ab + 7")
    assert [t.pos for t in toks] == [2, 5, 7, 8]


def test_tokenize_error_position():
    with pytest.raises(LexError) as info:
        tokenize("1 + $")
    assert info.value.pos == 4


def test_tokenize_exponent_without_digits_is_name():
    assert kinds("2e")[:2] == [("number", "2"), ("name", "e")]


def test_precedence():
    assert to_rpn(parse("1 + 2 * 3")) == "1 2 3 * +"
    assert to_rpn(parse("(1 + 2) * 3")) == "1 2 + 3 *"


def test_left_associative():
    assert to_rpn(parse("8 - 3 - 2")) == "8 3 - 2 -"
    assert to_rpn(parse("8 / 4 / 2")) == "8 4 / 2 /"


def test_power_right_associative():
    assert to_rpn(parse("2 ** 3 ** 2")) == "2 3 2 ** **"
    assert to_rpn(parse("2 ^ 3")) == "2 3 **"


def test_unary_minus_binds_looser_than_power():
    assert to_rpn(parse("-2 ** 2")) == "2 2 ** neg"


def test_calls():
    assert parse("max(1, x, 3)") == ("call", "max", [("num", 1), ("var", "x"), ("num", 3)])
    assert parse("f()") == ("call", "f", [])


def test_number_types():
    assert parse("2") == ("num", 2)
    assert parse("2.0") == ("num", 2.0)


def test_parse_errors():
    for text in ("1 +", "(1 + 2", "1 2", "max(1,", ")"):
        with pytest.raises(ParseError):
            parse(text)


def test_parse_error_position():
    with pytest.raises(ParseError) as info:
        parse("1 + * 2")
    assert info.value.pos == 4
