"""Tracing (SPEC 17.4, ``[HTTPSERVER] Tracing=otlp``, the extra ``fwrest[otel]``).

Imported only by a worker whose configuration sets ``Tracing`` (nothing of OpenTelemetry is
imported otherwise, and the request path is the same as without this module). What it adds
is decided at start, around the parts the worker assembles:

* :class:`TracedPort` serves a port in the engine's place (:class:`~fwrest.wire.PortHandler`):
  one server span per request, continuing the request's W3C ``traceparent``/``tracestate``
  (the SDK's propagators, ``OTEL_PROPAGATORS``), current while the port's pipeline runs, so
  that an application's own spans are its children (a ``def`` handler's too: a pool thread
  runs in a copy of the request's context); named ``{METHOD} {route}``, with the HTTP
  semantic conventions' attributes, never a header value but ``User-Agent``, never the
  query; it ends when the answer's last piece is written (a stream's too);
* :meth:`Tracing.guard` and :meth:`Tracing.call` compose the ``fwrest.auth`` and
  ``fwrest.handler`` child spans around the port's guard and each route's bound call, at
  start (``PortApp``'s ``traced``);
* :class:`TracedStoreClient` gives each store call made during a request its ``fwrest.store``
  span (``db.system.name``, ``fwrest.store.operation``: the ``StateStore`` operation it runs,
  ``store.calls.operation_of``);
* the log's ``Traced`` formatters read the current span's ids (``log.trace_ids``).

fwrest's own spans are children of the server span, none of them made current: SPEC 17.4
makes the server span the handler's parent. Spans are exported by the SDK's batch processor
and OTLP exporter, configured by the SDK's ``OTEL_*`` variables (endpoint, headers, timeout,
sampler, service name, ``OTEL_SDK_DISABLED``; the protocol, ``OTEL_EXPORTER_OTLP_PROTOCOL``
and ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``: OTLP/HTTP with protobuf by default, or OTLP/gRPC,
the extra ``fwrest[otel-grpc]``). A process whose application set an
SDK tracer provider of its own keeps it; else fwrest installs one, once per process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future
from contextvars import ContextVar
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from fwrest import __version__, log
from fwrest.config.loader import otlp_protocol
from fwrest.context.chunks import ChunkedAnswer
from fwrest.context.request import RequestContext
from fwrest.errors import ClientDisconnected, HTTPError, StreamCut, is_cancellation
from fwrest.server.app import Guard, PortApp
from fwrest.server.handler import Handler, Invoke
from fwrest.store.base import StoreBase
from fwrest.store.calls import (
    BACKGROUND_DEADLINE_S,
    STORE_THREADS,
    Started,
    StoreClient,
    operation_of,
)
from fwrest.wire import Reply, Request, close_stream

__all__ = ["TracedPort", "TracedStoreClient", "Tracing"]

T = TypeVar("T")

# what a stopping worker waits at most for its last spans to leave (the exporter's own
# timeout, OTEL_EXPORTER_OTLP_TIMEOUT, bounds each export)
FLUSH_S = 3.0

# RFC 9110's methods and PATCH: any other is "_OTHER" (the semantic conventions)
_METHODS = frozenset(
    ("CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE", "QUERY")
)


class _Headers(Getter[list[tuple[str, str]]]):
    """The propagators' view of a request's header fields (names in lower case)."""

    def get(self, carrier: list[tuple[str, str]], key: str) -> list[str] | None:
        key = key.lower()
        found = [value for name, value in carrier if name == key]
        return found or None

    def keys(self, carrier: list[tuple[str, str]]) -> list[str]:
        return [name for name, _ in carrier]


_HEADERS = _Headers()


class _Served:
    """The request being traced: its server span and what the pipeline tells it."""

    __slots__ = ("context", "recording", "route", "span")

    def __init__(self, span: Span, context: Context) -> None:
        self.span = span
        self.context = context  # the server span's (the parent of fwrest's spans)
        self.recording = span.is_recording()
        self.route = ""


# the request being traced, on the request's task (and in its pool jobs' copies)
_serving: ContextVar[_Served | None] = ContextVar("fwrest_tracing_served", default=None)


def _url_path(target: bytes) -> str:
    """The path of a request target, without its query (an absolute-form target's after
    its authority; ``*`` as it is).

    >>> _url_path(b"/rest/items/7?token=abc")
    '/rest/items/7'
    >>> _url_path(b"http://shop.example:8080/rest/x?a=1")
    '/rest/x'
    >>> _url_path(b"http://shop.example?a=1"), _url_path(b"*")
    ('/', '*')
    """
    text = target.decode("latin-1")
    if not text.startswith("/") and "://" in text:
        rest = text[text.index("://") + 3 :]
        slash = rest.find("/")
        text = rest[slash:] if slash >= 0 else "/"
    for mark in ("?", "#"):
        cut = text.find(mark)
        if cut >= 0:
            text = text[:cut]
    return text


def _error_type(exc: BaseException) -> str:
    """``error.type`` of an exception: an HTTP error's status, else the class's name (never
    its text, which may quote a request's secrets)."""
    if isinstance(exc, HTTPError):
        return str(exc.status)
    if isinstance(exc, StreamCut) and exc.cause is not None:
        exc = exc.cause  # a stream cut by its iterator's (or chunked handler's) failure
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def _failed(span: Span, exc: BaseException) -> None:
    """Mark ``span`` for an exception: ``error.type``, and the status ``ERROR`` unless the
    exception is an answer below 500 (a refusal is no failure of the server)."""
    span.set_attribute("error.type", _error_type(exc))
    if not isinstance(exc, HTTPError) or exc.status >= 500:
        span.set_status(Status(StatusCode.ERROR))


async def _child(
    tracer: Tracer, name: str, served: _Served, attributes: dict[str, Any], call: Awaitable[T]
) -> T:
    """``call`` awaited in a child span ``name`` of the request's server span, marked when
    it raises."""
    span = tracer.start_span(name, served.context, attributes=attributes)
    try:
        return await call
    except BaseException as exc:
        _failed(span, exc)
        raise
    finally:
        span.end()


def _handler_ended(span: Span, failure: BaseException | None) -> None:
    """(a pool thread) A chunked handler ended: its span too, marked when it failed (not
    when its client went away: no failure of the server)."""
    if failure is not None and not isinstance(failure, ClientDisconnected):
        _failed(span, failure)
    span.end()


def _current_ids() -> tuple[str, str] | None:
    """The current span's ids for the log (``log.trace_ids``)."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


_lock = threading.Lock()
_own: tuple[TracerProvider, BatchSpanProcessor] | None = None  # the provider fwrest installed


def _provider() -> BatchSpanProcessor | None:
    """Make sure the process has an SDK tracer provider: the application's own if it set
    one, else one of fwrest's, installed once per process (a batch processor and the OTLP
    exporter, which read the ``OTEL_*`` variables). Its processor, when it is fwrest's."""
    global _own
    with _lock:
        if _own is not None:
            return _own[1]
        if isinstance(trace.get_tracer_provider(), TracerProvider):
            return None  # the application's: its processors and exporters
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            # no OTEL_SERVICE_NAME nor service.name in OTEL_RESOURCE_ATTRIBUTES
            resource = resource.merge(Resource({"service.name": "fwrest"}))
        provider = TracerProvider(resource=resource)
        processor = BatchSpanProcessor(_exporter())
        provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
        _own = (provider, processor)
        return processor


