"""Per-request state, the read-only header view, and ``Response``."""

from __future__ import annotations

import contextvars
import re
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

if TYPE_CHECKING:
    from fwrest.context.chunks import ChunkFeed
    from fwrest.context.views import PortView, Routed, UsageKey

__all__ = [
    "AuthInfo",
    "Headers",
    "RequestContext",
    "Response",
    "check_header",
    "check_status",
    "current",
]

# A header name is an RFC 9110 token: nothing that could end it early (":", white space) or
# start another line. A value is any text but the control characters (RFC 9110 5.5: HTAB
# only): CR, LF and NUL would split the answer, the others confuse clients.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def check_status(status: object) -> int:
    """``status`` as an answer's status: a whole number in 200-599 (a 1xx is an interim
    answer, never a response of its own; anything else no HTTP status).

    >>> check_status(201)
    201
    >>> check_status(100)
    Traceback (most recent call last):
    ...
    ValueError: an HTTP status is a number in 200-599, not 100

    Raises:
        ValueError: it is not.
    """
    if not isinstance(status, int) or isinstance(status, bool) or not 200 <= status <= 599:
        raise ValueError(f"an HTTP status is a number in 200-599, not {status!r:.40}")
    return status


_NAMES_CHECKED: set[str] = set()  # header names that passed the check below
_NAMES_REMEMBERED = 256


def check_header(name: object, value: object) -> tuple[str, str]:
    r"""A response header as it may be written: the name a token, the value (``str()`` of
    it; bytes as latin-1) without CR, LF, NUL or another control character but HTAB, and
    without characters outside ISO-8859-1.

    >>> check_header("X-Id", 7)
    ('X-Id', '7')
    >>> check_header("Location", "/a\r\nSet-Cookie: x=1")
    Traceback (most recent call last):
    ...
    ValueError: the value of the header 'Location' holds CR, LF, NUL or another control character

    Raises:
        ValueError: the name or the value cannot be written as they are.
    """
    if not isinstance(name, str):
        raise ValueError(
            f"a header name is a token (letters, digits and !#$%&'*+.^_`|~-), "
            f"not a {type(name).__name__}"
        )
    # an application sets the same few names, request after request: a plain str checked
    # before is not checked again (a subclass always is: it could compare equal to one)
    if type(name) is not str or name not in _NAMES_CHECKED:
        if _TOKEN.fullmatch(name) is None:
            raise ValueError(
                f"a header name is a token (letters, digits and !#$%&'*+.^_`|~-), "
                f"not {repr(name)[:40]}"
            )
        if type(name) is str and len(_NAMES_CHECKED) < _NAMES_REMEMBERED:
            _NAMES_CHECKED.add(name)
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bytes, bytearray)):
        text = value.decode("latin-1")  # the bytes as they are (as Starlette's raw headers)
    else:
        text = str(value)
    if _BAD_VALUE.search(text) is not None:
        raise ValueError(
            f"the value of the header {name!r} holds CR, LF, NUL or another control character"
        )
    if not text.isascii():
        try:
            text.encode("latin-1")
        except UnicodeEncodeError:
            # written as "?", the value would change unseen (a file name, a Location)
            raise ValueError(
                f"the value of the header {name!r} holds characters outside ISO-8859-1 "
                "(RFC 9110 5.5): percent-encode them (RFC 8187 for a parameter's value)"
            ) from None
    return name, text


@dataclass(frozen=True, slots=True)
class AuthInfo:
    """The authorization in force on a port (SPEC 3 table); empty on an open port."""

    scheme: str = ""  # "basic" | "oAuth2" | ""
    on_auth: str = ""  # the configured OnAuth/onAuth name, "" when none

    @property
    def has_callback(self) -> bool:
        return bool(self.on_auth)


NO_AUTH = AuthInfo()


class Headers(Mapping[str, str]):
    """Read-only, case-insensitive request headers; a repeated header's values joined by ``, ``."""

    __slots__ = ("_map", "_raw")

    def __init__(self, raw: list[tuple[str, str]]) -> None:
        self._raw = raw
        merged: dict[str, str] = {}
        for name, value in raw:
            if name in merged:
                merged[name] = f"{merged[name]}, {value}"
            else:
                merged[name] = value
        self._map = merged

    def __getitem__(self, key: str) -> str:
        return self._map[key.lower()]

    def get(self, key: str, default: Any = None) -> Any:
        return self._map.get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._map

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def items_raw(self) -> list[tuple[str, str]]:
        """The headers as received, lower-cased names, in order (a copy)."""
        return list(self._raw)

    def __repr__(self) -> str:
        return f"Headers({sorted(self._map)})"


class Response:
    """A complete answer a handler returns as it is.

    Args:
        body: ``bytes``, ``str`` (in the server's ``Charset``), a dict/list sent as JSON, or an
            iterator or async iterator of ``bytes``/``str`` sent as it comes (SPEC 10.5);
            ``None`` is an empty body, as ``b""`` (whatever the status).
        status: the HTTP status.
        headers: extra headers: a mapping, or a list of ``(name, value)`` pairs, in which a
            name given more than once is sent once per pair (two ``Set-Cookie`` lines).
        media_type: the ``Content-Type``; chosen from ``body`` when omitted.
    """

    __slots__ = ("body", "headers", "media_type", "status")

    def __init__(
        self,
        body: bytes
        | str
        | dict[str, Any]
        | list[Any]
        | Iterator[Any]
        | AsyncIterator[Any]
        | None = b"",
        status: int = 200,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        media_type: str | None = None,
    ) -> None:
        self.body = b"" if body is None else body
        self.status = status
        self.headers: dict[str, str] | list[tuple[str, str]] = (
            dict(headers or {})
            if headers is None or isinstance(headers, Mapping)
            else list(headers)
        )
        self.media_type = media_type


