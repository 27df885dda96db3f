"""Loggers, the log line format, and redaction.

Owns: the ``fwrest.*`` loggers (``server``, ``access``, ``auth``, ``app``), the mapping of
``rest_log_level`` (0 off .. 5 debug) onto them, and the one place that redacts what a log
line may show (SPEC 7): ``Authorization``, ``Proxy-Authorization`` and ``Cookie`` masked whole,
secret-like query and form values replaced, the current request's secrets scrubbed from every
record (exception text included), CR, LF and ESC escaped. Imports nothing else of fwrest.
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

__all__ = [
    "VERBOSE",
    "access_log",
    "app_log",
    "auth_log",
    "escape",
    "mask_header",
    "python_level",
    "redact_json",
    "redact_query",
    "request_secrets",
    "scrub",
    "server_log",
    "set_level",
    "setup_logging",
    "trace_log",
    "truncate",
]

VERBOSE = 15
logging.addLevelName(VERBOSE, "VERBOSE")

server_log = logging.getLogger("fwrest.server")
access_log = logging.getLogger("fwrest.access")
auth_log = logging.getLogger("fwrest.auth")
app_log = logging.getLogger("fwrest.app")
trace_log = logging.getLogger("fwrest.trace")
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

# Secrets of the request being handled (a Basic password, a token): scrubbed from any record
# logged while it runs, whatever logger wrote it.
request_secrets: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "fwrest_request_secrets", default=()
)

worker_label = "main"


def python_level(rest_log_level: int) -> int:
    """The ``logging`` level for a ``rest_log_level`` value (0 off .. 5 debug)."""
    return _LEVELS.get(rest_log_level, logging.INFO)


def set_level(rest_log_level: int) -> None:
    """Apply ``rest_log_level`` to every ``fwrest`` logger."""
    _root.setLevel(python_level(rest_log_level))


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
    """Cut a logged value to ``size`` characters (``rest_log_stringsize``)."""
    if size <= 0 or len(text) <= size:
        return text
    return f"{text[:size]}...({len(text)} chars)"


def mask_header(name: str, value: str) -> str:
    """The loggable form of a header value: credentials and cookies are masked whole."""
    return MASKED if name.lower() in _MASKED_HEADERS else value


def redact_query(query: str) -> str:
    """Replace the values of secret-like parameters in a query string or form body.

    >>> redact_query("user=ann&password=x%20y&page=2")
    'user=ann&password=***&page=2'
    """
    if not query:
        return query
    out = []
    for pair in query.split("&"):
        name, sep, _value = pair.partition("=")
        out.append(f"{name}={MASKED}" if sep and is_secret_name(name) else pair)
    return "&".join(out)


def redact_json(text: str) -> str:
    """Replace the values of secret-like keys in a JSON text (``"password": "x"``)."""
    return _JSON_SECRET.sub(lambda m: f'{m.group(1)}"{MASKED}"', text)


_JSON_SECRET = re.compile(
    r'("(?:[^"\\]*(?:' + "|".join(_SECRET_PARTS) + r')[^"\\]*|code)"\s*:\s*)"(?:[^"\\]|\\.)*"',
    re.IGNORECASE,
)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Remove each secret (and its URL-encoded form) from a text."""
    return _scrub(text, secrets)


def _scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if len(secret) < 3:
            continue  # too short to scrub without wrecking the line; never logged directly
        text = text.replace(secret, MASKED)
        quoted = quote(secret, safe="")
        if quoted != secret:
            text = text.replace(quoted, MASKED)
    return text


class Formatter(logging.Formatter):
    """``2026-11-22T17:40:01.123Z INFO fwrest.access [w1] message``, one event per line."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        text = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text = f"{text}\n{record.exc_text}"
        secrets = request_secrets.get()
        if secrets:
            text = _scrub(text, secrets)
        # A traceback keeps its line breaks (indented); input-derived text was escaped already.
        text = text.replace("\x1b", "\\x1b").replace("\r", "\\r").replace("\n", "\n    ")
        msecs = int(record.msecs)
        return f"{ts}.{msecs:03d}Z {record.levelname} {record.name} [{worker_label}] {text}"


def remove_handlers() -> None:
    """Remove the handlers :func:`setup_logging` installed (``Service.stop()``)."""
    for handler in list(_root.handlers):
        if getattr(handler, "_fwrest", False):
            _root.removeHandler(handler)
            handler.close()


def setup_logging(rest_log_level: int, log_file: Path | None, *, own_process: bool) -> None:
    """Install fwrest's handlers: standard error, and ``LogFile`` when set.

    Args:
        rest_log_level: the level in force.
        log_file: ``[HTTPSERVER] LogFile``, resolved.
        own_process: True under ``fwrest serve``; under ``fwrest.start()`` a handler is added
            to standard error only when the host program has configured none.
    """
    set_level(rest_log_level)
    formatter = Formatter()
    for handler in list(_root.handlers):
        if getattr(handler, "_fwrest", False):
            _root.removeHandler(handler)
            handler.close()
    handlers: list[logging.Handler] = []
    if own_process or not (logging.getLogger().handlers or _root.handlers):
        handlers.append(logging.StreamHandler(sys.stderr))
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(formatter)
        handler._fwrest = True  # type: ignore[attr-defined]
        _root.addHandler(handler)
    if own_process:
        _root.propagate = False
