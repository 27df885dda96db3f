"""The request pipeline of one port: a fixed sequence of stages, built once per port and worker.

Per request (SPEC 7 settles the order; every stage is decided at start, and a stage that is
not configured is not in the sequence, so it costs nothing):

1. **resolve**: the target's normalised path, its location and the route's prebuilt matches
   (remembered per distinct target);
2. **early** stages, before authorization (each may answer the request itself);
3. **authorize**: the port's guard, unless the path is one of the port's public paths
   (on a protected port this runs before routing: an unknown path is 401, not 404);
4. **admitted** stages, after authorization and before routing (each may answer; the
   server's ``OnSelect`` is one: it may also pick the pool the route's call runs in), then
   the request's location's own (its rate limit, SPEC 13.7: not on a method and path a
   native route serves, known at start);
5. **route**: one match (404, 405 + ``Allow``);
6. **invoke**: the route's bound call (its pool, its ``ActiveTimeout``, its pool's ``OnSend``
   and ``OnError``: ``handler.bind``);
7. **encode**: the result as a :class:`~fwrest.wire.Reply` (SPEC 9's result rules);
8. **outgoing** stages of the request's location, each may change the reply;
9. **finish**: HEAD, the request id, the port's HSTS, usage figures, the access line.

Everything an application's function raises ends as an error reply here (SPEC 7.1); the
engine sees only :class:`~fwrest.wire.PortHandler`. A request that expects ``100 Continue``
meets stages 1 and 3 once more before its body is read (:meth:`PortApp.admit`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from fwrest import log
from fwrest.config.model import ThreadPoolConfig
from fwrest.context.charsets import CHARSETS
from fwrest.context.jsonbody import NotJSON
from fwrest.context.request import RequestContext, current
from fwrest.context.request_id import (
    carried_request_id,
    is_request_id,
    new_request_number,
    request_id_of,
)
from fwrest.context.views import ServiceView, TokenEndpoint, UsageKey
from fwrest.errors import CallbackRaised, HTTPError, error_body, is_cancellation
from fwrest.features.headers import HSTS, port_hsts
from fwrest.features.ratelimit import native_methods
from fwrest.features.static import StaticFiles
from fwrest.routing import (
    TOKEN_BODY_LIMIT,
    BadPath,
    BadSeparator,
    LocationTable,
    Match,
    Router,
    normalise_path,
    split_target,
)
from fwrest.routing.names import TOKEN_BODY_ROUTES
from fwrest.server.build import LocationPlan, PortPlan
from fwrest.server.failures import Failed, Raised, contained, log_failure
from fwrest.server.handler import (
    JSON_TYPE,
    Handler,
    Invoke,
    ResultError,
    bind,
    reads_ahead,
    result_reply,
)
from fwrest.server.hooks import NO_HOOKS, PoolHooks
from fwrest.server.hosts import HostCheck, own_authority
from fwrest.server.pool import ThreadPool
from fwrest.server.state import tunables
from fwrest.server.streams import Sending, StreamFailed, prepend
from fwrest.server.usage import UNMATCHED, UsageTable
from fwrest.wire import Reply, Request, close_stream, error_reply

__all__ = [
    "Admit",
    "Early",
    "Guard",
    "Outgoing",
    "PortApp",
    "Request",
    "Scoped",
    "Traced",
    "bounder",
    "error_reply",
    "trace_text",
]

Guard = Callable[[Request, RequestContext], Awaitable[None]]
Admit = Callable[[Request, RequestContext], Awaitable[Reply | None]]
"""An early or admitted stage: None lets the request go on, a reply answers it."""


@dataclass(frozen=True, slots=True)
class Early:
    """An early stage and the methods it is for (None: every request)."""

    stage: Admit
    methods: frozenset[str] | None = None


Outgoing = Callable[[Request, RequestContext, Reply], Reply]
"""An outgoing stage: the reply to send instead (or the same)."""

Scoped = Callable[[tuple[str, ...], Invoke], Invoke]
"""The stage of the routes that require scopes (SPEC 12.4): their call behind the check."""

Traced = Callable[[Handler, Invoke], Invoke]
"""A route's call in its span (SPEC 17.4, ``Tracing``: ``server/tracing.py``)."""

_READS = ("GET", "HEAD")  # the methods static files answer
_PATH_CACHE_SIZE = 4096  # distinct request paths remembered per port and worker
_PATH_KEY_MAX = 512  # longer targets are resolved every time, not remembered
# b"fw/oauth2/": a target that may name a route of TOKEN_BODY_ROUTES (the token route,
# revocation, introspection: SPEC 7, 12.3)
_TOKEN_TARGET = b"fw/oauth2/"
# rest_log_level=5: a request or response body over this many bytes is described by its size
# and type only (parsed and redacted, a bigger one held the event loop for as long)
DEBUG_BODY_MAX = 65536


@dataclass(slots=True)
class _Location:
    plan: LocationPlan
    router: Router[Handler]
    files: StaticFiles | None = None  # RootPath: answers GET/HEAD where no route does
    active_s: float = 0.0  # ActiveTimeout: also bounds a stream's first piece (0: none)
    outgoing: tuple[Outgoing, ...] = ()  # the location's outgoing stages, in order
    # the port's admitted stages, then the location's own (its rate limit), in order
    admitted: tuple[Admit, ...] = ()
    # its Strict-Transport-Security line (SPEC 10.2: None where its port sends none)
    hsts: tuple[str, str] | None = None
    # where ``admitted`` holds the location's own stages: the methods of each path that a
    # native route serves, which the port's stages alone admit (SPEC 13.7: not counted)
    native: Mapping[str, frozenset[str]] | None = None


