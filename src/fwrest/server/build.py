"""Everything a start decides before binding: imported repository, route tables per location,
the authorization in force per port. ``fwrest check``, ``routes`` and ``serve`` share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fwrest import log
from fwrest.auth import AuthSettings, parse_authorization
from fwrest.auth.oauth2 import load_signing_key
from fwrest.auth.oauth2.discovery import issuers, metadata_paths
from fwrest.auth.oauth2.keys import (
    check_stored_keys,
    in_store,
    key_set_source,
    load_key_set,
    store_signing_key,
)
from fwrest.auth.oauth2.keyset import ASYMMETRIC_ALGS, KeyEntry, KeySource
from fwrest.auth.oauth2.resource import Resources
from fwrest.auth.oauth2.route import OAUTH2_ROUTES
from fwrest.auth.oauth2.scopes import scope_warnings
from fwrest.auth.oauth2.warnings import nocheck_warnings, oauth2_warnings
from fwrest.config.model import LocationConfig, ServerConfig, ServiceConfig
from fwrest.context.request import NO_AUTH, AuthInfo
from fwrest.context.views import UsageKey
from fwrest.errors import ConfigError
from fwrest.native import (
    NATIVE_ROUTES,
    NativeOptions,
    native_endpoints,
    native_warnings,
    parse_native,
)
from fwrest.repository import Endpoint, Environment, Repository
from fwrest.routing import Router
from fwrest.server.handler import Handler
from fwrest.server.hooks import Hook, PoolHooks, pool_hooks, select_hook
from fwrest.store import StateStore, StoreError, open_store, shown_url
from fwrest.store.redis_target import quiet_redis, shared_store
from fwrest.store.schema import SchemaError
from fwrest.store.schema import ensure as ensure_schema

if TYPE_CHECKING:
    from fwrest.store.redis import RedisStore

__all__ = [
    "LocationPlan",
    "PortPlan",
    "ServicePlan",
    "WellKnownRoute",
    "build_plan",
    "check_schema",
    "check_store_keys",
    "probe_store",
]


@dataclass(slots=True)
class LocationPlan:
    config: LocationConfig
    router: Router[Handler]
    endpoints: list[Endpoint]

    @property
    def prefix(self) -> str:
        return self.config.path

    @property
    def pool_name(self) -> str:
        return self.config.thread_pool.name

    def full_path(self, route: str) -> str:
        if self.prefix == "/":
            return route
        return self.prefix if route == "/" else f"{self.prefix}{route}"


@dataclass(frozen=True, slots=True)
class WellKnownRoute:
    """A discovery document an oAuth2 port answers at its root, before its guard: the
    RFC 8414 metadata (SPEC 12.2) or the RFC 9728 protected resource metadata (SPEC 16.3) of
    a location. A native route under the name of its ``/fw/oauth2/`` twin, which
    ``NativeRoutes`` disable and hide take away with it; listed by ``list/service``, the
    OpenAPI document and ``fwrest routes`` (SPEC 5), answered by ``WellKnown`` early stages
    (``server/assembly.py``) from these, so that what is listed is what is served."""

    path: str  # at the port's root, whatever the location's path
    name: str  # "oauth2/metadata" or "oauth2/resource"
    prefix: str  # the location whose document it is
    description: str
    function: str  # the function of its /fw/oauth2/ twin, which serves the same document


def well_known_routes(
    server: ServerConfig,
    settings: AuthSettings | None,
    native: NativeOptions,
    prefixes: list[str],
) -> tuple[WellKnownRoute, ...]:
    """The discovery documents of a port at its root (none but on an oAuth2 port), those
    ``NativeRoutes.disable`` takes away left out."""
    if settings is None or settings.scheme != "oAuth2":
        return ()
    by_location = issuers(server.host, server.port, prefixes, settings.issuer)
    documents = (
        (
            "oauth2/metadata",
            metadata_paths(by_location),
            "Authorization server metadata (RFC 8414)",
        ),
        (
            "oauth2/resource",
            Resources(by_location).well_known_paths(),
            "Protected resource metadata (RFC 9728)",
        ),
    )
    out = []
    for name, paths, what in documents:
        if name in native.disable:
            continue
        func = OAUTH2_ROUTES[name]
        function = f"{func.__module__}.{func.__qualname__}"
        for path, prefix in paths.items():
            description = f"{what} of the location {prefix}, at the port's root"
            out.append(WellKnownRoute(path, name, prefix, description, function))
    return tuple(out)


@dataclass(slots=True)
class PortPlan:
    config: ServerConfig
    locations: list[LocationPlan]
    auth: AuthInfo = NO_AUTH
    auth_settings: AuthSettings | None = None
    native: NativeOptions = field(default_factory=NativeOptions)
    public_paths: frozenset[str] = frozenset()
    bound_address: str = ""  # the address the port's socket is bound to, set by bind_all
    on_select: Hook | None = None  # OnSelect (SPEC 11.1): an admitted stage of the port
    # an oAuth2 port's discovery documents at its root (SPEC 12.2, 16.3), native routes too
    well_known: tuple[WellKnownRoute, ...] = ()

    def urls(self, port: int | None = None) -> list[str]:
        host = self.config.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        real = self.config.port if port is None else port
        return [
            f"{self.config.scheme}://{shown}:{real}{loc.full_path('/')}" for loc in self.locations
        ]


@dataclass(slots=True)
class ServicePlan:
    config: ServiceConfig
    repository: Repository
    ports: list[PortPlan]
    warnings: list[str] = field(default_factory=list)
    monitor_auth: AuthSettings | None = None
    monitor_port: int = 0  # the bound port, set by bind_all
    store: StateStore | None = None  # opened by open_runtime(), not by check
    signing_key: bytes | None = None
    # the asymmetric key set (SPEC 12.1), when a port signs with EdDSA, ES256 or RS256
    key_source: KeySource | None = None
    key_entries: list[KeyEntry] = field(default_factory=list)
    # the hooks of the pools that name some (SPEC 11.1), by lower-case pool name
    hooks: dict[str, PoolHooks] = field(default_factory=dict)

    def key_algs(self) -> set[str]:
        """The asymmetric algorithms the oAuth2 ports sign with."""
        return key_algs(self.ports)


def key_algs(ports: list[PortPlan]) -> set[str]:
    """The asymmetric algorithms the oAuth2 ports of ``ports`` sign with (SPEC 12.1)."""
    return {
        p.auth_settings.signing_alg
        for p in ports
        if p.auth_settings is not None
        and p.auth_settings.scheme == "oAuth2"
        and p.auth_settings.signing_alg in ASYMMETRIC_ALGS
    }


def _location_plan(
    loc: LocationConfig, endpoints: list[Endpoint], server: ServerConfig, source: str | None
) -> LocationPlan:
    router: Router[Handler] = Router()
    prefix = loc.path if loc.path != "/" else ""
    for ep in endpoints:
        handler = Handler(ep, UsageKey(loc.path, ep.method, ep.path, loc.thread_pool.name))
        previous = router.add(ep.method, ep.path, handler, ep.head)
        if previous is not None:
            other = previous.endpoint
            by = (
                f"by {other.function} ({other.source}, {other.origin}) and by {ep.function} "
                f"({ep.source}, {ep.origin})."
            )
            if other.path == ep.path:
                what = f"{ep.method} {prefix}{ep.path} is registered twice: {by}"
            else:  # one shape, other parameter names: the same requests match both
                what = (
                    f"{ep.method} {prefix}{other.path} and {ep.method} {prefix}{ep.path} are "
                    f"one route (the same requests match both), registered twice: {by}"
                )
            raise ConfigError(
                what,
                section=server.name,
                key="Locations",
                fix="remove one of the two registrations, or give one another path.",
                source=source,
            )
        if handler.problem:
            raise ConfigError(
                f"{ep.method} {prefix}{ep.path} calls {ep.function} ({ep.source}, "
                f"{ep.origin}): {handler.problem}.",
                section=server.name,
                key="LoadURNs" if ep.source == "mapping" else "Locations",
                fix="change the hint to one fwrest fills (docs/endpoints.md, typed handlers): "
                "without a hint a path parameter is its text, and the rest of the request is "
                "read through the REST object.",
                source=source,
            )
        if handler.missing:
            names = ", ".join(repr(n) for n in handler.missing)
            raise ConfigError(
                f"{ep.method} {prefix}{ep.path} calls {ep.function} ({ep.source}, "
                f"{ep.origin}), whose parameter(s) {names} the route does not give: every "
                "request would fail.",
                section=server.name,
                key="LoadURNs" if ep.source == "mapping" else "Locations",
                fix="name the path parameters as the function names its parameters "
                "(/items/:id for def f(id)); a value of the query string or the body is a "
                "parameter with a type hint (def f(limit: int)), or is read through the REST "
                "object (rest.getQueryRequest()).",
                source=source,
            )
    return LocationPlan(loc, router, endpoints)


def _issuer_warnings(settings: AuthSettings, server: ServerConfig, shared: bool) -> list[str]:
    """An oAuth2 port without ``issuer`` (SPEC 12.2): on a store that several hosts share,
    each host derives an issuer of its own (the tokens still pass on every host, but the
    metadata names one host); on a wildcard address with an asymmetric key, the issuer is
    a URL that no other service can reach or trust."""
    if settings.scheme != "oAuth2" or settings.issuer:
        return []
    found = []
    if shared:
        found.append(
            f"[{server.name}] the state store is shared by every host of the service, but "
            'the Authorization object sets no "issuer": each host names itself '
            f"(https://{{its HostName}}:{server.port}/...) in its tokens' iss and its metadata; "
            'set "issuer" to the public URL of the location, as clients reach it through the '
            "balancer (the hosts then issue and accept that one issuer)."
        )
    if settings.signing_alg in ASYMMETRIC_ALGS and server.host in ("0.0.0.0", "::", ""):
        found.append(
            f"[{server.name}] HostName={server.host}: the tokens' issuer is "
            f"https://{server.host}:{server.port}/..., a URL other services cannot use to find "
            'the JWKS; set "issuer" in the Authorization object to the public URL of the '
            "location (as clients reach it)."
        )
    return found


def build_plan(config: ServiceConfig) -> ServicePlan:
    """Import the repository and compile every port's routes; bind nothing.

    Raises:
        ConfigError: an import fails, a function name is missing or ambiguous, a route is
            registered twice.
    """
    with naming_the_file(config):  # the key files', onAuthparams' errors too
        return _build_plan(config)


def _build_plan(config: ServiceConfig) -> ServicePlan:
    source = str(config.source) if config.source else None
    repo = Repository(config.base_dir, source)
    ports: list[PortPlan] = []
    warnings: list[str] = []
    for server in config.servers:
        envs: list[Environment] = []
        for loc in server.locations:
            env = repo.load(loc.thread_pool.environment)
            if env not in envs:
                envs.append(env)
        settings = parse_authorization(
            server.fw_data.authorization,
            section=server.name,
            repo=repo,
            envs=envs,
            source=source,
        )
        native = parse_native(server.fw_data.native_routes, section=server.name, source=source)
        warnings += native_warnings(
            native, section=server.name, scheme=settings.scheme if settings else None
        )
        mapped = repo.mapped_endpoints(server.load_urns, envs, section=server.name)
        oauth2 = settings is not None and settings.scheme == "oAuth2"
        mapped += native_endpoints(native, oauth2=oauth2, oauth2_routes=OAUTH2_ROUTES)
        locations = []
        for loc in server.locations:
            env = repo.load(loc.thread_pool.environment)
            endpoints = list(env.endpoints) + mapped
            locations.append(_location_plan(loc, endpoints, server, source))
        warnings += scope_warnings(
            server.name,
            settings.scheme if settings is not None else None,
            settings is not None and settings.on_auth is not None,
            (
                f"{ep.method} {loc.full_path(ep.path)}"
                for loc in locations
                for ep in loc.endpoints
                if ep.scopes
            ),
        )
        auth = NO_AUTH
        if settings is not None:
            auth = AuthInfo(settings.scheme, settings.on_auth_name)
            warnings += oauth2_warnings(settings, server.name, native.disable)
            if settings.scheme == "oAuth2" and settings.nocheck:
                served = [
                    (
                        loc.prefix,
                        [(ep.method, ep.path) for ep in loc.endpoints if ep.source != "native"],
                    )
                    for loc in locations
                ]
                warnings += nocheck_warnings(server.name, settings.nocheck, served)
            warnings += _issuer_warnings(settings, server, shared_store(config.state_store))
        public = frozenset(
            loc.full_path(route.path)
            for loc in locations
            for route in NATIVE_ROUTES
            if route.name in native.public and route.name not in native.disable
        )
        port = PortPlan(server, locations, auth, settings, native, public)
        port.on_select = select_hook(repo, server, envs)
        port.well_known = well_known_routes(
            server, settings, native, [loc.prefix for loc in locations]
        )
        ports.append(port)
    hooks = pool_hooks(repo, (loc.thread_pool for s in config.servers for loc in s.locations))
    warnings += _memory_warnings(config, ports)
    uses_key_file = config.signing_key_file is not None or (
        any(p.auth.scheme == "oAuth2" for p in ports) and not shared_store(config.state_store)
    )
    if uses_key_file:
        # a corrupt or short key stops the start (SPEC 7): `fwrest check` says so too, for
        # the default DataPath/signing.key as for a SigningKeyFile (absent: made at start)
        load_signing_key(config.signing_key_file, config.data_path, None, create=False)
    if key_algs(ports) and uses_key_file:
        # a damaged key set stops the start: `fwrest check` says so too
        load_key_set(
            key_set_source(config.signing_key_file, config.data_path, None), set(), create=False
        )
    monitor_auth = None
    if config.monitor is not None:
        all_envs = [repo.load(env) for env in config.environments]
        monitor_auth = parse_authorization(
            config.monitor.fw_data.authorization,
            section="APP_MONITOR",
            repo=repo,
            envs=all_envs,
            source=source,
        )  # Basic only: the loader refused another scheme (config/fwdata.py)
    return ServicePlan(config, repo, ports, warnings, monitor_auth, hooks=hooks)


# what to do about a Redis store that refused fwrest, by the key at fault
_NO_DATABASE_FIX = (
    "name in the URL a database Redis has (0 to one less than `databases` in redis.conf, "
    "16 by default: redis://host:port/0, unix:///path/redis.sock?db=0), or raise `databases`."
)
_PROBE_FIXES = {
    "StateStoreCA": "give in StateStoreCA the CA that issued Redis's certificate (tls-cert-file), "
    "and a host in the URL that the certificate names.",
    "StateStoreCert": "give StateStoreCert and StateStoreKey, a client certificate issued by "
    "the CA of Redis's tls-ca-cert-file.",
    "StateStorePassword": "give the password of the URL's ACL user (or of the default user) in "
    "StateStorePassword=env:NAME; the password itself is never shown.",
    "StateStore": "check the URL: a rediss:// URL names Redis's tls-port, a redis:// URL its "
    "plain port, a unix:// URL its unixsocket, a redis+sentinel:// URL the name the sentinels "
    "monitor, a redis+cluster:// URL nodes of a cluster (cluster-enabled yes); a password in "
    "it is the URL's ACL user's (it is never shown).",
}


def _memory_warnings(config: ServiceConfig, ports: list[PortPlan]) -> list[str]:
    """What ``StateStore=memory`` keeps in each worker's own process, for the ports and
    locations that use it: one warning (``fwrest check`` does not know ``--workers``, so it
    is given whatever N; docs/deploy.md, "Choosing a state store")."""
    if config.state_store != "memory":
        return []
    oauth = [p.config.name for p in ports if p.auth.scheme == "oAuth2"]
    guarded = [p.config.name for p in ports if p.auth.scheme in ("basic", "oAuth2")]
    limited = sorted(
        {loc.name for s in config.servers for loc in s.locations if loc.rate_limit is not None}
    )
    kept: list[str] = []
    if oauth:
        kept.append(
            f"the refresh tokens, authorization codes and revocations of {', '.join(oauth)}"
        )
    if guarded:
        kept.append("the audit trail")
    if limited:
        kept.append(f"the rate-limit counts of {', '.join(limited)}")
    if not kept:
        return []
    return [
        "[HTTPSERVER] StateStore=memory keeps in each worker process (with --workers N, each "
        "worker its own; lost at a reload or restart; out of the fwrest commands' reach): "
        f"{'; '.join(kept)}. Use sqlite (the default) for several workers on one host, "
        "redis:// for several hosts (docs/deploy.md#choosing-a-state-store)."
    ]


@contextmanager
def naming_the_file(config: ServiceConfig) -> Iterator[None]:
    """A ``ConfigError`` raised in the block names the configuration file, as the loader's do
    (docs/troubleshooting.md: one error naming the file, the section and key): what is found
    after loading (the state store, the signing key) is raised by code that knows no file."""
    try:
        yield
    except ConfigError as exc:
        exc.in_file(str(config.source) if config.source else None)
        raise


def _schema_error(exc: SchemaError) -> ConfigError:
    """A store this release cannot use (SPEC 17.2), as the start's and fwrest check's error."""
    return ConfigError(exc.problem, section="HTTPSERVER", key="StateStore", fix=exc.fix)


def check_schema(config: ServiceConfig) -> str | None:
    """``fwrest check``: the store's schema marker read without writing; a store this release
    cannot read is the start's error. Returns a warning for a sqlite file of an older schema
    (``fwrest store migrate`` copies it first; a start takes the steps without a copy).

    Raises:
        ConfigError: the store was written by a newer release this one cannot follow.
    """
    from fwrest.store.migrate import look
    from fwrest.store.schema import SCHEMA

    try:
        marker = look(config.state_store, config.data_path, config.redis)
        if config.state_store == "sqlite" and marker is not None and marker.schema < SCHEMA:
            return (
                f"[HTTPSERVER] StateStore: the sqlite store is schema {marker.schema} (fwrest "
                f"{marker.release}): `fwrest store migrate CONFIG` copies it beside itself and "
                f"brings it to schema {SCHEMA}; a start would migrate it without a copy"
            )
        return None
    except SchemaError as exc:
        with naming_the_file(config):
            raise _schema_error(exc) from None


def probe_store(config: ServiceConfig) -> str | None:
    """Ask a Redis state store once (``fwrest check`` and the start): what it answers may
    show a configuration fault (SPEC 15: a wrong ``StateStoreCA``, client certificate or
    password), raised as the ``ConfigError`` naming the key; a store that cannot be reached
    is no fault of the configuration (it may come back): its reason is returned, for a
    warning.

    Raises:
        ConfigError: Redis refused the TLS handshake or the password.
    """
    if config.state_store in ("sqlite", "memory"):
        return None
    from fwrest.store.redis import NO_DATABASE

    store = _look_at_redis(config)
    try:
        found = store.probe()
    finally:
        store.close()
    if found is None:
        return None
    key, problem = found
    if key is None:
        return problem
    fix = _NO_DATABASE_FIX if NO_DATABASE in problem else _PROBE_FIXES[key]
    source = str(config.source) if config.source else None
    raise ConfigError(problem, section="HTTPSERVER", key=key, fix=fix, source=source)


def _look_at_redis(config: ServiceConfig) -> RedisStore:
    """The Redis state store, opened for one look (no retry)."""
    quiet_redis()
    from fwrest.store.redis import RedisClusterStore, RedisStore
    from fwrest.store.redis_target import CLUSTER_SCHEMES

    cluster = config.state_store.lower().startswith(CLUSTER_SCHEMES)
    return (RedisClusterStore if cluster else RedisStore)(
        config.state_store, config.redis, retries=0
    )


def check_store_keys(plan: ServicePlan) -> str | None:
    """``fwrest check``: the signing key and key set that a Redis state store holds (no
    ``SigningKeyFile``), read and checked as :func:`open_runtime` reads them, nothing made or
    written (``build_plan`` checks the files). Returns why the store did not answer (a
    warning).

    Raises:
        ConfigError: the start would refuse the key or the set (its words).
    """
    config = plan.config
    if config.signing_key_file is not None or not shared_store(config.state_store):
        return None
    if not any(p.auth.scheme == "oAuth2" for p in plan.ports):
        return None
    store = _look_at_redis(config)
    try:
        with naming_the_file(config):
            check_stored_keys(store, plan.key_algs())
    except StoreError as exc:
        return str(exc)
    finally:
        store.close()
    return None


def open_runtime(plan: ServicePlan) -> None:
    """Open the state store and load the signing key (``serve``/``start``, not ``check``).

    Raises:
        ConfigError: the store cannot be opened or was written by a newer release than this
            one can read (SPEC 17.2), or the signing key is corrupt or short.
    """
    with naming_the_file(plan.config):
        _open_runtime(plan)


def _open_runtime(plan: ServicePlan) -> None:
    config = plan.config
    unreachable = probe_store(config)
    if unreachable is not None:
        # no reason not to start (it may come back; Basic ports and the bearer check of a
        # valid token do not need it), but no silence either: ready says DOWN meanwhile
        log.server_log.warning(
            "[HTTPSERVER] StateStore: the state store did not answer: %s; the service starts, "
            "what needs the store answers 503 and /fw/healthcheck/ready says DOWN until it "
            "answers",
            unreachable,
        )
    try:
        plan.store = open_store(config.state_store, config.data_path, config.redis)
        if plan.store.kind == "redis":  # a sqlite file checks and marks itself as it opens
            ensure_schema(plan.store, shown_url(config.state_store))
    except SchemaError as exc:
        raise _schema_error(exc) from None
    except StoreError as exc:
        if plan.store is not None:
            # Redis down at start: the marker is read at the next start (the service starts
            # without the store, as SPEC 7 says)
            log.server_log.warning(
                "[HTTPSERVER] StateStore: the store's schema version was not read (the store "
                "did not answer): %s",
                exc,
            )
        else:
            raise ConfigError(
                f"{exc}",
                section="HTTPSERVER",
                key="StateStore",
                fix="check the path or the Redis server.",
            ) from None
    if any(p.auth.scheme == "oAuth2" for p in plan.ports):
        if in_store(config.signing_key_file, plan.store):
            assert plan.store is not None
            try:
                plan.signing_key = store_signing_key(plan.store)
            except StoreError as exc:
                # Redis down at start (the probe refused what would never answer): the
                # workers read the key once it answers; the token route and the bearer check
                # answer 503 meanwhile (SPEC 7), the other ports serve
                log.server_log.warning(
                    "[HTTPSERVER] StateStore: the signing key was not read from the state "
                    "store: %s; the oAuth2 ports answer 503 until it is",
                    exc,
                )
        else:
            plan.signing_key = load_signing_key(
                config.signing_key_file, config.data_path, plan.store, create=True
            )
    algs = plan.key_algs()
    if algs:
        plan.key_source = key_set_source(config.signing_key_file, config.data_path, plan.store)
        if plan.signing_key is not None:
            plan.key_entries = load_key_set(plan.key_source, algs)
        # else the set is in the Redis that did not answer just now: each port's keys read it
        # (made there when missing) once it answers (auth/oauth2/portkeys.py, pending)
