"""Whether a request's ``Host`` names this server (SPEC 7.1), for the state-changing native
routes: a page served under a name the attacker owns, rebound by DNS to this server's
address, reaches it as same-origin, and only its ``Host`` header gives it away.

A server is named by its ``HostName``, the address its socket is bound to, ``localhost``
when that is a loopback address, and its ``AllowedHosts``. Bound to every interface
(``0.0.0.0``, ``::``), each address of the machine names it (an IP address as the ``Host``
never comes from DNS rebinding), and ``localhost``.
"""

from __future__ import annotations

import ipaddress
import socket
import time

import psutil

from fwrest.config.hosts import (
    WILDCARD_ADDRESSES,
    authority,
    canonical_host,
    host_of_header,
    is_ip,
)

__all__ = ["HostCheck", "own_authority"]

_ADDRESSES_TTL_S = 10.0  # the machine's addresses are read again at most this often on a miss


class HostCheck:
    """``check(host_header) -> bool`` for one server section.

    Args:
        host: its ``HostName``.
        allowed: its ``AllowedHosts``, canonical (``*.name``: any name under ``name``).
        bound: the address its socket is bound to ("" when it is not bound: the in-process
            test client), else ``host`` stands for it.
    """

    __slots__ = ("_addresses", "_any_local", "_names", "_read_at", "_suffixes")

    def __init__(self, host: str, allowed: tuple[str, ...] = (), bound: str = "") -> None:
        names: set[str] = set()
        suffixes: list[str] = []
        address = bound or host
        self._any_local = address in WILDCARD_ADDRESSES
        for given in (host, bound):
            canonical = canonical_host(given) if given not in WILDCARD_ADDRESSES else None
            if canonical is not None:
                names.add(canonical)
        if self._any_local or _loopback(canonical_host(address) or ""):
            names.add("localhost")
        for name in allowed:
            if name.startswith("*."):
                suffixes.append(name[1:])  # ".example.com"
            else:
                names.add(name)
        self._names = frozenset(names)
        self._suffixes = tuple(suffixes)
        self._addresses: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    def __call__(self, header: str) -> bool:
        host = host_of_header(header)
        if host is None:
            return False
        if host in self._names or any(host.endswith(s) for s in self._suffixes):
            return True
        return self._any_local and is_ip(host) and host in self._local_addresses()

    def _local_addresses(self) -> frozenset[str]:
        """The machine's addresses, read again when older than a few seconds (interfaces
        come and go); only an IP address that names no configured host asks."""
        now = time.monotonic()
        if now - self._read_at > _ADDRESSES_TTL_S:
            found = set()
            for entries in psutil.net_if_addrs().values():
                for entry in entries:
                    canonical = canonical_host(entry.address.split("%", 1)[0])
                    if canonical is not None and is_ip(canonical):
                        found.add(canonical)
            self._addresses = frozenset(found)
            self._read_at = now
        return self._addresses


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def own_authority(host: str, port: int, scheme: str) -> str:
    """``host[:port]`` as a server names itself in a URL: its ``HostName``, or the machine's
    name when it binds every interface (no address of it is the one every client reaches).

    >>> own_authority("127.0.0.1", 8080, "http"), own_authority("::1", 443, "https")
    ('127.0.0.1:8080', '[::1]')
    """
    name = None if host in WILDCARD_ADDRESSES else canonical_host(host)
    if name is None:
        name = canonical_host(socket.gethostname()) or "localhost"
    return authority(name, port, scheme)
