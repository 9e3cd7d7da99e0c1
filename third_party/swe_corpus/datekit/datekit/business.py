"""Business-day arithmetic (Saturday and Sunday off, plus optional holidays)."""
from datekit.calendar import add_days, day_of_week, to_ordinal, validate


def is_weekend(date):
    return day_of_week(date) >= 5


def is_business_day(date, holidays=()):
    date = validate(date)
    return not is_weekend(date) and date not in set(map(tuple, holidays))


def add_business_days(date, n, holidays=()):
    """Moves ``n`` business days forward (or backward for negative ``n``)."""
    date = validate(date)
    step = 1 if n >= 0 else -1
    remaining = abs(n)
    while remaining > 0:
        date = add_days(date, step)
        if is_business_day(date, holidays):
            remaining -= 1
    return date


def business_days_between(start, end, holidays=()):
    """Business days in the half-open range [start, end); negative if end < start."""
    if to_ordinal(end) < to_ordinal(start):
        return -business_days_between(end, start, holidays)
    count = 0
    current = validate(start)
    while to_ordinal(current) < to_ordinal(end):
        if is_business_day(current, holidays):
            count += 1
        current = add_days(current, 1)
    return count


def next_weekday(date, weekday):
    """The first date strictly after ``date`` that falls on ``weekday`` (0 = Monday)."""
    if not 0 <= weekday <= 6:
        raise ValueError("weekday must be in 0..6")
    delta = (weekday - day_of_week(date)) % 7
    if delta == 0:
        delta = 7
    return add_days(date, delta)
