"""Call plans for endpoint functions, fixed at start, and turning results into replies.

A :class:`Handler` is built per route when the plan is made (which parameters the function
takes, ``def`` or ``async def``); :func:`bind` turns it, in each worker, into one uniform call
``invoke(params) -> awaitable result`` that already knows its thread pool and its
``ActiveTimeout``, so that the request path makes no choice about how to call it (as
Starlette's ``request_response`` decides at registration).
"""

from __future__ import annotations

import codecs
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import msgspec

from fwrest.auth.blocking import settled
from fwrest.context.charsets import UTF8, Charset, answer_charset, unencodable
from fwrest.context.chunks import ChunkedAnswer
from fwrest.context.events import EventStream
from fwrest.context.jsonbody import VIEWS, NotJSON, to_json
from fwrest.context.request import RequestContext, Response, check_header, check_status
from fwrest.context.views import UsageKey
from fwrest.repository import Endpoint, is_async
from fwrest.repository.hints import NO_HINTS, HintError, Hints, read_hints
from fwrest.server.hooked import compose
from fwrest.server.hooks import NO_HOOKS, PoolHooks
from fwrest.server.streams import events, is_stream, pieces
from fwrest.server.typed import typed_function
from fwrest.wire import Reply

__all__ = [
    "JSON_TYPE",
    "Handler",
    "Invoke",
    "Reply",
    "Submit",
    "bind",
    "reads_ahead",
    "result_reply",
]

JSON = "application/json"
JSON_TYPE = ("content-type", JSON)  # the header pair of a JSON reply, shared
OCTETS = "application/octet-stream"


_NO_KWARGS: dict[str, str] = {}  # passed as **_NO_KWARGS: Python copies it


class ResultError(TypeError):
    """A handler returned something fwrest cannot send."""


class Handler:
    """One endpoint's function with how to call it, decided once at start.

    Path parameters are passed by name when the function declares them (or takes
    ``**kwargs``); ``async def`` functions run on the event loop, ``def`` ones in the
    location's thread pool. A function whose type hints ask for more (SPEC 14.1: converted
    path parameters, query parameters, a JSON body, an encoded result) is called through
    :func:`fwrest.server.typed.typed_function`, built here, once; ``hints`` says what they
    ask (the OpenAPI document reads it), ``problem`` why the start must refuse them.
    """

    __slots__ = (
        "endpoint",
        "func",
        "hints",
        "invoke",
        "invokes",
        "is_async",
        "missing",
        "pass_all",
        "passed",
        "problem",
        "submit",
        "takes_params",
        "usage_key",
    )

    def __init__(self, endpoint: Endpoint, usage_key: UsageKey) -> None:
        self.endpoint = endpoint
        self.usage_key = usage_key
        # the call of the request path, bound to a worker's pool by bind() (unbound: refused)
        self.invoke: Invoke = _unbound
        # on a port with OnSelect: the call in each pool it may pick, by lower-case pool name
        self.invokes: dict[str, Invoke] = {}
        self.submit: Submit | None = None  # the worker's pool, set by bind (streams use it)
        self.func: Callable[..., Any] = endpoint.func
        self.is_async = is_async(endpoint.func)
        names: set[str] = set()
        required: list[str] = []
        self.pass_all = False
        try:
            sig = inspect.signature(endpoint.func)
        except (TypeError, ValueError):
            sig = None
        route_names = {s[1:] for s in endpoint.path.split("/") if s.startswith(":")}
        self.hints: Hints = NO_HINTS
        self.problem = ""  # a hint fwrest cannot fill: the start refuses the route
        if endpoint.source != "native":
            try:
                self.hints = read_hints(endpoint.func, route_names)
            except HintError as exc:
                self.problem = str(exc)
        filled = {p.name for p in self.hints.params if p.source != "path"}
        if sig is not None:
            for param in sig.parameters.values():
                if param.kind is inspect.Parameter.VAR_KEYWORD:
                    self.pass_all = True
                elif param.kind in (
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    inspect.Parameter.KEYWORD_ONLY,
                ):
                    names.add(param.name)
                    if (
                        param.default is param.empty
                        and param.name not in route_names
                        and param.name not in filled
                    ):
                        required.append(param.name)
                elif (
                    param.kind is inspect.Parameter.POSITIONAL_ONLY and param.default is param.empty
                ):
                    required.append(param.name)  # fwrest passes parameters by name only
        # parameters without a default that the route cannot fill: every call would fail, so
        # the start refuses the route (SPEC 2: a mistake stops the start, not each request)
        self.missing = tuple(required)
        self.passed = frozenset(names & route_names)
        self.takes_params = bool(self.passed) or self.pass_all  # else it is called bare
        if self.hints.typed:
            self.func = typed_function(endpoint.func, self.hints, self.is_async)

    def kwargs(self, params: Mapping[str, str]) -> dict[str, str]:
        if not self.passed:
            return dict(params) if self.pass_all else _NO_KWARGS
        if self.pass_all:
            return dict(params)
        return {k: v for k, v in params.items() if k in self.passed}


