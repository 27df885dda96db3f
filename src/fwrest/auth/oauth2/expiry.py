"""Token lifetimes as ``onAuthparams`` gives them (SPEC 4.2).

``access_expires``: integer milliseconds (the original description), or text with a unit
(``"90s"``, ``"15m"``, ``"1h"``, ``"2d"``, ``"500ms"``). ``refresh_expires``: a ``date`` or
``datetime``, a ``timedelta``, ``"MM/DD/YYYY"``, ISO 8601, or ``"Date()+N"`` (today plus N
days, at the end of that day in the server's time zone).
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta

__all__ = ["ExpiryError", "access_ms", "refresh_deadline"]

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_WITH_UNIT = re.compile(r"\s*(\d+)\s*(ms|s|m|h|d)?\s*\Z", re.IGNORECASE)
_DATE_PLUS = re.compile(r"\s*date\(\)\s*(?:([+-])\s*(\d+))?\s*\Z", re.IGNORECASE)
_MDY = re.compile(r"\s*(\d{1,2})/(\d{1,2})/(\d{4})\s*\Z")
# A lifetime beyond this is a typing slip (and past it dates and 64-bit JSON integers
# overflow): refused with the message, never an OverflowError at start or a 500.
MAX_MS = 100 * 366 * 86_400_000  # about a century
_MAX_DIGITS = 20


class ExpiryError(ValueError):
    """A lifetime that cannot be understood; the message says what is accepted."""


def access_ms(value: object) -> int:
    """Milliseconds of an ``access_expires`` value.

    >>> access_ms(3600000), access_ms("1h"), access_ms("90s")
    (3600000, 3600000, 90000)
    """
    if isinstance(value, bool):
        raise ExpiryError(
            f"access_expires must be milliseconds or text such as '1h', not {value!r}"
        )
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif (
        isinstance(value, str)
        and (m := _WITH_UNIT.match(value))
        and len(m.group(1)) <= _MAX_DIGITS  # int() of thousands of digits raises
    ):
        number = int(m.group(1)) * _UNITS[(m.group(2) or "ms").lower()]
    else:
        raise ExpiryError(
            f"access_expires must be milliseconds or text such as '15m' or '1h', "
            f"not {_short(value)}"
        )
    if number <= 0:
        raise ExpiryError(f"access_expires must be positive, not {_short(value)}")
    if number > MAX_MS:
        raise ExpiryError(f"access_expires {_short(value)} is more than a century")
    return number


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}... ({len(text)} characters)"


def _end_of_day(day: date) -> float:
    return datetime.combine(day, time(23, 59, 59)).astimezone().timestamp()


def refresh_deadline(value: object, now: datetime | None = None) -> float:
    """The epoch second a refresh token expires at (see :func:`_refresh_deadline`).

    Raises:
        ExpiryError: a value that is not understood, or a date out of range.
    """
    try:
        return _refresh_deadline(value, now)
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, ExpiryError):
            raise
        raise ExpiryError(
            f"refresh_expires {_short(value)} is out of range: write a date before the year "
            "10000, or a duration of at most a century"
        ) from None


def _refresh_deadline(value: object, now: datetime | None = None) -> float:
    """The epoch second a refresh token expires at.

    >>> from datetime import datetime
    >>> refresh_deadline(timedelta(hours=1), datetime(2026, 1, 1, 12, 0).astimezone()) > 0
    True
    """
    now = now or datetime.now().astimezone()
    if isinstance(value, timedelta):
        if abs(value) > timedelta(milliseconds=MAX_MS):
            raise OverflowError(value)
        return (now + value).timestamp()
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.astimezone()).timestamp()
    if isinstance(value, date):
        return _end_of_day(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ExpiryError(
            f"refresh_expires cannot be {_short(value)}: write 'Date()+1', 'MM/DD/YYYY', an ISO "
            "8601 date or datetime, or a duration such as '7d'"
        )
    if isinstance(value, int):
        # a bare number: milliseconds, like access_expires
        if abs(value) > MAX_MS:
            raise OverflowError(value)
        return (now + timedelta(milliseconds=value)).timestamp()
    text = value.strip()
    if (m := _DATE_PLUS.match(text)) and len(m.group(2) or "") <= _MAX_DIGITS:
        days = int(m.group(2) or 0) * (-1 if m.group(1) == "-" else 1)
        return _end_of_day(now.date() + timedelta(days=days))
    if m := _MDY.match(text):
        month, day, year = (int(g) for g in m.groups())
        try:
            return _end_of_day(date(year, month, day))
        except ValueError:
            raise ExpiryError(
                f"refresh_expires {_short(text)} is not a date (MM/DD/YYYY)"
            ) from None
    if (m := _WITH_UNIT.match(text)) and len(m.group(1)) <= _MAX_DIGITS:
        number = int(m.group(1)) * _UNITS[(m.group(2) or "ms").lower()]
        if number > MAX_MS:
            raise OverflowError(number)
        return (now + timedelta(milliseconds=number)).timestamp()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ExpiryError(
            f"refresh_expires {_short(text)} is not understood: write 'Date()+1', 'MM/DD/YYYY', "
            "an ISO 8601 date or datetime, or a duration such as '7d'"
        ) from None
    if len(text) <= 10:  # a date alone: the end of that day
        return _end_of_day(parsed.date())
    return (parsed if parsed.tzinfo else parsed.astimezone()).timestamp()