class _Sequence:
    """Stages that run in order until one answers: one bound call (:meth:`run`)."""

    __slots__ = ("stages",)

    def __init__(self, stages: tuple[Admit, ...]) -> None:
        self.stages = stages

    async def run(self, req: Request, ctx: RequestContext) -> Reply | None:
        for stage in self.stages:
            reply = await stage(req, ctx)
            if reply is not None:
                return reply
        return None


def _compose(stages: tuple[Admit, ...]) -> Admit | None:
    """Stages as one call: None for none, a lone stage itself (the guard alone is called as
    it is: no coroutine more per request), else a :class:`_Sequence`."""
    if not stages:
        return None
    if len(stages) == 1:
        return stages[0]
    return _Sequence(stages).run


@dataclass(frozen=True, slots=True)
class _Admission:
    """Stages 2-4 of a path (early, authorize, admitted), composed at start into one call
    per method: ``call`` for every method no early stage names, ``by_method`` for the
    others (None: the port has no such stage). ``guard`` is the path's authorization, the
    one decision of whether it is guarded (None: an open port or a public path), which
    :meth:`PortApp.admit` runs alone before ``100 Continue``."""

    call: Admit | None
    by_method: Mapping[str, Admit | None] | None
    guard: Guard | None


@dataclass(frozen=True, slots=True)
class _Located:
    """A request path resolved: its normalised form, its location (None: outside every
    location), the path relative to it, the prebuilt matches of a static route path, and
    whether it is the token route or another route of ``TOKEN_BODY_ROUTES`` (their queries
    and bodies are never logged, however the target spells it: SPEC 7.1, 12.3)."""

    path: str
    location: _Location | None
    rel: str
    statics: Mapping[str, Match[Handler]] | None
    # stages 2-4 of the path, decided at start (its :class:`_Admission`'s, copied: a load
    # less per request): the call for its method (``by_method``, else ``admit``), the guard
    admit: Admit | None
    by_method: Mapping[str, Admit | None] | None
    guard: Guard | None
    is_token: bool = False


def _trusted(
    address: str, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
) -> bool:
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


def bounder(active_s: float, pool_name: str) -> Callable[[Awaitable[Any]], Awaitable[Any]]:
    """A pool's ``ActiveTimeout``: its calls answered 503 past ``active_s``."""

    async def bounded(call: Awaitable[Any]) -> Any:
        try:
            return await asyncio.wait_for(contained(call), active_s)
        except Raised as exc:
            raise exc.inner from None  # handled by the request's own task, as unbounded
        except TimeoutError:
            ctx = current.get(None)
            log.server_log.error(
                "%s %s ran longer than ActiveTimeout=%d ms of [%s]; answered 503",
                ctx.method if ctx is not None else "-",
                log.escape(ctx.path) if ctx is not None else "-",
                int(active_s * 1000),
                pool_name,
            )
            raise HTTPError(
                503, "Server Busy", detailed="the request ran longer than allowed"
            ) from None

    return bounded


def _has(headers: list[tuple[str, str]], name: str) -> bool:
    """Whether ``headers`` have a field ``name`` (lower case)."""
    return any(own.lower() == name for own, _ in headers)


# RFC 9110 9.3.7: OPTIONS * asks about the server in general: the methods any fwrest port
# may serve (the same on every port, so that it tells nothing of the application)
SERVER_ALLOW = ("allow", "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT")
_FILE_ALLOW = ("allow", "GET, HEAD, OPTIONS")


async def _options(refused: HTTPError, loc: _Location, rel: str) -> Reply:
    """An ``OPTIONS`` request no route takes (RFC 9110 9.3.7): 200 with ``Allow`` on a path
    that has routes (the 405's methods) or a file of the location's ``RootPath``; the
    router's 404 elsewhere."""
    if refused.status == 405:
        for name, value in refused.headers:
            if name == "allow":
                return Reply(200, [("allow", value)], b"")
    elif loc.files is not None and await loc.files.exists(rel):
        return Reply(200, [_FILE_ALLOW], b"")
    raise refused


def _plain_path(raw: bytes) -> str:
    """Where a target the router refuses is, for its location's headers: its path as far as
    no normalisation can change it, up to the first segment that holds ``%``, ``#`` or a byte
    outside printable ASCII (such a path ends with ``/``; ``.``, ``..`` and empty segments
    taken as the normaliser takes them). "/" where a ``..`` may climb out of what is kept;
    "" for a target that is no path (``*``).

    >>> _plain_path(b"/rest//a/./b%2fc"), _plain_path(b"/rest/a/../x%2f"), _plain_path(b"*")
    ('/rest/a/', '/rest/', '')
    >>> _plain_path(b"/rest/x%2f/../../y"), _plain_path(b"/../rest/%zz")
    ('/', '/')
    """
    text = raw.decode("latin-1")
    if not text.startswith("/"):
        if not text[:8].lower().startswith(("http://", "https://")):
            return ""
        rest = text.split("://", 1)[1]
        end = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
        text = rest[end:]
    kept: list[str] = []
    segments = text.split("/")
    for i, segment in enumerate(segments):
        if not segment or segment == ".":
            continue
        if segment == "..":
            if not kept:
                return "/"
            kept.pop()
        elif any(c in "%#" or not "!" <= c <= "~" for c in segment):
            tail = "/".join(segments[i:]).lower()
            if ".." in tail or "%2e" in tail:
                return "/"  # the rest may climb out of what is kept
            return "/" + "".join(f"{kept_one}/" for kept_one in kept)
        else:
            kept.append(segment)
    return "/" + "/".join(kept)


_closing: set[asyncio.Task[None]] = set()


