"""A location's ``RateLimit`` section (SPEC 13.7) -> :class:`~fwrest.config.model.RateLimitConfig`.

``Limit`` (at least 1) and ``Window`` (a duration) are checked by the key table; ``Key`` here:
``user`` or ``address``. A ``RateLimit`` naming a section that does not exist stops the start,
as a ``CORS`` key does.
"""

from __future__ import annotations

from fwrest.config.convert import section_values
from fwrest.config.model import RateLimitConfig
from fwrest.config.reading import RawConfig

__all__ = ["KEYS_COUNTED", "rate_limit_config"]

KEYS_COUNTED = ("user", "address")


def rate_limit_config(
    raw: RawConfig, name: str, by: tuple[str, str], cache: dict[str, RateLimitConfig]
) -> RateLimitConfig:
    """The RateLimit section ``name``, named by the key ``by`` (section, key)."""
    sec = raw.section(name, by)
    folded = sec.name.lower()
    if folded in cache:
        return cache[folded]
    values = section_values(raw, sec, "RateLimit")
    key = values["key"].strip().lower()
    if key not in KEYS_COUNTED:
        raise raw.error(
            f"{values['key']!r} is not what a rate limit counts by (user or address).",
            sec.name,
            sec.values["key"][0],
            "write Key=user (the authenticated user, else the address) or Key=address.",
        )
    config = RateLimitConfig(
        sec.name, values["limit"], values["window_s"], key, values["fail_open"]
    )
    cache[folded] = config
    return config
