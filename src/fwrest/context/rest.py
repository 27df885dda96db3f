"""``from fwrest import rest``: the REST object. Reads the current request's context.

snake_case methods are the Python API; the camelCase names of the original product are thin
aliases (STYLE "Naming").
"""

from __future__ import annotations

import codecs
import copy
import gzip
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fwrest import log
from fwrest.config.hosts import authority, host_and_port
from fwrest.context import chunks
from fwrest.context.certs import certificate_fields
from fwrest.context.charsets import answer_charset, body_text, unencodable
from fwrest.context.codings import choose_coding
from fwrest.context.jsonbody import VIEWS, to_json
from fwrest.context.request import Headers, RequestContext, check_header, check_status, current
from fwrest.context.request_id import id_text, request_id_of
from fwrest.errors import STATUS_PHRASES, error_body

if TYPE_CHECKING:
    from fwrest.config.model import ThreadPoolConfig

__all__ = ["RestObject", "rest"]


class NoRequestError(RuntimeError):
    """The REST object was used outside a request."""


class RestObject:
    """The current request, as the handler running for it sees it."""

    __slots__ = ()

    @staticmethod
    def _ctx() -> RequestContext:
        try:
            return current.get()
        except LookupError:
            raise NoRequestError(
                "fwrest.rest is only available while a request is being handled"
            ) from None

    # -- request -------------------------------------------------------------------------------
    def path_params(self) -> Mapping[str, str]:
        """The path parameters by name (read-only)."""
        return self._ctx().params

    def query(self) -> Mapping[str, str]:
        """The query parameters (read-only; a repeated name keeps its last value)."""
        return self._ctx().query

    def headers(self) -> Headers:
        """The request headers (read-only, case-insensitive names)."""
        return self._ctx().headers

    def body(self) -> str:
        """The request body as text: in the charset its ``Content-Type`` declares, else the
        server's ``Charset`` (UTF-8 by default); undecodable bytes replaced (SPEC 10.6).

        Raises:
            HTTPError: 415 when the declared charset is not one a client can mean (UTF-8,
                UTF-16, UTF-32, ISO 8859, windows-125x...: ``charsets.ACCEPTED``); the
                request is answered so, unless the handler catches it.
        """
        ctx = self._ctx()
        declared = None
        for name, value in ctx.raw_headers:
            if name == "content-type":
                declared = value
                break
        return body_text(ctx.body, declared, ctx.port.charset)

    def body_bytes(self) -> bytes:
        """The request body as received."""
        return self._ctx().body

    def method(self) -> str:
        return self._ctx().method

    def path(self) -> str:
        """The request's normalised path, location prefix included, without the query."""
        return self._ctx().path

    def server_user_data(self) -> Any:
        """A copy of the server's ``UserData``."""
        return copy.deepcopy(self._ctx().user_data)

    def auth_user(self) -> str:
        """The authenticated user's name ("" on an open port)."""
        return self._ctx().auth_user

    def client_certificate(self) -> dict[str, Any] | None:
        """The certificate the client presented on a port with ``SslClientCert`` 1 or 2, as
        ``{"subject", "issuer", "serial", "not_after", "sans"}`` (SPEC 11.2; a new dict each
        call); None when it sent none, or the port asks for none."""
        cert = self._ctx().peer_cert
        return certificate_fields(cert) if cert else None

    # -- response ------------------------------------------------------------------------------
    def set_response(self, body: Any) -> None:
        """Append to the response body (repeated calls append): text and bytes as they are, a
        dict or list (or a view this object handed out) as its JSON text, anything else as
        ``str()`` gives it."""
        ctx = self._ctx()
        if ctx.resp_body is None:
            ctx.resp_body = []
        if isinstance(body, str | bytes):
            ctx.resp_body.append(body)
        elif isinstance(body, (dict, list, *VIEWS)):
            ctx.resp_body.append(to_json(body))
        else:
            ctx.resp_body.append(str(body))

    def status_code(self) -> int:
        """The answer's status as it stands: 200, or what ``setStatusCode`` or ``setFault`` set;
        in ``OnSend``, the status of the answer it is shown (a returned ``Response``'s own)."""
        return self._ctx().resp_status

    def set_status_code(self, status: int) -> None:
        """Set the answer's status, a number in 200-599 (1xx are interim answers, never a
        response of their own): anything else raises ``ValueError``, a 500 (SPEC 7.1).

        On an answer that carries fwrest's error body (``setFault``, or the standard 500 an
        ``OnSend`` is shown), a 4xx or 5xx status rewrites the body's ``code`` with it (SPEC 3:
        the code is the status); a lower one is refused, logged as a warning, and the error's
        status stands: an error body is never sent as a success (docs/decisions.md).
        """
        ctx = self._ctx()
        status = check_status(status)
        if getattr(ctx, "fault", None) is not None:
            status = _fault_status(ctx, status)
        ctx.resp_status = status

    def set_header(self, name: str, value: str) -> None:
        """Set a response header. The name must be a token, the value free of CR, LF, NUL
        and other control characters (HTAB allowed): anything else raises ``ValueError``,
        a 500, so that a reflected value can never add a header (SPEC 7.1)."""
        name, text = check_header(name, value)
        ctx = self._ctx()
        if ctx.resp_headers is None:
            ctx.resp_headers = {}
        ctx.resp_headers[name] = text

    def set_fault(self, message: str) -> None:
        """Answer with the framework's error body carrying ``message`` (SPEC 3): status 500, or
        the 4xx/5xx status set before it with ``setStatusCode``; a 4xx/5xx status set after it
        rewrites the body's ``code`` too, a lower one is refused (``set_status_code``).

        The body is JSON, ``{"code": status, "detailedMessage": "", "message": message}``, as
        every error of the framework, so that a client handles all errors alike: it replaces
        what ``setResponse`` gathered, and a ``Content-Type`` or ``Content-Encoding`` set
        before it is dropped (other headers stay).
        """
        ctx = self._ctx()
        status = ctx.resp_status if 400 <= ctx.resp_status <= 599 else 500
        ctx.resp_status = status
        ctx.fault = str(message)
        ctx.resp_body = [error_body(status, ctx.fault)]
        headers = ctx.resp_headers
        if headers:
            # the body is JSON as it is, whatever the handler meant to send before
            _drop_header(headers, "content-type")
            _drop_header(headers, "content-encoding")

    def send_zipped(self, data: str | bytes) -> None:
        """Answer with ``data`` (text as UTF-8) gzip-compressed, with ``Content-Encoding:
        gzip``, when the request accepts gzip; as it is otherwise (SPEC 10.4). The answer
        says ``Vary: Accept-Encoding`` either way. Replaces what ``setResponse`` gathered."""
        ctx = self._ctx()
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        accepted = [v for n, v in ctx.raw_headers if n == "accept-encoding"]
        coding, _ = choose_coding(",".join(accepted) or None, ("gzip",))
        if ctx.resp_headers is None:
            ctx.resp_headers = {}
        ctx.resp_headers["Vary"] = "Accept-Encoding"
        if coding is not None:
            ctx.resp_headers["Content-Encoding"] = "gzip"
            raw = gzip.compress(raw, mtime=0)
        ctx.resp_body = [raw]
        ctx.fault = None

    def send_chunk(self, data: str | bytes, last: bool = False) -> None:
        """Send ``data`` as the next piece of a chunked answer, from a ``def`` handler, while
        it runs (SPEC 10.5); ``last`` ends the answer. The first piece sends the status and
        headers set so far; a piece waits while the client is far behind.

        Raises:
            TypeError: ``data`` is not text or bytes (what a streamed answer's items may be).
            RuntimeError: not in a ``def`` handler (an ``async def`` one returns an async
                iterator instead), or after the last piece.
            ClientDisconnected: the answer can no longer be sent (its client went away, or
                took nothing of it for ``BodyTimeout``), a ``ConnectionError``.
        """
        ctx = self._ctx()
        if not isinstance(data, str | bytes | bytearray | memoryview):
            raise TypeError(f"setChunkedResponse takes str or bytes, not {type(data).__name__}")
        feed = ctx.chunks
        if feed is None:
            caller = getattr(chunks.running, "caller", None)
            if caller is None:
                raise RuntimeError(
                    "setChunkedResponse works in a def handler; an async def handler returns "
                    "an async iterator of its pieces instead, and a returned iterator yields "
                    "them"
                )
            encode = _chunk_encoder(ctx)
            # the first piece encoded before the head goes out: text its charset cannot
            # encode is then the handler's failure (a 500), not a cut answer
            piece = _encoded(encode, data) if isinstance(data, str) else bytes(data)
            feed = ctx.chunks = chunks.ChunkFeed(caller.loop, encode)
            # the head is committed here (a copy): OnSend, run when the handler returns,
            # cannot change it, whether or not the loop has written it yet
            head = dict(ctx.resp_headers or {})
            answer = chunks.ChunkedAnswer(feed, ctx.method, ctx.path, ctx.resp_status, head)
            caller.answer_early(answer)
        else:
            piece = _encoded(feed.encode, data) if isinstance(data, str) else bytes(data)
        feed.put(piece)
        if last:
            feed.end()

    # -- authorization (SPEC 3 table) -----------------------------------------------------------
    def auth_scheme(self) -> str:
        return self._ctx().auth.scheme

    def auth_on_auth(self) -> str:
        return self._ctx().auth.on_auth

    def auth_has_callback(self) -> bool:
        return self._ctx().auth.has_callback

    # -- the original product's names ------------------------------------------------------------
    def getPathParamsRequest(self) -> Mapping[str, str]:
        return self.path_params()

    def getQueryRequest(self) -> Mapping[str, str]:
        return self.query()

    def getHeaderRequest(self) -> Headers:
        return self.headers()

    def getBodyRequest(self) -> str:
        return self.body()

    def getMethodRequest(self) -> str:
        return self.method()

    def getPathRequest(self) -> str:
        return self.path()

    def setResponse(self, body: str | bytes) -> None:
        self.set_response(body)

    def getStatusCode(self) -> int:
        return self.status_code()

    def setStatusCode(self, status: int) -> None:
        self.set_status_code(status)

    def setKeyHeaderResponse(self, name: str, value: str) -> None:
        self.set_header(name, value)

    def setFault(self, message: str) -> None:
        self.set_fault(message)

    def sendZipped(self, data: str | bytes) -> None:
        self.send_zipped(data)

    def setChunkedResponse(self, data: str | bytes) -> None:
        self.send_chunk(data)

    def setLastChunkedResponse(self, data: str | bytes) -> None:
        self.send_chunk(data, last=True)

    def getServerUserData(self) -> Any:
        return self.server_user_data()

    def getAuthUser(self) -> str:
        return self.auth_user()

    def getClientCertificate(self) -> dict[str, Any] | None:
        return self.client_certificate()

    def getCEntryPointAuthorizationScheme(self) -> str:
        return self.auth_scheme()

    def getCEntryPointAuthorizationOnAuth(self) -> str:
        return self.auth_on_auth()

    def getLEntryPointAuthorization(self) -> bool:
        return self.auth_has_callback()

    def getThreadPoolAuthorizationScheme(self) -> str:
        # Authorization is per port: the pool's scheme is that of the request's port (SPEC 3).
        return self.auth_scheme()

    def getThreadPoolAuthorizationOnAuth(self) -> str:
        return self.auth_on_auth()

    # -- the legacy start (SPEC 6): no request needed -------------------------------------------
    def wsRestfulStart(self, jo: Any, path: str) -> int:
        """Start a service from infrastructure JSON, adding the location ``path`` to every
        server; 0 on success, non-zero (with the message logged) otherwise."""
        from fwrest.server.legacy import ws_restful_start

        return ws_restful_start(jo, path)

    def wsRestfulStop(self) -> int:
        """Stop the services ``wsRestfulStart`` started."""
        from fwrest.server.legacy import ws_restful_stop

        return ws_restful_stop()

    # -- more of the request and the answer (SPEC 11.3) -----------------------------------------
    def client_ip(self) -> str:
        """The client's address: the connection's peer, or, for a request that comes from a
        ``TrustedProxies`` balancer, the rightmost ``X-Forwarded-For`` address that is not a
        trusted proxy (the one the access line and the brute-force count use)."""
        return self._ctx().client

    def full_url(self) -> str:
        """The URL the client asked for, ``scheme://host[:port]/path?query``.

        The host is the request's ``Host`` when it names this server (the check of SPEC 7.1:
        ``HostName``, the bound address, ``localhost`` on loopback, ``AllowedHosts``), with
        the port it gives; else the server's own ``HostName`` and port, so that a forged
        ``Host`` never gets into a URL the application hands out. The scheme is the port's;
        the path is the normalised one (``getPathRequest()``'s, percent-encoded again), the
        query as received. A default port (80, 443) is left out: a ``GET
        /rest/./users/1?fields=name`` with ``Host: api.example.com`` to an ``https`` port
        that ``AllowedHosts`` lets that name gives ``https://api.example.com/rest/users/1?fields=name``.
        """
        ctx = self._ctx()
        port = ctx.port
        scheme = port.scheme
        where = port.authority
        hosts = [value for name, value in ctx.raw_headers if name == "host"]
        if len(hosts) == 1 and port.names_host(hosts[0]):
            found = host_and_port(hosts[0])
            if found is not None:
                host, given = found
                if not given:
                    where = authority(host, None, scheme)
                elif given.isascii() and 0 < int(given) <= 65535:
                    where = authority(host, int(given), scheme)
        query = f"?{ctx.query_string}" if ctx.query_string else ""
        return f"{scheme}://{where}{quote(ctx.path, safe=_PATH_SAFE)}{query}"

    def request_id(self) -> str:
        """The request's id (SPEC 13.4): its ``X-Request-ID`` when that is 1-128 characters of
        ``[A-Za-z0-9._:-]``, else a new one; the port gives every request its id as it
        starts, the one its answer and its log records carry."""
        ctx = self._ctx()
        found = ctx.request_id
        if found is None:
            found = ctx.request_id = request_id_of(ctx.raw_headers)
        elif not isinstance(found, str):
            found = ctx.request_id = id_text(found)  # a new id, formatted once read
        return found

    def close_after_send(self) -> None:
        """Close the connection once this answer is sent: it says ``Connection: close``, and
        a client's next request on it is not read."""
        self._ctx().close_after = True

    def update_header(self, name: str, value: str) -> bool:
        """Replace the value of a response header set on the REST object (the name compared
        without case); a header not set yet is set, as ``setKeyHeaderResponse`` does. True
        when one was replaced. Checked as ``setKeyHeaderResponse`` checks (``ValueError``,
        a 500: SPEC 7.1)."""
        name, text = check_header(name, value)
        ctx = self._ctx()
        headers = ctx.resp_headers
        if headers is None:
            headers = ctx.resp_headers = {}
        replaced = _drop_header(headers, name)
        headers[name] = text
        return replaced

    def delete_header(self, name: str) -> bool:
        """Remove a response header set on the REST object (the name compared without case);
        True when there was one. The headers fwrest adds while encoding the answer
        (``Content-Type``, ``Content-Length``) are not among them. A name that is no header
        name raises ``ValueError``, a 500."""
        name, _ = check_header(name, "")
        headers = self._ctx().resp_headers
        return headers is not None and _drop_header(headers, name)

    def reset_response(self) -> None:
        """Drop the body gathered so far (``setResponse``, ``setFault``, ``sendZipped``); the
        status and headers stay."""
        ctx = self._ctx()
        ctx.resp_body = None
        ctx.fault = None

    def reset_headers(self) -> None:
        """Drop every response header set on the REST object so far."""
        self._ctx().resp_headers = None

    def auth_scopes(self) -> list[str]:
        """The scopes granted to the request's access token (SPEC 12.4): ``default`` for a
        token issued without ``scope``, else those the token request was granted; empty on a
        Basic or open port, on an oAuth2 port's public paths, and where a custom ``onAuth``
        checks the token (a new list each call)."""
        return self._ctx().scope.split()

    def _pool(self) -> ThreadPoolConfig | None:
        ctx = self._ctx()
        # the pool OnSelect picked, where the port has one and it picked (SPEC 11.1, 11.3)
        return ctx.port.thread_pool(ctx.path, getattr(ctx, "selected", None))

    def pool_name(self) -> str:
        """The thread pool the request runs in (its location's, or the one the server's
        ``OnSelect`` picked), as its section is named; "" outside every location (as the
        other pool getters' 0)."""
        pool = self._pool()
        return pool.name if pool is not None else ""

    def pool_min_threads(self) -> int:
        pool = self._pool()
        return pool.min_threads if pool is not None else 0

    def pool_max_threads(self) -> int:
        pool = self._pool()
        return pool.max_threads if pool is not None else 0

    def pool_accept_timeout(self) -> int:
        """``AcceptTimeout`` of the request's pool, in ms."""
        pool = self._pool()
        return pool.accept_timeout_ms if pool is not None else 0

    def pool_inactive_timeout(self) -> int:
        """``InactiveTimeout`` of the request's pool, in ms."""
        pool = self._pool()
        return pool.inactive_timeout_ms if pool is not None else 0

    def pool_active_timeout(self) -> int:
        """``ActiveTimeout`` of the request's pool, in ms (0: none)."""
        pool = self._pool()
        return pool.active_timeout_ms if pool is not None else 0

    def pool_port(self) -> int:
        """The TCP port the request came in on."""
        return self._ctx().port.port_number

    def pool_ssl(self) -> bool:
        """Whether the request came in over TLS (the server's ``SslCertificate``)."""
        return self._ctx().port.scheme == "https"

    def getClientIP(self) -> str:
        return self.client_ip()

    def getFullURLRequest(self) -> str:
        return self.full_url()

    def getRequestId(self) -> str:
        return self.request_id()

    def setCloseAfterSend(self) -> None:
        self.close_after_send()

    def updateKeyHeaderResponse(self, name: str, value: str) -> bool:
        return self.update_header(name, value)

    def deleteKeyHeaderResponse(self, name: str) -> bool:
        return self.delete_header(name)

    def resetResponse(self) -> None:
        self.reset_response()

    def resetKeyHeaderResponse(self) -> None:
        self.reset_headers()

    def getAuthScopes(self) -> list[str]:
        return self.auth_scopes()

    def getThreadPoolName(self) -> str:
        return self.pool_name()

    def getThreadPoolMinThreads(self) -> int:
        return self.pool_min_threads()

    def getThreadPoolMaxThreads(self) -> int:
        return self.pool_max_threads()

    def getThreadPoolAcceptTimeout(self) -> int:
        return self.pool_accept_timeout()

    def getThreadPoolInactiveTimeout(self) -> int:
        return self.pool_inactive_timeout()

    def getThreadPoolActiveTimeout(self) -> int:
        return self.pool_active_timeout()

    def getThreadPoolPort(self) -> int:
        return self.pool_port()

    def getThreadPoolSsl(self) -> bool:
        return self.pool_ssl()