Invoke = Callable[[Mapping[str, str]], Awaitable[Any]]
"""A route's call: its path parameters in, the function's result out (to be awaited)."""


class Submit(Protocol):
    """How a ``def`` function is run off the loop (a location's thread pool)."""

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Awaitable[Any]: ...


def _unbound(params: Mapping[str, str]) -> Awaitable[Any]:
    raise RuntimeError("a route was called before its handler was bound to a worker")


def bind(
    handler: Handler,
    submit: Submit,
    bounded: Callable[[Awaitable[Any]], Awaitable[Any]] | None = None,
    hooks: PoolHooks = NO_HOOKS,
    *,
    primary: bool = True,
) -> Invoke:
    """The call of ``handler`` in one worker: ``def`` functions through ``submit`` (the
    location's pool), ``async def`` ones on the loop; path parameters by name only when the
    function takes them; with the pool's ``OnSend``/``OnError`` around an application route's
    call (:mod:`fwrest.server.hooked`); under ``bounded`` (the pool's ``ActiveTimeout``) when
    given, hooks included. ``primary``: the call of the route's own pool (not one ``OnSelect``
    may pick), whose ``submit`` also advances the route's ``def`` streams."""
    func = handler.func
    kwargs = handler.kwargs
    if primary:
        handler.submit = submit
    call: Invoke
    if hooks.per_request and handler.endpoint.source != "native":
        call = compose(func, kwargs, handler.is_async, submit, hooks.on_send, hooks.on_error)
    elif handler.is_async:
        if handler.takes_params:

            def call(params: Mapping[str, str]) -> Awaitable[Any]:
                return func(**kwargs(params))  # type: ignore[no-any-return]
        else:

            def call(params: Mapping[str, str]) -> Awaitable[Any]:
                return func()  # type: ignore[no-any-return]
    elif handler.takes_params:

        def call(params: Mapping[str, str]) -> Awaitable[Any]:
            return settled(submit(func, **kwargs(params)))
    else:

        def call(params: Mapping[str, str]) -> Awaitable[Any]:
            return settled(submit(func))

    if bounded is None:
        return call
    plain = call

    def limited(params: Mapping[str, str]) -> Awaitable[Any]:
        return bounded(plain(params))

    return limited


def _encode(value: Any, charset: Charset) -> tuple[bytes, str]:
    if isinstance(value, dict | list):
        return to_json(value), JSON
    if isinstance(value, str):
        return _text(value, charset), charset.text_type
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value), OCTETS
    if isinstance(value, bool | int | float):
        return to_json(value), JSON
    if isinstance(value, msgspec.Struct) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return to_json(value), JSON  # a typed value without a return hint (SPEC 14.1)
    if isinstance(value, VIEWS):
        return to_json(value), JSON  # a view the REST object handed out, as the dict it shows
    raise ResultError(f"a handler returned a {type(value).__name__}, which fwrest cannot send")


def reads_ahead(result: Any, reply: Reply, method: str, bounded: bool) -> bool:
    """Whether the first piece of the stream ``result`` was encoded into (``reply``) is read
    before the answer's head goes out: never for an answer without content (HEAD, 204, 205,
    304), whose stream is closed unread and whose head goes at once, with or without
    ``ActiveTimeout``; else every stream under ``ActiveTimeout`` (``bounded``, SPEC 10.5),
    and a handler's iterator on every location, so that one failing (or giving an item that
    is not text or bytes) before its first piece is a clean 500, not a 200 cut short. Not,
    without ``ActiveTimeout``, an ``EventStream`` (an event-stream client expects the head at
    once), nor ``setChunkedResponse``'s (its head went with its first piece), nor a finished
    ``Reply``."""
    status = reply.status
    if method == "HEAD" or status == 204 or status == 205 or status == 304:
        return False
    return bounded or not isinstance(result, (EventStream, ChunkedAnswer, Reply))


