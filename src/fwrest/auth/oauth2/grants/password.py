"""The resource owner password credentials grant (RFC 6749 4.3, SPEC 4.2): ``username`` and
``password`` against ``onAuthparams``'s users, under the brute-force throttle (SPEC 7.1).

RFC 9700 deprecates this grant; fwrest keeps it because its users need it, with the
protections of SPEC 7: constant-time checks at one cost for every user (``passwords.py``),
attempts counted before the check, a lock-out past ``maxFailures``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fwrest import log
from fwrest.auth.blocking import settled
from fwrest.auth.oauth2.dpop import new_family
from fwrest.auth.oauth2.errors import InvalidGrant, InvalidRequest, LockedOut
from fwrest.auth.oauth2.grants.base import Grant, TokenRequest, Validated
from fwrest.auth.oauth2.params import CLIENT_PREFIX
from fwrest.auth.oauth2.passwords import check_user, costly
from fwrest.auth.oauth2.scopes import allowed_scopes, grant
from fwrest.auth.throttle import shown_user, user_key
from fwrest.errors import TooManyRequests

if TYPE_CHECKING:
    from fwrest.auth.oauth2.params import AuthParams
    from fwrest.auth.oauth2.tokens import StoreDeadline, TokenService

__all__ = ["REFUSED", "PasswordGrant", "check_password"]

T = TypeVar("T")

# one message whether the user exists or not (SPEC 4.2)
REFUSED = "invalid username or password"


class PasswordGrant(Grant):
    """``grant_type=password``: a pair for the user whose password matches."""

    grant_type: ClassVar[str] = "password"

    def __init__(self) -> None:
        self._warned_get = False  # the GET warning is logged once per worker and port

    def screen(self, service: TokenService, method: str, params: dict[str, str]) -> None:
        if method == "GET" and not self._warned_get:
            self._warned_get = True
            log.auth_log.warning(
                "[%s] a password grant arrived over GET: the password travels in the URL, "
                "where proxies, browser history and server logs keep it; clients should "
                'POST a form body instead (set "allowGetToken": false to refuse GET)',
                service.port_name,
            )
        username = params.get("username")
        if username and user_key(username).startswith(CLIENT_PREFIX):
            # no user may have such a name (a client's own tokens carry it): refused before a
            # legacy onAuthparams echoes it into an object the token route must refuse (500)
            raise InvalidGrant(REFUSED)

    async def validate(self, request: TokenRequest) -> Validated:
        subject = await _check_password(request)
        scope = grant(request.asked, allowed_scopes(request.allowed, request.client_id, subject))
        return Validated(subject, new_family(request), scope, scope)


async def _check_password(request: TokenRequest) -> str:
    """The user name whose password the request gives, counted by the throttle.

    Raises:
        InvalidRequest: no user name or no password.
        InvalidGrant: a wrong user or password (one message, one cost: SPEC 4.2).
        LockedOut: 429 past ``maxFailures`` (no password checked).
        HTTPError: 503 (the store).
    """
    params = request.params
    username, password = params.get("username"), params.get("password")
    if not username or password is None:
        raise InvalidRequest("username and password are required")
    try:
        ok = await check_password(
            request.service, request.deadline, request.allowed, username, password,
            request.client_ip,
        )  # fmt: skip
    except TooManyRequests as exc:
        raise LockedOut(exc) from None  # RFC 6749 5.2's answer (no-store), as the route's
    if not ok:
        raise InvalidGrant(REFUSED)
    return username


class _Run:
    """The token request's store calls for its throttle (``StoreRun``): under its deadline."""

    __slots__ = ("deadline", "service")

    def __init__(self, service: TokenService, deadline: StoreDeadline) -> None:
        self.service, self.deadline = service, deadline

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]:
        return self.service.store_call(self.deadline, fn, *args)

    def budget(self) -> float:
        return self.deadline.timeout()


async def check_password(
    service: TokenService,
    deadline: StoreDeadline,
    allowed: AuthParams,
    username: str,
    password: str,
    client_ip: str,
    what: str = "password grant",
) -> bool:
    """Whether ``password`` is ``username``'s among ``allowed``'s users, the attempt counted
    by the port's throttle: one budget for the password grant and the login page of the
    authorization code grant (SPEC 16.1), shared by every worker and host.

    Raises:
        HTTPError: 429 past ``maxFailures`` (no password checked), 503 (the store).
    """

    run = _Run(service, deadline)
    throttle = service.throttle
    users = allowed.users
    # counted before the check (SPEC 7.1): past maxFailures, 429 and no check
    attempt = await throttle.admit(username, client_ip, run)
    try:
        # a plain-text comparison is a few microseconds: done here; a hash costs
        # milliseconds of CPU (argon2, bcrypt): done in a thread, the event loop serving
        # others meanwhile. Every check costs the same (check_user).
        if costly(users):
            ok = await settled(asyncio.to_thread(check_user, users, username, password))
        else:
            ok = check_user(users, username, password)
    except BaseException:
        throttle.abandon(attempt)  # a client gone: not a failure
        raise
    if not ok:
        # %r escapes CR, LF and ESC, as for Basic's refusals
        log.auth_log.info(
            "[%s] %s refused for user %r",
            service.port_name,
            what,
            shown_user(username),
            extra=log.OWN,
        )
        await throttle.failed(attempt, run)
        return False
    await throttle.succeeded(attempt, run)
    return True
