"""Bind every port of a service once, all or nothing."""

from __future__ import annotations

import dataclasses
import errno
import socket
from collections.abc import Iterable

from fwrest.errors import ConfigError
from fwrest.server.build import PortPlan, ServicePlan

__all__ = ["Listening", "bind_all", "bind_socket", "listening", "resolve_all"]

# one answer of socket.getaddrinfo: family, type, protocol, canonical name, address
AddrInfo = tuple[
    socket.AddressFamily,
    socket.SocketKind,
    int,
    str,
    tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes],
]


def _address(host: str, port: int, *, section: str, source: str | None) -> AddrInfo:
    """The address ``bind_socket`` would bind ``host:port`` to.

    Raises:
        ConfigError: ``host`` cannot be resolved.
    """
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ConfigError(
            f"the host name {host!r} cannot be resolved ({exc.strerror}).",
            section=section,
            key="HostName",
            fix="give an address of this machine, e.g. 127.0.0.1 or 0.0.0.0.",
            source=source,
        ) from None
    return infos[0]


def resolve_all(plan: ServicePlan) -> None:
    """Resolve every ``HostName`` of the plan as ``bind_all`` would, binding nothing, so that
    ``fwrest check`` refuses the names a start would (SPEC 1).

    Raises:
        ConfigError: a host name cannot be resolved (the same error as at start).
    """
    source = str(plan.config.source) if plan.config.source else None
    for port in plan.ports:
        _address(port.config.host, port.config.port, section=port.config.name, source=source)
    monitor = plan.config.monitor
    if monitor is not None:
        _address(monitor.host, monitor.port, section="APP_MONITOR", source=source)


def bind_socket(host: str, port: int, *, section: str, source: str | None) -> socket.socket:
    """A listening, non-blocking TCP socket on ``host:port``.

    Raises:
        ConfigError: the address cannot be bound (in use, not an address of this machine).
    """
    family, kind, proto, _, address = _address(host, port, section=section, source=source)
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        fix = (
            "stop the process that uses it, or choose another Port."
            if exc.errno == errno.EADDRINUSE
            else "choose an address and port this machine "
            "can listen on (ports under 1024 need privileges)."
        )
        raise ConfigError(
            f"{host}:{port} cannot be bound: {reason}.",
            section=section,
            key="Port",
            fix=fix,
            source=source,
        ) from None
    return sock


# (HostName, Port) -> its listening socket; a section of ``Port=0`` also as ("HOST [NAME]", 0)
Listening = dict[tuple[str, int], socket.socket]


def bind_all(
    plan: ServicePlan, kept: Listening | None = None
) -> tuple[ServicePlan, list[socket.socket]]:
    """Bind each server's port; on any failure close what was bound and raise.

    Returns the plan with port 0 replaced by the port the system picked, and the sockets in
    the order of ``plan.ports`` (the monitor's last). A reload passes the sockets in use as
    ``kept``: a port they hold keeps its socket (no connection refused), only the others are
    bound, and only those are closed on a failure. A ``HostName`` spelt otherwise that names
    the address a kept socket is bound to (``localhost`` for ``127.0.0.1``) keeps it too: a
    new socket could not be bound beside it. A kept socket serves one section at most.
    """
    kept = kept or {}
    source = str(plan.config.source) if plan.config.source else None
    sockets: list[socket.socket] = []
    bound_here: list[socket.socket] = []

    def bind(host: str, port: int, section: str) -> socket.socket:
        sock = kept.get((host, port) if port else (f"{host} [{section}]", 0))
        if sock is None and port and kept:
            sock = _bound_to(host, port, section, source, kept.values())
        if sock is None or any(sock is taken for taken in sockets):
            sock = bind_socket(host, port, section=section, source=source)
            bound_here.append(sock)
        sockets.append(sock)
        return sock

    ports: list[PortPlan] = []
    try:
        for port in plan.ports:
            cfg = port.config
            sock = bind(cfg.host, cfg.port, cfg.name)
            bound, real = sock.getsockname()[:2]
            if real != cfg.port:
                port = dataclasses.replace(port, config=dataclasses.replace(cfg, port=real))
            ports.append(dataclasses.replace(port, bound_address=bound))
        monitor = plan.config.monitor
        if monitor is not None:
            sock = bind(monitor.host, monitor.port, "APP_MONITOR")
            plan = dataclasses.replace(plan, monitor_port=sock.getsockname()[1])
    except BaseException:
        for sock in bound_here:
            sock.close()
        raise
    return dataclasses.replace(plan, ports=ports), sockets


def _bound_to(
    host: str, port: int, section: str, source: str | None, kept: Iterable[socket.socket]
) -> socket.socket | None:
    """The kept socket bound to the address ``host:port`` resolves to, if one is."""
    family, _, _, _, address = _address(host, port, section=section, source=source)
    for sock in kept:
        if sock.family == family and sock.getsockname()[:2] == address[:2]:
            return sock
    return None


def listening(plan: ServicePlan, sockets: list[socket.socket]) -> Listening:
    """The sockets of a bound plan by the ``(HostName, Port)`` a later config may name again;
    by section too, so that a section of ``Port=0`` keeps the port the system picked."""
    names = [(p.config.host, p.config.name, p.config.port) for p in plan.ports]
    if plan.config.monitor is not None:
        names.append((plan.config.monitor.host, "APP_MONITOR", plan.monitor_port))
    out: Listening = {}
    for (host, name, port), sock in zip(names, sockets, strict=True):
        out[(host, port)] = out[(f"{host} [{name}]", 0)] = sock
    return out
