"""Revoking every token family of a user (SPEC 12.3): one function over the token store,
shared by ``fwrest tokens revoke --user`` and the ``oauth2/revoke-user`` route."""

from __future__ import annotations

import time
import unicodedata

from fwrest.store.base import TokenStore

__all__ = ["USER_ACCESS_BOUND_S", "family_until", "revoke_user", "user_name_problem"]

# A revocation by user knows no access lifetime (the command reads no onAuthparams): it
# outlasts the family's refresh tokens by a day, the longest access lifetime `fwrest check`
# accepts without a warning (SPEC 7; docs/decisions.md).
USER_ACCESS_BOUND_S = 86400.0


def family_until(latest_refresh: float, access_s: float) -> float:
    """Until when a revoked family stays revoked: past its latest refresh token's expiry (or
    now, when that has passed) by an access lifetime, so that no token of it works again when
    the store forgets the revocation (as ``tokens.revoked_until`` for a replay)."""
    return max(latest_refresh, time.time()) + access_s


def user_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a user's whose tokens are revoked (``oauth2/revoke-user``,
    ``fwrest tokens revoke --user``), else None: empty, or holding a control character
    (Unicode Cc: NUL, CR, LF, TAB, DEL, C1), which no user name has. A name no user has is
    no problem: both answer as for a user without tokens (they never tell which users exist).

    >>> user_name_problem("ada") is None
    True
    >>> print(user_name_problem("a" + chr(0) + "b"))
    the user name 'a\\x00b' holds a control character
    """
    if not name:
        return "the user name is empty"
    if any(unicodedata.category(c) == "Cc" for c in name):
        shown = repr(name) if len(name) <= 60 else f"{name[:60]!r}...({len(name)} chars)"
        return f"the user name {shown} holds a control character"
    return None


def revoke_user(store: TokenStore, subject: str, access_s: float = USER_ACCESS_BOUND_S) -> int:
    """Revoke every token family of ``subject`` (blocking: a store thread or the command);
    the number of families revoked now (one revoked already is not counted; its revocation
    is lengthened where this one lasts longer).

    Raises:
        StoreError: the store cannot be reached (``UnconfirmedWrite``: no replica confirmed
            a revocation; the same call again is harmless).
    """
    families = store.user_families(subject)
    before = store.revoked_families() if families else {}
    for family, latest in families.items():
        store.revoke_family(family, family_until(latest, access_s))
    return sum(family not in before for family in families)
