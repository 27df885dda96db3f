"""The request pipeline of one port: normalise, guard, route, call, serialise, log.

Built once per port and worker from a :class:`PortPlan`; per request it does one match,
one guard, one call and one serialisation.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from fwrest import log
from fwrest.context.jsonbody import NotJSON, to_json
from fwrest.context.request import RequestContext, current
from fwrest.errors import HTTPError, error_body, is_cancellation
from fwrest.routing import BadPath, LocationTable, Match, Router, normalise_path, split_target
from fwrest.server.build import LocationPlan, PortPlan
from fwrest.server.handler import JSON, JSON_TYPE, Handler, Reply, ResultError, result_reply
from fwrest.server.pool import ThreadPool
from fwrest.server.state import tunables
from fwrest.server.usage import UNMATCHED, UsageTable

__all__ = ["Guard", "PortApp", "Request", "trace_text"]

Guard = Callable[["Request", RequestContext], Awaitable[None]]
_PATH_CACHE_SIZE = 4096  # distinct request paths remembered per port and worker
_PATH_KEY_MAX = 512  # longer targets are resolved every time, not remembered
_TOKEN_ROUTE = "/fw/oauth2/token"  # noqa: S105 - the token route, relative to its location


@dataclass(slots=True)
class Request:
    """One parsed HTTP request, as the connection hands it over."""

    method: str
    target: bytes
    headers: list[tuple[str, str]]  # lower-case names, latin-1 values, in order
    body: bytes
    client: str
    port: int
    # the Authorization value, found by the HTTP layer while it checks the headers (None:
    # not looked for, or absent; guards then look in ``headers``)
    authorization: str | None = None


@dataclass(slots=True)
class _Location:
    plan: LocationPlan
    pool: ThreadPool
    active_s: float | None
    router: Router[Handler]


# a request path's normalised form, location, path relative to it, and the prebuilt matches
# when it is a static route path
_Located = tuple[str, _Location | None, str, Mapping[str, Match[Handler]] | None]


def _trusted(address: str, networks: tuple[Any, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in networks)


# "0us" .. "1023us": a request's times are looked up, not formatted (rest_trace_time=2 writes
# four of them per request); longer times are formatted
_US = tuple(f"{n}us" for n in range(1024))


def trace_text(level: int, started: int, guarded: int, handled: int, ended: int) -> str:
    """The times ``rest_trace_time`` puts on an access line, from ``perf_counter_ns`` marks:
    1 ``total=85us``; 2 also authorization, handler and serialization (``guarded`` 0: the
    request ended before authorization did, so only the total is known; ``handled`` 0: no
    handler ran, its phases are 0).

    >>> trace_text(2, 0, 3_000, 23_000, 28_000)
    'authorization=3us handler=20us serialization=5us total=28us'
    >>> trace_text(2, 0, 3_000, 0, 2_500_000)
    'authorization=3us handler=0us serialization=0us total=2500us'
    """
    total = (ended - started) // 1000
    if level == 1 or not guarded:
        return f"total={total}us"
    auth = (guarded - started) // 1000
    if handled:
        handler = (handled - guarded) // 1000
        serial = (ended - handled) // 1000
    else:
        handler = serial = 0
    if total < len(_US):  # each phase is at most the total
        us = _US
        return (
            f"authorization={us[auth]} handler={us[handler]} "
            f"serialization={us[serial]} total={us[total]}"
        )
    return f"authorization={auth}us handler={handler}us serialization={serial}us total={total}us"


class _Raised(Exception):
    """Carries a ``BaseException`` of an application's coroutine out of the task that
    ``asyncio.wait_for`` runs it in: a task re-raises ``SystemExit`` and
    ``KeyboardInterrupt`` into the event loop itself, which would end the worker."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(type(inner).__name__)
        self.inner = inner