_NO_PARAMS: Mapping[str, str] = MappingProxyType({})


class RequestContext:
    """Everything about one request a handler may read, and the answer it builds.

    Built once per request, so it holds references and derives the rest on demand: the port's
    name, user data and authorization from ``port`` (anything with ``name``, ``user_data`` and
    ``auth``), where the request was routed from its :class:`~fwrest.server.handler.Handler`'s
    usage key ``(location path, method, route, thread pool)``.
    """

    __slots__ = (
        "_headers",
        "_query",
        "auth_user",
        "body",
        "chunks",
        "client",
        "close_after",
        "dpop",
        "fault",
        "handler",
        "method",
        "params",
        "path",
        "peer_cert",
        "port",
        "query_string",
        "rate",
        "raw_headers",
        "request_id",
        "resp_body",
        "resp_headers",
        "resp_status",
        "scope",
        "selected",
        "started",
    )

    def __init__(
        self,
        port: PortView,
        method: str,
        path: str,
        query_string: str,
        raw_headers: list[tuple[str, str]],
        body: bytes,
        client: str,
        peer_cert: Mapping[str, object] | None = None,
    ) -> None:
        # positional and few: this runs for every request
        self.port = port  # what serves the request: its name, user_data and auth
        self.method = method
        self.path = path
        self.query_string = query_string
        self.raw_headers = raw_headers
        self.body = body
        self.client = client
        self.peer_cert = peer_cert  # the client's certificate, decoded (SPEC 11.2)
        self.auth_user = ""
        # the path parameters, read-only: the router hands out MappingProxyType views (SPEC 3:
        # nothing a handler does to them can leak)
        self.params: Mapping[str, str] = _NO_PARAMS
        self.handler: Routed | None = None  # the endpoint the request was routed to
        self.resp_status = 200
        self.resp_body: list[str | bytes] | None = None
        self.resp_headers: dict[str, str] | None = None
        self.chunks: ChunkFeed | None = None  # a chunked answer in progress (setChunkedResponse)
        self.close_after = False  # setCloseAfterSend: the connection ends with this answer
        # SPEC 13.4: the port sets it as the request starts; a new id as its integer
        # (context/request_id.py's new_request_number), the client's own as text
        self.request_id: str | int | None = None
        self.scope = ""  # the access token's granted scopes, space-separated (SPEC 12.4)
        self._headers: Headers | None = None
        self._query: Mapping[str, str] | None = None
        # ``selected``: the lower-case name of the pool OnSelect picked (None: the location's
        # own), set by that stage on the ports that have one, and read only there (unset
        # elsewhere: a port without OnSelect pays nothing for it)
        self.selected: str | None
        # ``rate``: (requests left, seconds until the window ends), set by a location's rate
        # limit when it counted the request (SPEC 13.7), unset elsewhere
        self.rate: tuple[int, int]
        # ``dpop``: True, set by the bearer check when a DPoP-bound token came with its proof,
        # unset elsewhere: a 403 insufficient_scope challenges with the scheme the token came
        # with (RFC 9449 7.1)
        self.dpop: bool
        # ``fault``: the message of fwrest's error body the answer carries (setFault, or the
        # standard 500 a pool with OnSend makes), which a later status rewrites (SPEC 3: its
        # code is the status); unset, or None, while the answer carries none
        self.fault: str | None
        # ``started``: perf_counter_ns() when the port took the request (set by the port's
        # pipeline): what a deadline counted from the request's start reads
        self.started: int

    @property
    def server_name(self) -> str:
        """The name of the server section (port) serving the request."""
        return self.port.name

    @property
    def user_data(self) -> Any:
        """The port's ``FwData.UserData`` (as configured; callers copy it)."""
        return self.port.user_data

    @property
    def auth(self) -> AuthInfo:
        """The authorization in force on the port."""
        return self.port.auth

    @property
    def usage_key(self) -> UsageKey | None:
        """Where the request was routed, None before routing."""
        return self.handler.usage_key if self.handler is not None else None

    @property
    def route(self) -> str:
        """The matched route's pattern relative to its location, e.g. ``/users/:id``."""
        return self.handler.usage_key.route if self.handler is not None else ""

    @property
    def location_path(self) -> str:
        return self.handler.usage_key.location if self.handler is not None else ""

    @property
    def pool_name(self) -> str:
        return self.handler.usage_key.pool if self.handler is not None else ""

    @property
    def headers(self) -> Headers:
        if self._headers is None:
            self._headers = Headers(self.raw_headers)
        return self._headers

    @property
    def query(self) -> Mapping[str, str]:
        if self._query is None:
            pairs = (
                parse_qsl(self.query_string, keep_blank_values=True) if self.query_string else []
            )
            self._query = MappingProxyType(dict(pairs))
        return self._query


current: contextvars.ContextVar[RequestContext] = contextvars.ContextVar("fwrest_request")
