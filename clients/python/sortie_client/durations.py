"""Durations as the HTTP API writes them: Go's "90s", "1m30s", "250ms".

The API takes durations (lease, wait, run_in, retry_in, timeout) as Go
duration strings and answers with them (a job's timeout). These helpers turn
seconds into such strings and back, so the rest of the package speaks
seconds as Python does.
"""

import datetime
import re

__all__ = ["format_duration", "parse_duration"]

# Seconds per unit, as Go's time.ParseDuration knows them.
_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def format_duration(value):
    """Returns value as a Go duration string for the API.

    value is a number of seconds (int or float), a datetime.timedelta, or a
    string, which is passed on as it is ("1h30m") for the server to check.
    Whole seconds are written as "90s", anything finer in milliseconds
    ("250ms"), the API's finest useful unit.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("a duration is seconds (int or float), a timedelta or a string like '90s', got %r" % (value,))
    if value < 0:
        raise ValueError("a duration must not be negative, got %r" % (value,))
    if float(value).is_integer():
        return "%ds" % int(value)
    return "%dms" % round(value * 1000)


def parse_duration(text):
    """Returns the seconds (a float) of a Go duration string such as "1m30s".

    Raises ValueError for text that is not one.
    """
    s = text
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    total, pos = 0.0, 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0 or pos != len(s):
        raise ValueError("%r is not a duration like 90s or 1h30m" % (text,))
    return sign * total
