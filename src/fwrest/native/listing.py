"""``/fw/rest/list/service`` and ``/fw/rest/openapi.json`` (also ``fwrest routes/openapi``)."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from fwrest.context.request import current
from fwrest.native.catalog import NativeOptions, route_name
from fwrest.native.schemas import Typed, add_schemas
from fwrest.routing.names import (
    AUTHORIZE_PARAMS,
    AUTHORIZE_ROUTE,
    AUTHORIZE_ROUTE_NAME,
    INTROSPECT_ROUTE_NAME,
    OPEN_OAUTH2_ROUTES,
    REVOKE_ROUTE_NAME,
    TOKEN_ROUTE,
    TOKEN_ROUTE_NAME,
)

__all__ = ["build_openapi", "list_service", "openapi", "service_listing"]

FORM_TYPE = "application/x-www-form-urlencoded"


def _form(required: list[str], *names: str) -> dict[str, Any]:
    """The schema of a form of text fields ``names`` (a secret's ``format: password``)."""
    props: dict[str, Any] = {}
    for name in names:
        props[name] = {"type": "string"}
        if name in ("password", "client_secret"):
            props[name]["format"] = "password"
    return {"type": "object", "properties": props, "required": required}


_TOKEN_FIELDS = ("token", "token_type_hint", "client_id", "client_secret")
# the token service's POST routes, by name: they take a form only (RFC 6749 4.1.3, 4.3.2,
# 6; RFC 7009 2.1; RFC 7662 2.1; the login form of SPEC 16.1), anything else is 400
_FORMS: dict[str, dict[str, Any]] = {
    TOKEN_ROUTE_NAME: _form(
        ["grant_type"],
        "grant_type",
        "username",
        "password",
        "scope",
        "refresh_token",
        "code",
        "redirect_uri",
        "code_verifier",
        "client_id",
        "client_secret",
        "resource",  # RFC 8707 (SPEC 16.3)
    ),
    REVOKE_ROUTE_NAME: _form(["token"], *_TOKEN_FIELDS),
    INTROSPECT_ROUTE_NAME: _form(["token"], *_TOKEN_FIELDS),
    AUTHORIZE_ROUTE_NAME: _form(
        ["fw_csrf", "username", "password"],  # fw_csrf: the page's CSRF token (hidden)
        *AUTHORIZE_PARAMS,
        "fw_csrf",
        "username",
        "password",
    ),
}
_AUTHORIZE_REDIRECT = {
    "description": "to the client's redirect_uri: code, state and iss (RFC 9207), or error, "
    "state and iss",
    "headers": {"Location": {"schema": {"type": "string"}}},
}

# the routes never behind the port's scheme (SPEC 4.2, 12.3), by name
_OPEN_NAMES = frozenset(path.removeprefix("/fw/") for path in OPEN_OAUTH2_ROUTES)
_PARAM = re.compile(r":([A-Za-z_][A-Za-z0-9_]*)")


def _is_public(port: Any, prefix: str, rel: str, name: str | None) -> bool:
    options: NativeOptions = port.native
    # the token, revocation, introspection and discovery routes are never behind the scheme
    # (SPEC 4.2, 12.2, 12.3)
    if name is not None and (name in options.public or name in _OPEN_NAMES):
        return True
    settings = port.auth_settings
    if settings is None:
        return True
    if settings.scheme == "oAuth2" and settings.nocheck:
        from fwrest.auth.oauth2 import NoCheckPaths

        nocheck = NoCheckPaths(settings.nocheck, (loc.prefix for loc in port.locations))
        return nocheck.matches(rel, prefix)
    return False


def service_listing(port: Any) -> list[dict[str, Any]]:
    """One entry per route path of a port (a :class:`PortPlan`), sorted (SPEC 5), an oAuth2
    port's discovery documents at its root included (``PortPlan.well_known``).

    An entry covers every location where the same relative path has the same methods,
    functions and exposure; where locations differ (their environments hold other routes
    for the path), each variant gets its own entry, so that no entry claims a method or a
    function that one of its ``paths`` does not have.
    """
    hidden = port.native.hide
    settings = port.auth_settings
    # a route's scopes are shown where they are checked (SPEC 12.4: oAuth2 ports)
    scoping = settings is not None and settings.scheme == "oAuth2"
    # (pattern, what the location serves there) -> entry
    entries: dict[tuple[str, tuple[Any, ...]], dict[str, Any]] = {}
    for loc in port.locations:
        served: dict[str, dict[str, Any]] = {}
        for method, pattern, handler in loc.router.routes():
            ep = handler.endpoint
            name = route_name(pattern) if ep.source == "native" else None
            if name is not None and name in hidden:
                continue
            entry = served.get(pattern)
            if entry is None:
                full = loc.full_path(pattern)
                entry = served[pattern] = {
                    "endpoint": pattern,
                    "type": "fw" if ep.source == "native" else "default",
                    "doc": "false",
                    "source": ep.source,
                    "paths": [full],
                    "public": _is_public(port, loc.prefix, pattern, name),
                    "methods": [],
                }
            shown: dict[str, Any] = {
                "method": method,
                "description": ep.description,
                "function": ep.function,
            }
            if scoping and ep.scopes:
                shown["scopes"] = list(ep.scopes)
            entry["methods"].append(shown)
            if ep.description:
                entry["doc"] = "true"
        for pattern, entry in served.items():
            entry["methods"].sort(key=lambda m: m["method"])
            signature = (
                entry["source"],
                entry["public"],
                tuple(
                    tuple(tuple(v) if isinstance(v, list) else v for v in m.values())
                    for m in entry["methods"]
                ),
            )
            known = entries.get((pattern, signature))
            if known is None:
                entries[(pattern, signature)] = entry
            elif entry["paths"][0] not in known["paths"]:
                known["paths"].append(entry["paths"][0])
    out = list(entries.values())
    for loc in port.locations:
        if loc.config.root_path is not None:
            # the location's static files (SPEC 10.3): one entry, behind the port's scheme
            full = loc.full_path("/*")
            out.append(
                {
                    "endpoint": "/*",
                    "type": "default",
                    "doc": "false",
                    "source": "static",
                    "paths": [full],
                    "public": _is_public(port, loc.prefix, "/*", None),
                    "methods": [
                        {"method": m, "description": "static files", "function": ""}
                        for m in ("GET", "HEAD")
                    ],
                }
            )
    for known in port.well_known:
        if known.name in hidden:
            continue
        # an oAuth2 port's discovery documents at its root, outside every location (SPEC
        # 12.2, 16.3): its endpoint is its path there; never behind the scheme
        out.append(
            {
                "endpoint": known.path,
                "type": "fw",
                "doc": "true",
                "source": "native",
                "paths": [known.path],
                "public": True,
                "methods": [
                    {"method": "GET", "description": known.description, "function": known.function}
                ],
            }
        )
    for entry in out:
        entry["paths"].sort()
    return sorted(out, key=lambda e: (e["endpoint"], e["paths"]))


async def list_service() -> list[dict[str, Any]]:
    ctx = current.get()
    return ctx.port.listing()


# the OAuth Flows Object's field (OpenAPI 3.1 4.8.29) of each grant type that has one
_FLOWS = {
    "authorization_code": "authorizationCode",
    "password": "password",
    "client_credentials": "clientCredentials",
}
_NO_TYPES = ("password", "refresh_token")  # what onAuthparams without types grants


def _flows(port: Any, grants: Sequence[str], scopes: dict[str, str]) -> dict[str, Any]:
    """The OAuth flows of an oAuth2 port (OpenAPI 3.1 OAuth Flows Object): one per grant
    offered that has one, with ``refreshUrl`` when the refresh grant is offered too."""
    token_url = port.locations[0].full_path(TOKEN_ROUTE)
    flows: dict[str, Any] = {}
    for grant in (g for g in _FLOWS if g in grants):
        flow: dict[str, Any] = {}
        if grant == "authorization_code":
            flow["authorizationUrl"] = port.locations[0].full_path(AUTHORIZE_ROUTE)
        flow["tokenUrl"] = token_url
        if grant != "client_credentials" and "refresh_token" in grants:
            flow["refreshUrl"] = token_url  # RFC 6749 4.4.3: no refresh token issued
        flow["scopes"] = dict(sorted(scopes.items()))
        flows[_FLOWS[grant]] = flow
    return flows


def build_openapi(port: Any, version: str, grants: Sequence[str] | None = None) -> dict[str, Any]:
    """An OpenAPI 3.1 document of a port's routes and its security scheme; an oAuth2 port's
    flows those of ``grants``, the grant types it offers (None: ``onAuthparams`` without
    ``types``)."""
    cfg = port.config
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "", "::") else cfg.host
    if ":" in host:
        host = f"[{host}]"
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": f"fwrest service [{cfg.name}]", "version": version},
        "servers": [{"url": f"{cfg.scheme}://{host}:{cfg.port}"}],
        "paths": {},
    }
    settings = port.auth_settings
    security_name = None
    if settings is not None and settings.scheme == "basic":
        security_name = "basicAuth"
        doc["components"] = {
            "securitySchemes": {security_name: {"type": "http", "scheme": "basic"}}
        }
        doc["security"] = [{security_name: []}]
    elif settings is not None:
        security_name = "oauth2"
        scopes = {"default": "granted to every token"}
        for loc in port.locations:
            for ep in loc.endpoints:
                for name in ep.scopes:
                    scopes.setdefault(name, f"required by {ep.method} {loc.full_path(ep.path)}")
        flows = _flows(port, _NO_TYPES if grants is None else grants, scopes)
        doc["components"] = {"securitySchemes": {security_name: {"type": "oauth2", "flows": flows}}}
        # a route without scopes takes any valid token: it requires none (OpenAPI 3.1: the
        # list is the scopes required); a scoped route lists its own below
        doc["security"] = [{security_name: []}]
    used_ids: set[str] = set()
    # OpenAPI 3.1 (Paths Object): templated paths that differ only in their parameter names
    # are the same path and must be one key; routes of one shape may name their parameters
    # differently (SPEC 3), so the first pattern of a shape names the template.
    templates: dict[str, tuple[str, list[str]]] = {}
    # the typed handlers' hints (SPEC 14.2), by full path and method
    hinted = {
        (loc.full_path(pattern), method): handler.hints
        for loc in port.locations
        for method, pattern, handler in loc.router.routes()
        if handler.hints.params or handler.hints.returns is not None
    }
    typed: list[Typed] = []
    for entry in service_listing(port):
        for full in entry["paths"]:
            shape = _PARAM.sub(":", full)
            if shape not in templates:
                templates[shape] = (_PARAM.sub(r"{\1}", full), _PARAM.findall(full))
            template, names = templates[shape]
            path_item: dict[str, Any] = doc["paths"].setdefault(template, {})
            params = [
                {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                for n in names
            ]
            for method in entry["methods"]:
                op_id = re.sub(r"[^A-Za-z0-9_]", "_", f"{method['method'].lower()}_{full}")
                while op_id in used_ids:
                    op_id += "_"
                used_ids.add(op_id)
                operation: dict[str, Any] = {
                    "operationId": op_id,
                    "summary": method["description"] or method["function"],
                    "responses": {
                        "200": {"description": "OK"},
                        "default": {"description": "Error (code, detailedMessage, message)"},
                    },
                }
                if params:
                    operation["parameters"] = params
                if entry["type"] == "fw":
                    operation["tags"] = ["fwrest native routes"]
                if security_name and entry["public"]:
                    operation["security"] = []
                elif security_name and "scopes" in method:
                    operation["security"] = [{security_name: method["scopes"]}]
                name = route_name(entry["endpoint"]) if entry["source"] == "native" else None
                form = _FORMS.get(name) if method["method"] == "POST" and name else None
                if form is not None:
                    operation["requestBody"] = {
                        "required": True,
                        "content": {FORM_TYPE: {"schema": copy.deepcopy(form)}},
                    }
                elif method["method"] in ("POST", "PUT", "PATCH"):
                    # a native route's state change needs its body (JSON, or the page's form
                    # with its token: a bare POST is 415, docs/decisions.md "Native routes")
                    operation["requestBody"] = {
                        "required": entry["type"] == "fw",
                        "content": {
                            "application/json": {"schema": {}},
                            FORM_TYPE: {"schema": {}},
                        },
                    }
                if name == AUTHORIZE_ROUTE_NAME:
                    # the page (200), or the redirect to the client: an error's, and the
                    # code's after the form
                    operation["responses"]["302"] = copy.deepcopy(_AUTHORIZE_REDIRECT)
                path_item[method["method"].lower()] = operation
                hints = hinted.get((full, method["method"]))
                if hints is not None:
                    own = dict(zip(_PARAM.findall(full), names, strict=True))
                    typed.append(Typed(operation, hints, own))
    add_schemas(doc, typed)
    return doc


async def openapi() -> dict[str, Any]:
    from fwrest import __version__

    ctx = current.get()
    service = ctx.port.token_service
    # an oAuth2 port's flows: the grants its metadata lists now (onAuthparams, NativeRoutes)
    grants = await service.grant_types() if service is not None else None
    return ctx.port.openapi(__version__, grants)
