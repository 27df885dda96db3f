"""Rate limits (SPEC 13.7): a location's ``RateLimit`` section, as an admitted and an outgoing
stage of that location (a location without one has neither, and pays nothing).

* **Counting** (admitted: after authorization, so that ``Key=user`` counts the authenticated
  user; before routing, so that a 404 counts too): one ``hit_rate`` of the state store per
  request, through the worker's :class:`~fwrest.store.calls.StoreClient` under the request
  deadline, in a fixed window from the key's first request. Every worker and host that shares
  the store shares the counts. Past ``Limit``: 429 with ``Retry-After`` (the seconds until the
  window ends) and the error body. The location's native routes are not counted: a request
  whose method and path match a native route (``source == "native"``, wherever its path is:
  ``/fw/...``, and ``/server/environment`` and ``/vendor/environment``), told apart at start
  (:func:`native_methods`; ``PortApp`` leaves the stage out of their admission). A path
  under ``/fw/`` that no native route serves (a 404, a disabled route) is counted.
* **Headers** (outgoing, errors included): ``RateLimit-Policy`` and ``RateLimit`` in the
  structured-field form of the IETF draft ``ratelimit-headers`` (from draft 08):
  ``RateLimit-Policy: "RL_API";q=600;w=60`` and ``RateLimit: "RL_API";r=599;t=42`` (the
  policy named after the section). An answer the limit did not count (refused by the guard
  before it; served while the store was out of reach) carries the policy alone; a native
  route's, neither.
* **Store out of reach**: ``FailOpen=1`` serves, with one warning (per worker and location)
  when the store stops answering and a line when it answers again, not one per request;
  ``FailOpen=0`` answers the standard 503 (``errors.store_unavailable``), logged as the token
  route's. A count the request gave up on is not taken later (:func:`_hit_by`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from fwrest import log
from fwrest.config.model import RateLimitConfig
from fwrest.context.request import RequestContext
from fwrest.errors import TooManyRequests, store_unavailable
from fwrest.store.base import RateStore, StoreError
from fwrest.store.calls import REQUEST_DEADLINE_S, StoreClient, StoreTimeout, runs
from fwrest.wire import Reply, Request, error_reply

__all__ = ["RateLimiter", "native_methods", "policy_name"]


def native_methods(router: Any) -> dict[str, frozenset[str]]:
    """The methods of each static path of a location's router (``routing.Router`` of
    handlers) whose route is native (SPEC 13.7: not counted), HEAD included where the
    native GET serves it; paths without one are left out. Native routes have no path
    parameters. A method the path's native routes do not take (405) goes through the
    router as any request, and is counted: it may reach an application's route."""
    out: dict[str, frozenset[str]] = {}
    for _, pattern, handler in router.routes():
        if handler.endpoint.source != "native" or pattern in out:
            continue
        matches = router.static_matches(pattern) or {}
        out[pattern] = frozenset(
            method for method, match in matches.items() if match.payload.endpoint.source == "native"
        )
    return out


# a count's deadline (``hit_rate``'s ``before``) this much before the request stops waiting:
# the count is taken while the request still waits for it, or not at all
_BEFORE_MARGIN_S = 0.05


@runs("hit_rate")
def _hit_by(store: RateStore, key: str, window_s: float) -> tuple[int, float]:
    """``hit_rate`` on a store thread, with the deadline of the request's wait that starts
    now (:meth:`StoreClient.wait` counts it from the thread's start): a count the request
    gave up on (a lock held past it, Redis frozen) is not taken later (SPEC 13.7)."""
    before = time.time() + REQUEST_DEADLINE_S - _BEFORE_MARGIN_S
    return store.hit_rate(key, window_s, before)


def policy_name(section: str) -> str:
    """The policy's name in the headers: an sf-string of the section's name (printable ASCII;
    a name that is not: ``default``).

    >>> policy_name("RL_API"), policy_name('odd"name'), policy_name("Zoë")
    ('"RL_API"', '"odd\\\\"name"', '"default"')
    """
    if not section.isascii() or not section.isprintable():
        return '"default"'
    return '"' + section.replace("\\", "\\\\").replace('"', '\\"') + '"'


