"""INI/JSON -> validated, frozen :class:`ServiceConfig`: the one entry point, which reads
(``reading``), converts (``convert``), types ``FwData`` (``fwdata``), resolves the sections
(``sections``; TLS: ``tls_check``), probes the file system (``probes``) and collects the warnings (``risky``).

``fwrest check`` and ``fwrest serve`` share this loader. Section names and keys are folded to
lower case once, at reading. Nothing here imports application code or binds a socket: names of
functions are resolved later, against the imported repository."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fwrest.config.convert import section_values
from fwrest.config.fwdata import parse_fw_data
from fwrest.config.model import (
    CorsConfig,
    EnvironmentConfig,
    LocationConfig,
    MonitorConfig,
    RateLimitConfig,
    ServerConfig,
    ServiceConfig,
    ThreadPoolConfig,
    Tunables,
)
from fwrest.config.probes import probe_writable
from fwrest.config.reading import RawConfig, RawSection, parse_json_text, read_source, spelled
from fwrest.config.risky import risky_settings
from fwrest.config.sections import (
    allowed_hosts,
    charset,
    check_hsts,
    check_ports,
    compression,
    content_types,
    location_config,
    refuse_authorization,
    trusted_proxies,
)
from fwrest.config.store_keys import state_store_config
from fwrest.config.tls import ClientCert
from fwrest.config.tls_check import tls_options

__all__ = ["load_config", "parse_json_text", "probe_writable", "read_general"]


def load_config(source: str | Path | Mapping[str, Any]) -> ServiceConfig:
    """Read and validate a whole service configuration.

    Args:
        source: an ``.ini`` or ``.json`` file, or the same structure as a dict.

    Raises:
        ConfigError: the first problem found, naming section, key, problem and fix.
    """
    raw = read_source(source)
    http = raw.section("HTTPSERVER")
    refuse_authorization(raw, http, "HTTPSERVER section", "each server section")
    top = section_values(raw, http, "HTTPSERVER")
    general_sec = raw.sections.get("general")
    in_file: dict[str, int] = {}
    if general_sec is not None:
        in_file = {
            k: v
            for k, v in section_values(raw, general_sec, "GENERAL").items()
            if k.lower() in general_sec.values
        }
    tunables = Tunables(**in_file)

    envs: dict[str, EnvironmentConfig] = {}
    pools: dict[str, ThreadPoolConfig] = {}
    locations: dict[str, LocationConfig] = {}
    cors: dict[str, CorsConfig] = {}
    limits: dict[str, RateLimitConfig] = {}
    servers: list[ServerConfig] = []
    servers_written = http.values["servers"][0]
    if not top["servers"]:
        raise raw.error(
            "lists no server.",
            http.name,
            servers_written,
            "name at least one server section, e.g. Servers=HTTP_REST.",
        )
    seen_servers: set[str] = set()
    for server_name in top["servers"]:
        sec = raw.section(server_name, (http.name, servers_written))
        if sec.name.lower() in seen_servers:
            raise raw.error(
                f"names [{sec.name}] twice.", http.name, servers_written, "list each server once."
            )
        seen_servers.add(sec.name.lower())
        values = section_values(raw, sec, "server")
        values["tls"] = tls_options(raw, sec, values)
        values["trusted_proxies"] = trusted_proxies(raw, sec, values.get("trusted_proxies"))
        values["allowed_hosts"] = allowed_hosts(raw, sec, values.get("allowed_hosts"))
        values["compression"] = compression(raw, sec, values.get("compression"))
        values["charset"] = charset(raw, sec, values["charset"])
        values["content_types"] = content_types(raw, sec, values["content_types"])
        fw_data = parse_fw_data(
            raw,
            sec,
            values.pop("fw_data"),
            section=sec.name,
            is_tls=values["ssl_certificate"] is not None,
        )
        auth_data = fw_data.authorization
        if (
            auth_data is not None
            and auth_data.bound_tokens == "mtls"
            and values["tls"].client_cert is ClientCert.NONE
        ):
            # SPEC 16.2: a binding to the client's certificate needs the port to ask for one
            raise raw.error(
                'FwData Authorization "boundTokens": "mtls" binds tokens to the client '
                "certificate, and this server asks clients for none.",
                sec.name,
                "FwData",
                "add SslClientCert=2 (or 1) and SslClientCA to this server.",
            )
        load_urns = values.pop("load_urns")
        if load_urns is None:  # absent or empty: nothing mapped, as for FwData and UserData
            load_urns = {}
        elif not isinstance(load_urns, dict):
            # an empty list too: `[]` is no mapping, and silently mapping nothing would hide
            # the mistake (SPEC 2: LoadURNs is an object, or a string naming a JSON file)
            got = "a JSON array" if isinstance(load_urns, list) else spelled(load_urns)
            raise raw.error(
                f"must be a JSON object of paths, got {got}.",
                sec.name,
                sec.values["loadurns"][0],
                'write {"/path/:p": {"GET": {"Function": "module.function"}}}, or leave it out.',
            )
        locs: list[LocationConfig] = []
        prefixes: dict[str, str] = {}
        loc_written = sec.values["locations"][0]
        for loc_name in values.pop("locations"):
            loc = location_config(
                raw, loc_name, (sec.name, loc_written), locations, pools, envs, cors, limits
            )
            if loc.path in prefixes:
                raise raw.error(
                    f"the locations [{prefixes[loc.path]}] and [{loc.name}] have the same "
                    f"Path {loc.path}.",
                    sec.name,
                    loc_written,
                    "give each location of one server its own Path.",
                )
            prefixes[loc.path] = loc.name
            locs.append(loc)
        if not locs:
            raise raw.error(
                "lists no location.", sec.name, loc_written, "name at least one location section."
            )
        check_hsts(raw, sec, values["ssl_certificate"] is not None, locs)
        servers.append(
            ServerConfig(
                name=sec.name,
                locations=tuple(locs),
                fw_data=fw_data,
                load_urns=load_urns,
                **values,
            )
        )
    check_ports(raw, servers)

    monitor = None
    mon_sec = raw.sections.get("app_monitor")
    if mon_sec is not None:
        mvalues = section_values(raw, mon_sec, "APP_MONITOR")
        if mvalues["enable"]:
            if mvalues["port"] is None:
                raise raw.error(
                    "the monitor is enabled but has no Port.",
                    mon_sec.name,
                    "Port",
                    "add Port=... (a port no server uses).",
                )
            mvalues["tls"] = tls_options(raw, mon_sec, mvalues)
            mvalues["fw_data"] = parse_fw_data(
                raw,
                mon_sec,
                mvalues["fw_data"],
                section="APP_MONITOR",
                is_tls=mvalues["ssl_certificate"] is not None,
                monitor=True,
            )
            monitor = MonitorConfig(**mvalues)
            for server in servers:
                if server.port == monitor.port and monitor.port != 0:
                    raise raw.error(
                        f"Port {monitor.port} is also the port of [{server.name}].",
                        mon_sec.name,
                        "Port",
                        "give the monitor a port of its own.",
                    )
    if not top["enable"] and monitor is None:
        raise raw.error(
            "Enable=0 and no monitor: there is nothing to serve.",
            http.name,
            "Enable",
            "set Enable=1.",
        )
    store, redis_options = state_store_config(raw, http, top)
    log_format = top["log_format"].strip().lower()
    if log_format not in ("text", "json"):
        raise raw.error(
            f"{top['log_format']!r} is not a log format.",
            http.name,
            "LogFormat",
            "write LogFormat=text (the default) or LogFormat=json.",
        )
    tracing = tracing_config(raw, http, top["tracing"])
    # what a start writes: found out here, so that `fwrest check` says so and no worker dies
    if top["log_file"] is not None:
        why = probe_writable(top["log_file"], directory=False)
        if why:
            raise raw.error(
                f"the log file {top['log_file']} cannot be written: {why}.",
                http.name,
                "LogFile",
                "give a file in a folder the service may write to (relative to the config file).",
            )
    if store == "sqlite":
        why = probe_writable(top["data_path"], directory=True)
        if why:
            raise raw.error(
                f"the folder {top['data_path']} (the sqlite state store) cannot be written: {why}.",
                http.name,
                "DataPath",
                "give a folder the service may create and write to, or another StateStore.",
            )
    return ServiceConfig(
        source=Path(raw.source).resolve() if raw.source else None,
        base_dir=raw.base_dir,
        servers=tuple(servers) if top["enable"] else (),
        environments=tuple(envs.values()),
        tunables=tunables,
        tunables_in_file=in_file,
        monitor=monitor,
        enable=top["enable"],
        state_store=store,
        redis=redis_options,
        data_path=top["data_path"],
        log_file=top["log_file"],
        log_format=log_format,
        tracing=tracing,
        signing_key_file=top["signing_key_file"],
        graceful_timeout_ms=top["graceful_timeout_ms"],
        worker_timeout_ms=top["worker_timeout_ms"],
        warnings=tuple(risky_settings(servers, monitor, tunables)),
        files=tuple(dict.fromkeys(path.resolve() for path in raw.files)),
    )


TRACING = ("otlp",)  # the values of [HTTPSERVER] Tracing (SPEC 17.4); unset: off
# what Tracing=otlp imports (the extra fwrest[otel]), whatever the protocol
_OTEL_MODULES = ("opentelemetry.sdk.trace",)
# the OTLP protocols spans are exported with (the SDK's values of the variables below): the
# exporter's package, and the extra that installs it
OTLP_PROTOCOLS = {
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http", "otel"),  # the default
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc", "otel-grpc"),
}
# the SDK's order: the traces' own variable, then the one of every signal
OTLP_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def otlp_protocol(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """The OTLP protocol of the spans' exporter as the SDK reads it: (the variable that
    sets it, its value), ``("", "http/protobuf")`` when neither does (unset or empty).

    >>> otlp_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": " grpc "})
    ('OTEL_EXPORTER_OTLP_PROTOCOL', 'grpc')
    >>> otlp_protocol({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
    ...                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    ('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'grpc')
    >>> otlp_protocol({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": ""})
    ('', 'http/protobuf')
    """
    for name in OTLP_PROTOCOL_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return "", "http/protobuf"


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, looked up without importing it: the packages
    around it that the look-up imports (``opentelemetry``'s namespace packages) leave
    ``sys.modules`` again, so that a worker forked after a check without ``Tracing`` (a
    reload that removed it) holds nothing of OpenTelemetry (SPEC 17.4)."""
    top = module.partition(".")[0]
    before = {name for name in sys.modules if name == top or name.startswith(top + ".")}
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False
    finally:
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            if name not in before:
                del sys.modules[name]


def tracing_config(raw: RawConfig, http: RawSection, value: str | None) -> str | None:
    """``[HTTPSERVER] Tracing``: None (off) or ``otlp``, whose packages must be installed,
    the exporter's of the protocol the ``OTEL_EXPORTER_OTLP_*PROTOCOL`` variables name (so
    that ``fwrest check`` says so, and no worker dies of it). Looked up, not imported."""
    if value is None or not value.strip():
        return None
    tracing = value.strip().lower()
    if tracing not in TRACING:
        raise raw.error(
            f"{value!r} is not a tracing exporter (allowed: {', '.join(TRACING)}).",
            http.name,
            "Tracing",
            "write Tracing=otlp, or leave Tracing out (no tracing).",
        )
    variable, protocol = otlp_protocol()
    if protocol not in OTLP_PROTOCOLS:
        why = (
            "; OpenTelemetry's Python SDK has no exporter for it" if protocol == "http/json" else ""
        )
        raise raw.error(
            f"the environment variable {variable}={protocol} names no OTLP protocol fwrest "
            f"exports spans with (supported: {', '.join(OTLP_PROTOCOLS)}){why}.",
            http.name,
            "Tracing",
            f"set {variable} to http/protobuf (the default) or grpc, or unset it.",
        )
    if protocol == "http/protobuf":
        _check_http_endpoint(raw, http)
    exporter, extra = OTLP_PROTOCOLS[protocol]
    for module in (*_OTEL_MODULES, exporter):
        if _installed(module):
            continue
        if module == exporter and variable:
            raise raw.error(
                f"the environment variable {variable}={protocol} needs OpenTelemetry's OTLP "
                f"exporter for {protocol}, which is not installed ({module} is missing).",
                http.name,
                "Tracing",
                f"pip install fwrest[{extra}], or unset {variable} (OTLP over HTTP), or "
                "leave Tracing out.",
            )
        raise raw.error(
            f"Tracing=otlp needs the OpenTelemetry SDK and its OTLP exporter, which are "
            f"not installed ({module} is missing).",
            http.name,
            "Tracing",
            f"pip install fwrest[{extra}], or leave Tracing out.",
        )
    return tracing


# the SDK's order: the traces' own endpoint (used as it is), then the one of every signal
OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def _check_http_endpoint(raw: RawConfig, http: RawSection) -> None:
    """The OTLP/HTTP collector's URL, when a variable names one, is an http(s) URL with a
    host: the SDK takes anything, and every export then failed at run time ("No connection
    adapters"). Its value is not repeated (it may hold credentials)."""
    for name in OTLP_ENDPOINT_VARIABLES:
        endpoint = os.environ.get(name, "").strip()
        if not endpoint:
            continue
        try:
            parts = urlsplit(endpoint)
            good = parts.scheme in ("http", "https") and bool(parts.hostname)
            _ = parts.port  # a port that is no number raises
        except ValueError:
            good = False
        if not good:
            raise raw.error(
                f"the environment variable {name} is not an http:// or https:// URL with a "
                "host, where OTLP over HTTP sends spans.",
                http.name,
                "Tracing",
                f"set {name} to the collector's URL (http://collector:4318), or unset it "
                "(http://localhost:4318).",
            )
        return


def read_general(path: Path) -> dict[str, int]:
    """Re-read only ``[GENERAL]`` of a config file (``rest_reload_time``); raises ConfigError."""
    raw = read_source(path)
    sec = raw.sections.get("general")
    if sec is None:
        return {}
    return {k: v for k, v in section_values(raw, sec, "GENERAL").items() if k.lower() in sec.values}
