"""Error types and the error bodies clients see.

Three kinds, never mixed (STYLE "Errors"):

* the operator's fault: :class:`ConfigError` (section, key, problem, fix); raised before
  anything binds, ``fwrest check``/``serve`` exit 2;
* the client's fault: :class:`HTTPError` and its subclasses (and the token service's
  ``OAuthError``, :mod:`fwrest.auth.oauth2.errors`), each building its own headers, all
  rendered by one function, :func:`fwrest.wire.error_reply`;
* the application's fault: the fixed 500 body; the traceback goes to the log only
  (:class:`CallbackRaised` carries a callback's exception from a native route to the
  pipeline, which logs it as a handler's).

Two more are about a streamed answer (SPEC 10.5): :class:`ClientDisconnected`, what a ``def``
handler's ``rest.setChunkedResponse`` raises once its answer can no longer be sent, and
:class:`StreamCut`, what a stream whose failure is already logged raises to the engine.

::

    HTTPError(status)                   any status, the JSON body of SPEC 3
    ├── Unauthorized(challenge)         401 + WWW-Authenticate
    ├── Forbidden(challenge=None)       403 (+ WWW-Authenticate: a token's missing scope)
    ├── TooManyRequests(retry_after)    429 + Retry-After: lock-outs, throttles, rate limits
    └── ServiceUnavailable(retry_after) 503 (+ Retry-After: the state store, store_unavailable)

A :class:`Challenge` (RFC 9110 11.6.1) is spelled once, at start, where its value is fixed
(the Basic realm, a location's Bearer challenge with its ``resource_metadata``); only a
refusal's ``error``/``error_description`` are added per request. :data:`NO_STORE` and
:data:`OAUTH_NO_STORE` are the one spelling of an answer no cache may keep.

This module imports nothing else of fwrest.
"""

from __future__ import annotations

import asyncio
import math
from http import HTTPStatus
from typing import Protocol

import orjson

__all__ = [
    "BASIC",
    "BEARER",
    "NO_STORE",
    "OAUTH_NO_STORE",
    "REALM",
    "STATUS_PHRASES",
    "CallbackRaised",
    "Challenge",
    "ClientDisconnected",
    "ConfigError",
    "Forbidden",
    "HTTPError",
    "RaisedInThread",
    "Refusal",
    "ServiceUnavailable",
    "StreamCut",
    "TooManyRequests",
    "Unauthorized",
    "error_body",
    "is_cancellation",
    "quoted",
    "store_unavailable",
]

Headers = tuple[tuple[str, str], ...]

REALM = "Access to REST"  # the realm of every challenge fwrest sends (SPEC 4.1, 4.2)
NO_STORE: Headers = (("cache-control", "no-store"),)
"""An answer no cache may keep (RFC 9111 5.2.2.5): the settings page, usage, the audit
trail."""
OAUTH_NO_STORE: Headers = (*NO_STORE, ("pragma", "no-cache"))
"""The token service's answers (RFC 6749 5.1: tokens, their errors, introspection), with
``Pragma`` for HTTP/1.0 caches."""

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

    def in_file(self, source: str | None) -> ConfigError:
        """This error naming ``source``, the configuration file, unless it names one already
        (an error found after loading, at the store's opening or the key's reading)."""
        if self.source is None and source is not None:
            self.source = source
            self.args = (self.message,)
        return self

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
            # a problem that quotes another error's words ends in them: a full stop first
            end = "" if self.problem.rstrip().endswith((".", "?", "!")) else "."
            parts.append(f"{end} Fix: {self.fix}")
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


class CallbackRaised(Exception):
    """An application's callback that a native route asks (``onAdmin``) raised ``inner``:
    the pipeline logs it as a handler's failure, naming ``what``, and answers the fixed 500
    (SPEC 3, 7.1). An exception is not a refusal: no access is granted and no 403 is said.
    """

    def __init__(self, what: str, inner: BaseException) -> None:
        super().__init__(f"{what} raised {type(inner).__name__}")
        self.what = what
        self.inner = inner


