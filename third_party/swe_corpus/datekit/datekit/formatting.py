"""Parsing and formatting with a small strftime-like pattern language."""
from datekit.calendar import WEEKDAYS, Date, day_of_week, validate

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")


def format_date(date, pattern="%Y-%m-%d"):
    """Supports %Y %m %d %B %b %A %a %j and %%."""
    year, month, day = validate(date)
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch != "%" or i + 1 >= len(pattern):
            out.append(ch)
            i += 1
            continue
        code = pattern[i + 1]
        if code == "Y":
            out.append(f"{year:04d}")
        elif code == "m":
            out.append(f"{month:02d}")
        elif code == "d":
            out.append(f"{day:02d}")
        elif code == "B":
            out.append(MONTHS[month - 1])
        elif code == "b":
            out.append(MONTHS[month - 1][:3])
        elif code == "A":
            out.append(WEEKDAYS[day_of_week(date)])
        elif code == "a":
            out.append(WEEKDAYS[day_of_week(date)][:3])
        elif code == "j":
            from datekit.calendar import day_of_year
            out.append(f"{day_of_year(date):03d}")
        elif code == "%":
            out.append("%")
        else:
            raise ValueError(f"unknown format code %{code}")
        i += 2
    return "".join(out)


def parse_date(text):
    """Parses 'YYYY-MM-DD', 'DD/MM/YYYY' or 'Month D, YYYY' (month names in any case)."""
    text = text.strip()
    if not text:
        raise ValueError("empty date string")
    if "-" in text:
        parts = text.split("-")
        if len(parts) != 3:
            raise ValueError(f"cannot parse {text!r}")
        year, month, day = (int(p) for p in parts)
    elif "/" in text:
        parts = text.split("/")
        if len(parts) != 3:
            raise ValueError(f"cannot parse {text!r}")
        day, month, year = (int(p) for p in parts)
    else:
        words = text.replace(",", " ").split()
        if len(words) != 3:
            raise ValueError(f"cannot parse {text!r}")
        month = month_number(words[0])
        day, year = int(words[1]), int(words[2])
    return validate(Date(year, month, day))


def month_number(name):
    """'mar' or 'March' -> 3."""
    key = name.strip().lower()
    if len(key) < 3:
        raise ValueError(f"month name too short: {name!r}")
    for i, full in enumerate(MONTHS, start=1):
        if full.lower().startswith(key):
            return i
    raise ValueError(f"unknown month {name!r}")