def _close_later(stream: AsyncIterator[bytes]) -> None:
    """Close a stream that is not sent (a HEAD request's), on the loop."""
    task = asyncio.get_running_loop().create_task(close_stream(stream))
    _closing.add(task)
    task.add_done_callback(_closing.discard)


def _unsent(reply: Reply, ctx: RequestContext | None) -> None:
    """A stream the answer does not send (HEAD, a status without content): closed unread,
    and a chunked answer's pieces thrown away (its handler goes on unhindered)."""
    stream = reply.stream
    assert stream is not None
    reply.stream = None
    if ctx is not None and ctx.chunks is not None:
        ctx.chunks.drop()
    _close_later(stream)


def _fields(
    req: Request,
    found: _Located | None,
    route_key: UsageKey,
    status: int,
    duration_us: int,
    ctx: RequestContext | None,
) -> log.RequestFields:
    """An access line's structured fields (SPEC 13.4; an answer's and a stream's end)."""
    return (
        req.port,
        req.method,
        route_key.location + route_key.route if route_key is not UNMATCHED else "",
        found.path if found is not None else "?",
        status,
        duration_us,
        ctx.auth_user if ctx is not None else "",
        req.client,
    )


class PortApp:
    """Serves one port (one server section) in one worker: the engine's
    :class:`~fwrest.wire.PortHandler` and the requests' :class:`~fwrest.context.views.PortView`.

    Args:
        plan: the port's plan (routes, authorization, native options).
        pools: the worker's thread pools by lower-case name.
        guard: the port's authorization (None: an open port).
        token_service: an oAuth2 port's token service.
        service: the worker's services native routes use (None: a bare pipeline).
        early: stages before authorization, each for the methods it names (or all).
        admitted: stages after authorization, before routing.
        limits: each location's own admitted stages (its rate limit), by location prefix:
            after the port's, and not on the location's native routes (the method and path
            of a route whose source is native: ``features.ratelimit.native_methods``).
        outgoing: each location's outgoing stages, by location prefix.
        files: the static files of locations with a ``RootPath``, by location prefix.
        hooks: the ``OnSend``/``OnError`` of the pools that have them, by lower-case name.
        scoped: on an oAuth2 port, the stage composed into the call of each route that
            requires scopes (after the route match, before the call and its hooks); None
            elsewhere, and routes without scopes never meet it.
        traced: with ``Tracing`` on, what puts each route's call (its scope check
            included) in its span; None otherwise, and the calls are bare.
    """

    def __init__(
        self,
        plan: PortPlan,
        pools: dict[str, ThreadPool],
        guard: Guard | None = None,
        *,
        token_service: TokenEndpoint | None = None,
        service: ServiceView | None = None,
        early: tuple[Early, ...] = (),
        admitted: tuple[Admit, ...] = (),
        limits: Mapping[str, tuple[Admit, ...]] | None = None,
        outgoing: Mapping[str, tuple[Outgoing, ...]] | None = None,
        files: Mapping[str, StaticFiles] | None = None,
        hooks: Mapping[str, PoolHooks] | None = None,
        scoped: Scoped | None = None,
        traced: Traced | None = None,
    ) -> None:
        self.plan = plan
        self.name = plan.config.name
        self.user_data = plan.config.user_data
        self.auth = plan.auth
        self.scheme = plan.config.scheme
        self.port_number = plan.config.port
        self.authority = own_authority(plan.config.host, plan.config.port, self.scheme)
        self.charset = CHARSETS[plan.config.charset.lower()]
        self.guard = guard
        self.token_service = token_service
        self.service = service
        # the early stages of each method named by one, and of every other method
        self._early_all = tuple(e.stage for e in early if e.methods is None)
        self._early: dict[str, tuple[Admit, ...]] = {
            method: tuple(e.stage for e in early if e.methods is None or method in e.methods)
            for e in early
            for method in e.methods or ()
        }
        self.admitted = admitted
        # the _Admission of each (admitted tuple, guarded) pair, made once; keyed by the
        # tuple's identity (the port's or a location's, kept as long as the port): a stage
        # need not be hashable
        self._admissions: dict[tuple[int, bool], _Admission] = {}
        hooks = hooks or {}
        # OnSelect may send a request to any pool: each route is bound for each, at start
        self._selecting = plan.on_select is not None
        alternates = pools if self._selecting else {}
        # what the pool getters report for a pick (SPEC 11.3)
        self._selectable = {name: pool.config for name, pool in alternates.items()}
        bounders = {
            name: bounder(p.active_timeout_ms / 1000, p.name) if p.active_timeout_ms else None
            for name, p in ((n, pool.config) for n, pool in pools.items())
        }
        # SPEC 10.2: HSTS on every answer of a TLS port where a location sets it (the path's
        # location's value, else the port's: features/headers.py); None: the port sends none
        self._hsts, hsts_of = port_hsts((loc.prefix, loc.config.hsts) for loc in plan.locations)
        # what the engine adds to the answers it makes itself (PortHandler)
        self.engine_headers: tuple[tuple[str, str], ...] = (
            (self._hsts,) if self._hsts is not None else ()
        )
        locs = []
        for loc in plan.locations:
            folded = loc.pool_name.lower()
            pool = pools[folded]
            active = loc.config.thread_pool.active_timeout_ms
            for _, _, handler in loc.router.routes():
                handler.invoke = bind(
                    handler, pool.submit, bounders[folded], hooks.get(folded, NO_HOOKS)
                )
                handler.invokes = {
                    name: bind(
                        handler,
                        other.submit,
                        bounders[name],
                        hooks.get(name, NO_HOOKS),
                        primary=False,
                    )
                    for name, other in alternates.items()
                }
                scopes = handler.endpoint.scopes
                if scoped is not None and scopes:
                    handler.invoke = scoped(scopes, handler.invoke)
                    handler.invokes = {n: scoped(scopes, i) for n, i in handler.invokes.items()}
                if traced is not None:
                    handler.invoke = traced(handler, handler.invoke)
                    handler.invokes = {n: traced(handler, i) for n, i in handler.invokes.items()}
            found = files.get(loc.prefix) if files else None
            stages = outgoing.get(loc.prefix, ()) if outgoing else ()
            limited = limits.get(loc.prefix, ()) if limits else ()
            own = admitted + limited
            located = _Location(loc, loc.router, found, active / 1000, stages, own)
            located.hsts = hsts_of.get(loc.prefix)
            if limited:
                located.native = native_methods(loc.router)
            locs.append((loc.prefix, located))
        self.locations: LocationTable[_Location] = LocationTable(locs)
        # raw targets under a location with static files: a bad separator there is 404
        self._static_prefixes = tuple(
            b"/" if prefix == "/" else prefix.encode() + b"/" for prefix in (files or {})
        )
        self.in_flight = 0
        self.total = 0
        self.public_paths: frozenset[str] = frozenset(plan.public_paths)
        self.usage: UsageTable = UsageTable()
        self.proxies = tuple(ipaddress.ip_network(n) for n in plan.config.trusted_proxies)
        self.max_body_size = plan.config.max_body_size
        self.host_check = HostCheck(plan.config.host, plan.config.allowed_hosts, plan.bound_address)
        # the token route's own limit applies only where it is smaller (SPEC 7)
        self._token_limit = token_service is not None and self.max_body_size > TOKEN_BODY_LIMIT
        self._paths: dict[bytes, _Located] = {}

    # -- PortView: what native routes read ----------------------------------------------------
    @property
    def on_admin(self) -> Callable[[str], Any] | None:
        settings = self.plan.auth_settings
        return settings.on_admin if settings is not None else None

    def names_host(self, host: str) -> bool:
        return self.host_check(host)

    def thread_pool(self, path: str, selected: str | None = None) -> ThreadPoolConfig | None:
        if selected is not None:
            return self._selectable[selected]
        found = self.locations.find(path)
        return found[0].plan.config.thread_pool if found is not None else None

    def listing(self) -> list[dict[str, Any]]:
        from fwrest.native.listing import service_listing

        return service_listing(self.plan)

    def openapi(self, version: str, grants: Sequence[str] | None = None) -> dict[str, Any]:
        from fwrest.native.listing import build_openapi

        return build_openapi(self.plan, version, grants)

    # -- PortHandler: what the engine asks ----------------------------------------------------
    def body_limit(self, target: bytes, length: int, chunked: bool) -> int:
        """``MaxBodySize``, or 16 KiB on the token route, revocation and introspection (SPEC
        7, 12.3). Only a body that may pass 16 KiB asks which route it is: loosely first (a
        target naming a path under ``fw/oauth2/``), then
        as the router resolves it (percent escapes, dot segments; remembered for the
        request's own routing). The route checks again."""
        if (
            self._token_limit
            and (length > TOKEN_BODY_LIMIT or chunked)
            and (_TOKEN_TARGET in target or self._is_token_target(target))
        ):
            return TOKEN_BODY_LIMIT
        return self.max_body_size

    def _is_token_target(self, target: bytes) -> bool:
        mark = target.find(b"?")
        try:
            found = self._locate(target if mark < 0 else target[:mark])
        except (BadPath, UnicodeDecodeError):
            return False  # refused with 400 when the request is handled
        return found.is_token

    async def admit(self, head: Request) -> Reply | None:
        """SPEC 7.1: ``100 Continue`` only after authorization passed. Stages 1 and 3 on the
        head of a request that expects it: None on an open port, a public path, or a target
        the router refuses (``handle`` answers its 400); else the guard's verdict, a refusal
        answered (and logged) as ``handle`` answers it. Early stages do not run here: they
        run once, in ``handle``."""
        if self.guard is None:
            return None
        started = time.perf_counter_ns()
        if self.proxies:
            head.client = self._client(head)
        target = head.target
        mark = target.find(b"?")
        try:
            found = self._locate(target if mark < 0 else target[:mark])
            query = "" if mark < 0 else target[mark + 1 :].decode("ascii")
        except (BadPath, UnicodeDecodeError):
            return None
        guard = found.guard  # the same decision as handle's
        if guard is None:
            return None
        path = found.path
        ctx = RequestContext(
            self, head.method, path, query, head.headers, b"", head.client, head.peer_cert
        )
        log.request_inputs.set(ctx)  # as handle does (the admission's task ends with it)
        rid = ctx.request_id = request_id_of(head.headers)
        rid_token = log.request_id.set(rid)
        try:
            try:
                await guard(head, ctx)
                return None
            except HTTPError as exc:
                reply = error_reply(exc)
            except BaseException as exc:  # an OnAuth's SystemExit too (SPEC 7.1)
                if is_cancellation(exc):
                    raise
                log_failure(head.method, path, exc)
                reply = Reply(500, [JSON_TYPE], error_body(500))
            where = found.location
            if where is not None:  # 8. outgoing (CORS, rate limits), as handle's refusals
                for stage in where.outgoing:
                    reply = stage(head, ctx, reply)
            self.total += 1
            return self._finish(head, reply, found, query, UNMATCHED, started, 0, 0, rid, ctx)
        finally:
            log.request_id.reset(rid_token)

    def refused(self, head: Request, reply: Reply) -> Reply:
        """An answer the engine made itself (SPEC 7's 413, 415, 431, 400, 408, 417) to a
        request whose target it read: with the outgoing stages of the request's location
        (CORS, SPEC 10.1; the rate limit's headers, not counted, SPEC 13.7), as its other
        errors have them. The engine asks only on that path; never raises."""
        try:
            return self._outgoing_of_refused(head, reply)
        except Exception:  # a refusal is sent whatever happens here
            log.server_log.exception("the headers of a refused request failed")
            return reply

    def _outgoing_of_refused(self, req: Request, reply: Reply) -> Reply:
        """The outgoing stages of the location of a request refused before it was served
        (by the engine, or stage 1: its target the router refuses). A target the router
        refuses is placed by its leading segments that no normalisation changes
        (``_plain_path``: ``/rest/a%2fb`` is under ``/rest``)."""
        target = req.target
        mark = target.find(b"?")
        raw = target if mark < 0 else target[:mark]
        where: _Location | None
        try:
            found = self._locate(raw)
            path, where = found.path, found.location
        except (BadPath, UnicodeDecodeError):
            path = _plain_path(raw)
            located = self.locations.find(path) if path else None
            where = located[0] if located is not None else None
        if where is None or not where.outgoing:
            return reply
        ctx = RequestContext(
            self, req.method, path, "", req.headers, b"", req.client, req.peer_cert
        )
        for stage in where.outgoing:
            reply = stage(req, ctx, reply)
        return reply

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
        """Stage 1, resolve: remembered per distinct path (most traffic asks for a few).

        Raises:
            BadPath: the target is refused (400); such targets are not remembered.
        """
        cached = self._paths.get(raw)
        if cached is not None:
            return cached
        raw_path, _ = split_target(raw)
        path = normalise_path(raw_path)
        located = self.locations.find(path)
        guarded = self.guard is not None and path not in self.public_paths
        if located is None:
            on = self._admission(self.admitted, guarded)
            found = _Located(path, None, "", None, on.call, on.by_method, on.guard)
        else:
            loc, rel = located
            on = self._admission(loc.admitted, guarded)
            native = loc.native.get(rel) if loc.native is not None else None
            if native:  # not counted by the location's rate limit (SPEC 13.7)
                on = self._native_admission(on, native, guarded)
            found = _Located(
                path,
                loc,
                rel,
                loc.router.static_matches(rel),
                on.call,
                on.by_method,
                on.guard,
                is_token=rel in TOKEN_BODY_ROUTES,
            )
        if len(raw) <= _PATH_KEY_MAX:
            if len(self._paths) >= _PATH_CACHE_SIZE:
                self._paths.clear()
            self._paths[raw] = found
        return found

    def _native_admission(
        self, counted: _Admission, native: frozenset[str], guarded: bool
    ) -> _Admission:
        """The admission of a path some native route serves, on a location with stages of its
        own (its rate limit): the port's stages alone for the native route's methods (SPEC
        13.7), ``counted`` for the others (a 405, or an application's route of another
        method). Made once per distinct path (``_locate`` remembers it)."""
        free = self._admission(self.admitted, guarded)
        by_method = dict(counted.by_method) if counted.by_method is not None else {}
        for method in native:
            by_method[method] = (
                free.call if free.by_method is None else free.by_method.get(method, free.call)
            )
        return _Admission(counted.call, by_method, counted.guard)

    def _admission(self, admitted: tuple[Admit, ...], guarded: bool) -> _Admission:
        """Stages 2-4 of a path, composed once per distinct pair: the early stages of the
        method, the port's guard (``guarded``: not an open port nor a public path), then
        ``admitted``."""
        key = (id(admitted), guarded)
        made = self._admissions.get(key)
        if made is None:
            guard = self.guard if guarded else None
            authorize: tuple[Admit, ...] = (guard,) if guard is not None else ()
            by_method = {
                method: _compose(early + authorize + admitted)
                for method, early in self._early.items()
            }
            made = _Admission(
                _compose(self._early_all + authorize + admitted), by_method or None, guard
            )
            self._admissions[key] = made
        return made

    async def handle(self, req: Request) -> Reply:
        """The stages of the module docstring, in order. Each is a slot decided at start for
        the request's path (``_Located``: its admission, its location's routes, files and
        outgoing stages), so a request meets only what its port and location configured."""
        started = time.perf_counter_ns()
        # SPEC 13.4: the request's id, on its answer and on every record logged while it runs
        # a new id stays an integer until something reads it (the encoder writes its line)
        rid: str | int = carried_request_id(req.headers) or new_request_number()
        rid_token = log.request_id.set(rid)
        try:  # the id is reset whatever ends the request (a cancellation too)
            if self.proxies:
                req.client = self._client(req)
            self.in_flight += 1
            self.total += 1
            method = req.method
            path = query = ""
            guarded = handled = 0  # phase times for rest_trace_time=2
            route_key = UNMATCHED
            ctx: RequestContext | None = None
            found: _Located | None = None
            reply: Reply | None = None
            try:
                # 1. resolve
                target = req.target
                mark = target.find(b"?")
                try:
                    if mark < 0:
                        found = self._locate(target)
                    else:
                        found = self._locate(target[:mark])
                        query = target[mark + 1 :].decode("ascii")
                except (BadPath, UnicodeDecodeError) as exc:
                    path = "?"
                    reply = self._unresolved(exc, target, method)
                if found is not None:
                    path = found.path
                    ctx = RequestContext(
                        self, method, path, query, req.headers, req.body, req.client, req.peer_cert
                    )
                    ctx.request_id = rid
                    ctx.started = started
                    # its secret-named inputs are scrubbed from any record (SPEC 7), worked
                    # out only when one is written; not reset: the request's task ends with it
                    log.request_inputs.set(ctx)
                    # 2-4. early, authorize, admitted: one call, composed at start
                    by_method = found.by_method
                    admit = found.admit if by_method is None else by_method.get(method, found.admit)
                    if admit is not None:
                        reply = await admit(req, ctx)
                    loc = found.location
                    match: Match[Handler] | None = None
                    if reply is None:
                        guarded = time.perf_counter_ns()
                        if loc is None:
                            raise HTTPError(404)
                        # 5. route
                        statics = found.statics
                        match = statics.get(method) if statics is not None else None
                        if match is None:
                            unrouted: HTTPError | None = None
                            try:
                                match = loc.router.match(method, found.rel)
                            except HTTPError as exc:
                                unrouted = exc
                            if unrouted is not None:  # awaited outside the except (mypyc_lint)
                                reply = await self._unrouted(unrouted, req, loc, found.rel)
                    if match is not None and loc is not None:
                        handler = match.payload
                        ctx.params = match.params
                        ctx.handler = handler
                        route_key = handler.usage_key
                        invoke = handler.invoke
                        if self._selecting and ctx.selected is not None:
                            invoke = handler.invokes[ctx.selected]  # the pool OnSelect picked
                        token = current.set(ctx)
                        try:
                            # 6. invoke
                            result = await invoke(match.params)
                            handled = time.perf_counter_ns()
                            # 7. encode: its common case inline (a call less per request), a
                            # dict sent as JSON with no header to merge; else the encoder (a
                            # 204 or 304 too: no media type for no content, result_reply)
                            status = ctx.resp_status
                            if (
                                type(result) is dict
                                and ctx.resp_headers is None
                                and status != 204
                                and status != 304
                            ):
                                try:
                                    body = orjson.dumps(result)
                                    reply = Reply(status, [JSON_TYPE], body)
                                except orjson.JSONEncodeError:
                                    reply = self._encode(result, ctx, method, path, handler)
                            else:
                                reply = self._encode(result, ctx, method, path, handler)
                                if reply.stream is not None and reads_ahead(
                                    result, reply, method, loc.active_s > 0
                                ):
                                    reply = await self._first_piece(reply, loc, method, path)
                        finally:
                            current.reset(token)
            except HTTPError as exc:
                reply = error_reply(exc)
            except Failed:  # a hook failed, or OnError answered nothing: logged where it happened
                reply = Reply(500, [JSON_TYPE], error_body(500))
            except CallbackRaised as exc:  # a native route's onAdmin: a handler's failure
                log_failure(method, path, exc.inner, f"{exc.what} raised")
                reply = Reply(500, [JSON_TYPE], error_body(500))
            except BaseException as exc:
                # SystemExit, KeyboardInterrupt, GeneratorExit or a stray CancelledError of the
                # application's code answer 500 as any exception does, and the worker serves on
                # (SPEC 7.1); only a cancellation of this request travels on
                if is_cancellation(exc):
                    raise
                log_failure(method, path, exc)
                reply = Reply(500, [JSON_TYPE], error_body(500))
            finally:
                self.in_flight -= 1
            assert reply is not None  # every path above made one
            if ctx is not None and found is not None:
                # 8. outgoing
                where = found.location
                if where is not None and where.outgoing:
                    for stage in where.outgoing:
                        reply = stage(req, ctx, reply)
                if ctx.close_after:
                    reply.close = True  # setCloseAfterSend: the engine says so and closes
            elif found is None and path == "?":
                # 8. a target stage 1 refused: its location's headers all the same
                reply = self.refused(req, reply)
            # 9. finish
            return self._finish(
                req, reply, found, query, route_key, started, guarded, handled, rid, ctx
            )
        finally:
            log.request_id.reset(rid_token)

    def _unresolved(self, exc: Exception, target: bytes, method: str) -> Reply:
        """Stage 1 refused the target: ``OPTIONS *`` asks about the server in general (RFC
        9110 9.3.7: answered before authorization, it names no resource; ``Allow`` is what
        every fwrest port may serve); a bad separator under a location with static files is
        404 for a read; anything else 400."""
        if target == b"*" and method == "OPTIONS":
            return Reply(200, [SERVER_ALLOW], b"")
        if (
            isinstance(exc, BadSeparator)
            and method in _READS
            and target.startswith(self._static_prefixes)
        ):
            raise HTTPError(404) from None
        why = str(exc) if isinstance(exc, BadPath) else "the request target is not ASCII"
        raise HTTPError(400, detailed=why) from None

    @staticmethod
    async def _unrouted(refused: HTTPError, req: Request, loc: _Location, rel: str) -> Reply:
        """Stage 5 found no route: an ``OPTIONS`` is answered from the router's refusal,
        a ``GET`` or ``HEAD`` by a file of the location's ``RootPath``, another method on
        such a file by 405 with the file's ``Allow`` (SPEC 3: a known path); else the
        refusal."""
        if req.method == "OPTIONS":
            return await _options(refused, loc, rel)
        files = loc.files
        if refused.status != 404 or files is None:
            raise refused
        if req.method not in _READS:
            if await files.exists(rel):
                raise HTTPError(405, headers=(_FILE_ALLOW,))
            raise refused
        return await files.serve(req, rel)

    async def _first_piece(self, reply: Reply, loc: _Location, method: str, path: str) -> Reply:
        """A stream's first piece, awaited before the head is sent, so that one that fails
        before it is a 500, as any handler (``handler.reads_ahead``); ``ActiveTimeout``
        bounds the wait (SPEC 10.5): a stream that gives nothing in time is a 503."""
        stream = reply.stream
        assert stream is not None
        failed: BaseException | None = None
        try:
            if loc.active_s:
                first = await asyncio.wait_for(anext(stream, None), loc.active_s)
            else:
                first = await anext(stream, None)
        except Exception as exc:
            failed = exc
        if failed is not None:  # the stream closed outside the except (mypyc_lint)
            await close_stream(stream)
            if isinstance(failed, TimeoutError) and loc.active_s:
                log.server_log.error(
                    "%s %s gave no first piece within ActiveTimeout=%d ms of [%s]; answered 503",
                    method,
                    log.escape(path),
                    int(loc.active_s * 1000),
                    loc.plan.pool_name,
                )
                raise HTTPError(503, "Server Busy", detailed="the request ran longer than allowed")
            # as a handler's failure (SPEC 3): its traceback, the iterator's own exception
            inner = failed.inner if isinstance(failed, StreamFailed) else failed
            log_failure(method, path, inner, "the streamed answer failed before its first piece")
            return Reply(500, [JSON_TYPE], error_body(500))
        reply.stream = prepend(first, stream)
        return reply

    def _encode(
        self, result: Any, ctx: RequestContext, method: str, path: str, handler: Handler
    ) -> Reply:
        """Stage 7: the reply of a handler's result (SPEC 9), the one encoder (``handle``
        sends a dict with no header to merge itself, and hands here what orjson refuses:
        json takes it, or it is a 500)."""
        try:
            return result_reply(result, ctx, None if handler.is_async else handler.submit)
        except (ResultError, NotJSON) as exc:
            return self._bad_result(method, path, exc)

    def _finish(
        self,
        req: Request,
        reply: Reply,
        found: _Located | None,
        query: str,
        route_key: UsageKey,
        started: int,
        guarded: int,
        handled: int,
        rid: str | int,
        ctx: RequestContext | None,
    ) -> Reply:
        """Stage 9: no content for HEAD, 204, 205 and 304, the request's id, the port's HSTS,
        the usage figures, the access line (``found``: the request's path resolved, None for a
        target refused as it is)."""
        headers = reply.headers
        # the id on the answer, unless the application set one itself (a handler passing on
        # an upstream id its own way): most answers have their media type alone
        if len(headers) == 1 or not _has(headers, "x-request-id"):
            if isinstance(rid, str):
                headers.append(("x-request-id", rid))
            else:
                reply.request_id = rid  # its line made by the encoder, as bytes
        hsts = self._hsts
        if hsts is not None:
            # SPEC 10.2: every answer of the port (a 404 outside every location, a refusal
            # before routing), unless the answer set its own
            where = found.location if found is not None else None
            if where is not None and where.hsts is not None:
                hsts = where.hsts
            if not _has(headers, HSTS):
                headers.append(hsts)
        status = reply.status
        if status == 204 or status == 304 or status == 205:
            # no content, whatever the handler gave (RFC 9110 15.3.5, 15.3.6, 15.4.5): a
            # stream is closed unread (never chunked: RFC 9112 6.1), a 205 has a length of 0
            if reply.stream is not None:
                _unsent(reply, ctx)
            if status == 205:
                reply.body = b""
        if req.method == "HEAD":
            # No content (RFC 9110 9.3.2), an error answer too, else a keep-alive client
            # reads the body as the start of the next response; the length GET would have
            # (none for 204 and 304, which have no content at all; a stream's when known,
            # else none: a content-length of 0 would say GET's content is empty, RFC 9110 8.6).
            reply.head_only = True
            if reply.stream is not None:
                _unsent(reply, ctx)
                if reply.length >= 0:
                    reply.headers.append(("content-length", str(reply.length)))
            elif status != 204 and status != 304:
                reply.headers.append(("content-length", str(len(reply.body))))
            reply.body = b""
        if reply.stream is not None:
            # a stream's time counts until its last piece is written (SPEC 10.5), and its
            # access line is written then (SPEC 5, 13.4: its whole time, and whether it was
            # cut); its steps carry the request's id, and its failure is logged as a handler's
            ended = self._stream_ended(
                req, found, query, reply.status, route_key, started, guarded, handled, ctx
            )
            self.in_flight += 1  # until it ends (SPEC 5: the monitor's requests_in_flight)
            reply.stream = Sending(
                reply.stream,
                self.usage,
                route_key,
                started,
                rid,
                req.method,
                found.path if found is not None else "?",
                ctx,
                ended,
            )
            if log.access_log.isEnabledFor(logging.DEBUG):
                self._log_debug(req, reply, found)
            return reply
        ended_ns = time.perf_counter_ns()
        duration_us = (ended_ns - started) // 1000
        self.usage.record(route_key, duration_us)
        access = log.access_log
        if access.isEnabledFor(logging.ERROR if reply.status >= 500 else logging.INFO):
            trace = tunables.current.rest_trace_time
            times = trace_text(trace, started, guarded, handled, ended_ns) if trace else ""
            fields = _fields(req, found, route_key, reply.status, duration_us, ctx)
            self._log_access(req, found, query, reply.status, times, fields)
            if access.isEnabledFor(logging.DEBUG):
                self._log_debug(req, reply, found)
        return reply

    def _stream_ended(
        self,
        req: Request,
        found: _Located | None,
        query: str,
        status: int,
        route_key: UsageKey,
        started: int,
        guarded: int,
        handled: int,
        ctx: RequestContext | None,
    ) -> Callable[[int, str], None]:
        """What writes a streamed answer's access line when it ends (``streams.Sending``: at
        ``ended``, cut as ``cut`` says): its times until then (the serialization phase is the
        sending of its pieces), ``cut=failed`` at WARNING after a failure of its iterator,
        ``cut=closed`` when closed before its end (the client gone, a deadline, a stop); and
        the stream's count in flight, taken in ``_finish``, given back."""

        def write(ended: int, cut: str) -> None:
            self.in_flight -= 1  # since _finish: the stream was in flight until now (SPEC 5)
            access = log.access_log
            if status >= 500:
                level = logging.ERROR
            else:
                level = logging.WARNING if cut == "failed" else logging.INFO
            if not access.isEnabledFor(level):
                return
            trace = tunables.current.rest_trace_time
            times = trace_text(trace, started, guarded, handled, ended) if trace else ""
            fields = _fields(req, found, route_key, status, (ended - started) // 1000, ctx)
            self._log_access(req, found, query, status, times, fields, cut, level)

        return write

    @staticmethod
    def _bad_result(method: str, path: str, exc: Exception) -> Reply:
        """A handler's result fwrest cannot send: 500, and the reason in the log."""
        why = str(exc)
        if isinstance(exc, NotJSON):
            why = f"a handler returned data that is not JSON: {why}"
        log.app_log.error("%s %s: %s", method, log.escape(path), log.escape(why))
        return Reply(500, [JSON_TYPE], error_body(500))

    def _log_access(
        self,
        req: Request,
        found: _Located | None,
        query: str,
        status: int,
        times: str,
        fields: log.RequestFields,
        cut: str = "",
        level: int = 0,
    ) -> None:
        """The request's access line (the caller checked the level is on), with the times of
        ``rest_trace_time`` when on (one line per request, so that tracing costs a few
        numbers, not a second log record); ``cut``: a stream's, ``cut=...`` after the status,
        at ``level``."""
        shown = log.escape(found.path) if found is not None else "?"
        if query and found is not None:
            # the token route's query (a password grant over GET) is redacted whole, user
            # names included (SPEC 4.2), known by the normalised path (%74oken is token);
            # elsewhere the values of secret-like names
            shown = f"{shown}?{log.escape(log.redact_query(query, every=found.is_token))}"
        if cut:
            times = f"cut={cut} {times}" if times else f"cut={cut}"
        elif not level:
            level = logging.ERROR if status >= 500 else logging.INFO
        # one text, built here (no %-formatting left for the record to do: it has no args)
        if times:
            text = f"{req.method} {shown} {status} {times} port={req.port} client={req.client}"
        else:
            text = f"{req.method} {shown} {status} port={req.port} client={req.client}"
        if cut:
            log.write(log.access_log, level, text, request=fields, cut=cut)
        else:
            log.write(log.access_log, level, text, request=fields)

    def _log_debug(self, req: Request, reply: Reply, found: _Located | None) -> None:
        """``rest_log_level=5``: headers and bodies, cut to ``rest_log_stringsize``.

        Bodies are redacted after parsing (JSON, URL-encoded forms); any other body is
        described by its length only (SPEC 7.1), and one over :data:`DEBUG_BODY_MAX` bytes by
        its size and type (the work stays bounded whatever the size). The request's secrets,
        its secret-named inputs included, are scrubbed BEFORE cutting (a cut could split a
        secret and defeat the scrub); the token route's bodies carry passwords and tokens and
        are never written (the route known by the normalised path, and a target that could
        not be resolved counted as it).
        """
        size = tunables.current.rest_log_stringsize
        secrets = log.request_secrets.get()
        done = {"fwrest_scrubbed": True}
        inputs = log.request_inputs.get()
        unread = 0  # the size of a request body not read for its secrets
        if inputs is not None:
            # the request's own secret-named inputs, scrubbed here before the cut (the
            # record is marked so that the formatter does not scrub them again); a body
            # over DEBUG_BODY_MAX is not shown, nor read for them, and then neither is the
            # response's body (it may echo one of them: "password" sent, "echo" answered)
            if len(inputs.body) <= DEBUG_BODY_MAX:
                own = log.input_secrets(inputs)
            else:
                own = log.input_secrets(inputs, with_body=False)
                unread = len(inputs.body)
            if own and own[0] is log.TOO_MANY:
                log.access_log.debug(
                    "request headers and bodies not logged: more than %d secret values",
                    log.SECRETS_MAX,
                    extra=done,
                )
                return
            secrets = secrets + own

        def shown(text: str) -> str:
            return log.escape(log.truncate(log.scrub(text, secrets), size))

        def body_of(data: bytes, headers: list[tuple[str, str]], why: str = "") -> str:
            if not data:
                return "-"
            media = next((v for n, v in headers if n == "content-type"), "")
            if len(data) > DEBUG_BODY_MAX or why:
                # parsing and redacting it would hold the event loop in proportion to its
                # size, and a prefix cannot be redacted for sure (a cut JSON or form)
                kind = shown(log.mask_header("content-type", media.partition(";")[0].strip()))
                kind = kind or "of no type"
                why = why or f"over {DEBUG_BODY_MAX} bytes"
                return f"({len(data)} bytes {kind}, not logged: {why})"
            text = log.redact_body(data.decode("utf-8", "replace"), media)
            if text is None:
                return f"({len(data)} bytes, not logged: neither JSON nor a URL-encoded form)"
            return shown(text) or "-"

        headers = ", ".join(
            f"{name}: {shown(log.mask_header(name, value))}"
            if name != "x-request-id" or is_request_id(value)
            else f"{name}: (not a request id, replaced)"  # never logged raw (SPEC 13.4)
            for name, value in req.headers
        )
        if found is None or found.is_token or _TOKEN_TARGET[3:] in req.target:
            body = out = "(not logged: token route)" if found is not None else "(not logged)"
        else:
            body = body_of(req.body, req.headers)
            out = body_of(
                reply.body,
                reply.headers,
                f"the request's body of {unread} bytes was not read for its secrets"
                if unread
                else "",
            )
        log.access_log.debug("request headers {%s} body %s", headers, body, extra=done)
        log.access_log.debug("response %d body %s", reply.status, out, extra=done)
