"""The run-time settings (``[GENERAL]``): which they are, and validating a change to them."""

from __future__ import annotations

import re
from typing import Any

from fwrest.config.schema import KEYS

__all__ = ["SETTINGS", "SettingsError", "given_twice", "validate"]

SETTINGS = {k.name: k for k in KEYS if k.section == "GENERAL"}

# A form field holds text: ASCII digits only (str.isdigit() also takes "٣" and "²"), and few
# enough of them that int() never meets Python's limit on the digits it converts.
_FORM_NUMBER = re.compile(r"[0-9]{1,12}")
_SHOWN = 40  # characters of a refused value repeated in the message


class SettingsError(ValueError):
    """A value refused: names the key and the allowed values."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


def given_twice(name: str) -> str:
    """The refusal of a change that names a setting twice (the audit and token routes refuse
    a repeated parameter likewise): which value was meant is unknown.

    >>> print(given_twice("rest_log_level"))
    'rest_log_level' is given twice (names are case-insensitive); give each setting once
    """
    return f"{_shown(name)} is given twice (names are case-insensitive); give each setting once"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}...({len(text)} chars)"


def validate(changes: dict[str, Any], *, form: bool = False) -> dict[str, int | None]:
    """Check a partial change; raises :class:`SettingsError`, naming the key and its values.

    Keys are case-insensitive (SPEC 9): the result and the messages name each by its
    lower-case name; one key given twice (in two spellings) is refused. JSON
    (``form=False``): a whole number (``true``, ``5.0`` and ``"5"`` are refused) or ``null``,
    which clears the run-time value. A form (``form=True``): the field's text, digits only;
    an empty field clears.

    >>> validate({"REST_Log_Level": 4})
    {'rest_log_level': 4}
    """
    out: dict[str, int | None] = {}
    for given, value in changes.items():
        name = given.lower()
        key = SETTINGS.get(name)
        if key is None:
            raise SettingsError(
                given,
                f"{_shown(given)} is not a run-time setting; the settings are "
                f"{', '.join(SETTINGS)}",
            )
        if name in out:
            raise SettingsError(name, given_twice(name))
        number: int | None = None
        if form:
            text = str(value).strip()
            if text == "":
                out[name] = None
                continue
            if _FORM_NUMBER.fullmatch(text):
                number = int(text)
        elif value is None:
            out[name] = None
            continue
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        assert key.low is not None and key.high is not None
        if number is None or not key.low <= number <= key.high:
            what = "null to clear" if not form else "empty to clear"
            raise SettingsError(
                name,
                f"{name} must be a whole number in {key.allowed} ({what}), got {_shown(value)}",
            )
        out[name] = number
    return out
