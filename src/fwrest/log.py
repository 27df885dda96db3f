"""Loggers, the log line format, and redaction.

Owns: the ``fwrest.*`` loggers (``server``, ``access``, ``auth``, ``app``; under ``fwrest
serve`` Python's root logger too), the mapping of ``rest_log_level`` (0 off .. 5 debug) onto
them, and the one place that redacts what a log
line may show (SPEC 7): ``Authorization``, ``Proxy-Authorization`` and ``Cookie`` masked whole,
secret-like query and form values replaced, the current request's secrets scrubbed from every
record (exception text included), CR, LF and ESC escaped. Imports nothing else of fwrest.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote_plus

__all__ = [
    "VERBOSE",
    "access_log",
    "app_log",
    "auth_log",
    "escape",
    "flush",
    "mask_header",
    "python_level",
    "redact_body",
    "redact_json",
    "redact_query",
    "request_secrets",
    "scrub",
    "secret_forms",
    "server_log",
    "set_level",
    "setup_logging",
    "truncate",
    "write",
]

VERBOSE = 15
logging.addLevelName(VERBOSE, "VERBOSE")

server_log = logging.getLogger("fwrest.server")
access_log = logging.getLogger("fwrest.access")
auth_log = logging.getLogger("fwrest.auth")
app_log = logging.getLogger("fwrest.app")
_root = logging.getLogger("fwrest")

# rest_log_level (SPEC 5.1) -> logging level; 0 switches the framework's log off.
_LEVELS = {0: logging.CRITICAL + 10, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}
_LEVELS |= {4: VERBOSE, 5: logging.DEBUG}

MASKED = "***"
_MASKED_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
_SECRET_PARTS = (
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
    "session",
    "signature",
    "assertion",
)
_ESCAPES = {"\r": "\\r", "\n": "\\n", "\x1b": "\\x1b"}
_ESCAPE_RE = re.compile("[\r\n\x1b]")

# Secrets of the request being handled (a Basic password, a token) as :func:`secret_forms`
# gives them: scrubbed from any record logged while it runs, whatever logger wrote it.
request_secrets: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "fwrest_request_secrets", default=()
)

worker_label = "main"  # this process's name in every line: set_worker_label()


def set_worker_label(label: str) -> None:
    """Name this process in the log's lines (``w1``, ``w2``: a worker of the supervisor)."""
    global worker_label
    worker_label = label


def python_level(rest_log_level: int) -> int:
    """The ``logging`` level for a ``rest_log_level`` value (0 off .. 5 debug)."""
    return _LEVELS.get(rest_log_level, logging.INFO)


# True under ``fwrest serve``: the process is fwrest's, so Python's root logger (the
# application's own loggers, ``logging.getLogger(__name__)``) writes through fwrest's handlers
# at fwrest's level, formatted, escaped and scrubbed like fwrest's records.
_owns_root = False


def set_level(rest_log_level: int) -> None:
    """Apply ``rest_log_level`` to every ``fwrest`` logger of this process."""
    level = python_level(rest_log_level)
    _root.setLevel(level)
    if _owns_root:
        logging.getLogger().setLevel(level)


def is_secret_name(name: str) -> bool:
    """True when a parameter of this name may carry a secret (``password``, ``client_secret``)."""
    lowered = name.lower()
    return lowered == "code" or any(part in lowered for part in _SECRET_PARTS)


def escape(text: str) -> str:
    r"""Escape CR, LF and ESC so that logged input cannot forge a line: ``a\nb`` -> ``a\\nb``."""
    if _ESCAPE_RE.search(text) is None:
        return text
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group()], text)


def truncate(text: str, size: int) -> str:
    """Cut a logged value to ``size`` characters (``rest_log_stringsize``; 0 writes none of
    it, only its length).

    >>> truncate("abcdef", 3), truncate("abcdef", 0), truncate("", 0)
    ('abc...(6 chars)', '...(6 chars)', '')
    """
    if len(text) <= size:
        return text
    return f"{text[:size]}...({len(text)} chars)"


def mask_header(name: str, value: str) -> str:
    """The loggable form of a header value: credentials and cookies are masked whole."""
    return MASKED if name.lower() in _MASKED_HEADERS else value


def redact_query(query: str, *, every: bool = False) -> str:
    """Replace the values of secret-like parameters in a query string or form body (of every
    parameter with ``every``: the token route's query, SPEC 4.2).

    Names are judged decoded, as the server reads them (``%70assword`` is ``password``).

    >>> redact_query("user=ann&password=x%20y&page=2&%70wd=z")
    'user=ann&password=***&page=2&%70wd=***'
    >>> redact_query("grant_type=password&username=ann&password=x", every=True)
    'grant_type=***&username=***&password=***'
    """
    if not query:
        return query
    out = []
    for pair in query.split("&"):
        name, sep, _value = pair.partition("=")
        secret = sep and (
            every
            or is_secret_name(name)
            or (("%" in name or "+" in name) and is_secret_name(unquote_plus(name)))
        )
        out.append(f"{name}={MASKED}" if secret else pair)
    return "&".join(out)


