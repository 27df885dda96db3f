"""Resolving the sections a service names into typed configs: environments, thread pools,
locations, trusted proxies, ports used twice."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

from fwrest.config.convert import section_values
from fwrest.config.cors import cors_config
from fwrest.config.hosts import canonical_host
from fwrest.config.model import (
    CorsConfig,
    EnvironmentConfig,
    LocationConfig,
    RateLimitConfig,
    ServerConfig,
    ThreadPoolConfig,
)
from fwrest.config.ratelimit import rate_limit_config
from fwrest.config.reading import RawConfig, RawSection

__all__ = [
    "allowed_hosts",
    "charset",
    "check_hsts",
    "check_ports",
    "compression",
    "content_types",
    "environment_config",
    "location_config",
    "refuse_authorization",
    "thread_pool_config",
    "trusted_proxies",
]


def refuse_authorization(raw: RawConfig, sec: RawSection, kind: str, belongs: str) -> None:
    for folded, (written, _value) in sec.values.items():
        if folded in ("fwdata", "authorization"):
            raise raw.error(
                f"authorization is configured per port, not per {kind}.",
                sec.name,
                written,
                f"move it to FwData of the server section ({belongs}).",
            )


def environment_config(
    raw: RawConfig, name: str, by: tuple[str, str], cache: dict[str, EnvironmentConfig]
) -> EnvironmentConfig:
    sec = raw.section(name, by)
    folded = sec.name.lower()
    if folded not in cache:
        refuse_authorization(raw, sec, "environment", "the server that serves it")
        values = section_values(raw, sec, "environment")
        cache[folded] = EnvironmentConfig(sec.name, values["repository"] or ())
    return cache[folded]


def thread_pool_config(
    raw: RawConfig,
    name: str,
    by: tuple[str, str],
    cache: dict[str, ThreadPoolConfig],
    envs: dict[str, EnvironmentConfig],
) -> ThreadPoolConfig:
    sec = raw.section(name, by)
    folded = sec.name.lower()
    if folded in cache:
        return cache[folded]
    refuse_authorization(raw, sec, "thread pool", "the server whose locations use it")
    values = section_values(raw, sec, "thread pool")
    env_name = values.pop("environment")
    if env_name:
        written = sec.values["environment"][0]
        env = environment_config(raw, env_name, (sec.name, written), envs)
    else:
        env = envs.setdefault("", EnvironmentConfig("", ()))
    if values["min_threads"] > values["max_threads"]:
        raise raw.error(
            f"MinThreads={values['min_threads']} is above MaxThreads={values['max_threads']}.",
            sec.name,
            "MinThreads",
            "make MinThreads at most MaxThreads.",
        )
    pool = ThreadPoolConfig(name=sec.name, environment=env, **values)
    cache[folded] = pool
    return pool


def location_config(
    raw: RawConfig,
    name: str,
    by: tuple[str, str],
    cache: dict[str, LocationConfig],
    pools: dict[str, ThreadPoolConfig],
    envs: dict[str, EnvironmentConfig],
    cors: dict[str, CorsConfig],
    limits: dict[str, RateLimitConfig],
) -> LocationConfig:
    sec = raw.section(name, by)
    folded = sec.name.lower()
    if folded in cache:
        return cache[folded]
    refuse_authorization(raw, sec, "location", "the server whose Locations list it")
    values = section_values(raw, sec, "location")
    written = sec.values["threadpool"][0]
    pool = thread_pool_config(raw, values["thread_pool"], (sec.name, written), pools, envs)
    policy = None
    if values["cors"]:
        by_key = (sec.name, sec.values["cors"][0])
        policy = cors_config(raw, values["cors"], by_key, cors)
    limit = None
    if values["rate_limit"]:
        by_key = (sec.name, sec.values["ratelimit"][0])
        limit = rate_limit_config(raw, values["rate_limit"], by_key, limits)
    headers = _security_headers(raw, sec, values)
    root, page = _static_files(raw, sec, values)
    loc = LocationConfig(sec.name, values["path"], pool, policy, *headers, root, page, limit)
    cache[folded] = loc
    return loc


def _security_headers(
    raw: RawConfig, sec: RawSection, values: dict[str, Any]
) -> tuple[str | None, str | None, str | None]:
    """A location's HSTS, XFrameOptions and ContentSecurityPolicy values (SPEC 10.2)."""
    out: list[str | None] = []
    for attr, folded in (
        ("hsts", "hsts"),
        ("x_frame_options", "xframeoptions"),
        ("content_security_policy", "contentsecuritypolicy"),
    ):
        value = values[attr]
        if value is None or not value.strip():
            out.append(None)
            continue
        value = value.strip()
        written = sec.values[folded][0]
        if any(ord(c) < 32 or ord(c) > 126 for c in value):
            raise raw.error(
                "holds a control or non-ASCII character, which a header value cannot carry.",
                sec.name,
                written,
                "write the header's value on one line, in ASCII.",
            )
        if attr == "x_frame_options":
            value = value.upper()
            if value not in ("DENY", "SAMEORIGIN"):
                raise raw.error(
                    f"must be DENY or SAMEORIGIN, got {values[attr]!r}.",
                    sec.name,
                    written,
                    "write XFrameOptions=DENY (or SAMEORIGIN to allow frames of the same site).",
                )
        if attr == "hsts" and not re.match(r"(?i)max-age=\d+(\s*;|\s*$)", value):
            raise raw.error(
                f"must start with max-age=SECONDS, got {value!r}.",
                sec.name,
                written,
                "write HSTS=max-age=31536000; includeSubDomains.",
            )
        out.append(value)
    return out[0], out[1], out[2]