def _exporter() -> SpanExporter:
    """The OTLP exporter of the protocol the ``OTEL_EXPORTER_OTLP_*PROTOCOL`` variables name
    (the loader's ``tracing_config`` checked the value, and that its package is installed)."""
    _, protocol = otlp_protocol()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


class Tracing:
    """A worker's tracing: the tracer, and the wrappers its assembly composes at start."""

    def __init__(self) -> None:
        self._processor = _provider()
        self.tracer: Tracer = trace.get_tracer("fwrest", __version__)
        log.trace_ids = _current_ids

    def port(self, app: PortApp) -> TracedPort:
        """What the engine serves for ``app``: its requests in server spans."""
        return TracedPort(app, self.tracer)

    def guard(self, guard: Guard, scheme: str) -> Guard:
        """``guard`` in a ``fwrest.auth`` span (a child of the request's server span)."""
        tracer = self.tracer
        attributes = {"fwrest.auth.scheme": scheme}

        async def traced(req: Request, ctx: RequestContext) -> None:
            served = _serving.get()
            if served is None or not served.recording:
                # an admission (100 Continue), or a request its sampler left out
                return await guard(req, ctx)
            await _child(tracer, "fwrest.auth", served, attributes, guard(req, ctx))

        return traced

    def call(self, handler: Handler, invoke: Invoke) -> Invoke:
        """A route's bound call in a ``fwrest.handler`` span (``code.function.name``), which
        also tells the server span the route (``http.route``)."""
        tracer = self.tracer
        key = handler.usage_key
        route = key.location + key.route  # as the access record's "route"
        func = handler.endpoint.func
        name = f"{getattr(func, '__module__', None) or '?'}.{getattr(func, '__qualname__', '?')}"
        attributes = {"code.function.name": name}

        async def traced(params: Any) -> Any:
            served = _serving.get()
            if served is None:
                return await invoke(params)
            served.route = route
            if not served.recording:
                return await invoke(params)
            span = tracer.start_span("fwrest.handler", served.context, attributes=attributes)
            try:
                result = await invoke(params)
            except BaseException as exc:
                _failed(span, exc)
                span.end()
                raise
            if isinstance(result, ChunkedAnswer):
                # setChunkedResponse's first piece: the handler goes on in its thread
                result.on_end(lambda failure: _handler_ended(span, failure))
            else:
                span.end()
            return result

        return traced

    def store_client(self, store: StoreBase, threads: int = STORE_THREADS) -> TracedStoreClient:
        """The worker's store client, each call of a request in a ``fwrest.store`` span."""
        return TracedStoreClient(store, self.tracer, threads)

    def flush(self, timeout: float = FLUSH_S) -> None:
        """Send what the batch processor holds (a stopping worker), waiting at most
        ``timeout`` seconds (a collector out of reach must not hold the stop)."""
        processor = self._processor
        if processor is None:
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):
                return
            flush: Callable[[], object] = provider.force_flush
        else:
            flush = processor.force_flush
        thread = threading.Thread(target=flush, name="fwrest-trace-flush", daemon=True)
        thread.start()
        thread.join(timeout)


