"""``OnSelect`` (SPEC 11.1): an admitted stage of the ports whose server section names one.

It runs for each request of the port after authorization, before routing, in the request's
context (the REST object gives the method, path, headers and client address), a ``def``
function in the thread pool of the port's first location (as ``OnAuth``), bounded by that
pool's ``ActiveTimeout``. What it returns:

* a thread pool's name (section names are case-insensitive): the route's call runs in that
  pool, with its ``ActiveTimeout``, ``OnSend`` and ``OnError`` (each route is bound for every
  pool at start, so this is one dict lookup);
* ``None``: the location's own pool;
* ``-2``: 503 "Server Busy" with the standard error body;
* ``-3``: the connection closes without an answer (a :class:`~fwrest.wire.Reply` whose
  ``drop`` the engine honours; the access line says 444, as nginx's "no response");
* anything else (a pool no location uses, ``True``, ``-1``...), or an exception: 500 with
  the standard body, and why in the log.

Owns: that stage. Must not know: routing, the engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fwrest import log
from fwrest.auth.blocking import settled
from fwrest.context.request import RequestContext, current
from fwrest.errors import HTTPError, ServiceUnavailable, error_body, is_cancellation
from fwrest.server.failures import log_failure
from fwrest.server.hooks import Hook
from fwrest.wire import Reply, Request, error_reply

__all__ = ["BUSY", "DROP", "Selector"]

BUSY = -2  # OnSelect's "refuse": 503 Server Busy
DROP = -3  # OnSelect's "close without an answer"
DROPPED_STATUS = 444  # how the access line and usage figures show a dropped request (nginx)
_JSON = ("content-type", "application/json")


class Selector:
    """The ``OnSelect`` stage of one port.

    Args:
        hook: the server's ``OnSelect``.
        pools: the worker's pool names, lower-case, each the key of a route's ``invokes``.
        submit: how a ``def`` hook runs (the port's first location's pool).
        bounded: that pool's ``ActiveTimeout`` (None: none).
    """

    def __init__(
        self,
        hook: Hook,
        pools: Mapping[str, object],
        submit: Callable[..., Awaitable[Any]],
        bounded: Callable[[Awaitable[Any]], Awaitable[Any]] | None,
    ) -> None:
        self.hook = hook
        self._pools = frozenset(pools)
        self._submit = submit
        self._bounded = bounded

    async def __call__(self, req: Request, ctx: RequestContext) -> Reply | None:
        hook = self.hook
        token = current.set(ctx)
        try:
            call = hook.func() if hook.is_async else settled(self._submit(hook.func))
            if self._bounded is not None:
                call = self._bounded(call)
            choice = await call
        except HTTPError:
            raise  # its pool's AcceptTimeout or ActiveTimeout: 503, logged there
        except BaseException as exc:  # SystemExit too: 500, the worker serves on (SPEC 7.1)
            if is_cancellation(exc):
                raise
            log_failure(ctx.method, ctx.path, exc, f"{hook.label} raised")
            return Reply(500, [_JSON], error_body(500))
        finally:
            current.reset(token)
        if choice is None:
            ctx.selected = None
            return None
        if type(choice) is str:
            folded = choice.lower()
            if folded in self._pools:
                ctx.selected = folded
                return None
            return self._refuse(
                ctx,
                f"the thread pool {log.escape(choice)!r}, which no location of the service uses",
            )
        if type(choice) is int and choice == BUSY:
            return error_reply(ServiceUnavailable(message="Server Busy"))
        if type(choice) is int and choice == DROP:
            return Reply(DROPPED_STATUS, [], b"", close=True, drop=True)
        shown = log.escape(repr(choice)[:80])
        return self._refuse(ctx, f"{shown}, which is neither a thread pool's name, None, -2 nor -3")

    def _refuse(self, ctx: RequestContext, what: str) -> Reply:
        log.app_log.error(
            "%s %s: %s returned %s; answered 500",
            ctx.method,
            log.escape(ctx.path),
            self.hook.label,
            what,
        )
        return Reply(500, [_JSON], error_body(500))
