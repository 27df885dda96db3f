"""Redirect URIs of the authorization code grant (SPEC 16.1, RFC 6749 3.1.2, RFC 8252 7.3): what
a client entry may register, and whether a request's ``redirect_uri`` is one it registered.

A redirect is ``https://host/...``, or, for a native app, ``http://127.0.0.1/...`` or
``http://[::1]/...``: such a loopback redirect is registered without a port and matches any
port at request time (the app listens where the system lets it). Every other comparison is
of exact strings. No fragment (RFC 6749 3.1.2), no user info, no wildcard.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["LOOPBACK_HOSTS", "redirect_problem", "registered_form"]

LOOPBACK_HOSTS = ("127.0.0.1", "[::1]")


def _without_port(uri: str) -> str | None:
    """A loopback ``http`` URI without its port; None for any other URI (or a malformed one)."""
    if not uri.startswith("http://"):
        return None
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - a port that is no number is a ValueError
    except ValueError:
        return None
    netloc = parts.netloc
    if "@" in netloc:
        return None
    host = netloc.rsplit(":", 1)[0] if not netloc.endswith("]") else netloc
    if host not in LOOPBACK_HOSTS:
        return None
    return uri.replace("http://" + netloc, "http://" + host, 1)


def redirect_problem(uri: object) -> str | None:
    """Why ``uri`` cannot be registered as a client's redirect; None when it can.

    >>> redirect_problem("https://app.example.com/cb") is None
    True
    >>> redirect_problem("http://app.example.com/cb")
    'http is allowed only for a loopback redirect (http://127.0.0.1/... or http://[::1]/...: RFC 8252 7.3); write https://app.example.com/cb'
    """
    if not isinstance(uri, str) or not uri:
        return f"a redirect URI is a non-empty text, got {uri!r}"
    if any(c.isspace() for c in uri) or any(ord(c) < 32 for c in uri):
        return f"the redirect URI {uri!r} holds white space or a control character"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018
    except ValueError:
        return f"the redirect URI {uri!r} is not a valid URL"
    if "#" in uri:
        return f"the redirect URI {uri!r} has a fragment (RFC 6749 3.1.2 forbids it)"
    if "*" in uri:
        return f"the redirect URI {uri!r} has a wildcard; redirect URIs are compared exactly"
    if "@" in parts.netloc:
        return f"the redirect URI {uri!r} has user info"
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http":
        if _without_port(uri) is not None:
            return None
        if parts.hostname == "localhost":
            return (
                f"the redirect URI {uri!r} names localhost, which may resolve elsewhere "
                "(RFC 8252 8.3); write http://127.0.0.1/... or http://[::1]/..."
            )
        shown = "https://" + uri[len("http://") :]
        return (
            "http is allowed only for a loopback redirect (http://127.0.0.1/... or "
            f"http://[::1]/...: RFC 8252 7.3); write {shown}"
        )
    return (
        f"the redirect URI {uri!r} is neither https://... nor a loopback http://127.0.0.1/... "
        "or http://[::1]/..."
    )


def registered_form(uri: str) -> str:
    """The form a redirect is compared in: a loopback one without its port, any other as it
    is. A request's ``redirect_uri`` names a registered redirect when both forms are equal.

    >>> registered_form("http://127.0.0.1:53123/cb"), registered_form("http://[::1]/cb")
    ('http://127.0.0.1/cb', 'http://[::1]/cb')
    >>> registered_form("https://app.example.com:8443/cb")
    'https://app.example.com:8443/cb'
    """
    return _without_port(uri) or uri
