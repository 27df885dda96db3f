"""HTTP Basic with the application's ``OnAuth(user, password)`` (SPEC 4.1)."""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import re
import secrets
import time
import traceback
from binascii import a2b_base64, b2a_base64
from functools import partial
from typing import TYPE_CHECKING

from fwrest import log
from fwrest.auth.blocking import Pool, off_loop, settled
from fwrest.auth.settings import AuthSettings
from fwrest.auth.throttle import Throttle, shown_user
from fwrest.context.request import current
from fwrest.errors import BASIC, Forbidden, HTTPError, Unauthorized, is_cancellation
from fwrest.wire import Request

if TYPE_CHECKING:
    from fwrest.context.request import RequestContext

__all__ = [
    "CACHE_MAX",
    "AcceptedPairs",
    "BasicGuard",
    "authorization_header",
    "mask_secret",
    "parse_basic",
]

# Decoded headers remembered per guard (a client sends the same header on every request);
# the verdict is remembered only with OnAuthCache (AcceptedPairs), else OnAuth runs for every
# request.
_DECODED_MAX = 256
CACHE_MAX = 10_000  # OnAuthCache's pairs per worker and port, the oldest dropped (SPEC 4.1)
# How long a header OnAuth accepted is taken for no guess by the throttle (it is not counted
# before OnAuth checks it again: see Throttle.known), from its latest acceptance.
_KNOWN_S = 300.0


