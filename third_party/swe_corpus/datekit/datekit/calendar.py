"""Proleptic Gregorian calendar arithmetic, implemented from first principles."""
from collections import namedtuple

Date = namedtuple("Date", "year month day")

_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def is_leap_year(year):
    """Divisible by 4, except centuries not divisible by 400."""
    if year % 400 == 0:
        return True
    if year % 100 == 0:
        return False
    return year % 4 == 0


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS[month - 1]


def validate(date):
    """Returns ``date`` as a ``Date`` or raises ValueError."""
    year, month, day = date
    if year < 1:
        raise ValueError(f"year must be >= 1, got {year}")
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"day {day} out of range for {year}-{month:02d}")
    return Date(year, month, day)


def day_of_year(date):
    """1 for January 1st."""
    year, month, day = validate(date)
    total = day
    for m in range(1, month):
        total += days_in_month(year, m)
    return total


def to_ordinal(date):
    """Days since 0001-01-01 (which is day 1)."""
    year, month, day = validate(date)
    y = year - 1
    days_before_year = y * 365 + y // 4 - y // 100 + y // 400
    return days_before_year + day_of_year((year, month, day))


def from_ordinal(n):
    """Inverse of ``to_ordinal``."""
    if n < 1:
        raise ValueError("ordinal must be >= 1")
    year = max(1, (n * 400) // 146097)
    while to_ordinal((year + 1, 1, 1)) <= n:
        year += 1
    while to_ordinal((year, 1, 1)) > n:
        year -= 1
    remaining = n - to_ordinal((year, 1, 1)) + 1
    month = 1
    while remaining > days_in_month(year, month):
        remaining -= days_in_month(year, month)
        month += 1
    return Date(year, month, remaining)


def add_days(date, days):
    return from_ordinal(to_ordinal(date) + days)


def days_between(start, end):
    """Signed number of days from ``start`` to ``end``."""
    return to_ordinal(end) - to_ordinal(start)


def day_of_week(date):
    """0 = Monday ... 6 = Sunday (0001-01-01 was a Monday)."""
    return (to_ordinal(date) - 1) % 7


def weekday_name(date):
    return WEEKDAYS[day_of_week(date)]


def add_months(date, months, clamp=True):
    """Moves by whole months; a day past the target month's end is clamped (or an error)."""
    year, month, day = validate(date)
    index = year * 12 + (month - 1) + months
    new_year, new_month = divmod(index, 12)
    new_month += 1
    last = days_in_month(new_year, new_month)
    if day > last:
        if not clamp:
            raise ValueError(f"{new_year}-{new_month:02d} has no day {day}")
        day = last
    return Date(new_year, new_month, day)


def iso_week(date):
    """(ISO year, ISO week number, ISO weekday 1..7)."""
    year = date[0]
    weekday = day_of_week(date) + 1
    ordinal = to_ordinal(date)
    # the Thursday of this week decides the ISO year
    thursday = ordinal - weekday + 4
    thursday_date = from_ordinal(thursday)
    iso_year = thursday_date.year
    week = (thursday - to_ordinal((iso_year, 1, 1))) // 7 + 1
    del year
    return iso_year, week, weekday


def quarter(date):
    """1..4"""
    return (validate(date).month - 1) // 3 + 1


def end_of_month(date):
    year, month, _ = validate(date)
    return Date(year, month, days_in_month(year, month))