def result_reply(result: Any, ctx: RequestContext, submit: Submit | None = None) -> Reply:
    """The reply for a handler's return value and what it set on the REST object (SPEC 9);
    ``submit`` advances a ``def`` generator's stream in the location's pool.

    Raises:
        ResultError: the value cannot be sent (the caller answers 500 and logs it).
    """
    try:
        reply = _reply(result, ctx, submit)
    except NotJSON as exc:
        raise ResultError(f"a handler returned data that is not JSON: {exc}") from None
    status = reply.status
    if status == 204 or status == 304:
        _without_media(reply, result, ctx)
    return reply


def _without_media(reply: Reply, result: Any, ctx: RequestContext) -> None:
    """A 204 or 304 has no content (RFC 9110 15.3.5, 15.4.5): no ``Content-Type`` for it
    either, unless the application set one itself (``setKeyHeaderResponse``, a
    ``Response``'s ``media_type`` or headers) or it is a native route's finished answer."""
    if type(result) is Reply:
        return
    named: list[Any] = list(ctx.resp_headers or ())
    if isinstance(result, Response):
        if result.media_type:
            return
        given = result.headers  # (checked by _checked: a dict, or pairs)
        named += given if isinstance(given, dict) else [_pair(h)[0] for h in given]
    if any(str(n).lower() == "content-type" for n in named):
        return
    reply.headers = [(n, v) for n, v in reply.headers if n != "content-type"]


def _checked(result: Response) -> tuple[int, str | None, list[tuple[str, str]]]:
    """A ``Response``'s status, media type and headers, checked as ``setStatusCode`` and
    ``setKeyHeaderResponse`` check theirs (SPEC 7.1): a reflected value with CR or LF can
    never add a header, a 1xx status never break the next answer of the connection.

    Raises:
        ResultError: one of them cannot be written (the caller answers 500 and logs why).
    """
    try:
        status = check_status(result.status)
        media = None
        if result.media_type:
            media = check_header("Content-Type", result.media_type)[1]
        headers = result.headers
        if isinstance(headers, dict):  # one line a name, whatever its case
            extra = [
                check_header(n, v)
                for n, v in {n.lower(): (n, v) for n, v in headers.items()}.values()
            ]
        elif isinstance(headers, list):  # pairs: a name given twice is sent twice
            extra = [check_header(*_pair(item)) for item in headers]
        else:  # Response copies them into a dict or a list, unless replaced
            raise ValueError(f"its headers are a {type(headers).__name__}, not a dict")
    except ValueError as exc:
        raise ResultError(f"a handler returned a Response that cannot be sent: {exc}") from None
    return status, media, extra


def _pair(item: Any) -> tuple[Any, Any]:
    """A ``(name, value)`` pair of a ``Response``'s list of headers.

    Raises:
        ValueError: it is not a pair.
    """
    if not isinstance(item, tuple | list) or len(item) != 2:
        raise ValueError(f"its headers hold {item!r}, not a (name, value) pair")
    return item[0], item[1]