def authorization_header(req: Request) -> str | None:
    """The request's ``Authorization`` value (the HTTP layer refuses a repeated one and
    hands over the value it found; a request built elsewhere is searched)."""
    found: str | None = req.authorization
    if found is not None:
        return found
    for name, value in req.headers:
        if name == "authorization":
            return value
    return None


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Basic dXNlcjpwYXNz`` -> ``("user", "pass")``; None for anything that is not Basic.

    The scheme name is case-insensitive (RFC 7235); the credentials are strict base64 of
    ``user:password``, split at the first colon, UTF-8 else ISO-8859-1.

    >>> parse_basic("basic dXNlcjpwOnc=")
    ('user', 'p:w')
    """
    parsed = _parse(header)
    return None if parsed is None else (parsed[0], parsed[1])


def _parse(header: str | None) -> tuple[str, str, str] | None:
    """``(user, password, base64 credentials)`` of a Basic header, or None."""
    if not header:
        return None
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    credentials = credentials.strip()
    if not credentials:
        return None
    try:
        # strict: only the base64 alphabet with correct padding (binascii.Error otherwise);
        # a non-ASCII str is a ValueError
        raw = a2b_base64(credentials, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    if b2a_base64(raw, newline=False) != credentials.encode("ascii"):
        # the one encoding of those bytes (RFC 4648 3.3, 3.5): strict_mode still takes "="
        # after a whole group and pad bits that are not zero ("YR==" for "YQ==")
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("iso-8859-1")
    user, colon, password = text.partition(":")
    if not colon:
        return None
    return user, password, credentials


def mask_secret(password: str, text: str) -> str:
    """``text`` with ``password`` masked: everywhere when 3 characters or more, else only where
    it stands as a word of its own (masking every ``o`` of a line mangled it and showed the
    password ``o`` all the same).

    >>> mask_secret("o", "onauth exploded: bad password o"), mask_secret("pw1", "a-pw1-b")
    ('onauth exploded: bad password ***', 'a-***-b')
    """
    if len(password) >= 3:
        return text.replace(password, log.MASKED)
    return re.sub(rf"(?<!\w){re.escape(password)}(?!\w)", log.MASKED, text)


class AcceptedPairs:
    """The user and password pairs ``OnAuth`` accepted within the last ``period`` seconds, on
    one port of one worker (SPEC 4.1 ``OnAuthCache``, the idea of Apache's
    ``mod_authn_socache``).

    A pair is held as its keyed hash only (BLAKE2b keyed with a random key made by this
    worker, never written anywhere), never the password nor an unkeyed hash of it: the table
    is no list of passwords to guess at offline. At most ``limit`` pairs, in the order they
    were last accepted, so the first is the oldest, dropped for a new one when full. Only an
    acceptance is remembered; a pair is forgotten when ``OnAuth`` refuses it.
    """

    __slots__ = ("_checking", "_key", "_table", "limit", "period")

    def __init__(self, period: float, limit: int = CACHE_MAX) -> None:
        self.period = period
        self.limit = limit
        self._key = secrets.token_bytes(32)
        self._table: dict[bytes, float] = {}  # keyed hash -> until when (monotonic)
        # keyed hash -> the end of the check of that pair in progress (see lead)
        self._checking: dict[bytes, asyncio.Future[None]] = {}

    def digest(self, user: str, password: str) -> bytes:
        """The keyed hash of a pair (the user name holds no colon: split at the first)."""
        pair = f"{user}:{password}".encode("utf-8", "surrogatepass")
        return hashlib.blake2b(pair, key=self._key, digest_size=16).digest()

    def holds(self, digest: bytes) -> bool:
        """Whether the pair was accepted within the period (one dict lookup)."""
        until = self._table.get(digest)
        if until is None:
            return False
        if until > time.monotonic():
            return True
        del self._table[digest]
        return False

    def remember(self, digest: bytes) -> None:
        """``OnAuth`` accepted the pair now: it passes for the period from now."""
        table = self._table
        if table.pop(digest, None) is None and len(table) >= self.limit:
            del table[next(iter(table))]  # the oldest acceptance
        table[digest] = time.monotonic() + self.period

    async def joined(self, digest: bytes) -> bool:
        """Whether a check of the pair in progress (another request's) accepted it: waits
        for it, if there is one. A pair refused meanwhile is checked again by each request
        (a failure always asks ``OnAuth``)."""
        pending = self._checking.get(digest)
        if pending is None:
            return False
        await asyncio.wait((pending,))  # not cancelled with this request
        return self.holds(digest)

    def lead(self, digest: bytes) -> asyncio.Future[None] | None:
        """This request checks the pair: the requests with the same pair that arrive
        meanwhile wait for its outcome (:meth:`joined`) instead of asking ``OnAuth`` too
        (a client opening many connections at once, a period ending under load). None when
        another request leads already."""
        if digest in self._checking:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._checking[digest] = future
        return future

    def settle(self, digest: bytes, future: asyncio.Future[None]) -> None:
        """The check :meth:`lead` announced has ended (accepted, refused or failed)."""
        if self._checking.get(digest) is future:
            del self._checking[digest]
        future.set_result(None)

    def forget(self, digest: bytes) -> None:
        """``OnAuth`` refused the pair (a request that overtook a concurrent acceptance)."""
        self._table.pop(digest, None)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"<AcceptedPairs {len(self._table)} of {self.limit}, {self.period:g} s>"


class BasicGuard:
    """Runs before routing on a Basic port: 401 without valid Basic credentials, then
    ``OnAuth``: exactly ``True`` passes, anything else is 403, an exception is 500.

    With ``OnAuthCache`` a pair ``OnAuth`` accepted passes without it for that period
    (:class:`AcceptedPairs`), unless the throttle has locked its user or address out; the
    keyed hash of a header's pair is made once, with its decoding, so a request that passes
    so costs two dict lookups."""

    __slots__ = (
        "_cache",
        "_decoded",
        "_func",
        "_is_async",
        "_known",
        "_name",
        "_port",
        "pool",
        "throttle",
    )

    def __init__(
        self,
        settings: AuthSettings,
        port_name: str,
        throttle: Throttle | None = None,
        pool: Pool | None = None,
    ) -> None:
        assert settings.on_auth is not None
        self._func = settings.on_auth
        self._is_async = settings.on_auth_is_async
        self._name = settings.on_auth_name
        self._port = port_name
        self.throttle = throttle
        # where a ``def`` OnAuth runs: the worker gives the port's thread pool (as the
        # original product runs OnAuth in the request's thread); else asyncio's default one
        self.pool = pool
        # OnAuthCache: None without it (the request path then asks OnAuth every time)
        self._cache = AcceptedPairs(settings.cache_s) if settings.cache_s > 0 else None
        # header -> (user, password, the secrets to scrub from the log, the pair's keyed hash
        # when OnAuthCache is on, else b"")
        self._decoded: dict[str, tuple[str, str, tuple[str, ...], bytes]] = {}
        # header -> until when (monotonic) OnAuth's latest acceptance of it counts: the
        # throttle counts it only should OnAuth refuse it (its client may send many at once)
        self._known: dict[str, float] = {}

    def _is_known(self, header: str) -> bool:
        return self._known.get(header, 0.0) > time.monotonic()

    async def __call__(self, req: Request, ctx: RequestContext) -> None:
        header = req.authorization
        if header is None:
            header = authorization_header(req)
        decoded = self._decoded.get(header) if header is not None else None
        if decoded is None:
            parsed = _parse(header)
            if parsed is None or header is None:
                raise Unauthorized(BASIC)
            user, password, credentials = parsed
            digest = self._cache.digest(user, password) if self._cache is not None else b""
            decoded = (user, password, log.secret_forms(password, credentials), digest)
            if len(self._decoded) >= _DECODED_MAX:
                self._decoded.clear()
            self._decoded[header] = decoded
        user, password, scrubbed, digest = decoded
        log.request_secrets.set(scrubbed)
        cache = self._cache
        if cache is None:
            await self._ask(req, ctx, header, user, password, b"")
            return
        if cache.holds(digest) or await cache.joined(digest):
            if self.throttle is not None:
                self.throttle.known(user, req.client)  # a lock-out stands: 429
            self._accepted(ctx, user, " (OnAuthCache)")
            return
        leading = cache.lead(digest)
        try:
            await self._ask(req, ctx, header, user, password, digest)
        finally:
            if leading is not None:
                cache.settle(digest, leading)

    async def _ask(
        self,
        req: Request,
        ctx: RequestContext,
        header: str | None,
        user: str,
        password: str,
        digest: bytes,
    ) -> None:
        """``OnAuth`` decides, under the throttle; raises the refusal."""
        cache = self._cache
        throttle = self.throttle
        attempt = None
        now = 0.0
        if throttle is not None and header is not None:
            now = time.monotonic()
            if self._known.get(header, 0.0) > now:
                throttle.known(user, req.client)  # not counted unless OnAuth refuses it
            else:
                # counted before OnAuth is asked (SPEC 7.1): past maxFailures, no OnAuth call
                attempt = await throttle.admit(
                    user, req.client, known=partial(self._is_known, header)
                )
        # OnAuth reads the request through the REST object (SPEC 11.2: the client's
        # certificate); a def one in a copy of this context (the pool's submit copies it)
        token = current.set(ctx)
        try:
            if self._is_async:
                verdict = await self._func(user, password)
            else:
                verdict = await settled(off_loop(self.pool, self._func, user, password))
        except HTTPError:
            if throttle is not None and attempt is not None:
                throttle.abandon(attempt)
            raise  # the pool's 503 Server Busy
        except BaseException as exc:  # SystemExit too: 500, the worker serves on (SPEC 7.1)
            if throttle is not None and attempt is not None:
                throttle.abandon(attempt)
            if is_cancellation(exc):
                raise
            self._log_raised(exc, user, password)
            raise HTTPError(500) from None
        finally:
            current.reset(token)
        if verdict is not True:
            # %r escapes CR, LF and ESC (and shows an empty name as '')
            log.auth_log.info(
                "[%s] OnAuth refused user %r", self._port, shown_user(user), extra=log.OWN
            )
            if header is not None:
                self._known.pop(header, None)
            if cache is not None:
                cache.forget(digest)
            if throttle is not None:
                # stays counted (one admitted as known is counted now); the attempts after
                # the maxFailures-th get 429 (SPEC 4.2), as on the token route: this refusal
                # itself is still a 403
                if attempt is None:
                    attempt = throttle.uncounted(user, req.client)
                await throttle.failed(attempt)
            raise Forbidden()
        if throttle is not None and header is not None:
            if attempt is not None and attempt.counted:
                await throttle.succeeded(attempt)
                now = time.monotonic()  # OnAuth took its time: from this acceptance
            if len(self._known) >= _DECODED_MAX and header not in self._known:
                self._known.clear()
            self._known[header] = now + _KNOWN_S
        if cache is not None:
            cache.remember(digest)
        self._accepted(ctx, user, "")

    def _accepted(self, ctx: RequestContext, user: str, how: str) -> None:
        ctx.auth_user = user
        if log.auth_log.isEnabledFor(log.VERBOSE):  # rest_log_level 4 and 5
            log.write(
                log.auth_log,
                log.VERBOSE,
                "[%s] OnAuth accepted user %r%s",
                self._port,
                shown_user(user),
                how,
            )

    def _log_raised(self, exc: BaseException, user: str, password: str) -> None:
        """An exception of ``OnAuth``: one error line (the message, without the password),
        followed by the traceback with ``rest_error_full=1``, as for an endpoint's exception."""
        from fwrest.server.state import tunables  # here: fwrest.server imports fwrest.auth

        text = log.escape(str(exc))
        if tunables.current.rest_error_full == 1:
            # formatted here rather than by the record's exc_info, so that the password is
            # taken out of the traceback too, even one too short for the log's own scrubbing
            tail = "\n" + "".join(traceback.format_exception(exc)).rstrip()
        else:
            tail = " (rest_error_full=1 logs the whole traceback)"
        if password:
            text = mask_secret(password, text)
            tail = mask_secret(password, tail)
        log.auth_log.error(
            "[%s] OnAuth %s raised %s: %s (user %r); answered 500%s",
            self._port,
            self._name,
            type(exc).__name__,
            text,
            shown_user(user),
            tail,
        )