async def _contained(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except Exception:
        raise
    except BaseException as exc:
        if is_cancellation(exc):
            raise
        raise _Raised(exc) from None


def error_reply(exc: HTTPError) -> Reply:
    headers = [("content-type", JSON), *exc.headers]
    return Reply(exc.status, headers, exc.body(), exc.close)


class PortApp:
    """Serves one port (one server section) in one worker."""

    def __init__(self, plan: PortPlan, pools: dict[str, ThreadPool], guard: Guard | None = None):
        self.plan = plan
        self.name = plan.config.name
        self.user_data = plan.config.user_data
        self.auth = plan.auth
        self.guard = guard
        locs = []
        for loc in plan.locations:
            active = loc.config.thread_pool.active_timeout_ms
            locs.append(
                (
                    loc.prefix,
                    _Location(
                        loc,
                        pools[loc.pool_name.lower()],
                        active / 1000 if active else None,
                        loc.router,
                    ),
                )
            )
        self.locations: LocationTable[_Location] = LocationTable(locs)
        self.in_flight = 0
        self.total = 0
        self.token_service: Any = None  # an oAuth2 port's TokenService
        self.worker: Any = None  # the Worker serving this port (native routes read it)
        self.public_paths: frozenset[str] = frozenset(plan.public_paths)
        self.usage: UsageTable = UsageTable()
        self.proxies = tuple(ipaddress.ip_network(n) for n in plan.config.trusted_proxies)
        self._paths: dict[bytes, _Located] = {}

    def is_token_target(self, target: bytes) -> bool:
        """Whether ``target`` is this port's token route as the router resolves it (any
        spelling: ``%74oken``, ``x/../token``), so that the HTTP layer applies the route's
        body limit before reading the body (SPEC 7). Asked only for bodies over that limit."""
        if self.token_service is None:
            return False
        mark = target.find(b"?")
        try:
            _, loc, rel, _ = self._locate(target if mark < 0 else target[:mark])
        except (BadPath, UnicodeDecodeError):
            return False  # refused with 400 when the request is handled
        return loc is not None and rel == _TOKEN_ROUTE

    def _client(self, req: Request) -> str:
        """The client behind trusted proxies: the rightmost X-Forwarded-For address that is
        not a trusted proxy (entries further left can be forged by the client)."""
        if not _trusted(req.client, self.proxies):
            return req.client
        forwarded = [v for n, v in req.headers if n == "x-forwarded-for"]
        hops = [h.strip() for h in ",".join(forwarded).split(",") if h.strip()]
        for hop in reversed(hops):
            if not _trusted(hop, self.proxies):
                try:
                    return str(ipaddress.ip_address(hop))
                except ValueError:
                    return req.client
        return req.client

    def _locate(self, raw: bytes) -> _Located:
        """The normalised path of a request target's path part, its location, the path
        relative to that location and the static route's matches; remembered per distinct
        path (most traffic asks for a few).

        Raises:
            BadPath: the target is refused (400); such targets are not remembered.
        """
        cached = self._paths.get(raw)
        if cached is not None:
            return cached
        raw_path, _ = split_target(raw)
        path = normalise_path(raw_path)
        located = self.locations.find(path)
        if located is None:
            found: _Located = (path, None, "", None)
        else:
            loc, rel = located
            found = (path, loc, rel, loc.router.static_matches(rel))
        if len(raw) <= _PATH_KEY_MAX:
            if len(self._paths) >= _PATH_CACHE_SIZE:
                self._paths.clear()
            self._paths[raw] = found
        return found

    async def handle(self, req: Request) -> Reply:
        started = time.perf_counter_ns()
        if self.proxies:
            req.client = self._client(req)
        self.in_flight += 1
        self.total += 1
        method = req.method
        path = query = ""
        guarded = handled = 0  # phase times for rest_trace_time=2
        route_key: tuple[str, ...] = UNMATCHED
        try:
            target = req.target
            mark = target.find(b"?")
            try:
                if mark < 0:
                    path, loc, rel, statics = self._locate(target)
                else:
                    path, loc, rel, statics = self._locate(target[:mark])
                    query = target[mark + 1 :].decode("ascii")
            except (BadPath, UnicodeDecodeError) as exc:
                path = "?"
                why = str(exc) if isinstance(exc, BadPath) else "the request target is not ASCII"
                raise HTTPError(400, detailed=why) from None
            ctx = RequestContext(self, method, path, query, req.headers, req.body, req.client)
            if self.guard is not None and path not in self.public_paths:
                # SPEC 7: on a protected port authorization runs before routing.
                await self.guard(req, ctx)
            guarded = time.perf_counter_ns()
            if loc is None:
                raise HTTPError(404)
            match = statics.get(method) if statics is not None else None
            if match is None:
                match = loc.router.match(method, rel)
            handler = match.payload
            ctx.params = match.params
            ctx.handler = handler
            route_key = handler.usage_key
            token = current.set(ctx)
            try:
                call: Awaitable[Any]
                if handler.takes_params:
                    kwargs = handler.kwargs(match.params)
                    if handler.is_async:
                        call = handler.func(**kwargs)
                    else:
                        call = loc.pool.submit(handler.func, **kwargs)
                elif handler.is_async:
                    call = handler.func()
                else:
                    call = loc.pool.submit(handler.func)
                if loc.active_s is not None:
                    result = await self._bounded(call, loc, method, path)
                else:
                    result = await call
                handled = time.perf_counter_ns()
                try:
                    if type(result) is dict and ctx.resp_headers is None:
                        # the common case, a dict sent as JSON: no header merging to do
                        try:
                            body = orjson.dumps(result)
                        except orjson.JSONEncodeError:
                            body = to_json(result)  # what orjson refuses, as json takes it
                        reply = Reply(ctx.resp_status, [JSON_TYPE], body)
                    else:
                        reply = result_reply(result, ctx)
                except (ResultError, NotJSON) as exc:
                    reply = self._bad_result(method, path, exc)
            finally:
                current.reset(token)
        except HTTPError as exc:
            reply = error_reply(exc)
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt, GeneratorExit or a stray CancelledError of the
            # application's code answer 500 as any exception does, and the worker serves on
            # (SPEC 7.1); only a cancellation of this request travels on
            if is_cancellation(exc):
                raise
            self._log_failure(method, path)
            reply = Reply(500, [JSON_TYPE], error_body(500))
        finally:
            self.in_flight -= 1
        if method == "HEAD":
            # No content (RFC 9110 9.3.2), an error answer too, else a keep-alive client
            # reads the body as the start of the next response; the length GET would have
            # (none for 204 and 304, which have no content at all).
            if reply.status != 204 and reply.status != 304:
                reply.headers.append(("content-length", str(len(reply.body))))
            reply.body = b""
        ended = time.perf_counter_ns()
        duration_us = (ended - started) // 1000
        self.usage.record(route_key, duration_us)
        access = log.access_log
        if access.isEnabledFor(logging.ERROR if reply.status >= 500 else logging.INFO):
            trace = tunables.current.rest_trace_time
            times = trace_text(trace, started, guarded, handled, ended) if trace else ""
            self._log_access(req, path, query, reply, times)
            if access.isEnabledFor(logging.DEBUG):
                self._log_debug(req, reply)
        return reply

    @staticmethod
    def _bad_result(method: str, path: str, exc: Exception) -> Reply:
        """A handler's result fwrest cannot send: 500, and the reason in the log."""
        why = str(exc)
        if isinstance(exc, NotJSON):
            why = f"a handler returned data that is not JSON: {why}"
        log.app_log.error("%s %s: %s", method, log.escape(path), why)
        return Reply(500, [JSON_TYPE], error_body(500))

    @staticmethod
    async def _bounded(call: Awaitable[Any], loc: _Location, method: str, path: str) -> Any:
        """Await a handler under its pool's ``ActiveTimeout`` (503 past it)."""
        try:
            return await asyncio.wait_for(_contained(call), loc.active_s)
        except _Raised as exc:
            raise exc.inner from None  # handled by the request's own task, as unbounded
        except TimeoutError:
            log.server_log.error(
                "%s %s ran longer than ActiveTimeout=%d ms of [%s]; answered 503",
                method,
                log.escape(path),
                int((loc.active_s or 0) * 1000),
                loc.plan.pool_name,
            )
            raise HTTPError(
                503, "Server Busy", detailed="the request ran longer than allowed"
            ) from None

    def _log_failure(self, method: str, path: str) -> None:
        full = tunables.current.rest_error_full == 1
        log.app_log.error(
            "%s %s: unhandled exception in the handler; answered 500",
            method,
            log.escape(path),
            exc_info=True if full else None,
            stack_info=False,
        )
        if not full:
            import sys
            import traceback

            exc = sys.exc_info()[1]
            if exc is not None:
                frames = traceback.extract_tb(exc.__traceback__)
                where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
                log.app_log.error(
                    "  %s: %s%s (rest_error_full=1 logs the whole traceback)",
                    type(exc).__name__,
                    log.escape(str(exc)),
                    where,
                )

    def _log_access(self, req: Request, path: str, query: str, reply: Reply, times: str) -> None:
        """The request's access line (the caller checked the level is on), with the times of
        ``rest_trace_time`` when on (one line per request, so that tracing costs a few
        numbers, not a second log record)."""
        shown = log.escape(path)
        if query:
            # the token route's query (a password grant over GET) is redacted whole, user
            # names included (SPEC 4.2); elsewhere the values of secret-like names
            every = self.token_service is not None and path.endswith(_TOKEN_ROUTE)
            shown = f"{shown}?{log.escape(log.redact_query(query, every=every))}"
        level = logging.ERROR if reply.status >= 500 else logging.INFO
        # one text, built here (no %-formatting left for the record to do: it has no args)
        if times:
            text = (
                f"{req.method} {shown} {reply.status} {times} port={req.port} client={req.client}"
            )
        else:
            text = f"{req.method} {shown} {reply.status} port={req.port} client={req.client}"
        log.write(log.access_log, level, text)

    def _log_debug(self, req: Request, reply: Reply) -> None:
        """``rest_log_level=5``: headers and bodies, cut to ``rest_log_stringsize``.

        The request's secrets are scrubbed BEFORE cutting (a cut could split a secret and
        defeat the scrub); the token route's bodies carry passwords and tokens and are never
        written.
        """
        size = tunables.current.rest_log_stringsize
        secrets = log.request_secrets.get()

        def shown(text: str) -> str:
            return log.escape(log.truncate(log.scrub(text, secrets), size))

        headers = ", ".join(
            f"{name}: {shown(log.mask_header(name, value))}" for name, value in req.headers
        )
        if b"oauth2/token" in req.target:
            body = out = "(not logged: token route)"
        else:
            body = shown(log.redact_body(req.body.decode("utf-8", "replace")))
            out = shown(log.redact_body(reply.body.decode("utf-8", "replace")))
        log.access_log.debug("request headers {%s} body %s", headers, body or "-")
        log.access_log.debug("response %d body %s", reply.status, out or "-")