class TracedPort:
    """A port as the engine sees it (:class:`~fwrest.wire.PortHandler`), each request in a
    server span around :class:`~fwrest.server.app.PortApp`'s pipeline."""

    def __init__(self, app: PortApp, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer
        self.engine_headers = app.engine_headers
        self.body_limit = app.body_limit
        self.refused = app.refused
        # the attributes every request of the port has
        self._port = {
            "url.scheme": app.plan.config.scheme,
            "server.port": app.port_number,
            "network.protocol.name": "http",
        }

    def _start(self, req: Request, started: int | None = None) -> tuple[Span, Context]:
        method = req.method
        known = method in _METHODS
        attributes: dict[str, Any] = {
            **self._port,
            "http.request.method": method if known else "_OTHER",
            "url.path": _url_path(req.target),
        }
        if not known:
            attributes["http.request.method_original"] = method
        for name, value in req.headers:
            if name == "user-agent":
                attributes["user_agent.original"] = value
                break
        parent = propagate.extract(req.headers, getter=_HEADERS)
        span = self.tracer.start_span(
            method if known else "HTTP",
            parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=started,
        )
        return span, trace.set_span_in_context(span, parent)

    @staticmethod
    def _answered(span: Span, req: Request, reply: Reply, route: str) -> None:
        span.set_attribute("client.address", req.client)  # behind TrustedProxies: the client
        span.set_attribute("http.response.status_code", reply.status)
        if route:
            span.set_attribute("http.route", route)
            method = req.method
            span.update_name(f"{method if method in _METHODS else 'HTTP'} {route}")
        if reply.status >= 500:
            span.set_attribute("error.type", str(reply.status))
            span.set_status(Status(StatusCode.ERROR))

    async def handle(self, req: Request) -> Reply:
        span, ctx = self._start(req)
        served = _Served(span, ctx)
        token = otel_context.attach(ctx)
        mark = _serving.set(served)
        try:
            reply = await self.app.handle(req)
        except BaseException as exc:  # a cancellation of the request (handle answers the rest)
            if not is_cancellation(exc):
                _failed(span, exc)
            span.end()
            raise
        finally:
            _serving.reset(mark)
            otel_context.detach(token)
        self._answered(span, req, reply, served.route)
        if reply.stream is None:
            span.end()
        else:
            reply.stream = _Spanned(reply.stream, served)
        return reply

    async def admit(self, head: Request) -> Reply | None:
        """``100 Continue``'s admission (untraced: ``handle`` traces the request); a refusal
        answers the request, so it is a server span of its own."""
        started = time.time_ns()
        reply = await self.app.admit(head)
        if reply is not None:
            span, _ = self._start(head, started)
            self._answered(span, head, reply, "")
            span.end()
        return reply


class _Spanned:
    """A streamed answer whose server span ends with it (its last piece written, or the
    stream closed early: the engine closes every stream it took). Each step and the close
    run with the server span current, as the handler did: an application's spans in its
    iterator are the span's children, and the log records of its steps, of its failure and
    its access line (written at its end) carry the span's ids (SPEC 17.4)."""

    __slots__ = ("_served", "_span", "_stream")

    def __init__(self, stream: AsyncIterator[bytes], served: _Served) -> None:
        self._stream = stream
        self._served = served
        self._span: Span | None = served.span

    def __aiter__(self) -> _Spanned:
        return self

    async def __anext__(self) -> bytes:
        served = self._served
        token = otel_context.attach(served.context)
        mark = _serving.set(served)
        try:
            return await anext(self._stream)
        except StopAsyncIteration:
            self._end(None)
            raise
        except BaseException as exc:
            self._end(exc)
            raise
        finally:
            _serving.reset(mark)
            otel_context.detach(token)

    async def aclose(self) -> None:
        served = self._served
        token = otel_context.attach(served.context)
        mark = _serving.set(served)
        try:
            await close_stream(self._stream)
        finally:
            self._end(None)
            _serving.reset(mark)
            otel_context.detach(token)

    def _end(self, exc: BaseException | None) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        if exc is not None and not is_cancellation(exc):
            _failed(span, exc)
        span.end()


class TracedStoreClient(StoreClient):
    """:class:`~fwrest.store.calls.StoreClient` with each call of a request in a
    ``fwrest.store`` span (a child of the request's server span; calls made outside a
    request, the background refreshes, have none). An in-process store (memory) is still
    called inline, on the loop: its callers go through :meth:`submit_timed` too (``inline``
    is False), which then runs the call at once and hands back its outcome."""

    def __init__(self, store: StoreBase, tracer: Tracer, threads: int = STORE_THREADS) -> None:
        super().__init__(store, threads)
        self._in_process = self.inline
        self.inline = False
        self._tracer = tracer
        self._system = store.kind

    def _span(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Span | None:
        served = _serving.get()
        if served is None or not served.recording:
            return None
        return self._tracer.start_span(
            "fwrest.store",
            served.context,
            kind=SpanKind.CLIENT,
            attributes={
                "db.system.name": self._system,
                "fwrest.store.operation": operation_of(fn, args),
            },
        )

    def submit_timed(self, fn: Callable[..., T], *args: Any) -> tuple[Future[T], Started]:
        span = self._span(fn, args)
        started = Started()
        if self._in_process:
            job: Future[T] = Future()
            try:
                job.set_result(started.run(fn, *args))
            except Exception as exc:
                job.set_exception(exc)
                if span is not None:
                    _failed(span, exc)
            if span is not None:
                span.end()
            return job, started
        if span is None:
            return self.submit(started.run, fn, *args), started
        return self.submit(_ended, span, started.run, fn, *args), started

    def at_once(self, fn: Callable[..., T], *args: Any) -> T:
        span = self._span(fn, args)
        return fn(*args) if span is None else _ended(span, fn, *args)

    async def call(
        self, fn: Callable[..., T], *args: Any, deadline: float = BACKGROUND_DEADLINE_S
    ) -> T:
        if self._in_process:
            return self.at_once(fn, *args)
        return await self.wait(*self.submit_timed(fn, *args), deadline)


def _ended(span: Span, run: Callable[..., T], *args: Any) -> T:
    """(on a store thread) ``run(*args)``, then ``span`` ends."""
    try:
        return run(*args)
    except BaseException as exc:
        _failed(span, exc)
        raise
    finally:
        span.end()
