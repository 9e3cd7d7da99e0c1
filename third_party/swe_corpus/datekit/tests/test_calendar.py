import pytest

from datekit.calendar import (Date, add_days, add_months, day_of_week, day_of_year,
                              days_between, days_in_month, end_of_month, from_ordinal,
                              is_leap_year, iso_week, quarter, to_ordinal, weekday_name)


@pytest.mark.parametrize("year,leap", [(2000, True), (1900, False), (2024, True), (2023, False),
                                       (2100, False), (1600, True)])
def test_is_leap_year(year, leap):
    assert is_leap_year(year) is leap


def test_days_in_month():
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2024, 12) == 31
    assert days_in_month(2024, 4) == 30


def test_days_in_month_invalid():
    with pytest.raises(ValueError):
        days_in_month(2024, 13)
    with pytest.raises(ValueError):
        days_in_month(2024, 0)


def test_day_of_year():
    assert day_of_year((2024, 1, 1)) == 1
    assert day_of_year((2024, 3, 1)) == 61
    assert day_of_year((2023, 12, 31)) == 365


def test_invalid_day_rejected():
    with pytest.raises(ValueError):
        day_of_year((2023, 2, 29))


def test_ordinal_round_trip():
    for d in [(1, 1, 1), (2000, 2, 29), (2024, 12, 31), (1999, 7, 15)]:
        assert from_ordinal(to_ordinal(d)) == Date(*d)


def test_to_ordinal_known():
    assert to_ordinal((1, 1, 1)) == 1
    assert to_ordinal((2000, 1, 1)) == 730120


def test_add_days_across_year():
    assert add_days((2023, 12, 30), 3) == Date(2024, 1, 2)
    assert add_days((2024, 3, 1), -1) == Date(2024, 2, 29)


def test_days_between():
    assert days_between((2024, 1, 1), (2024, 12, 31)) == 365
    assert days_between((2024, 1, 10), (2024, 1, 1)) == -9


def test_day_of_week():
    assert day_of_week((2024, 1, 1)) == 0
    assert weekday_name((2000, 1, 1)) == "Saturday"
    assert weekday_name((2024, 7, 4)) == "Thursday"


def test_add_months_simple():
    assert add_months((2024, 1, 15), 1) == Date(2024, 2, 15)
    assert add_months((2024, 11, 15), 3) == Date(2025, 2, 15)


def test_add_months_backward():
    assert add_months((2024, 1, 15), -1) == Date(2023, 12, 15)


def test_add_months_clamps():
    assert add_months((2024, 1, 31), 1) == Date(2024, 2, 29)
    assert add_months((2023, 1, 31), 1) == Date(2023, 2, 28)


def test_add_months_no_clamp():
    with pytest.raises(ValueError):
        add_months((2023, 1, 31), 1, clamp=False)


@pytest.mark.parametrize("date,expected", [
    ((2024, 1, 1), (2024, 1, 1)),
    ((2021, 1, 3), (2020, 53, 7)),
    ((2020, 12, 31), (2020, 53, 4)),
    ((2019, 12, 30), (2020, 1, 1)),
    ((2024, 6, 15), (2024, 24, 6)),
])
def test_iso_week(date, expected):
    assert iso_week(date) == expected


def test_quarter_and_end_of_month():
    assert [quarter((2024, m, 1)) for m in (1, 3, 4, 6, 7, 12)] == [1, 1, 2, 2, 3, 4]
    assert end_of_month((2024, 2, 10)) == Date(2024, 2, 29)
