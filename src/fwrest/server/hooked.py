"""A route's call with its pool's ``OnSend`` and ``OnError`` (SPEC 11.1), composed once, at
start, by :func:`fwrest.server.handler.bind`.

The composition is decided per route, so the request path makes no choice: a ``def`` handler
with a ``def`` ``OnSend`` (and a ``def`` ``OnError``) is ONE job of the pool (no second thread
hop); ``async def`` hooks run on the loop around it, and a ``def`` hook of an ``async def``
handler is one pool job of its own. Routes of a pool without these hooks keep the bare call.

- ``OnSend()`` runs in the request's context before each answer of the route's call is
  encoded (SPEC 11.1: "each answer of the pool's application routes"): the handler's result,
  the answer ``OnError`` builds, and the standard 500 of a handler that raised (without
  ``OnError``, or when it gave nothing or failed); what it sets through the REST object
  (``setKeyHeaderResponse``, ``setStatusCode``) is the answer's (a returned ``Response`` takes
  its status too). It raises: the standard 500, logged, and it is not asked again. It does not
  run for fwrest's own answers (an ``HTTPError``: a typed parameter's 400, ``ActiveTimeout``'s
  503), which the call did not give.
- ``OnError(exc)`` runs when the handler raises (``BaseException`` too, SPEC 7.1; never a
  cancellation, nor fwrest's own ``HTTPError``): the handler's traceback is logged as before
  (SPEC 3), then what the handler set on the REST object is dropped and ``OnError``'s result
  is the answer, status 500 unless ``OnError`` set one (or returns a ``Response`` with a status
  other than 200); ``None`` with nothing given to ``setResponse``/``setFault`` keeps the
  standard 500 body. It raises, or returns what fwrest cannot send: the standard 500, both
  logged.

A handler that fails after ``setChunkedResponse`` sent its first piece has had its answer's
head sent: neither hook runs for that failure, and the answer is cut (SPEC 10.5: no last
chunk), as without hooks. That first piece commits the status and headers
(:class:`~fwrest.context.chunks.ChunkedAnswer` holds them): what ``OnSend`` sets afterwards
is ignored, and an ``OnSend`` that raises is logged with the answer left to stand, however
soon the head is written.

A pool with ``OnSend`` answers a handler's failure inside the call (the standard 500 as a
fault's body, as ``setFault`` gathers one, so that ``OnSend`` can change it: a 4xx or 5xx it sets
rewrites the body's ``code``, a lower status is refused); a pool without it leaves the standard
500 to the pipeline, as a route without hooks does.

Owns: those two compositions. Must not know: routing, the pipeline's stages.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fwrest import log
from fwrest.context.request import RequestContext, Response, current
from fwrest.errors import STATUS_PHRASES, HTTPError, RaisedInThread, error_body, is_cancellation
from fwrest.server.failures import Failed, log_failure
from fwrest.server.hooks import Hook

__all__ = ["compose"]

Call = Callable[[Mapping[str, str]], Awaitable[Any]]
Run = Callable[..., Awaitable[Any]]  # a pool's submit

# what OnError may return (SPEC 9's results, streams aside)
_SENDABLE = (dict, list, str, bytes, bytearray, memoryview, bool, int, float, Response)


# -- OnSend ----------------------------------------------------------------------------------


def _after_send(result: Any, ctx: RequestContext, before: int) -> Any:
    """The result with the status ``OnSend`` set, where the result carries its own."""
    if ctx.resp_status != before and isinstance(result, Response):
        result = copy.copy(result)  # the handler's object may be shared: never changed
        result.status = ctx.resp_status
    return result


_HEAD_SENT = "the chunked answer stands (its head went with its first piece)"


def _failed(
    hook: Hook, ctx: RequestContext, exc: BaseException, outcome: str = "answered 500"
) -> Failed:
    """A hook raised ``exc`` (a cancellation passes): logged, the request's 500 to raise."""
    if is_cancellation(exc):
        raise exc
    log_failure(ctx.method, ctx.path, exc, f"{hook.label} raised", outcome)
    return Failed()