class RaisedInThread(Exception):
    """What a ``def`` function raised that a Future cannot hand to the loop as it is:
    ``StopIteration`` (a Future refuses it) and ``GeneratorExit`` (a task throws a Future's
    exception into the coroutines awaiting it, and thrown, ``GeneratorExit`` closes them
    instead of reaching their handlers). ``original`` is it; the failure is handled as
    any other (SPEC 7.1), ``OnError`` given ``original``."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"the function raised {type(original).__name__}")
        self.original = original
        self.__cause__ = original


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
        headers: Headers = (),
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


class ClientDisconnected(ConnectionError):
    """``rest.setChunkedResponse`` (or ``setLastChunkedResponse``) of a ``def`` handler whose
    chunked answer can no longer be sent (SPEC 10.5): the client went away, or took nothing of
    it for ``BodyTimeout``, or the answer was given up (``ActiveTimeout``). A
    ``ConnectionError``, so that a handler catches it as it would a socket's; one that lets it
    through ends as any handler whose client left: nothing more is sent, nothing is logged."""


class StreamCut(Exception):
    """A streamed answer is cut short for a reason already logged (its iterator or its
    handler failed): the engine closes the connection without the last chunk and logs
    nothing more. ``cause``: what failed (the trace's ``error.type``), when known."""

    def __init__(self, message: str = "", cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class Refusal(Protocol):
    """What :func:`fwrest.wire.error_reply` renders: an :class:`HTTPError`, or the token
    service's ``OAuthError``, whose body is RFC 6749 5.2's."""

    status: int
    headers: Headers
    close: bool

    def body(self) -> bytes: ...


def quoted(value: str) -> str:
    r"""``value`` as an RFC 9110 5.6.4 quoted-string (a backslash before ``"`` and ``\``).

    >>> print(quoted('say "hi"'))
    "say \"hi\""
    """
    if '"' in value or "\\" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{value}"'


class Challenge:
    """A ``WWW-Authenticate`` challenge (RFC 9110 11.6.1): a scheme and its auth-params,
    each value quoted, spelled once (at start, where it is fixed per port or location).

    >>> basic = Challenge("Basic", realm=REALM, charset="ISO-8859-1")
    >>> print(basic)
    Basic realm="Access to REST", charset="ISO-8859-1"
    >>> bearer = Challenge("Bearer", realm=REALM).extended(resource_metadata="https://h/m")
    >>> print(bearer.refused("invalid_token", "the access token has expired"))
    Bearer realm="Access to REST", resource_metadata="https://h/m", error="invalid_token", error_description="the access token has expired"
    >>> print(Challenge("Bearer").refused("insufficient_scope", scope="orders:read"))
    Bearer error="insufficient_scope", scope="orders:read"
    """

    __slots__ = ("header", "params", "scheme", "value")

    def __init__(self, scheme: str, **params: str) -> None:
        self.scheme = scheme
        self.params = params
        self.value = _spelled(scheme, params)
        self.header: Headers = (("www-authenticate", self.value),)

    def extended(self, **params: str) -> Challenge:
        """This challenge with more auth-params after its own."""
        return Challenge(self.scheme, **self.params, **params)

    def refused(self, error: str = "", description: str = "", **params: str) -> str:
        """The value of a refusal (RFC 6750 3): this challenge with ``error`` and
        ``error_description`` (none without an error, RFC 6750 3.1), then ``params``."""
        extra: dict[str, str] = {}
        if error:
            extra["error"] = error
            if description:
                extra["error_description"] = description
        extra.update(params)
        if not extra:
            return self.value
        tail = _spelled("", extra)
        return f"{self.value}, {tail}" if self.params else f"{self.scheme} {tail}"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Challenge({self.value!r})"


def _spelled(scheme: str, params: dict[str, str]) -> str:
    spelled = ", ".join(f"{name}={quoted(value)}" for name, value in params.items())
    if not scheme:
        return spelled
    return f"{scheme} {spelled}" if spelled else scheme


BASIC = Challenge("Basic", realm=REALM, charset="ISO-8859-1")
"""A Basic port's challenge (SPEC 4.1; RFC 7617 2.1: credentials may be ISO-8859-1)."""
BEARER = Challenge("Bearer", realm=REALM)
"""An oAuth2 port's challenge (RFC 6750 3), to which the port adds its locations'
``resource_metadata`` at start (SPEC 16.3)."""


def _value(challenge: Challenge | str) -> Headers:
    if isinstance(challenge, Challenge):
        return challenge.header
    return (("www-authenticate", challenge),)


class Unauthorized(HTTPError):
    """401: credentials missing or refused; ``challenge`` is the ``WWW-Authenticate`` value
    (a :class:`Challenge`, or a refusal's value, :meth:`Challenge.refused`), which a 401
    always carries (RFC 9110 15.5.2)."""

    def __init__(self, challenge: Challenge | str, detailed: str = "") -> None:
        super().__init__(401, detailed=detailed, headers=_value(challenge))


class Forbidden(HTTPError):
    """403: the credentials are good and not enough; with a ``challenge`` when the client
    may do better with other credentials (RFC 6750 3.1: ``insufficient_scope``)."""

    def __init__(self, detailed: str = "", challenge: Challenge | str | None = None) -> None:
        headers = _value(challenge) if challenge is not None else ()
        super().__init__(403, detailed=detailed, headers=headers)
        self.challenge = challenge


def _seconds(delay: float) -> str:
    """RFC 9110 10.2.3's delay-seconds: whole seconds, rounded up, at least 1."""
    return str(max(math.ceil(delay), 1))


class TooManyRequests(HTTPError):
    """429 with ``Retry-After`` (RFC 6585 4): a lock-out, the brute-force throttle, a rate
    limit. ``retry_after`` is in seconds, sent rounded up to a whole second, at least 1.

    >>> TooManyRequests(0.2, "too many failed attempts").headers
    (('retry-after', '1'),)
    """

    def __init__(self, retry_after: float, detailed: str = "") -> None:
        self.retry_after = _seconds(retry_after)
        super().__init__(429, detailed=detailed, headers=(("retry-after", self.retry_after),))


class ServiceUnavailable(HTTPError):
    """503: the server cannot take the request now (a full pool: ``message`` "Server Busy";
    the state store out of reach, SPEC 7: :func:`store_unavailable`), with ``Retry-After``
    when ``retry_after`` (seconds) is given."""

    def __init__(
        self, detailed: str = "", *, message: str | None = None, retry_after: float | None = None
    ) -> None:
        headers: Headers = ()
        if retry_after is not None:
            headers = (("retry-after", _seconds(retry_after)),)
        super().__init__(503, message, detailed, headers=headers)


def store_unavailable() -> ServiceUnavailable:
    """503 with ``Retry-After``: the state store cannot be reached (SPEC 7, fail closed)."""
    return ServiceUnavailable("the state store is unavailable", retry_after=1)


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