# RFC 3986 3.3: what a path segment may hold as it is, besides unreserved characters
_PATH_SAFE = "/!$&'()*+,;=:@~"


def _drop_header(headers: dict[str, str], name: str) -> bool:
    """Remove every spelling of ``name`` from ``headers``; whether there was one."""
    lowered = name.lower()
    found = [key for key in headers if key.lower() == lowered]
    for key in found:
        del headers[key]
    return bool(found)


rest = RestObject()


def _encoded(encode: Callable[[str], bytes], text: str) -> bytes:
    """``text`` as a chunked answer's piece.

    Raises:
        ValueError: a character the answer's charset has no byte for (named, as a ``str``
            answer's error names it).
    """
    try:
        return encode(text)
    except UnicodeEncodeError as exc:
        why = unencodable(text, exc, f"the answer's charset ({exc.encoding})")
        raise ValueError(f"setChunkedResponse: {why}") from None


def _chunk_encoder(ctx: RequestContext) -> Callable[[str], bytes]:
    """How a chunked answer's ``str`` pieces become bytes: in the charset its Content-Type
    declares (a JSON type: UTF-8), else the server's ``Charset``, the label completed in the
    headers the first piece sends (SPEC 10.6, as a ``str`` answer); one incremental encoder
    for the whole answer (one byte order mark).

    Raises:
        ValueError: the Content-Type declares a charset fwrest does not encode (nothing is
            sent yet: the handler's failure is a 500, logged).
    """
    headers = ctx.resp_headers if ctx.resp_headers is not None else {}
    ctx.resp_headers = headers
    name = next((n for n in headers if n.lower() == "content-type"), None)
    media = headers.pop(name) if name is not None else ctx.port.charset.text_type
    try:
        used, headers["Content-Type"] = answer_charset(media, ctx.port.charset)
    except LookupError as exc:
        raise ValueError(f"setChunkedResponse: {exc}") from None
    return codecs.getincrementalencoder(used.codec)().encode


def _fault_status(ctx: RequestContext, status: int) -> int:
    """The status ``setStatusCode(status)`` gives an answer carrying fwrest's error body: a 4xx
    or 5xx, with the body's ``code`` rewritten (a message that is its status's own phrase, as
    the standard 500's, follows the status); a lower one is logged, and the error's stands."""
    was = ctx.resp_status
    if status < 400:
        log.app_log.warning(
            "%s %s: setStatusCode(%d) on an answer with fwrest's error body (setFault, or the "
            "standard 500): an error is not sent as a success; its status %d stands",
            ctx.method,
            log.escape(ctx.path),
            status,
            was,
        )
        return was
    message = ctx.fault
    if message == STATUS_PHRASES.get(was):
        message = ctx.fault = STATUS_PHRASES.get(status, "Error")
    if ctx.resp_body:
        ctx.resp_body[0] = error_body(status, message)
    return status
