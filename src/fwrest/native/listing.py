"""``/fw/rest/list/service`` and ``/fw/rest/openapi.json`` (also ``fwrest routes/openapi``)."""

from __future__ import annotations

import re
from typing import Any

from fwrest.context.request import current
from fwrest.native.catalog import NativeOptions, route_name

__all__ = ["build_openapi", "list_service", "openapi", "service_listing"]

_PARAM = re.compile(r":([A-Za-z_][A-Za-z0-9_]*)")


def _is_public(port: Any, full_path: str, rel: str, name: str | None) -> bool:
    options: NativeOptions = port.native
    if name is not None and (name in options.public or name == "oauth2/token"):
        return True
    settings = port.auth_settings
    if settings is None:
        return True
    if settings.scheme == "oAuth2" and settings.nocheck:
        from fwrest.auth.oauth2 import NoCheckPaths

        nocheck = NoCheckPaths(settings.nocheck)
        return nocheck.matches(rel) or nocheck.matches(full_path)
    return False


def service_listing(port: Any) -> list[dict[str, Any]]:
    """One entry per route path of a port (a :class:`PortPlan`), sorted (SPEC 5)."""
    entries: dict[str, dict[str, Any]] = {}
    hidden = port.native.hide
    for loc in port.locations:
        for method, pattern, handler in loc.router.routes():
            ep = handler.endpoint
            name = route_name(pattern) if ep.source == "native" else None
            if name is not None and name in hidden:
                continue
            full = loc.full_path(pattern)
            entry = entries.get(pattern)
            if entry is None:
                entry = entries[pattern] = {
                    "endpoint": pattern,
                    "type": "fw" if ep.source == "native" else "default",
                    "doc": "false",
                    "source": ep.source,
                    "paths": [],
                    "public": _is_public(port, full, pattern, name),
                    "methods": [],
                }
            if full not in entry["paths"]:
                entry["paths"].append(full)
            if not any(m["method"] == method for m in entry["methods"]):
                entry["methods"].append(
                    {"method": method, "description": ep.description, "function": ep.function}
                )
            if ep.description:
                entry["doc"] = "true"
    out = sorted(entries.values(), key=lambda e: e["endpoint"])
    for entry in out:
        entry["paths"].sort()
        entry["methods"].sort(key=lambda m: m["method"])
    return out


async def list_service() -> list[dict[str, Any]]:
    ctx = current.get()
    return service_listing(ctx.port.plan)


def build_openapi(port: Any, version: str) -> dict[str, Any]:
    """An OpenAPI 3.1 document of a port's routes and its security scheme."""
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
        token_url = port.locations[0].full_path("/fw/oauth2/token")
        doc["components"] = {
            "securitySchemes": {
                security_name: {
                    "type": "oauth2",
                    "flows": {
                        "password": {
                            "tokenUrl": token_url,
                            "refreshUrl": token_url,
                            "scopes": {"default": "the only scope"},
                        }
                    },
                }
            }
        }
        doc["security"] = [{security_name: ["default"]}]
    used_ids: set[str] = set()
    for entry in service_listing(port):
        for full in entry["paths"]:
            path_item: dict[str, Any] = doc["paths"].setdefault(_PARAM.sub(r"{\1}", full), {})
            params = [
                {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                for n in _PARAM.findall(full)
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
                if method["method"] in ("POST", "PUT", "PATCH"):
                    operation["requestBody"] = {
                        "required": False,
                        "content": {
                            "application/json": {"schema": {}},
                            "application/x-www-form-urlencoded": {"schema": {}},
                        },
                    }
                path_item[method["method"].lower()] = operation
    return doc


async def openapi() -> dict[str, Any]:
    from fwrest import __version__

    ctx = current.get()
    return build_openapi(ctx.port.plan, __version__)