def redact_json(text: str) -> str:
    """Replace the values of secret-like keys in a JSON text (``"password": "x"``; a number,
    ``true``, ``false`` or ``null`` too: a PIN may be sent as a number).

    >>> redact_json('{"password": 1234, "user": "ann", "api_key": "k"}')
    '{"password": "***", "user": "ann", "api_key": "***"}'
    """
    return _JSON_SECRET.sub(lambda m: f'{m.group(1)}"{MASKED}"', text)


_SECRET_NAME = r'[^"\\]*(?:' + "|".join(_SECRET_PARTS) + r')[^"\\]*|code'
_JSON_SECRET = re.compile(
    r'("(?:' + _SECRET_NAME + r')"\s*:\s*)'
    r'(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null)',
    re.IGNORECASE,
)
# a multipart/form-data part of a secret-like name: its headers, then the value (up to the
# line end: the part's boundary follows it)
_MULTIPART_SECRET = re.compile(
    r'(content-disposition:[^\r\n]*\bname="(?:' + _SECRET_NAME + r')"[^\r\n]*\r?\n'
    r"(?:[^\r\n]+\r?\n)*\r?\n)[^\r\n]*",
    re.IGNORECASE,
)


def redact_body(text: str) -> str:
    """A request or response body as the log may show it (``rest_log_level=5``), whatever its
    type says: the values of secret-like JSON keys, form fields and multipart parts replaced.

    >>> redact_body('password=x&data={"token": "t"}')
    'password=***&data={"token": "***"}'
    >>> redact_body(' {"password": "x"}')
    ' {"password": "***"}'
    """
    if not text:
        return text
    if '"' in text:
        text = _JSON_SECRET.sub(lambda m: f'{m.group(1)}"{MASKED}"', text)
        if "name=" in text:
            text = _MULTIPART_SECRET.sub(lambda m: f"{m.group(1)}{MASKED}", text)
    # a form unless it starts as JSON, markup or a multipart boundary does (in those, the text
    # between two "&" is no form field)
    if "=" in text and text.lstrip()[:1] not in ("{", "[", "<", "-"):
        text = redact_query(text)
    return text


def secret_forms(*secrets: str) -> tuple[str, ...]:
    """What to scrub for these secrets, worked out once (the value for :data:`request_secrets`):
    each secret of 3 characters or more, and its URL-encoded form where that differs. A
    shorter one would wreck the line if scrubbed; fwrest never logs it directly.

    >>> secret_forms("pa ss", "ab", "tok-1")
    ('pa ss', 'pa%20ss', 'tok-1')
    """
    forms: list[str] = []
    for secret in secrets:
        if len(secret) < 3:
            continue
        forms.append(secret)
        if _URL_PLAIN.fullmatch(secret) is None:
            quoted = quote(secret, safe="")
            if quoted != secret:
                forms.append(quoted)
    return tuple(forms)


# the characters ``quote(safe="")`` leaves as they are: a secret made of them only (a JWT, a
# hex token) has no second form to look for
_URL_PLAIN = re.compile("[A-Za-z0-9_.~-]+")


def scrub(text: str, forms: tuple[str, ...]) -> str:
    """Remove secrets from a text, given as :func:`secret_forms` gives them.

    >>> scrub("user=ann&password=pa%20ss", secret_forms("pa ss"))
    'user=ann&password=***'
    """
    for form in forms:
        if form in text:
            text = text.replace(form, MASKED)
    return text


# What a record of :func:`write` shares with every other record of its process and thread,
# taken from a real LogRecord once: (pid, thread id) -> attributes.
_TEMPLATES: dict[tuple[int, int], dict[str, object]] = {}
_PER_RECORD = frozenset(
    ("name", "msg", "args", "levelno", "levelname", "created", "msecs", "relativeCreated")
)


def _template(key: tuple[int, int]) -> dict[str, object]:
    record = logging.LogRecord("fwrest", logging.INFO, "", 0, "", (), None)
    shared = {k: v for k, v in record.__dict__.items() if k not in _PER_RECORD}
    if len(_TEMPLATES) > 64:
        _TEMPLATES.clear()  # threads come and go (pools shrink); keep it bounded
    _TEMPLATES[key] = shared
    return shared


def write(logger: logging.Logger, level: int, msg: str, *args: object) -> None:
    """``logger.log(level, msg, *args)`` for the lines written per request, made cheaply.

    The caller has checked ``logger.isEnabledFor(level)``. The record is the standard
    ``LogRecord`` (every handler, filter and formatter sees what ``logger.log`` gives) except
    that it skips the walk up the stack for the caller's file and line, which fwrest's line
    format never shows, and copies the process and thread names from the first record of
    this thread instead of asking for them again: together about half of what a log line
    costs.
    """
    key = (os.getpid(), threading.get_ident())
    shared = _TEMPLATES.get(key)
    if shared is None:
        shared = _template(key)
    record = logging.LogRecord.__new__(logging.LogRecord)
    attrs = record.__dict__
    attrs.update(shared)
    created = time.time()
    attrs["name"] = logger.name
    attrs["msg"] = msg
    attrs["args"] = args
    attrs["levelno"] = level
    attrs["levelname"] = logging.getLevelName(level)
    attrs["created"] = created
    attrs["msecs"] = int((created - int(created)) * 1000) + 0.0
    attrs["relativeCreated"] = (created - _START) * 1000
    logger.handle(record)


