"""Error types and the error bodies clients see.

Three kinds, never mixed (STYLE "Errors"):

* the operator's fault: :class:`ConfigError` (section, key, problem, fix); raised before
  anything binds, ``fwrest check``/``serve`` exit 2;
* the client's fault: :class:`HTTPError` and its subclasses, rendered by :func:`error_body`;
* the application's fault: the fixed 500 body; the traceback goes to the log only.

This module imports nothing else of fwrest.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

import orjson

__all__ = [
    "STATUS_PHRASES",
    "ConfigError",
    "HTTPError",
    "error_body",
    "is_cancellation",
    "store_unavailable",
]

# RFC 9110's names where Python 3.11's http.HTTPStatus still has the older ones (3.13 took
# these up); every other status has HTTPStatus's phrase
_RFC9110_PHRASES = {
    413: "Content Too Large",
    414: "URI Too Long",
    416: "Range Not Satisfiable",
    422: "Unprocessable Content",
}
STATUS_PHRASES: dict[int, str] = {
    status.value: _RFC9110_PHRASES.get(status.value, status.phrase) for status in HTTPStatus
}
"""The reason phrase of every status Python knows (``418: "I'm a Teapot"``); a status
outside it (an application's ``299``) has none."""


class ConfigError(Exception):
    """The service's configuration cannot start: what is wrong, where, and how to fix it.

    Args:
        problem: what is wrong, in one sentence.
        section: the section as written in the file (``HTTP_REST``), if any.
        key: the key as written (``Port``), if any.
        fix: how to fix it.
        source: the config file, if any.
    """

    def __init__(
        self,
        problem: str,
        *,
        section: str | None = None,
        key: str | None = None,
        fix: str | None = None,
        source: str | None = None,
    ) -> None:
        self.problem = problem
        self.section = section
        self.key = key
        self.fix = fix
        self.source = source
        super().__init__(self.message)

    @property
    def where(self) -> str:
        if self.section and self.key:
            return f"[{self.section}] {self.key}"
        if self.section:
            return f"[{self.section}]"
        return self.key or ""

    @property
    def message(self) -> str:
        parts = []
        if self.source:
            parts.append(f"{self.source}: ")
        if self.where:
            parts.append(f"{self.where}: ")
        parts.append(self.problem)
        if self.fix:
            parts.append(f" Fix: {self.fix}")
        return "".join(parts)

    def __str__(self) -> str:
        return self.message


def error_body(status: int, message: str | None = None, detailed: str = "") -> bytes:
    """The JSON body of every framework error answer (SPEC 3, 4.1).

    >>> error_body(404)
    b'{"code":404,"detailedMessage":"","message":"Not Found"}'
    """
    return orjson.dumps(
        {
            "code": status,
            "detailedMessage": detailed,
            "message": message if message is not None else STATUS_PHRASES.get(status, "Error"),
        }
    )


class HTTPError(Exception):
    """A request the client got wrong (or the server cannot take now), answered with JSON.

    Args:
        status: the HTTP status.
        message: the ``message`` field; the status phrase when omitted.
        detailed: the ``detailedMessage`` field.
        headers: extra response headers.
        close: close the connection after answering.
    """

    def __init__(
        self,
        status: int,
        message: str | None = None,
        detailed: str = "",
        *,
        headers: tuple[tuple[str, str], ...] = (),
        close: bool = False,
    ) -> None:
        self.status = status
        self.message = message if message is not None else STATUS_PHRASES.get(status, "Error")
        self.detailed = detailed
        self.headers = headers
        self.close = close
        super().__init__(f"{status} {self.message}")

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.detailed)


def store_unavailable() -> HTTPError:
    """503 with ``Retry-After``: the state store cannot be reached (SPEC 7, fail closed)."""
    return HTTPError(
        503,
        "Service Unavailable",
        detailed="the state store is unavailable",
        headers=(("retry-after", "1"),),
    )


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is a cancellation of the running task (a client that went away, a
    drain, a deadline), which must travel on, rather than something an application raised.

    Everything else an application's function raises, ``BaseException`` subclasses such as
    ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` and a ``CancelledError`` that
    nothing asked for included, answers its request with 500 and leaves the worker serving
    (SPEC 7.1). Asyncio counts the cancellations it was asked for on the task
    (``Task.cancelling``), which tells the two kinds of ``CancelledError`` apart.
    """
    if not isinstance(exc, asyncio.CancelledError):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: a pool thread
        return False
    return task is not None and task.cancelling() > 0
