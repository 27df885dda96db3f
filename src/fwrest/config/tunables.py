"""The run-time settings (``[GENERAL]``): which they are, and validating a change to them."""

from __future__ import annotations

from typing import Any

from fwrest.config.schema import KEYS

__all__ = ["SETTINGS", "SettingsError", "validate"]

SETTINGS = {k.name: k for k in KEYS if k.section == "GENERAL"}


class SettingsError(ValueError):
    """A value refused: names the key and the allowed values."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


def validate(changes: dict[str, Any]) -> dict[str, int | None]:
    """Check a partial change (``None`` clears); raises :class:`SettingsError`."""
    out: dict[str, int | None] = {}
    for name, value in changes.items():
        key = SETTINGS.get(name)
        if key is None:
            raise SettingsError(
                name, f"{name!r} is not a run-time setting; the settings are {', '.join(SETTINGS)}"
            )
        if value is None or value == "":
            out[name] = None
            continue
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
            number = int(value.strip())
        assert key.low is not None and key.high is not None
        if number is None or not key.low <= number <= key.high:
            raise SettingsError(
                name, f"{name} must be a whole number in {key.allowed}, got {value!r}"
            )
        out[name] = number
    return out