def _put(headers: dict[str, str], extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A ``Response``'s headers put in ``headers`` by lower-case name; returns the earlier
    pairs of a name its list gives more than once (two ``Set-Cookie``), sent before its last."""
    seen: set[str] = set()
    again: list[tuple[str, str]] = []
    for name, value in extra:
        low = name.lower()
        if low in seen:
            again.append((low, headers[low]))
        seen.add(low)
        headers[low] = value
    return again


def _pairs(
    headers: dict[str, str], again: Sequence[tuple[str, str]], ctx: RequestContext
) -> list[tuple[str, str]]:
    """The answer's headers, with ``again`` (:func:`_put`) for the names the REST object did
    not set (its header replaces the ``Response``'s, as for any name) and the engine's own
    framing ones left out."""
    if not again:
        return list(headers.items())
    taken = {n.lower() for n in ctx.resp_headers or ()}
    kept = [(n, v) for n, v in again if n not in taken and n in headers]
    return [*kept, *headers.items()]


def _text(value: str, charset: Charset, encode: Callable[[str], bytes] | None = None) -> bytes:
    """``value`` in ``charset``: the server's ``Charset`` or the answer's own (SPEC 10.6);
    ``encode``: the incremental encoder of an answer in pieces (one byte order mark).

    Raises:
        ResultError: a character the charset has no byte for (a 500, and why in the log).
    """
    try:
        return value.encode(charset.codec) if encode is None else encode(value)
    except UnicodeEncodeError as exc:
        why = unencodable(value, exc, charset.described)
        raise ResultError(f"a handler returned {why}") from None


def _answer_charset(media: str, charset: Charset) -> tuple[Charset, str]:
    """The charset a ``str`` body labelled ``media`` is sent in, and its label
    (:func:`~fwrest.context.charsets.answer_charset`).

    Raises:
        ResultError: the label declares a charset fwrest does not encode (a 500, named in
            the log).
    """
    try:
        return answer_charset(media, charset)
    except LookupError as exc:
        raise ResultError(f"a handler's text answer cannot be sent: {exc}") from None


def _labelled(text: str | list[str | bytes], headers: dict[str, str], charset: Charset) -> bytes:
    """A ``str`` body (or ``setResponse``'s pieces) in the charset its final ``Content-Type``
    says (SPEC 10.6), the label completed in ``headers``."""
    media = headers.get("content-type")
    if not media or media == charset.text_type:  # the server's own label: its Charset
        used = charset
        headers["content-type"] = charset.text_type
    else:
        used, headers["content-type"] = _answer_charset(media, charset)
    if isinstance(text, str):
        return _text(text, used)
    encode = codecs.getincrementalencoder(used.codec)().encode
    return b"".join(_text(p, used, encode) if isinstance(p, str) else p for p in text)


def _stream_reply(result: Any, ctx: RequestContext, submit: Submit | None) -> Reply:
    """A streamed answer (SPEC 10.5): the iterator, or a ``Response`` whose body is one."""
    charset = ctx.port.charset
    headers: dict[str, str] = {"content-type": charset.text_type}
    status = ctx.resp_status
    source = result
    again: Sequence[tuple[str, str]] = ()
    if isinstance(result, Response):
        status, media, extra = _checked(result)
        source = result.body
        if media:
            headers["content-type"] = media
        again = _put(headers, extra)
    if ctx.resp_headers:
        for name, value in ctx.resp_headers.items():
            headers[name.lower()] = value
    for name in ("content-length", "transfer-encoding", "connection"):
        headers.pop(name, None)
    # str items in the charset the label says (SPEC 10.6), decided once for the stream
    used, headers["content-type"] = _answer_charset(
        headers.get("content-type") or charset.text_type, charset
    )
    stream = pieces(source, submit, used)
    return Reply(status, _pairs(headers, again, ctx), b"", stream=stream)


def _event_reply(result: EventStream, ctx: RequestContext, submit: Submit | None) -> Reply:
    """Server-Sent Events (SPEC 10.5): never buffered; through a compressing location each
    event is compressed and flushed as it comes (the stream's rule); ``no-transform`` asks
    proxies to pass the events on as they are."""
    headers: dict[str, str] = {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache, no-transform",
        "x-accel-buffering": "no",  # nginx: pass each event on at once
    }
    try:
        extra = [check_header(name, value) for name, value in result.headers.items()]
    except ValueError as exc:
        raise ResultError(f"an EventStream's headers cannot be sent: {exc}") from None
    for name, value in [*extra, *(ctx.resp_headers or {}).items()]:
        headers[name.lower()] = value
    for name in ("content-length", "transfer-encoding", "connection"):
        headers.pop(name, None)
    stream = events(result.items, submit)
    return Reply(ctx.resp_status, list(headers.items()), b"", stream=stream)


def _chunked_reply(result: ChunkedAnswer, ctx: RequestContext) -> Reply:
    """``setChunkedResponse``'s first piece: the status and headers set before it (what
    ``OnSend`` sets after it is ignored, docs/hooks.md), then the pieces as the handler
    sends them."""
    headers = {"content-type": ctx.port.charset.text_type}
    for name, value in result.headers.items():
        headers[name.lower()] = value
    for name in ("content-length", "transfer-encoding", "connection"):
        headers.pop(name, None)
    stream = result.feed.pieces()
    return Reply(result.status, list(headers.items()), b"", stream=stream)


_PLAIN = frozenset((dict, list, str, bytes, type(None)))  # results that are answers as they are
_FRAMING = frozenset(("content-length", "transfer-encoding", "connection"))  # the engine's own


def _with_set(media: tuple[str, str], set_headers: dict[str, str]) -> list[tuple[str, str]]:
    """A result's content type and the headers the request set (they win, the framing ones
    excepted: the engine writes those)."""
    headers = {media[0]: media[1]}
    for name, value in set_headers.items():
        headers[name.lower()] = value
    for name in _FRAMING.intersection(headers):
        del headers[name]
    return list(headers.items())


def _reply_with_set(reply: Reply, ctx: RequestContext) -> Reply:
    """A finished reply with the headers the request set (``onAuthparams`` may set some),
    as a ``Response`` gets them."""
    headers = dict(reply.headers)
    for name, value in (ctx.resp_headers or {}).items():
        headers[name.lower()] = value
    for name in _FRAMING.intersection(headers):
        del headers[name]
    reply.headers = list(headers.items())
    return reply


def _reply(result: Any, ctx: RequestContext, submit: Submit | None = None) -> Reply:
    status = ctx.resp_status
    kind = type(result)
    if kind is dict:
        set_headers = ctx.resp_headers
        if set_headers is None:
            # the common case, a dict sent as JSON: no header merging to do
            return Reply(status, [JSON_TYPE], to_json(result))
        return Reply(status, _with_set(JSON_TYPE, set_headers), to_json(result))
    if kind not in _PLAIN:  # a dict, list or text is never a stream (the ABC checks cost)
        if kind is Reply:
            # a native route's finished answer (the token service's routes: auth/oauth2/route.py)
            return result if ctx.resp_headers is None else _reply_with_set(result, ctx)
        if is_stream(result) or (isinstance(result, Response) and is_stream(result.body)):
            return _stream_reply(result, ctx, submit)
        if isinstance(result, EventStream):
            return _event_reply(result, ctx, submit)
        if isinstance(result, ChunkedAnswer):
            # setChunkedResponse's first piece: the status and headers set so far, then pieces
            return _chunked_reply(result, ctx)
    headers: dict[str, str] = {}
    again: Sequence[tuple[str, str]] = ()  # a Response's header given twice (two Set-Cookie)
    charset = ctx.port.charset
    # a str body, encoded once its final label is known (SPEC 10.6: the charset it declares)
    text: str | list[str | bytes] | None = None
    body = b""
    if result is not None:
        if isinstance(result, Response):
            status, media, extra = _checked(result)
            if isinstance(result.body, str):
                text = result.body
                headers["content-type"] = media or charset.text_type
            else:
                body, encoded_media = _encode(result.body, charset)
                headers["content-type"] = media or encoded_media
            again = _put(headers, extra)
        elif isinstance(result, str):
            if ctx.resp_headers is None:  # the common text answer: its label is the server's
                return Reply(status, [("content-type", charset.text_type)], _text(result, charset))
            text = result
            headers["content-type"] = charset.text_type
        else:
            body, media = _encode(result, charset)
            headers["content-type"] = media
    elif ctx.resp_body is not None:
        parts = ctx.resp_body
        body = b"".join(p.encode("utf-8") if isinstance(p, str) else p for p in parts)
        stripped = body.lstrip()[:1]
        if stripped in (b"{", b"["):
            headers["content-type"] = JSON  # JSON stays UTF-8 (RFC 8259)
        else:
            headers["content-type"] = charset.text_type
        if ctx.resp_headers or (charset is not UTF8 and stripped not in (b"{", b"[")):
            text = parts  # a label of its own, or the server's charset: encoded below
    if ctx.resp_headers:
        for name, value in ctx.resp_headers.items():
            headers[name.lower()] = value
    if text is not None:
        body = _labelled(text, headers, charset)
    headers.pop("content-length", None)
    headers.pop("transfer-encoding", None)
    headers.pop("connection", None)
    return Reply(status, _pairs(headers, again, ctx), body)
