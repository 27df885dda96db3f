"""Host names as a server compares them: ``HostName``, ``AllowedHosts`` and a request's
``Host`` header (SPEC 7.1, against DNS rebinding).

One canonical form for all three: lower case, without a final dot, an IP address in the
form :mod:`ipaddress` writes it (``::1``, never ``0:0::1`` or ``[::1]``), a non-ASCII name
in its IDNA (punycode) form, which is what a browser sends.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = [
    "WILDCARD_ADDRESSES",
    "authority",
    "canonical_host",
    "host_and_port",
    "host_of_header",
    "is_ip",
    "valid_host_field",
]

# the addresses that bind every interface
WILDCARD_ADDRESSES = frozenset({"", "0.0.0.0", "::", "*"})

# letters, digits, "-" and "_" (container and service names use it), 1-63 per label
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def canonical_host(text: str, *, wildcard: bool = False) -> str | None:
    """The canonical form of a host name or IP address; None when it is neither.

    With ``wildcard``, ``*.example.com`` (any name under ``example.com``) is taken too.

    >>> canonical_host("API.Example.com."), canonical_host("[0:0::1]"), canonical_host("a b")
    ('api.example.com', '::1', None)
    >>> canonical_host("*.example.com", wildcard=True), canonical_host("*.example.com")
    ('*.example.com', None)
    """
    name = text.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
        try:
            return str(ipaddress.IPv6Address(name))
        except ValueError:
            return None
    if name.endswith(".") and not name.endswith(".."):
        name = name[:-1]
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    prefix = ""
    if wildcard and name.startswith("*."):
        prefix, name = "*.", name[2:]
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    if len(name) > 253 or _NAME.fullmatch(name) is None:
        return None
    return prefix + name


# RFC 9110 7.2, RFC 9112 3.2: a Host field (or an absolute-form target's authority) is
# uri-host [":" port]: an IP literal in brackets, or a reg-name. The reg-name is held to RFC
# 3986's unreserved characters and percent escapes: its sub-delims (!$&'()*+,;=) are in no
# DNS name, and "," is what joins several values into a list. No userinfo ("user@"), no path.
_HOST_FIELD = re.compile(
    r"(?:\[([0-9A-Fa-f:.]+)\]|(?:[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2})+)(?::([0-9]{0,5}))?"
)


def valid_host_field(value: str) -> bool:
    """Whether ``value`` is a valid ``Host`` field value (RFC 9112 3.2): ``host[:port]``, the
    host a name, an IPv4 address or an IPv6 address in brackets, the port at most 65535.

    >>> [valid_host_field(v) for v in ("api.example.com:8443", "[::1]", "127.0.0.1:")]
    [True, True, True]
    >>> [valid_host_field(v) for v in ("", "u@h", "h/p", "a,b", "h:99999", "[::g]", "h:x")]
    [False, False, False, False, False, False, False]
    """
    found = _HOST_FIELD.fullmatch(value)
    if found is None:
        return False
    literal, port = found.groups()
    if port and int(port) > 65535:
        return False
    if literal is not None:
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            return False
    return True


def host_and_port(value: str) -> tuple[str, str] | None:
    """The canonical host a ``Host`` header names and its port as written ("" when none);
    None when the value is no ``host[:port]``.

    >>> host_and_port("Example.com:8080"), host_and_port("[::1]"), host_and_port("a@b")
    (('example.com', '8080'), ('::1', ''), None)
    """
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[: end + 1], value[end + 1 :]
        port = rest[1:] if rest.startswith(":") else rest
        if rest and not rest.startswith(":"):
            return None
    else:
        host, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    canonical = canonical_host(host)
    return None if canonical is None else (canonical, port)


def host_of_header(value: str) -> str | None:
    """The canonical host a ``Host`` header names (its port left out); None when the value
    is no ``host[:port]``.

    >>> host_of_header("Example.com:8080"), host_of_header("[::1]:80"), host_of_header("a@b")
    ('example.com', '::1', None)
    """
    found = host_and_port(value)
    return None if found is None else found[0]


_DEFAULT_PORTS = {"http": 80, "https": 443}


def authority(host: str, port: int | None, scheme: str) -> str:
    """``host[:port]`` as a URL writes it: an IPv6 address in brackets, the scheme's default
    port left out.

    >>> authority("::1", 8443, "https"), authority("example.com", 443, "https")
    ('[::1]:8443', 'example.com')
    """
    shown = f"[{host}]" if ":" in host else host
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return shown
    return f"{shown}:{port}"


def is_ip(host: str) -> bool:
    """Whether a canonical host is an IP address."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