class RateLimiter:
    """One location's rate limit: :meth:`admit` counts, :meth:`outgoing` adds the headers.

    Args:
        config: the location's RateLimit section.
        prefix: the location's path prefix.
        store: the state store that keeps the counts.
        client: the worker's store client (None: the store is called inline).
        port_name: the port, for the log.
        native: the location's native routes, their methods by path relative to it
            (:func:`native_methods`): their answers carry no headers.
        documents: the paths relative to the location of the discovery documents an oAuth2
            port answers at its root before the guard (a root location's: SPEC 12.2, 16.3),
            native routes of every method, whose answers carry no headers either.
    """

    def __init__(
        self,
        config: RateLimitConfig,
        prefix: str,
        store: RateStore,
        client: StoreClient | None,
        port_name: str,
        native: Mapping[str, frozenset[str]] | None = None,
        documents: frozenset[str] = frozenset(),
    ) -> None:
        self.limit = config.limit
        self.window_s = config.window_s
        self.by_user = config.key == "user"
        self.fail_open = config.fail_open
        self.section = config.name
        self._prefix_len = 0 if prefix == "/" else len(prefix)
        self._store = store
        self._client = client
        self._port = port_name
        self._native = native or {}
        self._documents = documents
        name = policy_name(config.name)
        self._policy = ("ratelimit-policy", f"{name};q={self.limit};w={self.window_s}")
        self._state = f"{name};r="
        # an answer the limit did not count (refused by the guard before it, the store out of
        # reach): the whole quota, as nothing was taken from it
        self._uncounted = ("ratelimit", f"{name};r={self.limit};t={max(1, self.window_s)}")
        # "rl:SECTION:" + user:NAME or address:IP (a user's name may hold anything; the
        # prefix keeps it apart from an address)
        self._key = f"rl:{config.name.lower()}:"
        self._warned = False  # the store is out of reach and a warning said so

    async def admit(self, req: Request, ctx: RequestContext) -> Reply | None:
        """Count the request; 429 past the limit, 503 when the store is out of reach and the
        section fails closed; None lets it go on."""
        user = ctx.auth_user if self.by_user else ""
        key = f"{self._key}user:{user}" if user else f"{self._key}address:{ctx.client}"
        try:
            if self._client is None:
                count, left = self._store.hit_rate(key, self.window_s)
            else:
                count, left = await self._client.call(
                    _hit_by, self._store, key, self.window_s, deadline=REQUEST_DEADLINE_S
                )
        except StoreError as exc:
            return self._unreachable(exc)
        if not count:  # past its deadline: not counted (the request waited as long as it may)
            return self._unreachable(StoreTimeout("the count came past the deadline"))
        if self._warned:
            self._warned = False
            log.server_log.warning(
                "[%s] rate limit [%s]: the state store answers again; counting",
                self._port,
                self.section,
            )
        reset = max(1, math.ceil(left))
        ctx.rate = (max(0, self.limit - count), reset)
        if count <= self.limit:
            return None
        return error_reply(
            TooManyRequests(
                reset,
                f"more than {self.limit} requests in {self.window_s} s; retry after {reset} s",
            )
        )

    def _unreachable(self, exc: StoreError) -> Reply | None:
        why = (
            f"no answer within the request's {REQUEST_DEADLINE_S:g} s deadline"
            if isinstance(exc, TimeoutError)
            else str(exc)
        )
        if not self.fail_open:
            log.server_log.error(
                "[%s] rate limit [%s]: state store unavailable: %s; answered 503",
                self._port,
                self.section,
                why,
            )
            return error_reply(store_unavailable())
        if not self._warned:
            self._warned = True
            log.server_log.warning(
                "[%s] rate limit [%s]: state store unavailable: %s; serving without "
                "counting (FailOpen=1) until it answers again",
                self._port,
                self.section,
                why,
            )
        return None

    def outgoing(self, req: Request, ctx: RequestContext, reply: Reply) -> Reply:
        """``RateLimit-Policy`` and ``RateLimit`` on every answer of the location (SPEC 13.7;
        the whole quota on one the limit did not count; neither on a native route's)."""
        try:
            remaining, reset = ctx.rate
        except AttributeError:  # not counted: refused before, the store out of reach, native
            rel = ctx.path[self._prefix_len :]
            native = self._native.get(rel)
            if (native is not None and req.method in native) or rel in self._documents:
                return reply
            reply.headers.append(self._policy)
            reply.headers.append(self._uncounted)
            return reply
        reply.headers.append(self._policy)
        reply.headers.append(("ratelimit", f"{self._state}{remaining};t={reset}"))
        return reply
