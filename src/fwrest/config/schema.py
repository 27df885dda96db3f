"""The one table of configuration keys: what the loader validates with, and what the key
reference in the user guide is generated from.

Each :class:`Key` names the key as the SPEC writes it, the section kind it belongs to, the
attribute it fills, its type, default, bounds and a one-line description.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KEYS", "SECTION_KINDS", "Key", "default_int", "default_str", "keys_of"]

SECTION_KINDS: tuple[str, ...] = ("GENERAL", "HTTPSERVER", "server", "location")
SECTION_KINDS += ("thread pool", "environment", "APP_MONITOR", "CORS", "RateLimit")


@dataclass(frozen=True, slots=True)
class Key:
    """One configuration key.

    ``kind`` is one of: ``int`` (whole number within ``low``..``high``), ``ms`` (milliseconds,
    a whole number >= 0), ``bool`` (0/1), ``str``, ``list`` (comma-separated or a JSON array),
    ``path`` (relative to the config file's folder), ``port`` (0..65535, 0 picks a free one),
    ``json`` (an object inline, or a file name), ``urlpath`` (starts with ``/``), ``secret``
    (text never shown in a message), ``seconds`` (a duration: whole seconds, with an optional
    unit ``s``, ``m`` or ``h``: ``60``, ``60s``, ``1m``; within ``low``..``high`` seconds).
    """

    section: str
    name: str
    attr: str
    kind: str
    default: object = None
    required: bool = False
    low: int | None = None
    high: int | None = None
    doc: str = ""

    @property
    def allowed(self) -> str:
        if self.low is not None and self.high is not None:
            return f"{self.low}-{self.high}"
        if self.low is not None:
            return f">= {self.low}"
        return ""


# The connection deadlines are at most a day: a larger value is a slip (a figure in
# microseconds, a stray digit) that would leave slow clients unbounded.
DEADLINE_MAX_MS = 86_400_000


def _limits(section: str) -> list[Key]:
    return [
        Key(
            section,
            "MaxHeaderSize",
            "max_header_size",
            "int",
            16384,
            low=1024,
            high=1048576,
            doc="bytes of request line and headers; more gets 431 and the connection closes",
        ),
        Key(
            section,
            "MaxHeaders",
            "max_headers",
            "int",
            100,
            low=1,
            high=10000,
            doc="header fields of a request (trailers not counted); more gets 431 and the "
            "connection closes",
        ),
        Key(
            section,
            "MaxBodySize",
            "max_body_size",
            "int",
            1048576,
            low=0,
            high=2**31,
            doc="bytes of request body; more gets 413 (checked before and while reading)",
        ),
        Key(
            section,
            "HeaderTimeout",
            "header_timeout_ms",
            "ms",
            10000,
            low=1,
            high=DEADLINE_MAX_MS,
            doc="ms to receive the request line and headers; then 408 and close",
        ),
        Key(
            section,
            "BodyTimeout",
            "body_timeout_ms",
            "ms",
            30000,
            low=1,
            high=DEADLINE_MAX_MS,
            doc="ms to receive the whole body; then 408 and close",
        ),
        Key(
            section,
            "KeepAliveTimeout",
            "keep_alive_timeout_ms",
            "ms",
            5000,
            low=1,
            high=DEADLINE_MAX_MS,
            doc="ms an idle keep-alive connection stays open",
        ),
        Key(
            section,
            "TlsHandshakeTimeout",
            "tls_handshake_timeout_ms",
            "ms",
            10000,
            low=1,
            high=DEADLINE_MAX_MS,
            doc="ms to complete the TLS handshake",
        ),
    ]


def _tls(section: str) -> list[Key]:
    """The TLS options of a port (SPEC 11.2), beside SslCertificate and SslCertificateKey."""
    return [
        Key(
            section,
            "SslCertificatePass",
            "ssl_certificate_pass",
            "secret",
            None,
            doc="pass phrase of an encrypted SslCertificateKey: env:NAME reads it from the "
            "environment variable NAME, file:PATH from the first line of a file (relative to "
            "the config file), anything else is the pass phrase itself; never logged",
        ),
        Key(
            section,
            "SslCertificateCA",
            "ssl_certificate_ca",
            "path",
            None,
            doc="PEM file of the intermediate CA certificates sent after SslCertificate (the "
            "chain); checked to issue it",
        ),
        Key(
            section,
            "SslMinVersion",
            "ssl_min_version",
            "str",
            "TLSv1.2",
            doc="oldest TLS version accepted: TLSv1.2 or TLSv1.3",
        ),
        Key(
            section,
            "SslCiphers",
            "ssl_ciphers",
            "str",
            None,
            doc="OpenSSL cipher string for TLS 1.2, e.g. ECDHE+AESGCM:ECDHE+CHACHA20 (TLS 1.3 "
            "keeps OpenSSL's suites); none: the AEAD ciphers of Mozilla's intermediate "
            "profile (ECDHE with AES-GCM or CHACHA20-POLY1305, no CBC; no DHE: fwrest loads no DH "
            "parameters)",
        ),
        Key(
            section,
            "SslClientCert",
            "ssl_client_cert",
            "int",
            0,
            low=0,
            high=2,
            doc="client certificates: 0 none asked for, 1 optional (one that is sent must "
            "chain to SslClientCA), 2 required (mutual TLS: a client without one fails the "
            "handshake)",
        ),
        Key(
            section,
            "SslClientCA",
            "ssl_client_ca",
            "path",
            None,
            doc="PEM file of the CAs client certificates must chain to (needed when "
            "SslClientCert is 1 or 2)",
        ),
    ]


KEYS: tuple[Key, ...] = (
    # [GENERAL]: the run-time tunables (SPEC 5.1)
    Key(
        "GENERAL",
        "rest_log_level",
        "rest_log_level",
        "int",
        3,
        low=0,
        high=5,
        doc="0 off, 1 error, 2 warning, 3 info (one line per request), 4 verbose, 5 debug",
    ),
    Key(
        "GENERAL",
        "rest_error_full",
        "rest_error_full",
        "int",
        0,
        low=0,
        high=1,
        doc="1 writes full tracebacks of handler errors to the log",
    ),
    Key(
        "GENERAL",
        "rest_trace_time",
        "rest_trace_time",
        "int",
        0,
        low=0,
        high=2,
        doc="0 off, 1 logs the total time per request, 2 the time per phase",
    ),
    Key(
        "GENERAL",
        "rest_reload_time",
        "rest_reload_time",
        "int",
        60,
        low=1,
        high=86400,
        doc="seconds between re-reads of the config file's [GENERAL]",
    ),
    Key(
        "GENERAL",
        "rest_log_stringsize",
        "rest_log_stringsize",
        "int",
        200,
        low=0,
        high=1048576,
        doc="characters of a body or header value written to the log (0: its length only)",
    ),
    # [HTTPSERVER]
    Key("HTTPSERVER", "Enable", "enable", "bool", True, doc="0 serves no REST port"),
    Key(
        "HTTPSERVER",
        "Servers",
        "servers",
        "list",
        required=True,
        doc="the server sections to start, one port each",
    ),
    Key(
        "HTTPSERVER",
        "StateStore",
        "state_store",
        "str",
        "sqlite",
        doc="sqlite (a file under DataPath; every worker of one host), memory (each worker "
        "process keeps its own refresh tokens, revocations, audit trail and rate-limit counts, "
        "lost at a reload or restart; tests and development: see deploy.md, Choosing a state "
        "store), or a Redis URL (every host): redis://host:port/db, "
        "rediss://host:port/db (TLS), unix:///path/redis.sock?db=N, or "
        "redis+sentinel://h1:26379,h2:26379/PRIMARY/db (Sentinel), or "
        "redis+cluster://h1:6379,h2:6379/db (a Redis or Valkey cluster; rediss+cluster:// with "
        "TLS; db is a key prefix); a password in the URL is never shown",
    ),
    Key(
        "HTTPSERVER",
        "StateStoreCA",
        "state_store_ca",
        "path",
        None,
        doc="with StateStore=rediss:// (or rediss+cluster://): PEM file of the CA certificates that Redis's "
        "certificate must chain to (default: the system's)",
    ),
    Key(
        "HTTPSERVER",
        "StateStoreCert",
        "state_store_cert",
        "path",
        None,
        doc="with StateStore=rediss:// (or rediss+cluster://): the client certificate (PEM) shown to a Redis that "
        "asks for one (tls-auth-clients); needs StateStoreKey",
    ),
    Key(
        "HTTPSERVER",
        "StateStoreKey",
        "state_store_key",
        "path",
        None,
        doc="the private key (PEM, unencrypted) of StateStoreCert",
    ),
    Key(
        "HTTPSERVER",
        "StateStorePassword",
        "state_store_password",
        "secret",
        None,
        doc="the Redis password (of the URL's user, or of the default user): env:NAME reads it "
        "from the environment variable NAME, file:PATH from the first line of a file, anything "
        "else is the password itself; a password in the URL wins; never logged nor shown",
    ),
    Key(
        "HTTPSERVER",
        "DataPath",
        "data_path",
        "path",
        ".fwrest",
        doc="folder for the service's state (relative to the config file)",
    ),
    Key(
        "HTTPSERVER",
        "LogFile",
        "log_file",
        "path",
        None,
        doc="also write the log to this file (relative to the config file)",
    ),
    Key(
        "HTTPSERVER",
        "LogFormat",
        "log_format",
        "str",
        "text",
        doc="text (one line per event) or json (one JSON object per line: SPEC 13.4)",
    ),
    Key(
        "HTTPSERVER",
        "Tracing",
        "tracing",
        "str",
        None,
        doc="otlp: a span per request, exported with the OpenTelemetry SDK to "
        "OTEL_EXPORTER_OTLP_ENDPOINT (SPEC 17.4; needs pip install fwrest[otel]; "
        "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: fwrest[otel-grpc]); unset: off",
    ),
    Key(
        "HTTPSERVER",
        "SigningKeyFile",
        "signing_key_file",
        "path",
        None,
        doc="file holding the HS256 token signing key (default signing.key under DataPath); "
        "the key set of EdDSA, ES256 and RS256 ports is keyset.json beside it",
    ),
    Key(
        "HTTPSERVER",
        "GracefulTimeout",
        "graceful_timeout_ms",
        "ms",
        30000,
        low=0,
        doc="ms a graceful stop waits for requests in flight; a second signal forces",
    ),
    Key(
        "HTTPSERVER",
        "WorkerTimeout",
        "worker_timeout_ms",
        "ms",
        30000,
        low=1000,
        doc="ms a worker's event loop may stay blocked before the worker is replaced",
    ),
    # server sections
    Key("server", "HostName", "host", "str", required=True, doc="address to listen on"),
    Key("server", "Port", "port", "port", required=True, doc="TCP port (0 picks a free one)"),
    Key(
        "server",
        "Locations",
        "locations",
        "list",
        required=True,
        doc="the location sections served on this port",
    ),
    Key(
        "server",
        "SslCertificate",
        "ssl_certificate",
        "path",
        None,
        doc="PEM certificate (chain); with SslCertificateKey the port speaks HTTPS only",
    ),
    Key(
        "server",
        "SslCertificateKey",
        "ssl_certificate_key",
        "path",
        None,
        doc="PEM private key of SslCertificate",
    ),
    *_tls("server"),
    Key(
        "server",
        "FwData",
        "fw_data",
        "json",
        None,
        doc="the framework's settings: Authorization, NativeRoutes (inline JSON or a file)",
    ),
    Key(
        "server",
        "UserData",
        "user_data",
        "json",
        None,
        doc="application data, readable by endpoints (inline JSON or a file)",
    ),
    Key(
        "server",
        "LoadURNs",
        "load_urns",
        "json",
        None,
        doc="routes mapped to functions without annotations (inline JSON or a file); a "
        'method entry may add the scopes the route requires, `"Scopes": ["orders:read"]`',
    ),
    *_limits("server"),
    Key(
        "server",
        "TrustedProxies",
        "trusted_proxies",
        "list",
        None,
        doc="addresses or networks of load balancers whose X-Forwarded-For names the client "
        "(for logs and the per-address brute-force count)",
    ),
    Key(
        "server",
        "AllowedHosts",
        "allowed_hosts",
        "list",
        None,
        doc="more names the Host header of a state-changing native route may give besides "
        "HostName, the bound address and localhost on loopback (a balancer's name; "
        "*.example.com for any name under it)",
    ),
    Key(
        "server",
        "Compression",
        "compression",
        "list",
        None,
        doc="gzip, or gzip, br: compress answers of compressible types for clients that "
        "accept it (never the token route, the settings page or no-store answers); none: off",
    ),
    Key(
        "server",
        "CompressionMinSize",
        "compression_min_size",
        "int",
        1024,
        low=0,
        high=1073741824,
        doc="bytes an answer needs to be compressed",
    ),
    Key(
        "server",
        "Charset",
        "charset",
        "str",
        "UTF-8",
        doc="UTF-8, CP1252 or ISO-8859-1: how text answers are encoded and text bodies "
        "without a declared charset decoded (JSON stays UTF-8)",
    ),
    Key(
        "server",
        "ContentTypes",
        "content_types",
        "str",
        None,
        doc="a section mapping file extensions to media types for static files "
        "(.xlsx=application/vnd.openxmlformats-officedocument.spreadsheetml.sheet), over "
        "Python's mimetypes",
    ),
    Key(
        "server",
        "OnSelect",
        "on_select",
        "str",
        None,
        doc="a function of the server's environments run for each request after authorization, "
        "before routing: it returns a thread pool's name (the request runs there), None (the "
        "location's pool), -2 (503 Server Busy) or -3 (the connection closes unanswered)",
    ),
    # location sections
    Key(
        "location",
        "Path",
        "path",
        "urlpath",
        required=True,
        doc="URL prefix of the location (/ allowed)",
    ),
    Key(
        "location",
        "ThreadPool",
        "thread_pool",
        "str",
        required=True,
        doc="the thread pool section that runs this location's def handlers",
    ),
    Key(
        "location",
        "CORS",
        "cors",
        "str",
        None,
        doc="the CORS section whose origins may call this location's routes and token route "
        "from a browser (SPEC 10.1); none: no cross-origin access",
    ),
    Key(
        "location",
        "RateLimit",
        "rate_limit",
        "str",
        None,
        doc="the RateLimit section that limits this location's requests per user or address "
        "(SPEC 13.7); none: no limit",
    ),
    Key(
        "location",
        "HSTS",
        "hsts",
        "str",
        None,
        doc="Strict-Transport-Security value sent on every answer (TLS ports only), e.g. "
        "max-age=31536000; includeSubDomains",
    ),
    Key(
        "location",
        "XFrameOptions",
        "x_frame_options",
        "str",
        None,
        doc="X-Frame-Options sent on every answer: DENY or SAMEORIGIN",
    ),
    Key(
        "location",
        "ContentSecurityPolicy",
        "content_security_policy",
        "str",
        None,
        doc="Content-Security-Policy sent on every answer, as written",
    ),
    Key(
        "location",
        "RootPath",
        "root_path",
        "path",
        None,
        doc="a folder (relative to the config file) whose files are served at the location's "
        "paths no route takes (GET, HEAD; SPEC 10.3); none: no files",
    ),
    Key(
        "location",
        "DefaultPage",
        "default_page",
        "str",
        None,
        doc="the file of a folder that answers the folder's path, e.g. index.html",
    ),
    # thread pool sections
    Key(
        "thread pool",
        "Environment",
        "environment",
        "str",
        None,
        doc="the environment section whose Repository supplies the endpoints",
    ),
    Key(
        "thread pool",
        "MinThreads",
        "min_threads",
        "int",
        1,
        low=0,
        high=4096,
        doc="threads kept alive per worker process",
    ),
    Key(
        "thread pool",
        "MaxThreads",
        "max_threads",
        "int",
        8,
        low=1,
        high=4096,
        doc="threads at most per worker process",
    ),
    Key(
        "thread pool",
        "MinFreeThreads",
        "min_free_threads",
        "int",
        0,
        low=0,
        high=4096,
        doc="idle threads kept ready for bursts",
    ),
    Key(
        "thread pool",
        "GrowthFactor",
        "growth_factor",
        "int",
        1,
        low=1,
        high=4096,
        doc="threads started at once when the pool grows",
    ),
    Key(
        "thread pool",
        "InactiveTimeout",
        "inactive_timeout_ms",
        "ms",
        30000,
        low=1,
        doc="ms an idle thread above MinThreads lives",
    ),
    Key(
        "thread pool",
        "AcceptTimeout",
        "accept_timeout_ms",
        "ms",
        10000,
        low=1,
        doc="ms a request may wait for a free thread; then 503 Server Busy",
    ),
    Key(
        "thread pool",
        "ActiveTimeout",
        "active_timeout_ms",
        "ms",
        0,
        low=0,
        doc="ms a request may run before the client gets 503 (0: no limit)",
    ),
    Key(
        "thread pool",
        "OnStart",
        "on_start",
        "str",
        None,
        doc="a function of the pool's environment run once in every worker before it accepts "
        "a request; an exception stops that worker's start",
    ),
    Key(
        "thread pool",
        "OnStop",
        "on_stop",
        "str",
        None,
        doc="a function of the pool's environment run once in every worker after its last "
        "request, for at most 10 s",
    ),
    Key(
        "thread pool",
        "OnSend",
        "on_send",
        "str",
        None,
        doc="a function of the pool's environment run before each answer of its application "
        "routes is encoded; it may change the answer's headers and status",
    ),
    Key(
        "thread pool",
        "OnError",
        "on_error",
        "str",
        None,
        doc="a function of the pool's environment called as OnError(exc) when a handler "
        "raises; what it returns is the answer (status 500 unless it sets one)",
    ),
    # environment sections
    Key(
        "environment",
        "Repository",
        "repository",
        "list",
        None,
        doc="modules, .py files or folders imported at start (relative to the config file)",
    ),
    # [APP_MONITOR]
    Key("APP_MONITOR", "Enable", "enable", "bool", False, doc="1 starts the memory monitor"),
    Key("APP_MONITOR", "HostName", "host", "str", "127.0.0.1", doc="monitor address"),
    Key("APP_MONITOR", "Port", "port", "port", None, doc="monitor port (required when enabled)"),
    Key("APP_MONITOR", "ApiPath", "api_path", "urlpath", "/api", doc="prefix of the monitor"),
    Key("APP_MONITOR", "SslCertificate", "ssl_certificate", "path", None, doc="PEM certificate"),
    Key(
        "APP_MONITOR",
        "SslCertificateKey",
        "ssl_certificate_key",
        "path",
        None,
        doc="PEM private key",
    ),
    *_tls("APP_MONITOR"),
    Key(
        "APP_MONITOR",
        "FwData",
        "fw_data",
        "json",
        None,
        doc='optional Basic Authorization of the monitor port: {"Authorization": {"scheme": '
        '"basic", "OnAuth", "OnAuthCache", "maxFailures"}} only (NativeRoutes and onAdmin, '
        "which the monitor has no use for, stop the start)",
    ),
    # CORS sections (named by a location's CORS key)
    Key(
        "CORS",
        "AllowOrigins",
        "allow_origins",
        "list",
        required=True,
        doc="origins (scheme://host[:port]) allowed to call; https://*.example.com for any "
        "name under example.com; * for any origin (not with AllowCredentials=1)",
    ),
    Key(
        "CORS",
        "AllowMethods",
        "allow_methods",
        "list",
        None,
        doc="methods a preflight may grant; none: the methods of the route asked for",
    ),
    Key(
        "CORS",
        "AllowHeaders",
        "allow_headers",
        "list",
        ["Authorization", "Content-Type"],
        doc="request headers a preflight may grant",
    ),
    Key(
        "CORS",
        "ExposeHeaders",
        "expose_headers",
        "list",
        None,
        doc="answer headers the browser lets the front-end read",
    ),
    Key(
        "CORS",
        "AllowCredentials",
        "allow_credentials",
        "bool",
        False,
        doc="1: the browser may send credentials (Authorization, cookies) and read the answer",
    ),
    Key(
        "CORS",
        "MaxAge",
        "max_age",
        "int",
        600,
        low=0,
        high=86400,
        doc="seconds a browser may remember a preflight's answer",
    ),
    # rate-limit sections (named by a location's RateLimit key)
    Key(
        "RateLimit",
        "Limit",
        "limit",
        "int",
        600,
        low=1,
        high=2**31,
        doc="requests of one key (user or address) a window lets through; more get 429 with "
        "Retry-After",
    ),
    Key(
        "RateLimit",
        "Window",
        "window_s",
        "seconds",
        60,
        low=1,
        high=86400,
        doc="the fixed window the requests are counted in, from the first one (60, 60s, 1m)",
    ),
    Key(
        "RateLimit",
        "Key",
        "key",
        "str",
        "user",
        doc="what is counted: user (the authenticated user, else the client's address) or "
        "address (the client's address)",
    ),
    Key(
        "RateLimit",
        "FailOpen",
        "fail_open",
        "bool",
        True,
        doc="1: serve while the state store cannot be reached (one warning); 0: answer 503",
    ),
)


def keys_of(section_kind: str) -> dict[str, Key]:
    """The keys of one section kind, by lower-cased name."""
    return {k.name.lower(): k for k in KEYS if k.section == section_kind}


def _key(section: str, attr: str) -> Key:
    for key in KEYS:
        if key.section == section and key.attr == attr:
            return key
    raise KeyError(f"no key {attr!r} in [{section}]")


def default_int(section: str, attr: str) -> int:
    """The default of a whole-number key, from this table (the frozen settings of ``model``
    take their defaults from here, so that each default is written once).

    >>> default_int("GENERAL", "rest_log_level")
    3
    """
    key = _key(section, attr)
    if isinstance(key.default, bool) or not isinstance(key.default, int):
        raise TypeError(f"[{section}] {key.name} has no whole-number default")
    return key.default


def default_str(section: str, attr: str) -> str:
    """The default of a text key, from this table (as :func:`default_int`).

    >>> default_str("APP_MONITOR", "api_path")
    '/api'
    """
    key = _key(section, attr)
    if not isinstance(key.default, str):
        raise TypeError(f"[{section}] {key.name} has no text default")
    return key.default
