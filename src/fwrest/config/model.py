"""Frozen, validated settings of one service: what the loader produces and the server reads."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwrest.config.fwdata import FwData
from fwrest.config.schema import default_int, default_str
from fwrest.config.tls import TlsOptions, server_tls_context
from fwrest.store.redis_target import RedisOptions

__all__ = [
    "CorsConfig",
    "EnvironmentConfig",
    "LocationConfig",
    "MonitorConfig",
    "RateLimitConfig",
    "ServerConfig",
    "ServiceConfig",
    "ThreadPoolConfig",
    "Tunables",
]


@dataclass(frozen=True, slots=True)
class Tunables:
    """The ``[GENERAL]`` settings that can change at run time (SPEC 5.1)."""

    rest_log_level: int = default_int("GENERAL", "rest_log_level")
    rest_error_full: int = default_int("GENERAL", "rest_error_full")
    rest_trace_time: int = default_int("GENERAL", "rest_trace_time")
    rest_reload_time: int = default_int("GENERAL", "rest_reload_time")
    rest_log_stringsize: int = default_int("GENERAL", "rest_log_stringsize")


@dataclass(frozen=True, slots=True)
class EnvironmentConfig:
    """An environment section: the modules its ``Repository`` names (empty: the program's own)."""

    name: str
    repository: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ThreadPoolConfig:
    name: str
    environment: EnvironmentConfig
    min_threads: int = default_int("thread pool", "min_threads")
    max_threads: int = default_int("thread pool", "max_threads")
    min_free_threads: int = default_int("thread pool", "min_free_threads")
    growth_factor: int = default_int("thread pool", "growth_factor")
    inactive_timeout_ms: int = default_int("thread pool", "inactive_timeout_ms")
    accept_timeout_ms: int = default_int("thread pool", "accept_timeout_ms")
    active_timeout_ms: int = default_int("thread pool", "active_timeout_ms")  # 0: no limit
    # the application hooks (SPEC 11.1): function names, resolved at start (server/hooks.py)
    on_start: str | None = None
    on_stop: str | None = None
    on_send: str | None = None
    on_error: str | None = None


@dataclass(frozen=True, slots=True)
class CorsConfig:
    """A CORS section (SPEC 10.1), validated: origins in canonical form or ``*``."""

    name: str
    allow_origins: tuple[str, ...]
    allow_methods: tuple[str, ...] = ()  # empty: the route's methods
    allow_headers: tuple[str, ...] = ("Authorization", "Content-Type")
    expose_headers: tuple[str, ...] = ()
    allow_credentials: bool = False
    max_age: int = 600


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """A RateLimit section (SPEC 13.7), validated."""

    name: str
    limit: int = default_int("RateLimit", "limit")
    window_s: int = default_int("RateLimit", "window_s")
    # "user" (the authenticated user, else the address) or "address"
    key: str = default_str("RateLimit", "key")
    fail_open: bool = True


@dataclass(frozen=True, slots=True)
class LocationConfig:
    name: str
    path: str  # "/" or "/prefix" without a trailing slash
    thread_pool: ThreadPoolConfig
    cors: CorsConfig | None = None
    hsts: str | None = None  # Strict-Transport-Security, TLS ports only
    x_frame_options: str | None = None  # DENY or SAMEORIGIN
    content_security_policy: str | None = None
    root_path: Path | None = None  # static files (SPEC 10.3), an existing folder
    default_page: str | None = None  # the file that answers a folder's path
    rate_limit: RateLimitConfig | None = None  # SPEC 13.7


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """A server section: one port, its locations, TLS, limits and the framework's ``FwData``."""

    name: str
    host: str
    port: int
    locations: tuple[LocationConfig, ...]
    ssl_certificate: Path | None = None
    ssl_certificate_key: Path | None = None
    tls: TlsOptions = field(default_factory=TlsOptions)  # SPEC 11.2, on a TLS port
    fw_data: FwData = field(default_factory=FwData)
    user_data: Any = None
    load_urns: dict[str, Any] = field(default_factory=dict)
    max_header_size: int = default_int("server", "max_header_size")
    max_headers: int = default_int("server", "max_headers")
    max_body_size: int = default_int("server", "max_body_size")
    header_timeout_ms: int = default_int("server", "header_timeout_ms")
    body_timeout_ms: int = default_int("server", "body_timeout_ms")
    keep_alive_timeout_ms: int = default_int("server", "keep_alive_timeout_ms")
    tls_handshake_timeout_ms: int = default_int("server", "tls_handshake_timeout_ms")
    trusted_proxies: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # canonical (fwrest.config.hosts)
    compression: tuple[str, ...] = ()  # "gzip", "br" (SPEC 10.4); empty: off
    compression_min_size: int = default_int("server", "compression_min_size")
    charset: str = "UTF-8"  # UTF-8, CP1252 or ISO-8859-1 (SPEC 10.6)
    # extension (".xlsx", lower case) -> media type, from the ContentTypes section (SPEC 10.3)
    content_types: tuple[tuple[str, str], ...] = ()
    on_select: str | None = None  # OnSelect's function name (SPEC 11.1), resolved at start

    @property
    def is_tls(self) -> bool:
        return self.ssl_certificate is not None

    @property
    def scheme(self) -> str:
        return "https" if self.is_tls else "http"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A server TLS context from the configured files and options (validated at load)."""
        if self.ssl_certificate is None or self.ssl_certificate_key is None:
            return None
        return server_tls_context(self.ssl_certificate, self.ssl_certificate_key, self.tls)


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    enable: bool
    host: str = default_str("APP_MONITOR", "host")
    port: int = 0
    api_path: str = default_str("APP_MONITOR", "api_path")
    ssl_certificate: Path | None = None
    ssl_certificate_key: Path | None = None
    tls: TlsOptions = field(default_factory=TlsOptions)
    fw_data: FwData = field(default_factory=FwData)


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """One whole service, as ``fwrest check`` validated it."""

    source: Path | None
    base_dir: Path
    servers: tuple[ServerConfig, ...]
    environments: tuple[EnvironmentConfig, ...]
    tunables: Tunables
    tunables_in_file: dict[str, int]
    monitor: MonitorConfig | None = None
    enable: bool = True
    state_store: str = default_str("HTTPSERVER", "state_store")
    redis: RedisOptions = field(default_factory=RedisOptions)  # SPEC 15: StateStoreCA, ...
    data_path: Path = Path(default_str("HTTPSERVER", "data_path"))
    log_file: Path | None = None
    log_format: str = default_str("HTTPSERVER", "log_format")  # text or json (SPEC 13.4)
    tracing: str | None = None  # "otlp": spans exported with OpenTelemetry (SPEC 17.4)
    signing_key_file: Path | None = None
    graceful_timeout_ms: int = default_int("HTTPSERVER", "graceful_timeout_ms")
    worker_timeout_ms: int = default_int("HTTPSERVER", "worker_timeout_ms")
    warnings: tuple[str, ...] = ()
    # the files its values name that the load read (FwData=oauth2.json, ...): --reload watches
    files: tuple[Path, ...] = ()