_START: float = logging._startTime  # type: ignore[attr-defined]
_stamp: tuple[int, str] = (-1, "")  # the last second formatted (one tuple: swapped atomically)


def _timestamp(created: float) -> str:
    global _stamp
    second = int(created)
    stamp = _stamp
    if stamp[0] != second:
        stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        _stamp = stamp
    return stamp[1]


class Formatter(logging.Formatter):
    """``2026-11-22T17:40:01.123Z INFO fwrest.access [w1] message``, one event per line."""

    def format(self, record: logging.LogRecord) -> str:
        ts = _timestamp(record.created)
        text = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text = f"{text}\n{record.exc_text}"
        secrets = request_secrets.get()
        if secrets:
            text = scrub(text, secrets)
        # A traceback keeps its line breaks (indented); input-derived text was escaped already.
        if "\n" in text or "\r" in text or "\x1b" in text:  # most lines: none to replace
            text = text.replace("\x1b", "\\x1b").replace("\r", "\\r").replace("\n", "\n    ")
        msecs = int(record.msecs)
        return f"{ts}.{msecs:03d}Z {record.levelname} {record.name} [{worker_label}] {text}"


class TurnFlushingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record at once, but on an event-loop thread flushes once per turn of the
    loop instead of once per record: the lines of every request answered in one turn leave
    in one ``write``. Elsewhere (the supervisor, thread pools) each record is flushed as
    usual. :func:`flush` empties it for sure (before a fork, before a worker exits).
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._pending = False

    def flush(self) -> None:
        # called by emit() with the handler's lock held
        if self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            super().flush()
            return
        self._pending = True
        loop.call_soon(self.flush_now)

    def flush_now(self) -> None:
        self.acquire()
        try:
            self._pending = False
            if self.stream is not None and hasattr(self.stream, "flush"):
                self.stream.flush()
        finally:
            self.release()


class _FileHandler(logging.FileHandler, TurnFlushingHandler):
    """``LogFile``: a file handler that flushes as :class:`TurnFlushingHandler` does."""

    def __init__(self, path: Path) -> None:
        logging.FileHandler.__init__(self, path, encoding="utf-8")
        self._pending = False


def flush() -> None:
    """Write out what fwrest's handlers hold (a worker's last turn, before a fork)."""
    for handler in list(_root.handlers):
        if isinstance(handler, TurnFlushingHandler):
            handler.flush_now()
        elif getattr(handler, "_fwrest", False):
            handler.flush()


def _stderr_stream() -> Any:
    """Standard error with a block buffer of its own (:class:`TurnFlushingHandler` decides
    when it is written; ``sys.stderr`` would write every line at once)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.stderr
    return open(
        fd, "w", buffering=1 << 16, encoding="utf-8", errors="backslashreplace", closefd=False
    )


def remove_handlers() -> None:
    """Remove the handlers :func:`setup_logging` installed (``Service.stop()``)."""
    global _owns_root
    flush()
    python_root = logging.getLogger()
    for handler in list(python_root.handlers):
        if getattr(handler, "_fwrest", False):
            python_root.removeHandler(handler)
    _owns_root = False
    for handler in list(_root.handlers):
        if getattr(handler, "_fwrest", False):
            _root.removeHandler(handler)
            handler.close()


def setup_logging(rest_log_level: int, log_file: Path | None, *, own_process: bool) -> None:
    """Install fwrest's handlers: standard error, and ``LogFile`` when set.

    Args:
        rest_log_level: the level in force.
        log_file: ``[HTTPSERVER] LogFile``, resolved.
        own_process: True under ``fwrest serve``: the application's own loggers (Python's
            root logger) write through the same handlers, at the same level, so that their
            records are formatted, escaped and scrubbed of the request's secrets too (without
            it they reach ``logging``'s last-resort handler, raw). Under ``fwrest.start()``
            the host program's logging is left as it is, and a handler is added to standard
            error only when the host program has configured none.
    """
    global _owns_root
    formatter = Formatter()
    remove_handlers()
    _owns_root = own_process
    set_level(rest_log_level)
    handlers: list[logging.Handler] = []
    if own_process:
        handlers.append(TurnFlushingHandler(_stderr_stream()))
    elif not (logging.getLogger().handlers or _root.handlers):
        handlers.append(logging.StreamHandler(sys.stderr))  # the host's stderr, as it is
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(_FileHandler(log_file))
    python_root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(formatter)
        handler._fwrest = True  # type: ignore[attr-defined]
        _root.addHandler(handler)
        if own_process:
            python_root.addHandler(handler)
    if own_process:
        _root.propagate = False
