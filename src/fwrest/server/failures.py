"""What happens when an application's function fails during a request: the log line, and the
marker that a failure is already logged.

Owns: the wording of those lines (SPEC 3: the traceback in the log, whole when
``rest_error_full=1``, never to the client). Must not know: routes, pools, hooks' names.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable
from typing import Any

from fwrest import log
from fwrest.errors import is_cancellation
from fwrest.server.state import tunables

__all__ = ["Failed", "Raised", "contained", "log_failure"]


class Failed(Exception):
    """A request failed and why is already in the log: answer it with the standard 500 body.

    Raised by what runs around a handler (a hook that raised, an ``OnError`` that gave
    nothing to send) so that the pipeline neither logs the failure twice nor mistakes it for
    the handler's own exception.
    """


class Raised(Exception):
    """Carries a ``BaseException`` of an application's coroutine out of the task it runs in
    (``asyncio.wait_for``'s, a hook's): a task re-raises ``SystemExit`` and
    ``KeyboardInterrupt`` into the event loop itself, which would end the worker."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(type(inner).__name__)
        self.inner = inner


async def contained(call: Awaitable[Any]) -> Any:
    """``await call``, its ``BaseException`` (a cancellation aside) carried as :class:`Raised`."""
    try:
        return await call
    except Exception:
        raise
    except BaseException as exc:
        if is_cancellation(exc):
            raise
        raise Raised(exc) from None


def log_failure(
    method: str,
    path: str,
    exc: BaseException,
    what: str = "unhandled exception in the handler",
    outcome: str = "answered 500",
) -> None:
    """Log that ``what`` failed with ``exc`` while serving ``method path``: its traceback
    when ``rest_error_full=1``, else its type, message and where it was raised, e.g.::

        GET /rest/x: unhandled exception in the handler; answered 500
          RuntimeError: no at app.py:12 (rest_error_full=1 logs the whole traceback)
    """
    full = tunables.current.rest_error_full == 1
    log.app_log.error(
        "%s %s: %s; %s",
        method,
        log.escape(path),
        what,
        outcome,
        exc_info=exc if full else None,
    )
    if not full:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        log.app_log.error(
            "  %s: %s%s (rest_error_full=1 logs the whole traceback)",
            type(exc).__name__,
            log.escape(_text(exc)),
            where,
        )


def _text(exc: BaseException) -> str:
    """``str(exc)``, or a note when the application's ``__str__`` itself fails (as
    ``traceback`` writes it): the line is written either way."""
    try:
        return str(exc)
    except BaseException:
        return "<exception str() failed>"