def _send_failed(hook: Hook, ctx: RequestContext, exc: BaseException, result: Any) -> Any:
    """``OnSend`` raised ``exc``: the standard 500 (raised), unless ``setChunkedResponse``
    committed the answer's head: then logged, and the answer stands."""
    if ctx.chunks is not None:
        _failed(hook, ctx, exc, _HEAD_SENT)
        return result
    raise _failed(hook, ctx, exc) from None


def _before_send(result: Any, ctx: RequestContext) -> int:
    """The status of the answer ``OnSend`` is shown (``rest.getStatusCode()``: a returned
    ``Response``'s own), to tell whether it set another."""
    if isinstance(result, Response):
        ctx.resp_status = result.status
    return ctx.resp_status


def _send_sync(hook: Hook, result: Any) -> Any:
    ctx = current.get()
    before = _before_send(result, ctx)
    try:
        hook.func()
    except BaseException as exc:
        return _send_failed(hook, ctx, exc, result)
    return _after_send(result, ctx, before)


# -- OnError ---------------------------------------------------------------------------------


def _before_error(hook: Hook, exc: BaseException, ctx: RequestContext) -> None:
    """The handler's failure logged as ever (SPEC 3); the answer started afresh."""
    log_failure(ctx.method, ctx.path, exc, outcome=f"{hook.label} answers it")
    ctx.resp_status = 500
    ctx.resp_headers = None
    ctx.resp_body = None
    ctx.fault = None


def _error_answer(hook: Hook, result: Any, ctx: RequestContext) -> Any:
    """What ``OnError`` returned, as the handler's result.

    Raises:
        Failed: it gave nothing (the standard 500 body), or what fwrest cannot send (logged).
    """
    if result is None:
        if ctx.resp_body is None:
            raise Failed
        return None  # what it gave setResponse/setFault, with its status
    if isinstance(result, Response):
        status = ctx.resp_status
        if status == 500 and result.status != 200:
            status = result.status  # a status the Response was given
        if status != result.status:
            result = copy.copy(result)
            result.status = status
        return result
    if not isinstance(result, _SENDABLE):
        log.app_log.error(
            "%s %s: %s returned a %s, which fwrest cannot send; answered 500",
            ctx.method,
            log.escape(ctx.path),
            hook.label,
            type(result).__name__,
        )
        raise Failed
    return result


def _standard_500(ctx: RequestContext) -> None:
    """The standard 500 as an answer ``OnSend`` may change: a fresh answer (what the handler or
    ``OnError`` set on the REST object is dropped), the standard body as a fault's (so that a
    status ``OnSend`` sets rewrites its ``code``, or is refused below 400: ``rest.py``)."""
    ctx.resp_status = 500
    ctx.resp_headers = None
    ctx.fault = STATUS_PHRASES[500]
    ctx.resp_body = [error_body(500, ctx.fault)]


def _error_failed(hook: Hook, ctx: RequestContext, exc: BaseException, sending: bool) -> Any:
    """``OnError`` raised ``exc`` (logged): the standard 500, for ``OnSend`` when there is
    one (``sending``), else raised for the pipeline's."""
    failed = _failed(hook, ctx, exc)
    if not sending:
        raise failed from None
    return _standard_500(ctx)


def _error_result(hook: Hook, result: Any, ctx: RequestContext, sending: bool) -> Any:
    """``OnError``'s answer (:func:`_error_answer`); the standard 500 as there."""
    try:
        return _error_answer(hook, result, ctx)
    except Failed:
        if not sending:
            raise
        return _standard_500(ctx)


def _recover_sync(hook: Hook | None, exc: BaseException, sending: bool) -> Any:
    """The answer to the handler's failure ``exc``: ``OnError``'s (``hook``), or, for a pool
    with ``OnSend`` (``sending``), the standard 500 for ``OnSend`` to see; else raised for
    the pipeline's standard 500."""
    ctx = current.get()
    if hook is None:
        if not sending:
            raise exc
        log_failure(ctx.method, ctx.path, exc)
        return _standard_500(ctx)
    _before_error(hook, exc, ctx)
    try:
        result = hook.func(exc)
    except BaseException as second:
        return _error_failed(hook, ctx, second, sending)
    return _error_result(hook, result, ctx, sending)


