"""``onAuthparams`` as a start sees it: settings that cannot work stop the start; legal but
probably wrong ones are reported by ``fwrest check`` and logged at start (SPEC 2)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from fwrest.auth.oauth2.expiry import ExpiryError, access_ms, refresh_deadline
from fwrest.auth.oauth2.guard import NoCheckPaths, pattern_location
from fwrest.auth.oauth2.params import (
    AuthParams,
    ParamsError,
    ParamsSource,
    malformed_hashes,
    name_clashes,
)
from fwrest.auth.oauth2.revocation import INTROSPECT_SCOPE
from fwrest.auth.settings import AuthSettings
from fwrest.errors import ConfigError
from fwrest.repository import is_async
from fwrest.routing.names import AUTHORIZE_ROUTE_NAME

__all__ = ["nocheck_warnings", "oauth2_warnings"]

_DAY_S = 86400
_FIX = (
    "correct what the message names (the forms onAuthparams accepts are in docs/authorization.md)."
)


def _describe_ms(ms: int) -> str:
    return f"{ms} ms is {ms / 1000:g} seconds"


def oauth2_warnings(
    settings: AuthSettings, section: str, disabled: frozenset[str] = frozenset()
) -> list[str]:
    """Call ``onAuthparams`` once (as a token request would) and judge what it gives
    (``disabled``: the native routes ``NativeRoutes`` disables on the port).

    Raises:
        ConfigError: a file that is not valid JSON or not a valid settings object; a function
            (not the legacy form, which a start calls without a request) that returns such an
            object; a lifetime that no token request could use (every one would be a 500).
    """
    if settings.scheme != "oAuth2":
        return []
    judged, params = _read_and_judge(settings, section, disabled)
    # SPEC 4.2: a port whose types leave out the password grant takes none, over GET or POST;
    # params unknown (an async function, one that raised): said, as it may allow it
    if settings.allow_get and (
        params is None or params.types is None or "password" in params.types
    ):
        judged.insert(
            0,
            f"[{section}] the token route accepts the password grant over GET (the password "
            'travels in the URL); set "allowGetToken": false in FwData Authorization.',
        )
    return judged


def _read_and_judge(
    settings: AuthSettings, section: str, disabled: frozenset[str]
) -> tuple[list[str], AuthParams | None]:
    """:func:`oauth2_warnings` but the GET one, and the settings read (None when not read)."""
    source = ParamsSource(settings.params_func, settings.params_file)
    name = settings.params_name
    try:
        if source.file is not None:
            params = source.read_file()
        elif source.func is not None and not is_async(source.func):
            params = source.call_sync({})
        else:
            return [], None
    except ParamsError as exc:
        if source.file is not None:
            # SPEC 2: invalid JSON aborts the start, never a failure at request time (every
            # token request would read this file and fail)
            text = str(exc)
            raise ConfigError(
                f"the file {text}"
                if text.startswith(str(source.file))
                else f"the file {source.file} cannot be used: {text}",
                section=section,
                key="onAuthparams",
                fix="correct the file (it is read again when it changes, for every token request).",
            ) from None
        if source.legacy:
            # called with no request parameters: what it fills may depend on them
            return [f"[{section}] onAuthparams: {exc}"], None
        raise ConfigError(
            f"the function {name} returned settings that cannot be used: {exc}",
            section=section,
            key="onAuthparams",
            fix=_FIX,
        ) from None
    except KeyboardInterrupt:
        raise  # Ctrl-C during the start
    except BaseException as exc:  # sys.exit() too: a warning, as for any exception
        return [f"[{section}] onAuthparams raised {type(exc).__name__} when called at start"], None
    out: list[str] = []
    if source.file is None:
        # a file with such names stops the start (ParamsSource.read_file); a function's
        # answer may change while serving: said here, not refused
        out += [f"[{section}] onAuthparams {name}: {clash}" for clash in name_clashes(params)]
        # a file with such a hash stops the start too (ParamsSource.read_file); a function's,
        # as any settings it returns that cannot work (the legacy form's: filled without a
        # request, said only)
        malformed = malformed_hashes(params)
        if malformed and source.legacy:
            out += [f"[{section}] onAuthparams {name}: {problem}" for problem in malformed]
        elif malformed:
            raise ConfigError(
                f"the function {name} returned settings that cannot be used: {malformed[0]}",
                section=section,
                key="onAuthparams",
                fix=_FIX,
            )
    try:
        return out + _judge(params, section, disabled), params
    except ExpiryError as exc:
        where = f"the file {source.file}" if source.file is not None else f"the function {name}"
        raise ConfigError(
            f"{where} gives a lifetime no token request could use: {exc}",
            section=section,
            key="onAuthparams",
            fix=_FIX,
        ) from None


def _judge(params: AuthParams, section: str, disabled: frozenset[str]) -> list[str]:
    out: list[str] = []
    value: Any = params.access_expires
    if value is not None:
        ms = access_ms(value)
        if ms < 60000:
            # SPEC 2's wording: "3600 ms is 3.6 seconds; write 3600000 or "1h""
            unit = f"{ms // 3600}h" if ms >= 3600 and ms % 3600 == 0 else f"{ms}s"
            out.append(
                f"[{section}] onAuthparams access_expires: {_describe_ms(ms)}; write "
                f'{ms * 1000} or "{unit}" (access_expires is in milliseconds)'
            )
        elif ms > _DAY_S * 1000:
            out.append(
                f"[{section}] onAuthparams access_expires is over a day: a stolen "
                "access token stays valid that long."
            )
    if params.refresh_expires is not None:
        left = refresh_deadline(params.refresh_expires) - time.time()
        if left > 90 * _DAY_S:
            out.append(f"[{section}] onAuthparams refresh_expires is more than 90 days away.")
        elif left <= 0:
            out.append(
                f"[{section}] onAuthparams refresh_expires {params.refresh_expires!r} is already "
                "past: every refresh token is expired when issued, so clients must repeat the "
                "password grant."
            )
    if params.types is None or "password" in params.types:
        # SPEC 12.4: a password grant may have what the client allows when its user lists no
        # scopes: every such user may take the client's introspect (every token of the port)
        loose = list(dict.fromkeys(n for n, _ in params.users if n not in params.user_scopes))
        for cid, scopes in params.client_scopes.items():
            if INTROSPECT_SCOPE in scopes and loose:
                shown = ", ".join(repr(n) for n in loose[:5])
                more = f" and {len(loose) - 5} more" if len(loose) > 5 else ""
                out.append(
                    f"[{section}] onAuthparams: the client {cid!r} may be granted "
                    f"{INTROSPECT_SCOPE!r}, and users without scopes ({shown}{more}) get it in "
                    "a password grant through that client: they can read every token of the "
                    'port by introspection; give those users "scopes" (an empty list '
                    "allows default only), or keep introspect to a client of its own."
                )
    out += _code_warnings(params, section, disabled)
    for key in params.repeated:
        out.append(
            f"[{section}] onAuthparams gives {key} more than once (single key and expires "
            "entries): the first applies to every token, the others are ignored."
        )
    return out


def _code_warnings(params: AuthParams, section: str, disabled: frozenset[str]) -> list[str]:
    """The authorization code grant (SPEC 16.1): listed without a client that could use it,
    or without the route it needs, or redirect URIs that no grant uses."""
    listed = params.types is not None and "authorization_code" in params.types
    if listed and AUTHORIZE_ROUTE_NAME in disabled:
        return [
            f"[{section}] onAuthparams lists the grant type authorization_code, but FwData "
            "NativeRoutes disables oauth2/authorize, the route where it begins: no client "
            "can use it (the metadata does not list it); leave oauth2/authorize out of "
            'disable ("*" includes it), or authorization_code out of types.'
        ]
    if listed and not params.redirect_uris:
        return [
            f"[{section}] onAuthparams lists the grant type authorization_code, but no client "
            'entry has "redirect_uris": every authorization request is refused; add the '
            "client's redirect URIs."
        ]
    if not listed and params.redirect_uris:
        shown = ", ".join(repr(c) for c in params.redirect_uris)
        return [
            f"[{section}] onAuthparams gives redirect_uris to {shown}, but its types do not "
            "list authorization_code: the authorize route refuses every request; add "
            '{"grant_type": "authorization_code"} to types.'
        ]
    return []


Routes = Sequence[tuple[str, Sequence[tuple[str, str]]]]


def _full(prefix: str, rel: str) -> str:
    if prefix in ("", "/"):
        return rel
    return prefix if rel == "/" else prefix + rel


def _shown(routes: list[str]) -> str:
    more = f" and {len(routes) - 5} more" if len(routes) > 5 else ""
    return ", ".join(routes[:5]) + more


def nocheck_warnings(section: str, patterns: Sequence[str], routes: Routes) -> list[str]:
    """``fwrest check``'s warnings about ``onAuthNoCheckUri`` patterns whose reach a reader may
    mistake (SPEC 4.2; guard.py's ``NoCheckPaths`` says how a pattern is read).

    ``routes`` holds each location's prefix and its application routes (method, path relative
    to the location). Reported: a relative pattern that opens routes of more than one
    location; a pattern in the prefixed form of one location that opens routes there while
    it could have been written relative to another: the port's root location (``/app/*``
    written for ``/`` opens the routes of the location ``/app``), or one with routes that
    the pattern, read relative to it, would match (it opens them nowhere but its own
    location).
    """
    prefixes = [prefix for prefix, _ in routes]
    out: list[str] = []
    for raw in dict.fromkeys(patterns):
        if not raw.strip():
            continue
        written = raw if raw.startswith("/") else "/" + raw
        owner, rel = pattern_location(written, prefixes)
        if owner is None:
            matcher = NoCheckPaths([rel])
            opened = [
                (prefix, f"{method} {_full(prefix, path)}")
                for prefix, served in routes
                for method, path in served
                if matcher.matches(path)
            ]
            where = list(dict.fromkeys(prefix for prefix, _ in opened))
            if len(where) > 1:
                named = next((p for p in where if p not in ("", "/")), where[0])
                out.append(
                    f"[{section}] onAuthNoCheckUri {raw!r} is relative, so it opens the "
                    f"routes it matches in every location: "
                    f"{_shown([route for _, route in opened])}; write a location's prefix "
                    f"before it to open that location's only (e.g. "
                    f"{_full(named, rel)!r})."
                )
            continue
        own = NoCheckPaths([rel])
        mine = [
            f"{method} {_full(prefix, path)}"
            for prefix, served in routes
            if prefix == owner
            for method, path in served
            if own.matches(path)
        ]
        as_relative = NoCheckPaths([written])
        elsewhere = [
            f"{method} {_full(prefix, path)}"
            for prefix, served in routes
            if prefix != owner
            for method, path in served
            if as_relative.matches(path)
        ]
        rooted = any(prefix in ("", "/") for prefix in prefixes)
        if elsewhere or (rooted and mine):
            if elsewhere:
                other = (
                    f", and not {_shown(elsewhere)} of another location (a pattern meant "
                    "relative to another location is written with that location's prefix)"
                )
            else:
                other = (
                    f"; it does not open routes of the location / (every path under {owner} "
                    f"is the location {owner}'s)"
                )
            out.append(
                f"[{section}] onAuthNoCheckUri {raw!r} begins with the prefix of the location "
                f"{owner}, so it is that location's: it opens "
                f"{_shown(mine) if mine else 'no route'} there{other}."
            )
    return out