def _static_files(
    raw: RawConfig, sec: RawSection, values: dict[str, Any]
) -> tuple[Path | None, str | None]:
    """A location's ``RootPath`` (an existing folder) and ``DefaultPage`` (a file name)."""
    root: Path | None = values["root_path"]
    page: str | None = values["default_page"]
    if root is not None and not root.is_dir():
        raise raw.error(
            f"the folder {root} does not exist (or is not a folder).",
            sec.name,
            sec.values["rootpath"][0],
            "give the folder of the files to serve, relative to the config file.",
        )
    if page is not None:
        page = page.strip()
        if not page or "/" in page or "\\" in page or page.startswith("."):
            raise raw.error(
                f"must be a file name, got {values['default_page']!r}.",
                sec.name,
                sec.values["defaultpage"][0],
                "write the name of a file in each folder, e.g. DefaultPage=index.html.",
            )
        if root is None:
            raise raw.error(
                "a DefaultPage needs a RootPath.",
                sec.name,
                sec.values["defaultpage"][0],
                "give the location RootPath=FOLDER, or remove DefaultPage.",
            )
    return root, page


def content_types(
    raw: RawConfig, server: RawSection, name: str | None
) -> tuple[tuple[str, str], ...]:
    """The ``ContentTypes`` section a server names: extension -> media type (SPEC 10.3)."""
    if not name:
        return ()
    sec = raw.section(name, (server.name, server.values["contenttypes"][0]))
    out: dict[str, str] = {}
    for folded, (written, value) in sec.values.items():
        media = str(value).strip()
        main, slash, sub = media.partition("/")
        if not slash or not main or not sub or any(c in media for c in " \t\r\n,;"):
            raise raw.error(
                f"{media!r} is not a media type (type/subtype).",
                sec.name,
                written,
                "write the extension and its media type, e.g. .xlsx=application/"
                "vnd.openxmlformats-officedocument.spreadsheetml.sheet.",
            )
        out["." + folded.lstrip(".")] = media
    return tuple(out.items())


def check_hsts(raw: RawConfig, server: RawSection, tls: bool, locs: list[LocationConfig]) -> None:
    """HSTS is sent over TLS only: on a plain HTTP port it is a start error (SPEC 10.2)."""
    if tls:
        return
    for loc in locs:
        if loc.hsts is not None:
            raise raw.error(
                f"the location [{loc.name}] sets HSTS, which only a TLS port can send.",
                server.name,
                "Locations",
                f"give [{server.name}] SslCertificate and SslCertificateKey, or remove HSTS "
                f"from [{loc.name}].",
            )


def trusted_proxies(
    raw: RawConfig, sec: RawSection, value: tuple[str, ...] | None
) -> tuple[str, ...]:
    out = []
    for item in value or ():
        try:
            out.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            written = sec.values.get("trustedproxies", ("TrustedProxies", None))[0]
            raise raw.error(
                f"{item!r} is not an IP address or network.",
                sec.name,
                written,
                "list the load balancers' addresses, e.g. 10.0.0.5, 10.0.1.0/24.",
            ) from None
    return tuple(out)


def check_ports(raw: RawConfig, servers: list[ServerConfig]) -> None:
    seen: dict[int, str] = {}
    for server in servers:
        if server.port == 0:
            continue
        if server.port in seen:
            raise raw.error(
                f"Port {server.port} is also the port of [{seen[server.port]}].",
                server.name,
                "Port",
                "give each server its own port.",
            )
        seen[server.port] = server.name


def allowed_hosts(
    raw: RawConfig, sec: RawSection, value: tuple[str, ...] | None
) -> tuple[str, ...]:
    """``AllowedHosts``: host names or IP addresses, canonical; ``*.name`` for any name under
    ``name``. A scheme, port, path or user is a mistake (the Host header's port is ignored)."""
    out: list[str] = []
    for item in value or ():
        host = canonical_host(item, wildcard=True)
        if host is None:
            written = sec.values.get("allowedhosts", ("AllowedHosts", None))[0]
            raise raw.error(
                f"{item[:80]!r} is not a host name or IP address.",
                sec.name,
                written,
                "list the names clients reach this server by, without scheme, port or path, "
                "e.g. api.example.com, 10.0.0.5, *.example.com.",
            )
        if host not in out:
            out.append(host)
    return tuple(out)


def compression(raw: RawConfig, sec: RawSection, value: list[str] | None) -> tuple[str, ...]:
    """A server's ``Compression`` codings (SPEC 10.4): gzip and br, each once."""
    out: list[str] = []
    for item in value or ():
        coding = item.lower()
        if coding not in ("gzip", "br"):
            raise raw.error(
                f"{item!r} is not a coding fwrest compresses with (gzip, br).",
                sec.name,
                sec.values["compression"][0],
                "write Compression=gzip, or Compression=gzip, br.",
            )
        if coding not in out:
            out.append(coding)
    return tuple(out)


_CHARSETS = {"utf-8": "UTF-8", "cp1252": "CP1252", "iso-8859-1": "ISO-8859-1"}


def charset(raw: RawConfig, sec: RawSection, value: str) -> str:
    """A server's ``Charset`` (SPEC 10.6), as the SPEC writes it."""
    found = _CHARSETS.get(value.strip().lower())
    if found is None:
        raise raw.error(
            f"{value!r} is not a charset fwrest answers in (UTF-8, CP1252, ISO-8859-1).",
            sec.name,
            sec.values["charset"][0],
            "write Charset=UTF-8 (the default), CP1252 or ISO-8859-1.",
        )
    return found
