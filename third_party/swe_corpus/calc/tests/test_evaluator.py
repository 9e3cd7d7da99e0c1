import math

import pytest

from calc.evaluator import CalcError, Evaluator, evaluate


def test_arithmetic():
    assert evaluate("1 + 2 * 3") == 7
    assert evaluate("(1 + 2) * 3") == 9
    assert evaluate("10 - 4 - 3") == 3
    assert evaluate("2 ** 10") == 1024


def test_division_keeps_integers_when_exact():
    assert evaluate("8 / 2") == 4
    assert isinstance(evaluate("8 / 2"), int)
    assert evaluate("7 / 2") == 3.5


def test_floor_division_and_modulo():
    assert evaluate("7 // 2") == 3
    assert evaluate("-7 // 2") == -4
    assert evaluate("7 % 3") == 1


def test_division_by_zero():
    for text in ("1 / 0", "1 // 0", "1 % 0"):
        with pytest.raises(CalcError, match="division by zero"):
            evaluate(text)


def test_unary():
    assert evaluate("-3 + 5") == 2
    assert evaluate("--3") == 3
    assert evaluate("+4") == 4
    assert evaluate("-2 ** 2") == -4


def test_variables_and_constants():
    assert evaluate("x * y + 1", x=3, y=4) == 13
    assert evaluate("2 * pi") == pytest.approx(2 * math.pi)


def test_unknown_variable():
    with pytest.raises(CalcError, match="unknown variable"):
        evaluate("z + 1")


def test_functions():
    assert evaluate("max(3, 9, 4)") == 9
    assert evaluate("min(3, 9, 4)") == 3
    assert evaluate("abs(-5)") == 5
    assert evaluate("sqrt(16)") == 4.0
    assert evaluate("hypot(3, 4)") == 5.0
    assert evaluate("round(2.567, 2)") == 2.57


def test_clamp():
    assert evaluate("clamp(15, 0, 10)") == 10
    assert evaluate("clamp(-3, 0, 10)") == 0
    assert evaluate("clamp(4, 0, 10)") == 4
    with pytest.raises(CalcError):
        evaluate("clamp(4, 10, 0)")


def test_function_arity():
    with pytest.raises(CalcError, match="takes 1"):
        evaluate("abs(1, 2)")
    with pytest.raises(CalcError, match="at least one"):
        evaluate("max()")


def test_function_domain_error():
    with pytest.raises(CalcError, match="sqrt"):
        evaluate("sqrt(-1)")


def test_unknown_function():
    with pytest.raises(CalcError, match="unknown function"):
        evaluate("nope(1)")


def test_exponent_limit():
    assert Evaluator(max_exponent=10).evaluate("2 ** 10") == 1024
    with pytest.raises(CalcError, match="too large"):
        Evaluator(max_exponent=10).evaluate("2 ** 11")


def test_assignment():
    ev = Evaluator()
    assert ev.assign("x = 4") == 4
    assert ev.assign("y = x * 2 + 1") == 9
    assert ev.assign("x + y") == 13


def test_assignment_errors():
    ev = Evaluator()
    with pytest.raises(CalcError):
        ev.assign("2x = 1")
    with pytest.raises(CalcError, match="constant"):
        ev.assign("pi = 3")
