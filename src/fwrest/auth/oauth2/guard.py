"""The bearer check of an oAuth2 port, and the paths ``onAuthNoCheckUri`` exempts."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from fwrest import log
from fwrest.auth.basic import authorization_header
from fwrest.auth.blocking import Pool, off_loop, settled
from fwrest.auth.oauth2.dpop import DpopCheck, dpop_token
from fwrest.auth.oauth2.mtls import MtlsRefused, certificate_bound, check_certificate
from fwrest.auth.oauth2.tokens import (
    InvalidToken,
    TokenService,
    UnknownKey,
    bearer_token,
    token_user,
)
from fwrest.errors import BEARER, Challenge, HTTPError, Unauthorized, is_cancellation
from fwrest.repository import is_async
from fwrest.routing.names import OPEN_OAUTH2_ROUTES, TOKEN_ROUTE
from fwrest.wire import Request

if TYPE_CHECKING:
    from fwrest.context.request import RequestContext

__all__ = [
    "TOKEN_ROUTE",
    "BearerGuard",
    "NoCheckPaths",
    "pattern_location",
]  # TOKEN_ROUTE: from routing

_OPEN_TAILS = tuple(OPEN_OAUTH2_ROUTES)  # str.endswith takes a tuple


class _Patterns:
    """Literal paths, ``:param`` segments, a trailing ``*``; one trailing slash ignored."""

    __slots__ = ("_regex", "literal")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.literal: set[str] = set()
        regexes: list[str] = []
        for pattern in patterns:
            star = pattern.endswith("*")
            if star:
                pattern = pattern[:-1]
            if len(pattern) > 1 and pattern.endswith("/") and not star:
                pattern = pattern[:-1]
            if not star and ":" not in pattern:
                self.literal.add(pattern)
                continue
            parts = []
            for seg in pattern.split("/"):
                parts.append("[^/]+" if seg.startswith(":") and len(seg) > 1 else re.escape(seg))
            body = "/".join(parts)
            if star:
                if body.endswith("/"):
                    body = body[:-1] + "(?:/.*)?"  # /public/* covers /public and below
                else:
                    body += ".*"
            regexes.append(body)
        self._regex = re.compile("(?:" + "|".join(regexes) + r")\Z") if regexes else None

    def any(self) -> bool:
        return bool(self.literal) or self._regex is not None

    def matches(self, path: str) -> bool:
        if path in self.literal:
            return True
        return self._regex is not None and self._regex.match(path) is not None


def pattern_location(pattern: str, prefixes: Iterable[str]) -> tuple[str | None, str]:
    """The location a pattern belongs to and the pattern relative to it: ``(prefix,
    relative)`` when it begins with a location's prefix at a segment boundary (the longest
    such; the prefixed form, SPEC 4.2), ``(None, pattern)`` for a relative pattern, which
    applies to every location of the port.

    >>> pattern_location("/app/*", ["/", "/app"]), pattern_location("/public/*", ["/app"])
    (('/app', '/*'), (None, '/public/*'))
    """
    best: str | None = None
    for prefix in prefixes:
        if prefix in ("", "/") or (best is not None and len(prefix) <= len(best)):
            continue
        if pattern == prefix or pattern.startswith(prefix + "/"):
            best = prefix
    if best is None:
        return None, pattern
    return best, pattern[len(best) :] or "/"


def _written(raw: str) -> str | None:
    """A pattern as written, with its leading slash; None for a blank one."""
    if not raw.strip():
        return None
    # taken as written: "/ " must not become "/" (the whole port)
    return raw if raw.startswith("/") else "/" + raw


class NoCheckPaths:
    """Paths that skip the bearer check: literal, with ``:param`` segments, or ending in ``*``.

    Matched case-sensitively on the normalised path (one trailing slash ignored). A pattern
    that begins with one of the port's location prefixes (``prefixes``, at a segment
    boundary) is that location's, in the prefixed form: it is matched against that
    location's relative paths only. Any other pattern is relative: it is matched against the
    relative path of every location (and a path outside every location as it is). So each
    pattern has one reading, decided at start (docs/decisions.md).

    >>> paths = NoCheckPaths(["/public/*", "/items/:id", "/app/open"], ["/", "/app", "/api"])
    >>> paths.matches("/items/7"), paths.matches("/open", "/app"), paths.matches("/open", "/api")
    (True, True, False)
    """

    __slots__ = ("_any", "located", "relative")

    def __init__(self, patterns: Iterable[str], prefixes: Iterable[str] = ()) -> None:
        known = tuple(prefixes)
        relative: list[str] = []
        located: dict[str, list[str]] = {}
        for raw in patterns:
            pattern = _written(raw)
            if pattern is None:
                continue
            prefix, rel = pattern_location(pattern, known)
            if prefix is None:
                relative.append(rel)
            else:
                located.setdefault(prefix, []).append(rel)
        self.relative = _Patterns(relative)
        self.located = {prefix: _Patterns(rels) for prefix, rels in located.items()}
        self._any = self.relative.any() or bool(self.located)

    def any(self) -> bool:
        """True when some path is exempt."""
        return self._any

    def matches(self, rel: str, prefix: str | None = None) -> bool:
        """Whether ``rel``, a path relative to the location ``prefix`` (None: a path outside
        every location), is exempt."""
        if self.relative.matches(rel):
            return True
        own = self.located.get(prefix) if prefix is not None else None
        return own is not None and own.matches(rel)


def _dpop_scheme(header: str | None) -> bool:
    """Whether ``header`` names the DPoP scheme (whatever follows it).

    >>> _dpop_scheme("DPoP"), _dpop_scheme(" dpop a b"), _dpop_scheme("DPoP,"), _dpop_scheme("DPoPx")
    (True, True, True, False)
    """
    if not header:
        return False
    text = header.lstrip()
    return text[:4].lower() == "dpop" and (len(text) == 4 or text[4] in " \t,")


class BearerGuard:
    """Runs before routing on an oAuth2 port (SPEC 4.2)."""

    __slots__ = (
        "_any_nocheck",
        "_challenge",
        "_custom",
        "_custom_async",
        "_custom_name",
        "_dpop",
        "_locate",
        "_nocheck",
        "_service",
        "pool",
    )

    def __init__(
        self,
        service: TokenService,
        nocheck: NoCheckPaths,
        locate: Callable[[str], tuple[str, str] | None],
        custom: Callable[..., Any] | None,
        custom_name: str,
        pool: Pool | None = None,
        challenges: dict[str | None, Challenge] | None = None,
        dpop: DpopCheck | None = None,
    ) -> None:
        self._service = service
        # SPEC 16.2: the DPoP scheme and bound tokens (None: the port takes Bearer alone)
        self._dpop = dpop
        # SPEC 16.3: every 401 names the protected resource metadata (RFC 9728 5.1) of the
        # request's location; the challenges are spelled at start, per location prefix
        # (None: a path outside every location), by the resource metadata (resource.py)
        self._challenge: dict[str | None, Challenge] = dict(challenges or {})
        self._nocheck = nocheck
        self._any_nocheck = nocheck.any()  # else only the token route skips the check
        self._locate = locate
        self._custom = custom
        self._custom_async = is_async(custom) if custom else False
        self._custom_name = custom_name
        self.pool = pool  # where a def onAuth runs (see BasicGuard.pool)

    async def __call__(self, req: Request, ctx: RequestContext) -> None:
        path = ctx.path
        if self._any_nocheck or path.endswith(_OPEN_TAILS):
            located = self._locate(path)
            if located is not None and located[1] in OPEN_OAUTH2_ROUTES:
                # the token, revocation, introspection and discovery routes (of a location)
                # are never protected: they authenticate their callers themselves, or publish
                # only public data (SPEC 4.2, 12.2, 12.3)
                return
            # outside every location there is no token route: /fw/oauth2/token there is
            # checked like any path (401 without a token, not 404: SPEC 7.1)
            if located is None:
                if self._nocheck.matches(path):
                    return
            elif self._nocheck.matches(located[1], located[0]):
                return
        header = authorization_header(req)
        token = bearer_token(header)
        dpop_scheme = False
        if token is None and self._dpop is not None:
            token = dpop_token(header)  # Authorization: DPoP (SPEC 16.2)
            dpop_scheme = token is not None
        if token is None:
            why = "an access token is required"
            # the DPoP scheme without one token ("DPoP", "DPoP a b"): its challenge too
            if self._dpop is not None and (self._dpop.required or _dpop_scheme(header)):
                raise self._dpop.refuse(self._prefix(path), "", why)
            raise Unauthorized(self._challenge.get(self._prefix(path), BEARER), why)
        log.request_secrets.set(log.secret_forms(token))
        if self._custom is not None:
            try:
                if self._custom_async:
                    verdict = await self._custom(token, path)
                else:
                    verdict = await settled(off_loop(self.pool, self._custom, token, path))
            except HTTPError:
                raise  # the pool's 503 Server Busy
            except BaseException as exc:  # SystemExit too: 500, the worker serves on
                if is_cancellation(exc):
                    raise
                log.auth_log.error(
                    "onAuth %s raised %s; answered 500", self._custom_name, type(exc).__name__
                )
                raise HTTPError(500) from None
            if verdict is not True:
                raise self._invalid(path, "the access token was refused", dpop_scheme)
            return
        fresh = False
        try:
            claims = self._service.verify(token)
        except UnknownKey:
            fresh = True  # a key made a moment ago elsewhere: one look at the set, then again
        except InvalidToken as exc:
            raise self._invalid(path, str(exc), dpop_scheme) from None
        if fresh:  # awaited outside the except (mypyc_lint)
            try:
                claims = await self._service.verify_fresh(token)
            except InvalidToken as exc:
                raise self._invalid(path, str(exc), dpop_scheme) from None
        dpop = self._dpop
        if dpop is not None and (dpop_scheme or dpop.required or "cnf" in claims):
            # a bound token, the DPoP scheme, or DPoP mandatory: the proof (dpop.py)
            await dpop.access(
                ctx.headers.get,
                ctx.method,
                path,
                ctx.client,
                token,
                claims,
                dpop_scheme,
                self._prefix(path),
            )
            if dpop_scheme:  # a DPoP-bound token with its proof (access refuses the rest)
                ctx.dpop = True
        if "cnf" in claims:
            try:  # SPEC 16.2: a certificate-bound token needs its certificate (RFC 8705 3)
                check_certificate(claims, req.peer_cert)
            except MtlsRefused as exc:
                # the challenge of the scheme the token came with (DPoP: RFC 9449 7.1)
                raise self._invalid(path, str(exc), dpop_scheme) from None
        if self._service.mtls_required and not certificate_bound(claims):
            # SPEC 16.2: "boundTokens": "mtls" makes the binding mandatory, here as at the
            # token route (a token issued unbound elsewhere, or before it was turned on)
            why = "a certificate-bound access token is required here"
            raise self._invalid(path, why, dpop_scheme)
        ctx.auth_user = token_user(claims)  # "client:<id>" for a client's own token
        scope = claims.get("scope")
        if isinstance(scope, str):
            ctx.scope = scope  # split only when rest.getAuthScopes() asks

    def _prefix(self, path: str) -> str | None:
        """The location prefix of ``path`` for its challenge; None outside every location
        (looked up only on a 401, and only when the port has challenges)."""
        if not self._challenge:
            return None
        located = self._locate(path)
        return located[0] if located is not None else None

    def _invalid(self, path: str, why: str, dpop_scheme: bool = False) -> Unauthorized:
        dpop = self._dpop
        if dpop is not None and (dpop_scheme or dpop.required):
            # a token sent with the DPoP scheme, or where DPoP is mandatory: its challenge
            # (RFC 9449 7.1), as for a missing one
            return dpop.refuse(self._prefix(path), "invalid_token", why)
        challenge = self._challenge.get(self._prefix(path), BEARER)
        return Unauthorized(challenge.refused("invalid_token", why), why)
