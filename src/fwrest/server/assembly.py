"""Assembly of one worker's request pipelines: thread pools, guards, throttles, token
services and port apps, each built with every collaborator in its constructor.

Owns: what each port's pipeline is made of, decided once per worker. Must not know: sockets,
signals, the supervisor (``worker``), how the usage figures are shared (``usage_sync``).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fwrest.auth import AuthSettings, BasicGuard
from fwrest.auth.oauth2 import BearerGuard, NoCheckPaths, ParamsSource, TokenService
from fwrest.auth.oauth2.authorize import Authorizer
from fwrest.auth.oauth2.discovery import Metadata, WellKnown, issuers
from fwrest.auth.oauth2.dpop import ALGS as DPOP_ALGS
from fwrest.auth.oauth2.dpop import DPOP, DpopCheck
from fwrest.auth.oauth2.keys import in_store
from fwrest.auth.oauth2.keyset import ASYMMETRIC_ALGS, StoreKeySet
from fwrest.auth.oauth2.mtls import metadata_fields as mtls_metadata
from fwrest.auth.oauth2.portkeys import PortKeys
from fwrest.auth.oauth2.resource import Resources
from fwrest.auth.oauth2.scopes import requiring
from fwrest.auth.throttle import BASIC_WORDING, TOKEN_WORDING, LockBoard, Throttle
from fwrest.config.tls import ClientCert
from fwrest.context.views import ServiceView
from fwrest.errors import BEARER
from fwrest.features.compression import Compression
from fwrest.features.cors import CorsStages, DocumentCors
from fwrest.features.headers import SecurityHeaders
from fwrest.features.headers import configured as security_headers
from fwrest.features.ratelimit import RateLimiter, native_methods
from fwrest.features.static import StaticFiles
from fwrest.routing import LocationTable
from fwrest.routing.names import RESOURCE_ROUTE_NAME
from fwrest.server.app import Admit, Early, Guard, Outgoing, PortApp, Scoped, bounder
from fwrest.server.build import PortPlan, ServicePlan
from fwrest.server.pool import ThreadPool
from fwrest.server.select import Selector
from fwrest.store.audit import AuditLog
from fwrest.store.base import RateStore
from fwrest.store.calls import StoreClient
from fwrest.wire import PortHandler

if TYPE_CHECKING:  # (imported by a worker that traces: SPEC 17.4)
    from fwrest.server.tracing import Tracing

# a look at the key set in the store (a poll every 0.5 s, or a request naming a key not
# known here, answered 503 when it fails: within SPEC 7's 1.5 s with room for a loaded host)
KEYSET_READ_DEADLINE_S = 1.0

__all__ = [
    "Assembly",
    "admitted_stages",
    "assemble",
    "location_stages",
    "monitor_throttle",
    "rate_limits",
    "static_files",
]


@dataclass(slots=True)
class Assembly:
    """What a worker built for its ports; :meth:`close` stops its background parts."""

    pools: dict[str, ThreadPool] = field(default_factory=dict)
    apps: list[PortApp] = field(default_factory=list)
    # what the engine serves for each app: the app, or its TracedPort (SPEC 17.4)
    handlers: list[PortHandler] = field(default_factory=list)
    services: list[TokenService] = field(default_factory=list)
    throttles: list[Throttle] = field(default_factory=list)
    # how everything here calls the store (the worker's; closed by the worker)
    client: StoreClient | None = None
    # the worker's audit trail (SPEC 13.5): lock-outs, replays and revocations are recorded
    audit: AuditLog | None = None

    def close(self) -> None:
        for pool in self.pools.values():
            pool.shutdown()
        for service in self.services:
            service.stop()
        for throttle in self.throttles:
            throttle.stop()


def _locator(port: PortPlan) -> Callable[[str], tuple[str, str] | None]:
    """(location prefix, path relative to it) of a normalised path, None outside every
    location (the oAuth2 guard's view)."""
    table: LocationTable[str] = LocationTable((loc.prefix, loc.prefix) for loc in port.locations)
    return table.find


def rate_limits(
    port: PortPlan, store: RateStore | None, client: StoreClient | None
) -> dict[str, RateLimiter]:
    """The rate limits of the port's locations with a ``RateLimit`` (SPEC 13.7), by prefix
    (none without a store: ``fwrest check`` builds no pipeline)."""
    if store is None:
        return {}
    # the discovery documents at the port's root, by the location they fall in (a root
    # location's): native routes of every method, answered before the limit
    table: LocationTable[str] = LocationTable((loc.prefix, loc.prefix) for loc in port.locations)
    documents: dict[str, set[str]] = {}
    for known in port.well_known:
        found = table.find(known.path)
        if found is not None:
            documents.setdefault(found[0], set()).add(found[1])
    return {
        loc.prefix: RateLimiter(
            loc.config.rate_limit,
            loc.prefix,
            store,
            client,
            port.config.name,
            native_methods(loc.router),
            frozenset(documents.get(loc.prefix, ())),
        )
        for loc in port.locations
        if loc.config.rate_limit is not None
    }


def location_stages(
    port: PortPlan, limits: dict[str, RateLimiter] | None = None
) -> tuple[tuple[Early, ...], dict[str, tuple[Outgoing, ...]]]:
    """The stages of the location features the port's locations configure (SPEC 10, 13.7):
    the early ones, and each location's outgoing ones by prefix (a rate limit's headers
    last: they describe the answer as sent). None, and so no cost on the request path, where
    none is configured; a location's own stages are decided here, so that none of them looks
    its location up per request."""
    early: list[Early] = []
    outgoing: dict[str, tuple[Outgoing, ...]] = {}
    locations = port.locations
    cors = None
    if any(loc.config.cors is not None for loc in locations):
        cors = CorsStages(
            (loc.prefix, loc.config.cors, loc.router, loc.config.root_path is not None)
            for loc in locations
        )
        early.append(Early(cors.preflight, frozenset({"OPTIONS"})))
    config = port.config
    compression = None
    if config.compression:
        compression = Compression(config.compression, config.compression_min_size)
    for loc in locations:
        # compression first: it reads only the answer's own headers (the next stages add
        # theirs to what it made, a Vary merged, none that would change its choice)
        stages: list[Outgoing] = [compression] if compression is not None else []
        lines = security_headers(loc.config)
        if lines:
            stages.append(SecurityHeaders(lines))
        headers = cors.outgoing_of(loc.prefix) if cors is not None else None
        if headers is not None:
            stages.append(headers)
        limiter = limits.get(loc.prefix) if limits else None
        if limiter is not None:
            stages.append(limiter.outgoing)
        if stages:
            outgoing[loc.prefix] = tuple(stages)
    return tuple(early), outgoing


def admitted_stages(port: PortPlan, pools: dict[str, ThreadPool]) -> tuple[Admit, ...]:
    """The port's stages after authorization and before routing: its ``OnSelect`` (SPEC
    11.1), a ``def`` one run in the pool of the port's first location (as ``OnAuth``), under
    that pool's ``ActiveTimeout``. None where the server names none."""
    hook = port.on_select
    if hook is None or not port.locations:
        return ()
    pool = pools[port.locations[0].pool_name.lower()]
    active = pool.config.active_timeout_ms
    bounded = bounder(active / 1000, pool.name) if active else None
    return (Selector(hook, pools, pool.submit, bounded),)


def static_files(port: PortPlan) -> dict[str, StaticFiles]:
    """The static files of the port's locations with a ``RootPath`` (SPEC 10.3), with the
    port's compression (a 304 carries the ``Vary`` and ``ETag`` its 200 would, SPEC 10.4)."""
    config = port.config
    types = config.content_types
    compression = None
    if config.compression:
        compression = Compression(config.compression, config.compression_min_size)
    return {
        loc.prefix: StaticFiles(loc.config.root_path, loc.config.default_page, types, compression)
        for loc in port.locations
        if loc.config.root_path is not None
    }


def _throttle(
    plan: ServicePlan,
    built: Assembly,
    max_failures: int,
    port_name: str,
    lock_board: LockBoard | None,
    region: int,
    *,
    token_route: bool = False,
) -> Throttle | None:
    """The brute-force throttle of a Basic guard or a token service (None without a store),
    started: one implementation for both (the token route's counts in the store before each
    check and fails closed; Basic's never waits on the store before ``OnAuth``)."""
    if plan.store is None:
        return None
    throttle = Throttle(
        plan.store,
        max_failures,
        port_name,
        board=lock_board,
        region=region,
        strict=token_route,
        wording=TOKEN_WORDING if token_route else BASIC_WORDING,
        client=built.client,
        audit=built.audit,
    )
    throttle.start()
    built.throttles.append(throttle)
    return throttle


class _Builder:
    def __init__(
        self,
        plan: ServicePlan,
        loop: asyncio.AbstractEventLoop,
        service: ServiceView,
        lock_board: LockBoard | None,
        region: int,
        tracing: Tracing | None = None,
    ) -> None:
        self.plan = plan
        self.tracing = tracing
        self.loop = loop
        self.service = service
        self.lock_board = lock_board
        self.region = region
        self.built = Assembly()

    def throttle(
        self, max_failures: int, port_name: str, *, token_route: bool = False
    ) -> Throttle | None:
        return _throttle(
            self.plan,
            self.built,
            max_failures,
            port_name,
            self.lock_board,
            self.region,
            token_route=token_route,
        )

    def pools(self) -> None:
        pools = self.built.pools
        for port in self.plan.ports:
            for loc in port.locations:
                config = loc.config.thread_pool
                if config.name.lower() not in pools:
                    pools[config.name.lower()] = ThreadPool(config, self.loop)

    def port_app(self, port: PortPlan) -> PortApp:
        settings = port.auth_settings
        # a def OnAuth/onAuth/onAuthparams runs in the thread pool of the port's first location
        pool = self.built.pools[port.locations[0].pool_name.lower()] if port.locations else None
        guard: Guard | None = None
        tokens: TokenService | None = None
        scoped: Scoped | None = None
        if settings is not None and settings.scheme == "basic":
            throttle = self.throttle(settings.max_failures, port.config.name)
            guard = BasicGuard(settings, port.config.name, throttle, pool)
        elif settings is not None and settings.scheme == "oAuth2":
            tokens = self.token_service(port, settings, pool)
            guard = BearerGuard(
                tokens,
                NoCheckPaths(settings.nocheck, (loc.prefix for loc in port.locations)),
                _locator(port),
                settings.on_auth,
                settings.on_auth_name,
                pool,
                tokens.resources.challenges(BEARER) if tokens.resources is not None else None,
                tokens.dpop,
            )
            scoped = requiring  # the routes' scopes are checked on oAuth2 ports only
        tracing = self.tracing
        if tracing is not None and guard is not None and settings is not None:
            guard = tracing.guard(guard, settings.scheme)
        limits = rate_limits(port, self.plan.store, self.built.client)
        early, outgoing = location_stages(port, limits)
        if tokens is not None and port.well_known:
            # SPEC 12.2, 16.3: the discovery documents at the port's root, before the guard
            # (each gone with its /fw/oauth2/ twin when NativeRoutes disables it: the plan
            # lists those served, as list/service and `fwrest routes` show them)
            metadata = {w.path: w.prefix for w in port.well_known if w.name == "oauth2/metadata"}
            if metadata:
                # a location's CORS section applies to its metadata there too (SPEC 16.1)
                cors = {
                    loc.prefix: DocumentCors(loc.config.cors)
                    for loc in port.locations
                    if loc.config.cors is not None
                }
                well_known = WellKnown(metadata, tokens.metadata_document, cors)
                early = (*early, Early(well_known))  # every method: 405 without the scheme
            resource = {w.path: w.prefix for w in port.well_known if w.name == RESOURCE_ROUTE_NAME}
            if resource:
                documents = WellKnown(resource, tokens.resource_document)
                early = (*early, Early(documents))
        return PortApp(
            port,
            self.built.pools,
            guard,
            token_service=tokens,
            service=self.service,
            early=early,
            admitted=admitted_stages(port, self.built.pools),
            limits={prefix: (limiter.admit,) for prefix, limiter in limits.items()},
            outgoing=outgoing,
            files=static_files(port),
            hooks=self.plan.hooks,
            scoped=scoped,
            traced=tracing.call if tracing is not None else None,
        )

    def token_service(
        self, port: PortPlan, settings: AuthSettings, pool: ThreadPool | None
    ) -> TokenService:
        assert self.plan.store is not None  # signing_key None: read later (TokenService)
        throttle = self.throttle(settings.max_failures, port.config.name, token_route=True)
        tokens = TokenService(
            port_name=port.config.name,
            key=self.plan.signing_key,
            store=self.plan.store,
            client=self.built.client,
            audit=self.built.audit,
            source=ParamsSource(settings.params_func, settings.params_file),
            max_failures=settings.max_failures,
            allow_get=settings.allow_get,
            pool=pool,
            throttle=throttle,
            keys=self.port_keys(settings),
            issuers=issuers(
                port.config.host,
                port.config.port,
                [loc.prefix for loc in port.locations],
                settings.issuer,
            ),
            issuer_configured=bool(settings.issuer),
        )
        # SPEC 7: a signing key in the Redis store is checked to be there still
        tokens.key_in_store = in_store(self.plan.config.signing_key_file, self.plan.store)
        # SPEC 16.2: certificate-bound tokens on a port that asks for client certificates
        tokens.mtls = port.config.tls.client_cert is not ClientCert.NONE
        tokens.mtls_required = settings.bound_tokens == "mtls"
        mtls_fields = mtls_metadata() if tokens.mtls else None
        disabled = port.native.disable
        tokens.metadata = Metadata(
            tokens.issuers,
            asymmetric=tokens.keys is not None,
            bound=mtls_fields,
            disabled=disabled,
        )
        tokens.resources = Resources(
            tokens.issuers,
            configured=bool(settings.issuer),
            bound=mtls_fields,
            served=RESOURCE_ROUTE_NAME not in disabled,
        )
        tokens.authorizer = Authorizer(tokens, settings.login_page)  # SPEC 16.1
        self.dpop(tokens, port, settings)  # SPEC 16.2
        tokens.start()
        self.built.services.append(tokens)
        return tokens

    def dpop(self, tokens: TokenService, port: PortPlan, settings: AuthSettings) -> None:
        """DPoP on an oAuth2 port (SPEC 16.2): always accepted, mandatory with
        ``"boundTokens": "dpop"``; the metadata documents name it."""
        required = settings.bound_tokens == "dpop"
        resources = tokens.resources
        tokens.dpop = DpopCheck(
            tokens,
            required=required,
            proxies=tuple(ipaddress.ip_network(n) for n in port.config.trusted_proxies),
            challenges=resources.challenges(DPOP) if resources is not None else None,
        )
        if tokens.metadata is not None:
            tokens.metadata.bindings["dpop_signing_alg_values_supported"] = list(DPOP_ALGS)
        if resources is not None:
            resources.bindings["dpop_signing_alg_values_supported"] = list(DPOP_ALGS)
            if required:
                resources.bindings["dpop_bound_access_tokens_required"] = True

    def port_keys(self, settings: AuthSettings) -> PortKeys | None:
        """The key set view of an asymmetric port (SPEC 12.1); None for HS256."""
        if settings.signing_alg not in ASYMMETRIC_ALGS:
            return None
        source = self.plan.key_source
        assert source is not None
        client = self.built.client
        read = None
        if isinstance(source, StoreKeySet) and client is not None and not client.inline:
            # a store's key set is read by the worker's store threads, not asyncio's
            def read(fn: Callable[[], object]) -> Awaitable[object]:
                return client.call(fn, deadline=KEYSET_READ_DEADLINE_S)

        return PortKeys(settings.signing_alg, source, self.plan.key_entries, read=read)


def assemble(
    plan: ServicePlan,
    loop: asyncio.AbstractEventLoop,
    service: ServiceView,
    *,
    lock_board: LockBoard | None = None,
    region: int = 0,
    client: StoreClient | None = None,
    audit: AuditLog | None = None,
    tracing: Tracing | None = None,
) -> Assembly:
    """Every port's pipeline for one worker (on its running loop).

    Args:
        plan: the service's plan (the store open, the signing key loaded).
        loop: the worker's loop (thread pools hand results back to it).
        service: what native routes may use of the worker.
        lock_board: the brute-force counts and lock-outs the workers of the host share.
        region: this worker's slot on the lock board.
        client: how the throttles and token services call the store (one per worker).
        audit: the worker's audit trail.
        tracing: the worker's tracing (SPEC 17.4: ``Tracing`` set), else None.
    """
    builder = _Builder(plan, loop, service, lock_board, region, tracing)
    builder.built.client = client
    builder.built.audit = audit
    builder.pools()
    for port in plan.ports:
        app = builder.port_app(port)
        builder.built.apps.append(app)
        builder.built.handlers.append(tracing.port(app) if tracing is not None else app)
    return builder.built


def monitor_throttle(
    plan: ServicePlan, built: Assembly, lock_board: LockBoard | None, region: int
) -> Throttle | None:
    """The monitor port's brute-force throttle, when it has a Basic guard and a store."""
    auth = plan.monitor_auth
    if auth is None or auth.scheme != "basic":
        return None
    return _throttle(plan, built, auth.max_failures, "APP_MONITOR", lock_board, region)
