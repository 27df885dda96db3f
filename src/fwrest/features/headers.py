"""Security headers (SPEC 10.2): a location's ``XFrameOptions`` and ``ContentSecurityPolicy``,
as an outgoing stage of each location that configures them, and ``HSTS``, on every answer of
its port.

``XFrameOptions`` and ``ContentSecurityPolicy`` are added to every answer of a request in the
location, unless the answer carries that header already (the settings page sends its own
``X-Frame-Options: DENY`` and policy). ``HSTS`` is configured on TLS ports only (the loader
refuses it on a plain one) and is "sent on every answer of a TLS port": when a location sets
it, every answer of the port carries it (:func:`port_hsts`: the path's own location's value,
else the port's), answers outside every location, refusals before routing and the engine's
own errors included; :class:`~fwrest.server.app.PortApp` adds it as it finishes an answer.
``X-Content-Type-Options: nosniff`` is on every answer of every port: the encoder writes it
(:func:`fwrest.wire.encode_reply`).
"""

from __future__ import annotations

from collections.abc import Iterable

from fwrest.config.model import LocationConfig
from fwrest.context.request import RequestContext
from fwrest.wire import Reply, Request

__all__ = ["HSTS", "SecurityHeaders", "configured", "port_hsts"]

HSTS = "strict-transport-security"

_Lines = tuple[tuple[str, str], ...]


def configured(config: LocationConfig) -> _Lines:
    """The security headers a location's outgoing stage sends (lower-case names; HSTS is
    the port's: :func:`port_hsts`)."""
    out = []
    if config.x_frame_options is not None:
        out.append(("x-frame-options", config.x_frame_options))
    if config.content_security_policy is not None:
        out.append(("content-security-policy", config.content_security_policy))
    return tuple(out)


def port_hsts(
    locations: Iterable[tuple[str, str | None]],
) -> tuple[tuple[str, str] | None, dict[str, tuple[str, str]]]:
    """A port's ``Strict-Transport-Security`` lines from its locations' ``(prefix, HSTS)``
    (None: not set): the port's own (None: no location sets HSTS), for answers outside every
    location, and each location's (its own value, else the port's). The port's is that of the
    location with the shortest prefix that sets one (the most general: HSTS is a policy of the
    whole host), the first of them in the config on a tie (docs/decisions.md).

    >>> port, each = port_hsts([("/a", "max-age=1"), ("/", "max-age=2"), ("/c", None)])
    >>> port
    ('strict-transport-security', 'max-age=2')
    >>> [(prefix, value) for prefix, (_, value) in each.items()]
    [('/a', 'max-age=1'), ('/', 'max-age=2'), ('/c', 'max-age=2')]
    >>> port_hsts([("/c", None)])
    (None, {})
    """
    locations = list(locations)
    setting = [(prefix, value) for prefix, value in locations if value is not None]
    if not setting:
        return None, {}
    default = (HSTS, min(setting, key=lambda pair: len(pair[0]))[1])  # min: a tie's first
    return default, {
        prefix: (HSTS, value) if value is not None else default for prefix, value in locations
    }


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
