"""A route's call with its pool's ``OnSend`` and ``OnError`` (SPEC 11.1), composed once, at
start, by :func:`fwrest.server.handler.bind`.

The composition is decided per route, so the request path makes no choice: a ``def`` handler
with a ``def`` ``OnSend`` (and a ``def`` ``OnError``) is ONE job of the pool (no second thread
hop); ``async def`` hooks run on the loop around it, and a ``def`` hook of an ``async def``
handler is one pool job of its own. Routes of a pool without these hooks keep the bare call.

- ``OnSend()`` runs in the request's context after the handler returned, before its result
  is encoded; what it sets through the REST object (``setKeyHeaderResponse``,
  ``setStatusCode``) is the answer's (a returned ``Response`` takes its status too). It
  raises: the standard 500, logged; it does not run for an answer the handler did not give
  (an exception, a timeout).
- ``OnError(exc)`` runs when the handler raises (``BaseException`` too, SPEC 7.1; never a
  cancellation, nor fwrest's own ``HTTPError``): the handler's traceback is logged as before
  (SPEC 3), then what the handler set on the REST object is dropped and ``OnError``'s result
  is the answer, status 500 unless ``OnError`` set one (or returns a ``Response`` with a status
  other than 200); ``None`` with nothing given to ``setResponse``/``setFault`` keeps the
  standard 500 body. It raises, or returns what fwrest cannot send: the standard 500, both
  logged.

Owns: those two compositions. Must not know: routing, the pipeline's stages.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fwrest import log
from fwrest.context.request import RequestContext, Response, current
from fwrest.errors import HTTPError, is_cancellation
from fwrest.server.failures import Failed, log_failure
from fwrest.server.hooks import Hook

__all__ = ["compose"]

Call = Callable[[Mapping[str, str]], Awaitable[Any]]
Run = Callable[..., Awaitable[Any]]  # a pool's submit

# what OnError may return (SPEC 9's results, streams aside)
_SENDABLE = (dict, list, str, bytes, bytearray, memoryview, bool, int, float, Response)


class _Recovered:
    """OnError's answer coming back from a pool job: the loop's ``OnSend`` skips it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


# -- OnSend ----------------------------------------------------------------------------------


def _after_send(result: Any, ctx: RequestContext, before: int) -> Any:
    """The result with the status ``OnSend`` set, where the result carries its own."""
    if ctx.resp_status != before and isinstance(result, Response):
        result = copy.copy(result)  # the handler's object may be shared: never changed
        result.status = ctx.resp_status
    return result


def _failed(hook: Hook, ctx: RequestContext, exc: BaseException) -> Failed:
    """A hook raised ``exc`` (a cancellation passes): logged, the request's 500 to raise."""
    if is_cancellation(exc):
        raise exc
    log_failure(ctx.method, ctx.path, exc, f"{hook.label} raised")
    return Failed()


def _send_sync(hook: Hook, result: Any) -> Any:
    ctx = current.get()
    before = ctx.resp_status
    try:
        hook.func()
    except BaseException as exc:
        raise _failed(hook, ctx, exc) from None
    return _after_send(result, ctx, before)


async def _send_async(hook: Hook, result: Any) -> Any:
    ctx = current.get()
    before = ctx.resp_status
    try:
        await hook.func()
    except BaseException as exc:
        raise _failed(hook, ctx, exc) from None
    return _after_send(result, ctx, before)


# -- OnError ---------------------------------------------------------------------------------


def _before_error(hook: Hook, exc: BaseException, ctx: RequestContext) -> None:
    """The handler's failure logged as ever (SPEC 3); the answer started afresh."""
    log_failure(ctx.method, ctx.path, exc, outcome=f"{hook.label} answers it")
    ctx.resp_status = 500
    ctx.resp_headers = None
    ctx.resp_body = None


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


def _recover_sync(hook: Hook, exc: BaseException) -> Any:
    ctx = current.get()
    _before_error(hook, exc, ctx)
    try:
        result = hook.func(exc)
    except BaseException as second:
        raise _failed(hook, ctx, second) from None
    return _error_answer(hook, result, ctx)


async def _recover_async(hook: Hook, exc: BaseException) -> Any:
    ctx = current.get()
    _before_error(hook, exc, ctx)
    try:
        result = await hook.func(exc)
    except BaseException as second:
        raise _failed(hook, ctx, second) from None
    return _error_answer(hook, result, ctx)


# -- the composition -------------------------------------------------------------------------


def _then_send(first: Call, hook: Hook) -> Call:
    """``first``, then an ``async def`` ``OnSend`` on the loop (what ``_send_async`` does,
    inline: the shape an ``OnSend`` that sets a header usually has)."""
    send = hook.func

    async def call(params: Mapping[str, str]) -> Any:
        result = await first(params)
        if type(result) is _Recovered:
            return result.value
        ctx = current.get()
        before = ctx.resp_status
        try:
            await send()
        except BaseException as exc:
            raise _failed(hook, ctx, exc) from None
        return _after_send(result, ctx, before)

    return call


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
    if func_is_async:

        def first(params: Mapping[str, str]) -> Awaitable[Any]:
            return func(**kwargs(params))  # type: ignore[no-any-return]

        loop_send, loop_error = send, error
    else:
        # the def hooks run in the handler's own job; the async ones on the loop after it
        in_thread_send = send if send is not None and not send.is_async else None
        in_thread_error = error if error is not None and not error.is_async else None
        loop_send = send if send is not None and send.is_async else None
        loop_error = error if error is not None and error.is_async else None
        marked = loop_send is not None  # OnError's answer must not meet the loop's OnSend

        def job(kw: dict[str, str]) -> Any:
            try:
                result = func(**kw)
            except HTTPError:
                raise  # fwrest's own answer (a 503...), not the application's failure
            except BaseException as exc:
                if in_thread_error is None:
                    raise
                value = _recover_sync(in_thread_error, exc)
                return _Recovered(value) if marked else value
            if in_thread_send is not None:
                return _send_sync(in_thread_send, result)
            return result

        def first(params: Mapping[str, str]) -> Awaitable[Any]:
            return submit(job, kwargs(params))

    if loop_send is None and loop_error is None:
        return first  # the pool job does it all
    if loop_error is None and loop_send is not None and loop_send.is_async:
        return _then_send(first, loop_send)  # the common shape, one coroutine less

    async def call(params: Mapping[str, str]) -> Any:
        try:
            result = await first(params)
        except (HTTPError, Failed):
            raise  # fwrest's own answers, and a hook's failure already logged
        except BaseException as exc:
            if loop_error is None or is_cancellation(exc):
                raise
            if loop_error.is_async:
                return await _recover_async(loop_error, exc)
            return await submit(_recover_sync, loop_error, exc)
        if type(result) is _Recovered:
            return result.value
        if loop_send is None:
            return result
        if loop_send.is_async:
            return await _send_async(loop_send, result)
        return await submit(_send_sync, loop_send, result)

    return call
