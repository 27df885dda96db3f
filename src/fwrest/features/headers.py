"""Security headers (SPEC 10.2): a location's ``HSTS``, ``XFrameOptions`` and
``ContentSecurityPolicy``, as an outgoing stage.

Each is added to every answer of a request in the location, unless the answer carries that
header already (the settings page sends its own ``X-Frame-Options: DENY`` and policy). ``HSTS``
is configured on TLS ports only (the loader refuses it on a plain one).
``X-Content-Type-Options: nosniff`` is on every answer of every port: the encoder writes it
(:func:`fwrest.wire.encode_reply`).
"""

from __future__ import annotations

from collections.abc import Iterable

from fwrest.config.model import LocationConfig
from fwrest.context.request import RequestContext
from fwrest.routing import LocationTable
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
    """The outgoing stage of one port; ``locations`` are all of them, ``(prefix, config)``."""

    def __init__(self, locations: Iterable[tuple[str, LocationConfig]]) -> None:
        self._table: LocationTable[_Lines] = LocationTable(
            (prefix, configured(config)) for prefix, config in locations
        )

    def __call__(self, req: Request, ctx: RequestContext, reply: Reply) -> Reply:
        found = self._table.find(ctx.path)
        if found is None or not found[0]:
            return reply
        present = {name for name, _ in reply.headers}
        for name, value in found[0]:
            if name not in present:
                reply.headers.append((name, value))
        return reply
