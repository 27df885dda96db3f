"""What a request may see of what serves it: declared, so that mypy --strict checks every use.

A handler and a native route reach the port through ``RequestContext.port`` (a
:class:`PortView`) and, through it, the worker's shared services (a :class:`ServiceView`).
The server implements these Protocols (``fwrest.server.app.PortApp`` and
``fwrest.server.monitor_port.MonitorPort``, ``fwrest.server.worker.Worker``); nothing below
the server layer imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from fwrest.context.charsets import Charset

if TYPE_CHECKING:
    from fwrest.config.model import ThreadPoolConfig
    from fwrest.context.request import AuthInfo
    from fwrest.repository import Endpoint
    from fwrest.store import StateStore
    from fwrest.store.audit import AuditLog
    from fwrest.wire import Reply

__all__ = [
    "PortView",
    "Routed",
    "ServiceView",
    "SettingsView",
    "TokenEndpoint",
    "UsageKey",
]


class UsageKey(NamedTuple):
    """Where a request was routed: the row of the usage figures it counts in."""

    location: str  # the location's path, e.g. "/rest"
    method: str
    route: str  # the route's pattern relative to the location, e.g. "/users/:id"
    pool: str  # the location's thread pool


class Routed(Protocol):
    """The endpoint a request was routed to, as the REST object reads it."""

    @property
    def usage_key(self) -> UsageKey: ...

    @property
    def endpoint(self) -> Endpoint: ...


class TokenEndpoint(Protocol):
    """An oAuth2 port's token service, as the token route calls it."""

    async def metadata_document(self, prefix: str) -> bytes | None:
        """The metadata document (RFC 8414) of the location ``prefix`` (SPEC 12.2)."""
        ...

    async def resource_document(self, prefix: str) -> bytes | None:
        """The protected resource metadata (RFC 9728) of the location ``prefix`` (SPEC 16.3)."""
        ...

    async def grant_types(self) -> list[str]:
        """The grant types the port offers now (the metadata's ``grant_types_supported``)."""
        ...

    async def token_endpoint(
        self,
        method: str,
        query: str,
        body: bytes,
        headers: dict[str, str],
        client_ip: str,
        location: str = "",
        path: str = "",
    ) -> Reply:
        """The answer to one request of the token route (RFC 6749 5.1, 5.2)."""
        ...

    def jwks(self) -> bytes | None:
        """The port's JWK Set document; None on an HS256 port (nothing to publish)."""
        ...

    async def current_jwks(self) -> tuple[bytes, float] | None:
        """:meth:`jwks` after a look at the key set (a key made elsewhere a moment ago), and
        until when it holds (epoch seconds: a former key is dropped then)."""
        ...


class SettingsView(Protocol):
    """The run-time settings (``[GENERAL]``) of the service."""

    def describe(self) -> dict[str, dict[str, Any]]: ...

    async def change(
        self, changes: dict[str, int | None], deadline_s: float = ...
    ) -> tuple[dict[str, tuple[int, int]], float]:
        """Change run-time values (the store given ``deadline_s`` to answer); each key's
        value in force before and after, and the time the store made the change."""
        ...


class ServiceView(Protocol):
    """What native routes read and do of the service beyond one port."""

    @property
    def store(self) -> StateStore | None: ...

    @property
    def settings(self) -> SettingsView: ...

    @property
    def draining(self) -> bool: ...

    @property
    def audit(self) -> AuditLog:
        """The audit trail (SPEC 13.5): record an event, read those kept."""
        ...

    def service_secret(self) -> bytes:
        """A key every worker and host of the service shares (anti-forgery tokens)."""
        ...

    def workers_alive(self) -> tuple[int, int]:
        """(workers whose heartbeat is fresh, workers expected)."""
        ...

    def probe(self, name: str) -> tuple[int, dict[str, Any]]:
        """SPEC 13.3's ``live``, ``ready`` or ``started``: the status and the JSON body."""
        ...

    async def usage_figures(self) -> dict[str, Any]: ...

    async def reset_usage(self) -> None: ...


class PortView(Protocol):
    """The port (server section) serving a request."""

    @property
    def name(self) -> str: ...

    @property
    def user_data(self) -> Any: ...

    @property
    def auth(self) -> AuthInfo: ...

    @property
    def scheme(self) -> str:
        """``http`` or ``https``."""
        ...

    @property
    def port_number(self) -> int:
        """The TCP port the server listens on."""
        ...

    @property
    def authority(self) -> str:
        """``host[:port]`` as the server names itself: its ``HostName`` (the machine's name
        when it binds every interface) and its port, left out when the scheme's default."""
        ...

    @property
    def service(self) -> ServiceView | None:
        """The worker's services; None for a port served without a worker (a bare pipeline)."""
        ...

    @property
    def token_service(self) -> TokenEndpoint | None: ...

    @property
    def charset(self) -> Charset:
        """How ``str`` answers are encoded and undeclared text bodies decoded (SPEC 10.6)."""
        ...

    @property
    def on_admin(self) -> Callable[[str], Any] | None:
        """The port's ``onAdmin`` function, who may change settings."""
        ...

    def names_host(self, host: str) -> bool:
        """Whether a request's ``Host`` header value names this server: its ``HostName``, its
        bound address, ``localhost`` on loopback, or its ``AllowedHosts`` (SPEC 7.1)."""
        ...

    def thread_pool(self, path: str, selected: str | None = None) -> ThreadPoolConfig | None:
        """The thread pool of the location that serves ``path`` (normalised), as configured,
        or the pool ``selected`` names (lower-case: the one the server's ``OnSelect`` picked,
        SPEC 11.1); None outside every location."""
        ...

    def listing(self) -> list[dict[str, Any]]:
        """The port's routes, as ``list/service`` answers them."""
        ...

    def openapi(self, version: str, grants: Sequence[str] | None = None) -> dict[str, Any]:
        """The port's OpenAPI document; on an oAuth2 port, its OAuth flows those of
        ``grants`` (the grant types offered; None: ``onAuthparams`` without ``types``)."""
        ...
