"""Scopes (SPEC 12.4): what a token request asks for, what it is granted, and the check of
the routes that require some.

A token request's ``scope`` must be a subset of what its user and client entries allow, plus
``default``, which is always allowed; no ``scope`` is ``default``. A route that requires
scopes is checked by a stage composed into that route's call at start (:func:`requiring`),
so a route without scopes pays nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from fwrest.auth.oauth2.dpop import DPOP
from fwrest.auth.oauth2.errors import InvalidScope
from fwrest.auth.oauth2.params import AuthParams
from fwrest.context.request import RequestContext, current
from fwrest.errors import Challenge, Forbidden

__all__ = [
    "DEFAULT",
    "MAX_SCOPE_PARAM",
    "allowed_scopes",
    "grant",
    "insufficient",
    "requested",
    "requiring",
    "scope_warnings",
]

DEFAULT = "default"
# A ``scope`` parameter longer than this is refused as malformed (400 invalid_scope), well
# before the token route's 4 KiB field cap (invalid_request) could apply.
MAX_SCOPE_PARAM = 1024
# the parameter: scope-tokens separated by spaces (RFC 6749 3.3)
_SCOPE_PARAM = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]*\Z")
# the challenge of the 403 of a token without a route's scopes (RFC 6750 3.1): no realm
_SCOPES = Challenge("Bearer")

Invoke = Callable[[Mapping[str, str]], Awaitable[Any]]


def requested(scope: str | None) -> tuple[str, ...]:
    """The scopes a token request asks for, in its order, each once (None: ``default``).

    Raises:
        InvalidScope: for a malformed parameter (too long, control or
            non-ASCII characters, quotes, backslashes).

    >>> requested("orders:read  default orders:read")
    ('orders:read', 'default')
    """
    if scope is None:
        return (DEFAULT,)
    if len(scope) > MAX_SCOPE_PARAM:
        raise InvalidScope(f"the scope is longer than {MAX_SCOPE_PARAM} characters")
    if _SCOPE_PARAM.match(scope) is None:
        raise InvalidScope(
            "the scope holds characters a scope cannot have (RFC 6749 3.3: printable ASCII, "
            'no " or \\, separated by spaces)',
        )
    names = tuple(dict.fromkeys(scope.split()))
    return names or (DEFAULT,)


def allowed_scopes(params: AuthParams, client_id: str, username: str | None) -> frozenset[str]:
    """What a grant to ``client_id`` (and ``username``, for a password or refresh grant) may
    carry: ``default``, and what the entries allow (both entries' when both list scopes)."""
    client = params.client_scopes.get(client_id)
    user = params.user_scopes.get(username) if username is not None else None
    if client is not None and user is not None:
        listed = frozenset(client) & frozenset(user)
    else:
        listed = frozenset(client or user or ())
    return listed | {DEFAULT}


def grant(asked: Iterable[str], allowed: frozenset[str]) -> str:
    """The granted ``scope`` (space-separated, in the request's order).

    Raises:
        InvalidScope: naming no more than a few of the scopes refused.
    """
    names = tuple(asked)
    refused = [name for name in names if name not in allowed]
    if refused:
        shown = " ".join(refused[:5])
        raise InvalidScope(f"not allowed for this grant: {shown}")
    return " ".join(names)


def insufficient(scopes: Iterable[str]) -> Forbidden:
    """The 403 of RFC 6750 3.1 for a route that requires ``scopes``.

    >>> insufficient(["orders:read"]).headers
    (('www-authenticate', 'Bearer error="insufficient_scope", scope="orders:read"'),)
    """
    wanted = " ".join(scopes)
    return Forbidden(
        f"the access token lacks a scope this route requires: {wanted}",
        _SCOPES.refused("insufficient_scope", scope=wanted),
    )


def requiring(scopes: tuple[str, ...], invoke: Invoke) -> Invoke:
    """``invoke`` behind the check that the request's token carries every one of ``scopes``
    (the bearer guard put the token's ``scope`` claim on the request's context); 403 else.
    Composed at start into the call of the routes that require scopes only."""
    needed = frozenset(scopes)
    refusal = insufficient(scopes)  # spelled once: a refusal raises a copy
    wanted = " ".join(scopes)

    async def checked(params: Mapping[str, str]) -> Any:
        ctx = current.get()
        if not needed.issubset(ctx.scope.split()):
            raise _refused(ctx, refusal, wanted)
        return await invoke(params)

    return checked


def _refused(ctx: RequestContext, refusal: Forbidden, wanted: str) -> Forbidden:
    """A copy of ``refusal``, challenged with ``DPoP`` where a DPoP-bound token came with its
    proof (RFC 9449 7.1: the scheme the token came with)."""
    if not getattr(ctx, "dpop", False):  # unset: a bearer token
        return Forbidden(refusal.detailed, refusal.challenge)
    return Forbidden(refusal.detailed, DPOP.refused("insufficient_scope", scope=wanted))


def scope_warnings(
    section: str, scheme: str | None, custom_on_auth: bool, routes: Iterable[str]
) -> list[str]:
    """The start's warning about the routes of a port (``"GET /rest/orders"``) that require
    scopes where no scope can be checked: ignored on a Basic or open port; refused (403)
    behind a named ``onAuth``, which gives the request no token scopes."""
    scoped = sorted(routes)
    if not scoped:
        return []
    shown = ", ".join(scoped[:5]) + (f" and {len(scoped) - 5} more" if len(scoped) > 5 else "")
    if scheme != "oAuth2":
        where = "a Basic port" if scheme == "basic" else "a port without authorization"
        return [f"[{section}] route scopes are ignored on {where}: {shown}"]
    if custom_on_auth:
        return [
            f"[{section}] a named onAuth checks the tokens, so no token carries scopes here: "
            f"the routes that require scopes answer 403 insufficient_scope: {shown}"
        ]
    return []
