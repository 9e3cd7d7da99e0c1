import pytest

from datekit.business import (add_business_days, business_days_between, is_business_day,
                              is_weekend, next_weekday)
from datekit.calendar import Date


def test_is_weekend():
    assert is_weekend((2024, 6, 15)) is True     # Saturday
    assert is_weekend((2024, 6, 16)) is True     # Sunday
    assert is_weekend((2024, 6, 17)) is False    # Monday


def test_holiday_is_not_business_day():
    assert is_business_day((2024, 12, 25), holidays=[(2024, 12, 25)]) is False
    assert is_business_day((2024, 12, 24), holidays=[(2024, 12, 25)]) is True


def test_add_business_days_skips_weekend():
    assert add_business_days((2024, 6, 14), 1) == Date(2024, 6, 17)


def test_add_business_days_multiple():
    assert add_business_days((2024, 6, 12), 5) == Date(2024, 6, 19)


def test_add_business_days_backward():
    assert add_business_days((2024, 6, 17), -1) == Date(2024, 6, 14)


def test_add_business_days_zero():
    assert add_business_days((2024, 6, 15), 0) == Date(2024, 6, 15)


def test_add_business_days_with_holiday():
    assert add_business_days((2024, 12, 24), 1, holidays=[(2024, 12, 25)]) == Date(2024, 12, 26)


def test_business_days_between_week():
    assert business_days_between((2024, 6, 10), (2024, 6, 17)) == 5


def test_business_days_between_same_day():
    assert business_days_between((2024, 6, 10), (2024, 6, 10)) == 0


def test_business_days_between_reversed():
    assert business_days_between((2024, 6, 17), (2024, 6, 10)) == -5


def test_next_weekday():
    assert next_weekday((2024, 6, 12), 4) == Date(2024, 6, 14)
    assert next_weekday((2024, 6, 14), 4) == Date(2024, 6, 21)


def test_next_weekday_invalid():
    with pytest.raises(ValueError):
        next_weekday((2024, 6, 12), 7)
