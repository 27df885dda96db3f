"""Warnings about legal but risky settings (SPEC 7: ``fwrest check`` prints them, a start logs
them): Basic without TLS off loopback, a public monitor, the GET token route, full error
bodies, long token lifetimes, a long ``OnAuthCache``, client CAs that no client certificate is
asked against."""

from __future__ import annotations

from fwrest.config.fwdata import LONG_AUTH_CACHE_S, FwData
from fwrest.config.model import (
    MonitorConfig,
    ServerConfig,
    Tunables,
)
from fwrest.config.tls import ClientCert, TlsOptions

__all__ = ["risky_settings"]


_LOOPBACK = ("127.", "localhost", "::1")


def risky_settings(
    servers: list[ServerConfig], monitor: MonitorConfig | None, tunables: Tunables
) -> list[str]:
    out = []
    if tunables.rest_error_full == 1:
        out.append(
            "[GENERAL] rest_error_full=1: full tracebacks go to the log (local variables of "
            "handlers may appear there); use it while diagnosing, then set it back to 0."
        )
    for server in servers:
        auth = server.fw_data.authorization
        if (
            auth is not None
            and auth.scheme == "basic"
            and not server.is_tls
            and not server.host.startswith(_LOOPBACK)
        ):
            out.append(
                f"[{server.name}] Basic authorization without TLS on {server.host}: passwords "
                "cross the network in clear text; add SslCertificate/SslCertificateKey."
            )
        if server.max_body_size == 0:
            out.append(
                f"[{server.name}] MaxBodySize=0 refuses every request body with 413 (the token "
                "route's too); it does not mean unlimited, as nginx's client_max_body_size 0 "
                "does. Leave it out for the default 1 MiB, or give the largest body in bytes."
            )
    fw_data: list[tuple[str, FwData]] = [(server.name, server.fw_data) for server in servers]
    if monitor is not None:
        fw_data.append(("APP_MONITOR", monitor.fw_data))
    for name, data in fw_data:
        auth = data.authorization
        if auth is not None and auth.on_auth_cache_s > LONG_AUTH_CACHE_S:
            out.append(
                f"[{name}] OnAuthCache={auth.on_auth_cache_s}s: for that long a worker keeps "
                "letting in a password that OnAuth accepted, even after it is changed or its "
                "user removed; a few minutes (300s) already spare nearly every check."
            )
    sections: list[tuple[str, TlsOptions]] = [(server.name, server.tls) for server in servers]
    if monitor is not None:
        sections.append(("APP_MONITOR", monitor.tls))
    for name, tls in sections:
        if tls.client_ca is not None and tls.client_cert is ClientCert.NONE:
            out.append(
                f"[{name}] SslClientCA is set and SslClientCert=0: no client certificate is "
                "asked for; set SslClientCert=1 (optional) or 2 (required), or remove "
                "SslClientCA."
            )
    if monitor is not None and not monitor.host.startswith(_LOOPBACK):
        warning = _public_monitor(monitor)
        if warning is not None:
            out.append(warning)
    return out


def _public_monitor(monitor: MonitorConfig) -> str | None:
    """The warning about a monitor off loopback, naming what its protection lacks (none
    behind Basic over TLS, as a server's port)."""
    if monitor.fw_data.authorization is None:
        return (
            f"[APP_MONITOR] HostName={monitor.host}: the monitor is reachable from the "
            "network without authorization; bind it to 127.0.0.1 or protect it with FwData "
            "Basic authorization (with SslCertificate/SslCertificateKey)."
        )
    if monitor.ssl_certificate is None:
        return (
            f"[APP_MONITOR] Basic authorization without TLS on {monitor.host}: passwords "
            "cross the network in clear text; add SslCertificate/SslCertificateKey, or bind "
            "the monitor to 127.0.0.1."
        )
    return None
