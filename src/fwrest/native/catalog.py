"""Which native routes exist, their paths, and ``FwData.NativeRoutes`` (disable/hide/public):
the loader validated its form (:class:`~fwrest.config.fwdata.NativeRoutesData`); the route
names are checked here, against the catalog."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fwrest.config.fwdata import NATIVE_ROUTE_NAMES, NATIVE_ROUTES_FIX, NativeRoutesData
from fwrest.errors import ConfigError
from fwrest.native.docs import DOCS_FILES
from fwrest.repository import Endpoint
from fwrest.routing.names import (
    AUTHORIZE_ROUTE,
    AUTHORIZE_ROUTE_NAME,
    INTROSPECT_ROUTE,
    INTROSPECT_ROUTE_NAME,
    JWKS_ROUTE,
    METADATA_ROUTE,
    RESOURCE_ROUTE,
    RESOURCE_ROUTE_NAME,
    REVOKE_ROUTE,
    REVOKE_ROUTE_NAME,
    REVOKE_USER_ROUTE,
    REVOKE_USER_ROUTE_NAME,
    TOKEN_ROUTE,
    TOKEN_ROUTE_NAME,
)

__all__ = [
    "NATIVE_ROUTES",
    "NativeOptions",
    "native_endpoints",
    "native_warnings",
    "parse_native",
]


@dataclass(frozen=True, slots=True)
class _Route:
    name: str
    method: str
    path: str
    handler: str  # "module:function" inside fwrest.native; "" for an oAuth2 port's own
    description: str
    head: bool = True  # a GET route serves HEAD too (Endpoint.head)


NATIVE_ROUTES: tuple[_Route, ...] = (
    _Route(
        "rest/config",
        "GET",
        "/fw/rest/config",
        "settings:config_page",
        "Run-time settings: HTML page, or JSON with Accept: application/json",
    ),
    _Route(
        "rest/config",
        "POST",
        "/fw/rest/config",
        "settings:config_change",
        "Change run-time settings (form with anti-forgery token, or JSON)",
    ),
    _Route(
        "rest/audit",
        "GET",
        "/fw/rest/audit",
        "audit:audit_trail",
        "Audit trail, newest first (since, event, limit; users onAdmin allows)",
    ),
    _Route(
        "rest/list/service",
        "GET",
        "/fw/rest/list/service",
        "listing:list_service",
        "Every route of this port",
    ),
    _Route(
        "rest/openapi.json",
        "GET",
        "/fw/rest/openapi.json",
        "listing:openapi",
        "OpenAPI 3.1 document of this port",
    ),
    _Route(
        "rest/docs",
        "GET",
        "/fw/rest/docs",
        "docs:docs_page",
        "API documentation: Swagger UI over this port's OpenAPI document",
    ),
    *(
        _Route(
            "rest/docs",
            "GET",
            f"/fw/rest/docs/{name}",
            "docs:docs_asset",
            f"A file of the API documentation page ({name})",
        )
        for name in DOCS_FILES
    ),
    _Route(
        "rest/usage/time",
        "GET",
        "/fw/rest/usage/time",
        "info:usage_time",
        "Time per entry point, worker and thread pool",
    ),
    _Route(
        "rest/usage/time",
        "POST",
        "/fw/rest/usage/time/reset",
        "info:usage_reset",
        "Start the usage figures from zero",
    ),
    _Route(
        "environment", "GET", "/fw/environment", "info:fw_environment", "Version of the framework"
    ),
    _Route(
        "server/environment",
        "GET",
        "/server/environment",
        "info:server_environment",
        "Version of the server runtime",
    ),
    _Route(
        "vendor/environment",
        "GET",
        "/vendor/environment",
        "info:vendor_environment",
        "Versions of framework and runtime together",
    ),
    # SPEC 5 names these two "server/environment" and "vendor/environment", a route's name
    # being its path after /fw/, while the seed serves them at {base_url}/server/... and
    # /vendor/...: both paths answer, under the one name (disable, hide, public cover both).
    _Route(
        "server/environment",
        "GET",
        "/fw/server/environment",
        "info:server_environment",
        "Version of the server runtime (also at /server/environment)",
    ),
    _Route(
        "vendor/environment",
        "GET",
        "/fw/vendor/environment",
        "info:vendor_environment",
        "Versions of framework and runtime together (also at /vendor/environment)",
    ),
    _Route(
        "healthcheck",
        "GET",
        "/fw/healthcheck",
        "info:healthcheck",
        "UP/DOWN with the state of the store and the workers",
    ),
    _Route("healthcheck/ok", "GET", "/fw/healthcheck/ok", "info:healthcheck_ok", "Answers ok"),
    _Route(
        "healthcheck/live",
        "GET",
        "/fw/healthcheck/live",
        "info:healthcheck_live",
        "Liveness probe: 200 while the worker's event loop turns",
    ),
    _Route(
        "healthcheck/ready",
        "GET",
        "/fw/healthcheck/ready",
        "info:healthcheck_ready",
        "Readiness probe: 200, or 503 with the failing checks",
    ),
    _Route(
        "healthcheck/started",
        "GET",
        "/fw/healthcheck/started",
        "info:healthcheck_started",
        "Startup probe: 200 once the worker's start finished",
    ),
    _Route(
        "healthcheck/datetime",
        "GET",
        "/fw/healthcheck/datetime",
        "info:healthcheck_datetime",
        "The server's time, ISO 8601",
    ),
    # HEAD would run a grant (spend a refresh token) and drop the tokens it issued: 405
    _Route(TOKEN_ROUTE_NAME, "GET", TOKEN_ROUTE, "", "OAuth2 token endpoint", head=False),
    _Route(TOKEN_ROUTE_NAME, "POST", TOKEN_ROUTE, "", "OAuth2 token endpoint"),
    _Route(REVOKE_ROUTE_NAME, "POST", REVOKE_ROUTE, "", "OAuth2 token revocation (RFC 7009)"),
    _Route(
        INTROSPECT_ROUTE_NAME,
        "POST",
        INTROSPECT_ROUTE,
        "",
        "OAuth2 token introspection (RFC 7662)",
    ),
    _Route(
        REVOKE_USER_ROUTE_NAME,
        "POST",
        REVOKE_USER_ROUTE,
        "tokens:revoke_user",
        'Revoke every token family of a user (JSON {"username"}; onAdmin only)',
    ),
    _Route("oauth2/jwks", "GET", JWKS_ROUTE, "", "Public keys of the token signatures"),
    _Route(
        AUTHORIZE_ROUTE_NAME,
        "GET",
        AUTHORIZE_ROUTE,
        "",
        "OAuth2 authorization endpoint: the login page (authorization code with PKCE)",
    ),
    _Route(
        AUTHORIZE_ROUTE_NAME,
        "POST",
        AUTHORIZE_ROUTE,
        "",
        "OAuth2 authorization endpoint: the login form, answered by a redirect with a code",
    ),
    _Route("oauth2/metadata", "GET", METADATA_ROUTE, "", "Authorization server metadata"),
    _Route(RESOURCE_ROUTE_NAME, "GET", RESOURCE_ROUTE, "", "Protected resource metadata"),
)

NAMES = list(NATIVE_ROUTE_NAMES)  # each the name of at least one route above
_DOCUMENT, _DOCS_PAGE = "rest/openapi.json", "rest/docs"  # disabling the first, the second too


@dataclass(frozen=True, slots=True)
class NativeOptions:
    disable: frozenset[str] = frozenset()
    hide: frozenset[str] = frozenset()
    public: frozenset[str] = frozenset()


def parse_native(data: NativeRoutesData, *, section: str, source: str | None) -> NativeOptions:
    """Check the route names of ``FwData.NativeRoutes``; ``"*"`` stands for every route.
    Disabling ``rest/openapi.json`` disables ``rest/docs`` too (the page has nothing to show
    without the document; docs/decisions.md).

    Raises:
        ConfigError: a name that is not a native route's.
    """
    out: dict[str, frozenset[str]] = {}
    for listed in data.lists:
        names: set[str] = set()
        for item in listed.names:
            name = item.strip().strip("/")
            name = name[3:] if name.startswith("fw/") else name
            if name == "*":
                names.update(NAMES)
            elif name in NAMES:
                names.add(name)
            else:
                raise ConfigError(
                    f"FwData NativeRoutes {listed.key} names {item!r}, which is not a native "
                    f"route.{_hint(name)}",
                    section=section,
                    key="FwData",
                    source=source,
                    fix=NATIVE_ROUTES_FIX,
                )
        if listed.kind == "disable" and _DOCUMENT in names:
            names.add(_DOCS_PAGE)  # the page only shows the document: none, no page
        out[listed.kind] = frozenset(names)
    return NativeOptions(**out)


def _hint(name: str) -> str:
    """What the user probably meant by an unknown route name ("" when nothing is close)."""
    for known in NAMES:
        if name.lower() == known.lower():
            return f" Did you mean {known!r}? Route names are case-sensitive, as paths are."
    for route in NATIVE_ROUTES:
        if name == route.path.removeprefix("/fw/") or name == route.path.lstrip("/"):
            return f" That path is a route of {route.name!r}; name {route.name!r}."
    if "fw/" in name:
        tail = name.rsplit("fw/", 1)[1]
        if tail in NAMES:
            return f" Names leave out the location and /fw/: write {tail!r}."
    return ""


def native_warnings(options: NativeOptions, *, section: str, scheme: str | None) -> list[str]:
    """Legal but risky ``NativeRoutes`` (SPEC 2: reported by ``fwrest check``, logged at start).

    Args:
        options: the parsed ``NativeRoutes``.
        section: the server section, for the message.
        scheme: the port's authorization scheme (``None`` on an open port).
    """
    out: list[str] = []
    if not scheme and "rest/config" not in options.disable:
        # SPEC 5 allows the change to "every authenticated user"; on a port without a scheme
        # every caller is one (the original product's behaviour, kept: docs/decisions.md)
        out.append(
            f"[{section}] has no Authorization scheme and serves rest/config: anyone who "
            "reaches this port can change the service's run-time settings (POST "
            "{base_url}/fw/rest/config, for every worker and host; audit actor 'anonymous'); "
            'disable the route on this port (FwData "NativeRoutes": {"disable": '
            '["rest/config"]}) or put the port behind a scheme (FwData "Authorization", '
            'with "onAdmin" to choose who may change settings).'
        )
    if scheme:
        opened = [
            name
            for name in ("rest/config", "rest/usage/time")
            if name in options.public and name not in options.disable
        ]
        if opened:
            out.append(
                f"[{section}] FwData NativeRoutes public opens {' and '.join(opened)} to "
                "anyone without credentials, POST included (changing the run-time settings, "
                "resetting the usage figures); make public only the routes a probe reads, "
                'such as "healthcheck" and "healthcheck/ok".'
            )
    if scheme == "oAuth2" and TOKEN_ROUTE_NAME in options.disable:
        out.append(
            f"[{section}] FwData NativeRoutes disable takes away this port's token route "
            "(oauth2/token): its clients can only use tokens issued by another oAuth2 port "
            'of the service; leave oauth2/token out of disable ("*" includes it).'
        )
    return out


def _resolve(spec: str) -> Callable[..., Any]:
    module_name, _, func_name = spec.partition(":")
    import importlib

    module = importlib.import_module(f"fwrest.native.{module_name}")
    func: Callable[..., Any] = getattr(module, func_name)
    return func


def native_endpoints(
    options: NativeOptions,
    *,
    oauth2: bool,
    oauth2_routes: Mapping[str, Callable[..., Any]] | None = None,
) -> list[Endpoint]:
    """The native endpoints of one port, without the disabled ones.

    Args:
        oauth2: whether the port's scheme is oAuth2 (its token service's routes exist).
        oauth2_routes: the functions of those routes by route name (``oauth2/token``, ...),
            given by the server (``native/`` does not import ``auth/``).
    """
    out = []
    for route in NATIVE_ROUTES:
        if route.name in options.disable or (route.name.startswith("oauth2/") and not oauth2):
            continue
        if not route.handler:
            found = (oauth2_routes or {}).get(route.name)
            if found is None:
                continue
            func = found
            function = f"{found.__module__}.{found.__qualname__}"
        else:
            func = _resolve(route.handler)
            function = f"fwrest.native.{route.handler.replace(':', '.')}"
        out.append(
            Endpoint(
                method=route.method,
                path=route.path,
                func=func,
                description=route.description,
                source="native",
                module=function.rsplit(".", 1)[0],
                function=function,
                origin="fwrest",
                head=route.head,
            )
        )
    return out


def route_name(path: str) -> str | None:
    """The native name of a route path (``/fw/rest/config`` -> ``rest/config``)."""
    for route in NATIVE_ROUTES:
        if route.path == path:
            return route.name
    return None
