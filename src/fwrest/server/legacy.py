"""``fwrest.rest.wsRestfulStart(jo, path)``: the original product's old start (SPEC 6)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Mapping
from typing import Any

from fwrest import log
from fwrest.config import load_config
from fwrest.errors import ConfigError
from fwrest.server.service import Service, start

__all__ = ["ws_restful_start", "ws_restful_stop"]

_LOCATION = "FW_LEGACY_LOCATION"
_lock = threading.Lock()
_services: list[Service] = []


def _with_location(jo: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A copy of ``jo`` where every server also serves its endpoints under ``path``."""
    data = {str(k): copy.deepcopy(v) for k, v in jo.items()}
    folded = {k.lower(): k for k in data}
    http = data.get(folded.get("httpserver", ""))
    if not isinstance(http, dict):
        raise ConfigError("the infrastructure JSON has no HTTPSERVER object.")
    servers = next((v for k, v in http.items() if k.lower() == "servers"), None)
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",") if s.strip()]
    if not isinstance(servers, list) or not servers:
        raise ConfigError("HTTPSERVER lists no Servers.", section="HTTPSERVER", key="Servers")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigError(f"the extra path {path!r} must start with /.")
    # One extra location per thread pool: each server serves the extra path on the pool of
    # its own first location (so on its own environment), as its other requests.
    extra: dict[str, str] = {}  # pool -> location section
    for name in servers:
        server = data.get(folded.get(str(name).lower(), ""))
        if not isinstance(server, dict):
            raise ConfigError(f"the server {name!r} is not in the infrastructure JSON.")
        key = next((k for k in server if k.lower() == "locations"), None)
        if key is None:
            continue  # serves nothing; the loader reports the missing key
        locations = server[key]
        if isinstance(locations, str):
            locations = [s.strip() for s in locations.split(",") if s.strip()]
        if not isinstance(locations, list) or not all(isinstance(x, str) for x in locations):
            raise ConfigError(
                "Locations must name location sections (comma-separated, or a list).",
                section=str(name),
                key="Locations",
            )
        if not locations:
            continue
        first = data.get(folded.get(locations[0].lower(), ""), {})
        if not isinstance(first, dict):
            raise ConfigError(
                f"the location [{locations[0]}] is not an object of keys.",
                section=locations[0],
            )
        pool = next((v for k, v in first.items() if k.lower() == "threadpool"), None)
        if not isinstance(pool, str):
            continue  # the loader reports the location's missing or bad ThreadPool
        section = extra.setdefault(pool.lower(), f"{_LOCATION}_{len(extra) + 1}")
        data[section] = {"Path": path, "ThreadPool": pool}
        server[key] = [*locations, section]
    if not extra:
        load_config(data)  # reports what is wrong with the servers or locations, if it can
        raise ConfigError("no server location names a ThreadPool to serve the extra path.")
    return data


def ws_restful_start(jo: Mapping[str, Any] | str | bytes, path: str) -> int:
    """Start the service of ``jo`` with one extra location ``path`` on every server.

    ``jo`` is the infrastructure JSON: a dict, or its JSON text (``str`` or ``bytes``). The
    service runs on a background thread of this process (as :func:`fwrest.start`); this
    returns 0 once it serves, 1 for a bad infrastructure JSON, 2 for a start failure (a port
    in use); the message is logged. :func:`ws_restful_stop` stops it, and so does the
    program's end.
    """
    try:
        data = json.loads(jo) if isinstance(jo, str | bytes | bytearray) else jo
        if not isinstance(data, Mapping):
            raise ConfigError("the infrastructure JSON must be an object of sections.")
        service = start(_with_location(data, path))
    except json.JSONDecodeError as exc:
        log.server_log.error("wsRestfulStart: the infrastructure JSON is invalid: %s", exc)
        return 1
    except ConfigError as exc:
        log.server_log.error("wsRestfulStart: %s", exc)
        started = ("cannot be bound", "did not become ready")  # it failed as it started
        return 2 if any(text in str(exc) for text in started) else 1
    except Exception as exc:  # the old API answers with a code, never an exception (SPEC 6)
        log.server_log.error("wsRestfulStart: the service did not start: %r", exc)
        return 2
    with _lock:
        _services.append(service)
    log.server_log.info("wsRestfulStart: serving %s", ", ".join(service.urls))
    return 0


def ws_restful_stop() -> int:
    """Stop every service ``wsRestfulStart`` started; returns 0."""
    with _lock:
        services = list(_services)
        _services.clear()
    for service in services:
        service.stop()
    return 0