async def _recover_async(hook: Hook, exc: BaseException, sending: bool) -> Any:
    ctx = current.get()
    _before_error(hook, exc, ctx)
    try:
        result = await hook.func(exc)
    except BaseException as second:
        return _error_failed(hook, ctx, second, sending)
    return _error_result(hook, result, ctx, sending)


# -- the composition -------------------------------------------------------------------------


def compose(
    func: Callable[..., Any],
    kwargs: Callable[[Mapping[str, str]], dict[str, str]],
    func_is_async: bool,
    submit: Run,
    send: Hook | None,
    error: Hook | None,
) -> Call:
    """A route's call with ``send`` (``OnSend``) and ``error`` (``OnError``) around it.

    Args:
        func: the route's function; ``kwargs`` turns path parameters into its arguments.
        func_is_async: whether it is an ``async def`` (run on the loop, else in ``submit``).
        submit: the pool's ``submit``.
        send: the pool's ``OnSend``, if any.
        error: the pool's ``OnError``, if any.
    """
    sending = send is not None
    # a def handler's job runs its pool's def hooks too (no second thread hop); the rest run
    # on the loop after it (a def hook there as a pool job of its own)
    in_job = not func_is_async
    job_send = send if in_job and send is not None and not send.is_async else None
    job_error = error if in_job and error is not None and not error.is_async else None
    # the job answers a failure itself with a def OnError, or, without OnError, with the
    # standard 500 for a def OnSend; else it raises it to the loop
    job_answers = job_error is not None or (error is None and job_send is not None)
    first: Callable[[Mapping[str, str]], Awaitable[Any]]
    if func_is_async:

        def first(params: Mapping[str, str]) -> Awaitable[Any]:
            return func(**kwargs(params))  # type: ignore[no-any-return]

    else:

        def job(kw: dict[str, str]) -> Any:
            try:
                result = func(**kw)
            except HTTPError:
                raise  # fwrest's own answer (a 503...), not the application's failure
            except BaseException as exc:
                if not job_answers or current.get().chunks is not None:
                    # answered on the loop (an async OnError or OnSend); or a chunked answer's
                    # head is out (setChunkedResponse): it can only be cut (SPEC 10.5)
                    raise
                result = _recover_sync(job_error, exc, sending)
            if job_send is not None:
                return _send_sync(job_send, result)
            return result

        def first(params: Mapping[str, str]) -> Awaitable[Any]:
            return submit(job, kwargs(params))

        if (send is None or job_send is not None) and (error is None or job_error is not None):
            return first  # the pool job does it all

    async def recovered(exc: BaseException) -> Any:
        """The answer to a failure the job did not answer."""
        if error is None:
            return _recover_sync(None, exc, sending)  # no hook to run: on the loop
        if error.is_async:
            return await _recover_async(error, exc, sending)
        return await submit(_recover_sync, error, exc, sending)

    async def call(params: Mapping[str, str]) -> Any:
        try:
            result = await first(params)
        except (HTTPError, Failed):
            raise  # fwrest's own answers, and a hook's failure already logged
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            # then OnSend, whoever it is; OnError is given what the function raised
            result = await recovered(exc.original if type(exc) is RaisedInThread else exc)
        else:
            if send is None or job_send is not None:
                return result  # no OnSend, or the job ran it
        if send is None:
            return result
        if not send.is_async:
            return await submit(_send_sync, send, result)
        # an async OnSend inline (the shape an OnSend that sets a header usually has)
        ctx = current.get()
        before = _before_send(result, ctx)
        try:
            await send.func()
        except BaseException as exc:
            return _send_failed(send, ctx, exc, result)
        return _after_send(result, ctx, before)

    return call
