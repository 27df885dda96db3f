"""Content codings a request accepts (``Accept-Encoding``, RFC 9110 12.5.3), for the
compression stage (SPEC 10.4) and ``rest.sendZipped``."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["choose_coding"]

_REMEMBERED = 256  # distinct Accept-Encoding values remembered (clients send a few)
_chosen: dict[tuple[str, tuple[str, ...]], tuple[str | None, bool]] = {}


def _weights(header: str) -> dict[str, float]:
    """coding -> q of an ``Accept-Encoding`` value (an unreadable q counts as 0)."""
    out: dict[str, float] = {}
    for item in header.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
                if not 0.0 <= q <= 1.0:
                    q = 0.0
        out[name] = q
    return out


def choose_coding(header: str | None, offered: Sequence[str]) -> tuple[str | None, bool]:
    """``(coding, identity refused)``: the coding of ``offered`` (in the server's order of
    preference) the request accepts with the highest q (None: none of them), and whether it
    refused the uncompressed answer (``identity;q=0``, or ``*;q=0`` without ``identity``).
    A request that weights ``identity`` (by name or by ``*``) above every offered coding gets
    None: it prefers the uncompressed answer.

    >>> choose_coding("gzip;q=0.5, br", ("br", "gzip"))
    ('br', False)
    >>> choose_coding("br;q=0, *", ("br", "gzip"))
    ('gzip', False)
    >>> choose_coding("gzip, identity;q=0", ("gzip",))
    ('gzip', True)
    >>> choose_coding("identity;q=1, gzip;q=0.5", ("gzip",))
    (None, False)
    >>> choose_coding(None, ("gzip",))
    (None, False)
    """
    if not header:
        return None, False
    key = (header, tuple(offered))
    found = _chosen.get(key)
    if found is not None:
        return found
    weights = _weights(header)
    star = weights.get("*")
    best: str | None = None
    best_q = 0.0
    for coding in offered:
        q = weights.get(coding, star if star is not None else 0.0)
        if q > best_q:
            best, best_q = coding, q
    identity = weights.get("identity", star if star is not None else 1.0)
    if best_q < identity and ("identity" in weights or star is not None):
        best = None  # the uncompressed answer preferred, by name or by ``*`` (RFC 9110 12.4.2)
    found = (best, identity == 0.0)
    if len(_chosen) >= _REMEMBERED:
        _chosen.clear()
    _chosen[key] = found
    return found
