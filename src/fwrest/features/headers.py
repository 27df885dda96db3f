"""Security headers (SPEC 10.2): a location's ``HSTS``, ``XFrameOptions`` and
``ContentSecurityPolicy``, as an outgoing stage of each location that configures them.

Each is added to every answer of a request in the location, unless the answer carries that
header already (the settings page sends its own ``X-Frame-Options: DENY`` and policy). ``HSTS``
is configured on TLS ports only (the loader refuses it on a plain one).
``X-Content-Type-Options: nosniff`` is on every answer of every port: the encoder writes it
(:func:`fwrest.wire.encode_reply`).
"""

from __future__ import annotations

from fwrest.config.model import LocationConfig
from fwrest.context.request import RequestContext
from fwrest.wire import Reply, Request

__all__ = ["SecurityHeaders", "configured"]

_Lines = tuple[tuple[str, str], ...]


def configured(config: LocationConfig) -> _Lines:
    """The security headers a location sends (lower-case names)."""
    out = []
    if config.hsts is not None:
        out.append(("strict-transport-security", config.hsts))
    if config.x_frame_options is not None:
        out.append(("x-frame-options", config.x_frame_options))
    if config.content_security_policy is not None:
        out.append(("content-security-policy", config.content_security_policy))
    return tuple(out)


class SecurityHeaders:
    """The outgoing stage of one location that configures security headers: ``lines``
    (from :func:`configured`), each sent unless the answer set it itself."""

    __slots__ = ("lines", "names")

    def __init__(self, lines: _Lines) -> None:
        self.lines = lines
        self.names = frozenset(name for name, _ in lines)

    def __call__(self, req: Request, ctx: RequestContext, reply: Reply) -> Reply:
        headers = reply.headers
        names = self.names
        for name, _ in headers:
            if name in names:  # the answer set one itself: keep its own
                present = {n for n, _ in headers}
                headers.extend([line for line in self.lines if line[0] not in present])
                return reply
        headers.extend(self.lines)
        return reply
