"""The resource owner password credentials grant (RFC 6749 4.3, SPEC 4.2): ``username`` and
``password`` against ``onAuthparams``'s users, under the brute-force throttle (SPEC 7.1).

RFC 9700 deprecates this grant; fwrest keeps it because its users need it, with the
protections of SPEC 7: constant-time checks at one cost for every user (``passwords.py``),
attempts counted before the check, a lock-out past ``maxFailures``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fwrest import log
from fwrest.auth.blocking import settled
from fwrest.auth.oauth2.errors import InvalidGrant, InvalidRequest
from fwrest.auth.oauth2.grants.base import Grant, TokenRequest, Validated
from fwrest.auth.oauth2.params import CLIENT_PREFIX
from fwrest.auth.oauth2.passwords import check_user, costly
from fwrest.auth.oauth2.scopes import allowed_scopes, grant
from fwrest.auth.throttle import user_key

if TYPE_CHECKING:
    from fwrest.auth.oauth2.tokens import TokenService

__all__ = ["REFUSED", "PasswordGrant"]

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
        return Validated(subject, uuid.uuid4().hex, scope, scope)


async def _check_password(request: TokenRequest) -> str:
    """The user name whose password the request gives, counted by the throttle.

    Raises:
        InvalidRequest: no user name or no password.
        InvalidGrant: a wrong user or password (one message, one cost: SPEC 4.2).
        HTTPError: 429 past ``maxFailures`` (no password checked), 503 (the store).
    """
    params, service, deadline = request.params, request.service, request.deadline
    username, password = params.get("username"), params.get("password")
    if not username or password is None:
        raise InvalidRequest("username and password are required")

    def run(fn: Callable[..., T], /, *args: Any) -> Awaitable[T]:
        return service.store_call(deadline, fn, *args)

    throttle = service.throttle
    users = request.allowed.users
    # counted before the check (SPEC 7.1): past maxFailures, 429 and no check
    attempt = await throttle.admit(username, request.client_ip, run)
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
        log.auth_log.info("[%s] password grant refused for user %r", service.port_name, username)
        await throttle.failed(attempt, run)
        raise InvalidGrant(REFUSED)
    await throttle.succeeded(attempt, run)
    return username
