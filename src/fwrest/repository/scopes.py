"""Scope names (RFC 6749 3.3): what a route may require and ``onAuthparams`` may allow.

Here, below ``auth/``, because routes (``@get(..., scopes=[...])``, ``LoadURNs``) declare them.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SCOPE_TOKEN", "scope_list"]

# scope-token = 1*( %x21 / %x23-5B / %x5D-7E ): printable ASCII without space, '"' and '\'
SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+\Z")
MAX_SCOPE_NAME = 128  # one scope's name; a route or an entry lists at most MAX_SCOPES
MAX_SCOPES = 64


def scope_list(value: Any, what: str) -> tuple[str, ...]:
    """A list of scope names, checked: non-empty text of RFC 6749's scope-token characters.

    Raises:
        ValueError: not a list of such names (the message names ``what``).

    >>> scope_list(["orders:read", "orders:read", "default"], "scopes")
    ('orders:read', 'default')
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} must be a list of scope names, got {value!r}")
    if len(value) > MAX_SCOPES:
        raise ValueError(f"{what} lists more than {MAX_SCOPES} scopes")
    out: list[str] = []
    for name in value:
        if (
            not isinstance(name, str)
            or len(name) > MAX_SCOPE_NAME
            or SCOPE_TOKEN.match(name) is None
        ):
            raise ValueError(
                f"{what}: {name!r} is not a scope name (1 to {MAX_SCOPE_NAME} printable ASCII "
                'characters, no space, no " or \\, RFC 6749 3.3)'
            )
        if name not in out:
            out.append(name)
    return tuple(out)
