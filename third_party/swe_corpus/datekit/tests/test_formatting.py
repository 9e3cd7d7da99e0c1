import pytest

from datekit.calendar import Date
from datekit.formatting import format_date, month_number, parse_date


def test_format_default():
    assert format_date((2024, 3, 5)) == "2024-03-05"


def test_format_names():
    assert format_date((2024, 7, 4), "%A, %B %d %Y") == "Thursday, July 04 2024"
    assert format_date((2024, 7, 4), "%a %b") == "Thu Jul"


def test_format_day_of_year_and_percent():
    assert format_date((2024, 2, 1), "%j%%") == "032%"


def test_format_unknown_code():
    with pytest.raises(ValueError):
        format_date((2024, 2, 1), "%Q")


def test_format_trailing_percent_kept():
    assert format_date((2024, 2, 1), "%Y%") == "2024%"


def test_parse_iso():
    assert parse_date("2024-02-29") == Date(2024, 2, 29)


def test_parse_slashes_day_first():
    assert parse_date("05/03/2024") == Date(2024, 3, 5)


def test_parse_month_name():
    assert parse_date("March 5, 2024") == Date(2024, 3, 5)
    assert parse_date("  sep 30 1999 ") == Date(1999, 9, 30)


def test_parse_invalid():
    with pytest.raises(ValueError):
        parse_date("2023-02-29")
    with pytest.raises(ValueError):
        parse_date("")
    with pytest.raises(ValueError):
        parse_date("1-2")


def test_month_number():
    assert month_number("Dec") == 12
    with pytest.raises(ValueError):
        month_number("ju")
    with pytest.raises(ValueError):
        month_number("Smarch")
