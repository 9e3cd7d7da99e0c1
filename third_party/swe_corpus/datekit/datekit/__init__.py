"""datekit: calendar arithmetic on (year, month, day) values."""
from datekit.calendar import (Date, add_days, add_months, day_of_week, day_of_year,
                              days_between, days_in_month, is_leap_year, iso_week)
from datekit.business import add_business_days, business_days_between, is_weekend
from datekit.formatting import format_date, parse_date

__all__ = ["Date", "add_days", "add_months", "day_of_week", "day_of_year", "days_between",
           "days_in_month", "is_leap_year", "iso_week", "add_business_days",
           "business_days_between", "is_weekend", "format_date", "parse_date"]
