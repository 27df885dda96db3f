"""Loggers, the log line format, and redaction.

Owns: the ``fwrest.*`` loggers (``server``, ``access``, ``auth``, ``app``, ``audit``; under
``fwrest serve`` Python's root logger too), the mapping of ``rest_log_level`` (0 off .. 5
debug) onto them (``audit`` writes at every level above 0, SPEC 13.5), ``LogFile`` (mode
0600, an existing file's made so), and the one place that redacts what a log line may show
(SPEC 7, 7.1): headers whose names may carry secrets masked whole (``Authorization``, ``Cookie``, ``X-Api-Key``...),
secret-like query and form values replaced, bodies redacted after parsing (JSON, URL-encoded
forms; any other body is described by its length only), URLs' userinfo (``user:pw@host`` too)
and the secret-like values of any query (``/path?token=...`` too) masked in every record,
whatever logger wrote it, the current request's secrets scrubbed from every record (exception
text included), CR, LF and ESC escaped; the lines as text or as JSON (``LogFormat``, SPEC
13.4), each record of a request with the request's id (:data:`request_id`). Imports nothing
else of fwrest.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote_plus

import orjson

__all__ = [
    "OWN",
    "VERBOSE",
    "access_log",
    "app_log",
    "audit_log",
    "auth_log",
    "close_logger",
    "command_audit_log",
    "escape",
    "flush",
    "input_secrets",
    "is_secret_header",
    "mask_header",
    "python_level",
    "redact_body",
    "redact_query",
    "redact_urls",
    "redact_value",
    "request_id",
    "request_inputs",
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
# SPEC 13.5: the audit trail's lines, at every rest_log_level above 0 (a level of its own)
audit_log = logging.getLogger("fwrest.audit")
_root = logging.getLogger("fwrest")

# rest_log_level (SPEC 5.1) -> logging level; 0 switches the framework's log off.
_LEVELS = {0: logging.CRITICAL + 10, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}
_LEVELS |= {4: VERBOSE, 5: logging.DEBUG}

MASKED = "***"
# DPoP: a proof of possession (SPEC 16.2), masked as the Authorization it goes with
_MASKED_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "dpop"}
)
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
    "verifier",  # PKCE's code_verifier (SPEC 16.1)
    "csrf",  # an anti-forgery token (the login form's fw_csrf)
)
_ESCAPES = {"\r": "\\r", "\n": "\\n", "\x1b": "\\x1b"}
_ESCAPE_RE = re.compile("[\r\n\x1b]")

# Secrets of the request being handled (a Basic password, a token) as :func:`secret_forms`
# gives them: scrubbed from any record logged while it runs, whatever logger wrote it.
request_secrets: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "fwrest_request_secrets", default=()
)


class RequestInputs(Protocol):
    """What :func:`input_secrets` reads of a request (``context.request.RequestContext``)."""

    raw_headers: list[tuple[str, str]]
    query_string: str
    body: bytes


# The request being handled: the values the access line and the debug lines mask in it
# (secret-named headers, query and form fields, JSON keys) are scrubbed from every other
# record logged while it runs (a traceback holding an X-Api-Key), worked out from it only
# when such a record is written (:func:`input_secrets`), never per request.
request_inputs: contextvars.ContextVar[RequestInputs | None] = contextvars.ContextVar(
    "fwrest_request_inputs", default=None
)

# The id of the request being handled (SPEC 13.4): set by the port for the whole request, so
# that every record logged while it runs carries it (the access line, the application's own
# ``logging`` calls, on the loop or in a pool thread, which runs in a copy of the request's
# context, tracebacks, hooks' records). Only ids of ``context/request_id.py``'s alphabet are
# set, so a line never shows one raw.
request_id: contextvars.ContextVar[str | int | None] = contextvars.ContextVar(
    "fwrest_request_id", default=None
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
    audit_log.setLevel(logging.INFO if rest_log_level > 0 else _LEVELS[0])
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


def is_secret_header(name: str) -> bool:
    """True when a header of this name may carry a secret, masked whole in the log (SPEC 7.1):
    ``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``, and any name
    holding a secret-like part (``X-Api-Key``, ``X-Auth-Token``, ``X-Session-Id``).

    >>> [is_secret_header(n) for n in ("X-Api-Key", "x-auth-token", "Cookie2", "Accept")]
    [True, True, True, False]
    """
    lowered = name.lower()
    return (
        lowered in _MASKED_HEADERS
        or "cookie" in lowered
        or any(part in lowered for part in _SECRET_PARTS)
    )


def mask_header(name: str, value: str) -> str:
    """The loggable form of a header value: masked whole when the name may carry a secret;
    otherwise a URL, form or JSON in it redacted as :func:`redact_value` does.

    >>> mask_header("X-Api-Key", "k-123"), mask_header("Referer", "http://u:pw@h/p?token=t")
    ('***', 'http://***@h/p?token=***')
    """
    return MASKED if is_secret_header(name) else redact_value(value)


def _secret_param(name: str) -> bool:
    """A query or form field name, judged also decoded as the server reads it."""
    return is_secret_name(name) or (
        ("%" in name or "+" in name) and is_secret_name(unquote_plus(name))
    )


def redact_query(query: str, *, every: bool = False) -> str:
    """Replace the values of secret-like parameters in a query string or form body (of every
    parameter with ``every``: the token route's query, SPEC 4.2).

    Fields are separated by ``&`` or ``;`` (servers differ, so both readings are covered: a
    secret's value is hidden up to the next ``&``, a ``;`` in it included). Names are judged
    decoded, as the server reads them (``%70assword`` is ``password``). The value of any other
    field is redacted inside too when it holds a URL, a query or JSON (a password in a
    ``next=`` URL, SPEC 7.1).

    >>> redact_query("user=ann&password=x%20y&page=2&%70wd=z")
    'user=ann&password=***&page=2&%70wd=***'
    >>> redact_query("user=ann;password=a;b&page=2")
    'user=ann;password=***&page=2'
    >>> redact_query("next=https%3A%2F%2Fann%3Apw%40h%2Fx%3Ftoken%3Dt&n=1")
    'next=https://***@h/x?token=***&n=1'
    >>> redact_query("grant_type=password&username=ann&password=x", every=True)
    'grant_type=***&username=***&password=***'
    """
    return _redact_pairs(query, every, 0)


_MAX_DEPTH = 6  # values inside values inside values...: deeper ones are masked whole
_SEPARATORS = re.compile("([&;])")


def _redact_pairs(text: str, every: bool, depth: int) -> str:
    if not text:
        return text
    parts = _SEPARATORS.split(text)  # [field, sep, field, sep, ..., field]
    count = len(parts)
    out: list[str] = []
    i = 0
    while i < count:
        pair = parts[i]
        sep = parts[i + 1] if i + 1 < count else ""
        name, eq, value = pair.partition("=")
        if eq and (every or _secret_param(name)):
            out.append(f"{name}={MASKED}")
            while sep == ";":  # the value may go on up to the next "&"
                i += 2
                sep = parts[i + 1] if i + 1 < count else ""
        elif eq and value:
            out.append(f"{name}={_redact_param_value(value, depth)}")
        else:
            out.append(pair)
        out.append(sep)
        i += 2
    return "".join(out)


# what a redacted value keeps unencoded, so that the line stays readable
_SAFE = "/:@?=;,*!$'()[]"


def _redact_param_value(value: str, depth: int) -> str:
    """A query or form value, redacted inside when it holds a URL, a query or JSON."""
    if depth >= _MAX_DEPTH:
        return MASKED if any(c in value for c in "=%:{[") else value
    decoded = unquote_plus(value) if ("%" in value or "+" in value) else value
    redacted = redact_value(decoded, depth + 1)
    if redacted == decoded:
        return value
    return quote(redacted, safe=_SAFE, errors="backslashreplace")


# a URL's userinfo: from the scheme's "//" to the last "@" before the path's query, a blank or
# the next URL's "://" (greedy: a password holding "/" or "@" is hidden whole; a path with "@"
# hides more; a query's next field that holds a URL, "&u=http://a:pw@h", keeps its name and
# has its own userinfo masked). Linear: no look-ahead but one character's
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)(?:[^\s?#\"'<>:]|:(?!//))*@")
# the words of a text, for a userinfo without its scheme (``user:password@host``, as a URL's
# authority is written apart: OpenTelemetry's gRPC exporter names its endpoint so): split
# once, each word then read in Python (a pattern that looked for the word around each "@"
# went back over the text at each word start: quadratic)
_WORD_BOUNDS = re.compile("([\\s\"'<>()]+)")
# a query, in any text: a "?" and the fields after it up to a blank, a quote, "<", ">" or "#"
# (a URL's, with its scheme or without: urllib3's "url: /v1/traces?token=...")
_QUERY = re.compile(r"\?([^\s#\"'<>]+)")


def redact_value(text: str, depth: int = 0) -> str:
    """A text as the log may show it: a URL's userinfo masked, and the values of secret-like
    fields of a query, a form or JSON in it replaced (at any depth: a URL inside a query
    value, JSON inside a JSON string).

    >>> redact_value("redis://:s3cret@10.0.0.5:6379/0")
    'redis://***@10.0.0.5:6379/0'
    >>> redact_value('{"user": "ann", "auth": {"pin": 1234, "password": "x"}}')
    '{"user":"ann","auth":"***"}'
    >>> redact_value("/login?next=%2Fa%3Fpassword%3Dx")
    '/login?next=/a?password=***'
    """
    if not text:
        return text
    if depth > _MAX_DEPTH:  # nested deeper than a log line should follow
        return MASKED if any(c in text for c in "=%:@{[") else text
    out = text
    if "://" in out and "@" in out:
        out = _USERINFO.sub(rf"\1{MASKED}@", out)
    head = out.lstrip()[:1]
    if head == "{" or head == "[":
        tree = _parse_json(out)
        # JSON that does not parse cannot be told apart safely (as a body of that kind)
        return MASKED if tree is None else _redacted_json(tree, out, depth)
    if "?" in out:
        base, _, query = out.partition("?")
        return f"{base}?{_redact_pairs(query, False, depth + 1)}"
    if "=" in out:
        return _redact_pairs(out, False, depth + 1)
    return out


def redact_urls(text: str) -> str:
    """Every URL in a log line with its userinfo masked and its query redacted: a URL with
    its scheme, a path and its query (``/v1/traces?token=t``), an authority with its
    userinfo (``ann:pw@collector:4317``); any query's secret-like values.

    >>> redact_urls("GET https://ann:pw@api.example/x?api_key=k&a=1 failed")
    'GET https://***@api.example/x?api_key=***&a=1 failed'
    >>> redact_urls("Max retries exceeded with url: /v1/traces?token=t&a=1 (refused)")
    'Max retries exceeded with url: /v1/traces?token=***&a=1 (refused)'
    >>> redact_urls("exporting traces to ann:p@ss@collector:4317, mail ann@example.org")
    'exporting traces to ***@collector:4317, mail ann@example.org'
    """
    if "@" in text:
        if "://" in text:
            text = _USERINFO.sub(rf"\1{MASKED}@", text)
        text = "".join(
            _bare_userinfo(word) if "@" in word else word for word in _WORD_BOUNDS.split(text)
        )
    if "?" in text:
        text = _QUERY.sub(lambda m: "?" + _redact_pairs(m.group(1), False, 1), text)
    return text


def _bare_userinfo(word: str) -> str:
    """A word with the userinfo of an authority written without its scheme masked
    (``user:password@host``, or after a ``=`` or ``,`` in the word: ``to=u:pw@h``), up to its
    last ``@`` before a host; a word holding ``/``, ``?`` or ``#`` before it (a path, a URL
    with its scheme) or no ``:`` (an e-mail address) as it is.

    >>> _bare_userinfo("to=ann:p@ss@collector:4317,"), _bare_userinfo("ann@example.org")
    ('to=***@collector:4317,', 'ann@example.org')
    """
    at = len(word)
    while True:
        at = word.rfind("@", 0, at)
        if at <= 0:
            return word
        host = word[at + 1 : at + 2]
        if host.isalnum() or host == "_" or host == "[":
            break
    head = word[:at]
    colon = head.find(":")
    if colon < 0 or "/" in head or "?" in head or "#" in head:
        return word
    start = max(head.rfind("=", 0, colon), head.rfind(",", 0, colon)) + 1
    return f"{word[:start]}{MASKED}@{word[at + 1 :]}"


def _parse_json(text: str) -> dict[str, Any] | list[Any] | None:
    """An object or array parsed from ``text``; None when it is no JSON of that shape."""
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return tree if isinstance(tree, dict | list) else None


def _dump(tree: Any) -> str:
    text = json.dumps(tree, ensure_ascii=False, separators=(",", ":"))
    if text.isascii():
        return text
    # a lone surrogate ("\\ud800" in the JSON) is no character a log file can hold
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _redact_tree(node: Any, depth: int) -> tuple[Any, bool]:
    """A parsed JSON value with the values of secret-like keys replaced (keys as parsed, so
    a ``\\u``-escaped key is judged by its letters), and whether anything was; strings are
    redacted as :func:`redact_value` does, one level deeper than ``depth``."""
    if isinstance(node, dict):
        changed = False
        out: dict[str, Any] = {}
        for key, value in node.items():
            if is_secret_name(key) and not _no_secret(key, value):
                out[key] = MASKED
                changed = True
            else:
                out[key], inner = _redact_tree(value, depth)
                changed = changed or inner
        return out, changed
    if isinstance(node, list):
        changed = False
        items = []
        for value in node:
            item, inner = _redact_tree(value, depth)
            items.append(item)
            changed = changed or inner
        return items, changed
    if isinstance(node, str):
        redacted = redact_value(node, depth + 1)
        return redacted, redacted != node
    return node, False


def _no_secret(key: str, value: Any) -> bool:
    """True for a value under a secret-like key that holds no secret: ``true``, ``false`` and
    ``null`` (under any key), and a number under ``code`` (a status or an error code, where
    the code grant's authorization code is a string).

    >>> _no_secret("authenticated", True), _no_secret("code", 401), _no_secret("code", "c-1")
    (True, True, False)
    """
    if value is None or isinstance(value, bool):
        return True
    return isinstance(value, int | float) and key.lower() == "code"


def _redacted_json(tree: dict[str, Any] | list[Any], text: str, depth: int) -> str:
    """``text``, parsed as ``tree``, redacted: as it is when nothing in it is secret."""
    try:
        redacted, changed = _redact_tree(tree, depth)
        return _dump(redacted) if changed else text
    except RecursionError:  # nested deeper than a log line should follow
        return MASKED


FORM_TYPE = "application/x-www-form-urlencoded"
# what a form body may hold: URL-encoded fields (a brace, a quote, a blank or a non-ASCII
# letter says it is something else, and its fields could not be told apart safely)
_FORM = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?%\[\]]*")


def redact_body(text: str, media_type: str = "") -> str | None:
    """A request or response body as the log may show it (``rest_log_level=5``), or None
    when it may only be described by its length (SPEC 7.1).

    It is redacted after parsing: JSON (an object or an array, whatever ``media_type`` says)
    with the values of secret-like keys replaced at any depth, and a form
    (``application/x-www-form-urlencoded``, fields separated by ``&`` or ``;``) as
    :func:`redact_query` does. Anything else (text, XML, multipart, a form that is not
    URL-encoded, a ``{`` that starts no JSON) is None.

    >>> redact_body('{"us\\\\u0065r": "ann", "p\\\\u0061ssword": "x"}')
    '{"user":"ann","password":"***"}'
    >>> redact_body("user=ann;password=x", FORM_TYPE)
    'user=ann;password=***'
    >>> redact_body("{user=ann&password=x", FORM_TYPE) is None
    True
    >>> redact_body("<p>password=x</p>", "application/xml") is None
    True
    """
    if not text:
        return text
    head = text.lstrip()[:1]
    if head == "{" or head == "[":
        tree = _parse_json(text)
        if tree is None:
            return None
        return _redacted_json(tree, text, 0)
    media = media_type.split(";", 1)[0].strip().lower()
    if media == FORM_TYPE and _FORM.fullmatch(text) is not None:
        return _redact_pairs(text, False, 0)
    return None


# where a query or form field's name may be secret-like (a part of one, or an escape that
# may spell one), found in the lowered text (a pattern with (?i) is ten times slower); the
# field around each is judged in Python (its bounds, its "="), once: the hits after it in
# the same field are skipped. The parts only: a pattern that also matched up to the "="
# was tried again at each part or escape and read to the field's end each time (quadratic:
# a 100 KB "msg=word+word+..." took seconds)
_PAIR_PARTS = "|".join((*_SECRET_PARTS, "code", "%", r"\+"))
_PAIR_CANDIDATE = re.compile(_PAIR_PARTS)
_PAIR_END = re.compile("[&;]|$")


def _pair_secrets(text: str, found: list[str]) -> None:
    """The values of secret-like fields of a query or form (``&`` or ``;``), as sent and
    decoded, each also up to the next ``&`` (as :func:`redact_query` hides it)."""
    pos = 0  # read up to here (a separator, or the start)
    amp = -1  # the next "&" found (-1: look again), or len(text): none left
    tail_to = -1  # where the last tail taken ends
    for hit in _PAIR_CANDIDATE.finditer(_lowered(text)):
        at = hit.start()
        if at < pos:
            continue
        start = max(text.rfind("&", pos, at), text.rfind(";", pos, at)) + 1
        ending = _PAIR_END.search(text, at)
        assert ending is not None
        end = ending.start()
        pos = end
        name, eq, value = text[start:end].partition("=")
        if not eq or not _secret_param(name):
            continue
        values = [value] if value else []  # `password=;tail`: an &-only parser reads ";tail"
        if end < len(text) and text[end] == ";":
            if amp < end:
                amp = text.find("&", end)
                if amp < 0:
                    amp = len(text)
            # once per run of ";" fields: a later field's tail is a part of the first's (and
            # taking each would be quadratic: "pwd=x;" * N up to one "&")
            if amp != tail_to:
                tail_to = amp
                values.append(text[start + len(name) + 1 : amp])
        for value in values:
            found.append(value)
            if "%" in value or "+" in value:
                found.append(unquote_plus(value))
        if len(found) > 3 * SECRETS_MAX:
            return


# where a JSON key may be secret-like: a part of one, the key "code", or an escape (that may
# spell one), found in the lowered text (a pattern with (?i) is ten times slower); each found
# is then read as the string around it, judged decoded, in Python. A scan rather than a
# parse: it reads JSON that does not parse (cut, invalid), a key given twice (each value),
# any depth, the values as written (escapes and all), at the speed of ``re`` where no key
# may be secret
_CANDIDATE = re.compile("|".join((*_SECRET_PARTS, '"code"', r"\\")))
_KEY_END = re.compile(r'"\s*:\s*')
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"?')
_JSON_NUMBER = re.compile(r"-?[0-9][0-9.eE+\-]*")
# the tokens of a value under a secret-like key: strings, numbers, brackets (the rest skipped)
_JSON_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"?|(-?[0-9][0-9.eE+\-]*)|([\[{])|([\]}])|(:)')


def _lowered(text: str) -> str:
    """``text`` lowered letter for letter (a letter that lowers to two, ``İ``, is first made
    ``I``, and if one still does, every letter past ASCII a NUL)."""
    low = text.lower()
    if len(low) != len(text):
        low = text.replace("\u0130", "I").lower()
        if len(low) != len(text):
            low = re.sub(r"[^\x00-\x7f]", "\x00", text).lower()
    return low


def _escaped(text: str, at: int) -> bool:
    """True when the character at ``at`` follows an odd number of backslashes."""
    count = 0
    while at > 0 and text[at - 1] == "\\":
        count += 1
        at -= 1
    return count % 2 == 1


def _string_around(text: str, at: int, lo: int) -> tuple[int, int]:
    """The bounds of the JSON string holding ``at`` (from its opening quote to its closing
    one, or to the end of a cut text), opened at ``lo`` or after (what is before was read);
    (-1, -1) when none. Bounded by ``lo``: a search from the text's start at every hit
    outside a string was quadratic (16 KB of ``\\"`` took seconds)."""
    if text[at] == '"':  # the key "code", found with its quotes
        opening = at
    else:
        opening = text.rfind('"', lo, at)
        while opening > lo and _escaped(text, opening):
            opening = text.rfind('"', lo, opening)
        if opening < 0:
            return -1, -1
    closing = text.find('"', opening + 1)
    while closing > 0 and _escaped(text, closing):
        closing = text.find('"', closing + 1)
    return opening, closing if closing >= 0 else len(text)


def _json_string_forms(raw: str, found: list[str]) -> None:
    """A JSON string's text as written, decoded, and as ``json.dumps`` writes it back."""
    found.append(raw)
    if "\\" in raw:
        try:
            decoded = json.loads(f'"{raw}"')
        except ValueError:  # a cut escape: its text as written only
            return
        found.append(decoded)
    else:
        decoded = raw
    if not decoded.isascii():
        found.append(json.dumps(decoded)[1:-1])


def _json_number_forms(raw: str, found: list[str]) -> None:
    found.append(raw)
    try:
        value = json.loads(raw)
    except ValueError:
        return
    if str(value) != raw:
        found.append(str(value))


def _json_secrets(text: str, found: list[str]) -> None:
    """The values under secret-like keys of JSON, parsed or not (a value under ``code`` only
    when a string: a number there is a status); the scalars inside an object or array under
    one, at any depth (read as tokens, with no recursion). Stops past :data:`SECRETS_MAX`."""
    pos = 0  # read up to here
    for hit in _CANDIDATE.finditer(_lowered(text)):
        if hit.start() < pos:
            continue
        opening, closing = _string_around(text, hit.start(), pos)
        if opening < 0:
            pos = hit.end()  # no string opens between pos and the hit
            continue
        after = _KEY_END.match(text, closing)
        if after is None:
            # a value, or a key of no value (cut); or no string at all (a word outside one,
            # in JSON that does not parse): its closing quote may open the next string
            pos = closing
            continue
        pos = closing + 1
        raw_key = text[opening + 1 : closing]
        key = raw_key
        if "\\" in raw_key:
            with contextlib.suppress(ValueError):
                key = json.loads(f'"{raw_key}"')
        if not is_secret_name(key):
            continue
        pos = after.end()
        head = text[pos : pos + 1]
        if head == '"':
            string = _JSON_STRING.match(text, pos)
            assert string is not None
            _json_string_forms(string.group(1), found)
            pos = string.end()
        elif head == "{" or head == "[":
            pos = _container_secrets(text, pos, found)
        elif key.lower() != "code":
            number = _JSON_NUMBER.match(text, pos)
            if number is not None:
                _json_number_forms(number.group(), found)
                pos = number.end()
        if len(found) > 3 * SECRETS_MAX:
            return


def _container_secrets(text: str, pos: int, found: list[str]) -> int:
    """The strings and numbers of the object or array at ``pos`` but its keys; where it ends."""
    depth = 0
    last: str | None = None  # a string read, kept until the next token tells it is no key
    for token in _JSON_TOKEN.finditer(text, pos):
        string, number, opening, closing, colon = token.groups()
        if last is not None and colon is None:
            _json_string_forms(last, found)
        last = None
        if string is not None:
            last = string
        elif number is not None:
            _json_number_forms(number, found)
        elif opening is not None:
            depth += 1
        elif closing is not None:
            depth -= 1
            if depth <= 0:
                return token.end()
    if last is not None:
        _json_string_forms(last, found)
    return len(text)


# more values than this to scrub from a request's records: its records are withheld instead
# (scrubbing costs a pass over the record per value; no real request holds that many), but
# for fwrest's own lines of :data:`OWN` and the audit lines
SECRETS_MAX = 1000
_WITHHELD = "(record withheld: its request holds more than 1000 secret values to scrub)"
TOO_MANY = "\x00too many secrets\x00"  # input_secrets()'s answer for such a request
# ``extra=`` of a line fwrest builds from its own words and values it shows bounded (a port's
# name, counts, a user name cut by ``shown_user``), never from what a request sends raw (a
# hook's exception text): written even for a request of more than SECRETS_MAX secret values
# (a brute-forcer adding ``?pwd=0&pwd=1&...`` to each attempt withheld its lock-out's lines)
OWN: dict[str, object] = {"fwrest_own": True}


def input_secrets(inputs: RequestInputs, *, with_body: bool = True) -> tuple[str, ...]:
    """What to scrub of a request's own input (as :func:`secret_forms` gives it, longest
    first): every value the access and debug lines mask. The whole value of each header
    whose name may carry a secret (:func:`is_secret_header`), with an ``Authorization``'s
    credentials (and a Basic one's decoded password) and each cookie's value; the values of
    secret-like fields of the query and of a URL-encoded form body; the values under
    secret-like keys of a JSON body, each of a key given twice, as written (``\\u``
    escapes and all) and decoded, at any depth, read whether the JSON parses or not.
    ``with_body=False``: the headers' and the query's only. A request with more than
    :data:`SECRETS_MAX` values is :data:`TOO_MANY`: its records are withheld.

    >>> class Req:
    ...     raw_headers = [("x-api-key", "k-123"), ("cookie", "a=1; sid=s-456")]
    ...     query_string = "page=2&password=p%20789"
    ...     body = b'{"user": "ann", "auth": {"pin": 4321}}'
    >>> input_secrets(Req())[1:]
    ('a=1; sid=s-456', 'p%2520789', 'p%20789', 'k-123', 's-456', 'p 789', '4321')
    """
    found: list[str] = []
    media = ""
    for name, value in inputs.raw_headers:
        if name == "content-type":
            media = value
        if not is_secret_header(name):
            continue
        value = value.strip()
        found.append(value)
        if name == "cookie":
            found.extend(part.partition("=")[2].strip() for part in value.split(";"))
            continue
        scheme, _, credentials = value.partition(" ")
        credentials = credentials.strip()
        if credentials:
            found.append(credentials)
            if scheme.lower() == "basic":
                try:
                    decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
                except ValueError:  # binascii.Error and UnicodeDecodeError alike
                    decoded = ""
                found.append(decoded)
                found.append(decoded.partition(":")[2])
    if inputs.query_string:
        _pair_secrets(inputs.query_string, found)
    body = inputs.body if with_body else b""
    if body:
        text = body.decode("utf-8", "replace")
        head = text.lstrip()[:1]
        if head == "{" or head == "[" or "json" in media.lower():
            _json_secrets(text, found)
        elif media.split(";", 1)[0].strip().lower() == FORM_TYPE:
            _pair_secrets(text, found)
    values = dict.fromkeys(found)
    # (past 3 * SECRETS_MAX values found, the body was not read to its end)
    if len(values) > SECRETS_MAX or len(found) > 3 * SECRETS_MAX:
        return (TOO_MANY,)
    forms = dict.fromkeys(secret_forms(*values))
    return tuple(sorted(forms, key=len, reverse=True))


_inputs_seen: tuple[object, tuple[str, ...]] = (None, ())  # the last request's (one tuple)


def _input_secrets(inputs: RequestInputs) -> tuple[str, ...]:
    """:func:`input_secrets`, remembered for the last request asked about (a request that
    logs several records works them out once)."""
    global _inputs_seen
    seen = _inputs_seen
    if seen[0] is inputs:
        return seen[1]
    secrets = input_secrets(inputs)
    _inputs_seen = (inputs, secrets)
    return secrets


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


RequestFields = tuple[int, str, str, str, int, int, str, str]
"""What an access record carries for the JSON lines (:data:`REQUEST_FIELDS`, in order)."""
REQUEST_FIELDS = ("port", "method", "route", "path", "status", "duration_us", "user", "client")


def write(
    logger: logging.Logger,
    level: int,
    msg: str,
    *args: object,
    request: RequestFields | None = None,
    cut: str = "",
) -> None:
    """``logger.log(level, msg, *args)`` for the lines written per request, made cheaply;
    ``request``: an access record's fields (:data:`REQUEST_FIELDS`), for the JSON lines;
    ``cut``: a streamed answer's, cut short (``failed``, ``closed``), their ``cut`` field.

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
    attrs["fwrest_request"] = request
    if cut:
        attrs["fwrest_cut"] = cut
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


def _message(record: logging.LogRecord, formatter: logging.Formatter) -> tuple[str, str]:
    """A record's message and its exception text (a traceback, ``""`` when none), with the
    request's secrets scrubbed and URLs redacted in both (the text and the JSON lines show
    the same)."""
    text = record.getMessage()
    if record.exc_info and not record.exc_text:
        record.exc_text = formatter.formatException(record.exc_info)
    trace = record.exc_text or ""
    secrets = request_secrets.get()
    inputs = request_inputs.get()
    attrs = record.__dict__
    if (
        inputs is not None
        and attrs.get("fwrest_request") is None
        and not attrs.get("fwrest_scrubbed")
    ):
        # (an access line shows no header, and redacts its query itself; the debug lines
        # are scrubbed of them before they are cut)
        found = _input_secrets(inputs)
        if found and found[0] is TOO_MANY:
            if not attrs.get("fwrest_own") and attrs.get("fwrest_audit") is None:
                return _WITHHELD, ""
            found = ()  # its text holds no value of the request's to scrub
        secrets = secrets + found
    if secrets:
        text = scrub(text, secrets)
        if trace:
            trace = scrub(trace, secrets)
    # a URL's userinfo and a query's secret-like values, in any record, whatever logger wrote
    # it (OpenTelemetry's exporter names its endpoint); a record without "?" nor "@" has none.
    # An access line redacted its target's query itself (the token route's whole)
    if ("?" in text or "@" in text) and (attrs.get("fwrest_request") is None or "://" in text):
        text = redact_urls(text)
    if trace and ("?" in trace or "@" in trace):
        trace = redact_urls(trace)
    return text, trace


class Formatter(logging.Formatter):
    """``2026-11-22T17:40:01.123Z INFO fwrest.access [w1] message``, one event per line; a
    request's records end their first line with `` request_id=...``."""

    label: str | None = None  # the process's name in the line, if not :data:`worker_label`

    def format(self, record: logging.LogRecord) -> str:
        ts = _timestamp(record.created)
        text, trace = _message(record, self)
        if trace:
            text = f"{text}\n{trace}"
        # A traceback keeps its line breaks (indented); input-derived text was escaped already.
        if "\n" in text or "\r" in text or "\x1b" in text:  # most lines: none to replace
            text = text.replace("\x1b", "\\x1b").replace("\r", "\\r").replace("\n", "\n    ")
        rid = request_id.get()
        if rid is not None:
            if not isinstance(rid, str):  # a new id, kept as its integer (32 digits)
                rid = f"{rid:032x}"
            cut = text.find("\n")
            if cut < 0:
                text = f"{text} request_id={rid}"
            else:
                text = f"{text[:cut]} request_id={rid}{text[cut:]}"
        msecs = int(record.msecs)
        label = self.label or worker_label
        return f"{ts}.{msecs:03d}Z {record.levelname} {record.name} [{label}] {text}"


class JsonFormatter(logging.Formatter):
    """``LogFormat=json`` (SPEC 13.4): one JSON object per line, ``ts`` (ISO 8601, UTC),
    ``level``, ``logger``, ``worker``, ``message``, ``exception`` (a traceback), and, in a
    request's records, ``request_id``; an access record also has ``port``, ``method``,
    ``route``, ``path`` (without the query), ``status``, ``duration_us``, ``user`` and
    ``client`` (and ``cut``, a streamed answer's cut short); an audit record (SPEC 13.5) has
    the event's ``event``, ``actor``, ``client``, ``port`` and ``details``. Redacted as the
    text lines are; a control character cannot end a line, as JSON escapes it.
    """

    label: str | None = None  # as :attr:`Formatter.label`

    def format(self, record: logging.LogRecord) -> str:
        text, trace = _message(record, self)
        out: dict[str, object] = {
            "ts": f"{_timestamp(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "worker": self.label or worker_label,
            "message": text,
        }
        if trace:
            out["exception"] = trace
        rid = request_id.get()
        if rid is not None:
            out["request_id"] = rid if isinstance(rid, str) else f"{rid:032x}"
        fields: RequestFields | None = record.__dict__.get("fwrest_request")
        if fields is not None:
            port, method, route, path, status, duration_us, user, client = fields
            secrets = request_secrets.get()
            out |= {
                "port": port,
                "method": method,
                "route": route or None,
                "path": scrub(path, secrets) if secrets else path,
                "status": status,
                "duration_us": duration_us,
                "user": user or None,
                "client": client,
            }
            cut = record.__dict__.get("fwrest_cut")
            if cut:
                out["cut"] = cut
        audit: dict[str, object] | None = record.__dict__.get("fwrest_audit")
        if audit is not None:
            out |= {k: v for k, v in audit.items() if k != "ts"}
        try:
            return orjson.dumps(out).decode()
        except orjson.JSONEncodeError:
            # a lone surrogate (from a handler's text) is no character a log file can hold
            return orjson.dumps({k: _printable(v) for k, v in out.items()}).decode()


# SPEC 17.4: the ids of the span current where a record is logged, as hex text (None: no span),
# when [HTTPSERVER] Tracing is on: set by server/tracing.py in the processes that trace (this
# module imports nothing of OpenTelemetry). Only the Traced formatters read it.
trace_ids: Callable[[], tuple[str, str] | None] | None = None


class TracedFormatter(Formatter):
    """:class:`Formatter` with ``Tracing`` on: a record logged under a span ends its first
    line with `` trace_id=... span_id=...`` (after the request id)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = trace_ids() if trace_ids is not None else None
        if ids is None:
            return text
        tail = f" trace_id={ids[0]} span_id={ids[1]}"
        cut = text.find("\n")
        return f"{text}{tail}" if cut < 0 else f"{text[:cut]}{tail}{text[cut:]}"


class TracedJsonFormatter(JsonFormatter):
    """:class:`JsonFormatter` with ``Tracing`` on: a record logged under a span has
    ``trace_id`` and ``span_id`` (hex, as W3C ``traceparent`` writes them)."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = trace_ids() if trace_ids is not None else None
        if ids is None:
            return line
        # (hex digits only: nothing to escape; the object's closing brace replaced)
        return f'{line[:-1]},"trace_id":"{ids[0]}","span_id":"{ids[1]}"}}'


def _printable(value: object) -> object:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


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
    """``LogFile``: a file handler that flushes as :class:`TurnFlushingHandler` does.

    The file is mode 0600 (SPEC 7.1: a log at level 5 shows requests, however redacted, and
    only the service's user should read it): created so, and an existing file with a wider
    mode made so when it is opened; when that fails (another user's file), its
    :attr:`mode_warning` says so, written once by :func:`setup_logging`.
    """

    def __init__(self, path: Path) -> None:
        self.mode_warning = ""
        logging.FileHandler.__init__(self, path, encoding="utf-8", errors="backslashreplace")
        self._pending = False

    def _private(self, fd: int) -> None:
        """Make the open file mode 0600 if it is wider."""
        try:
            mode = os.fstat(fd).st_mode & 0o777
            if mode & 0o077 == 0:
                return
            os.fchmod(fd, 0o600)
        except OSError as exc:
            if not self.mode_warning:
                self.mode_warning = (
                    f"[HTTPSERVER] LogFile {self.baseFilename}: its mode could not be made "
                    f"0600 ({exc.strerror or exc}): other users may read the log (SPEC 7); "
                    "chmod 600 it, or let the service's user own it"
                )

    def _open(self) -> Any:
        if getattr(self, "_closed", False):
            # closed (its service stopped, or another in-process one took over the log)
            # while a thread still held it: logging's FileHandler would open the file again
            # and leave it open for good; the record is dropped instead
            return None
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._private(fd)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)


class _AppendHandler(_FileHandler):
    """A command's ``LogFile`` (:func:`command_audit_log`): appended to, never created (a
    command run by another user than the service's, root, would leave a file the service
    cannot open at its next start or reload); a line it cannot write is one warning on
    standard error, not a traceback (the change it reports is done)."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND)
        self._private(fd)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        why = sys.exc_info()[1]
        print(
            f"fwrest: warning: the audit line could not be written to {self.baseFilename} "
            f"({getattr(why, 'strerror', None) or why}); the change is done",
            file=sys.stderr,
        )


def command_audit_log(
    rest_log_level: int, log_file: Path | None, log_format: str
) -> logging.Logger:
    """The ``fwrest.audit`` logger of a command that records audit events (``keys rotate``,
    ``tokens revoke``, ``lockouts clear``; SPEC 13.5): a logger of its own, outside the
    process's tree (a command run inside another program leaves that program's logging as
    it is), writing where the service writes its lines: appended to ``LogFile`` when it
    exists (the service's processes append to it too, one ``write`` a line), else to
    standard error; in the service's line format (``LogFormat``), named ``[cli]``; at every
    ``rest_log_level`` above 0. :func:`close_logger` closes it.

    Raises:
        OSError: ``LogFile`` exists and cannot be opened.
    """
    logger = logging.Logger(audit_log.name)
    logger.setLevel(logging.INFO if rest_log_level > 0 else _LEVELS[0])
    handler: logging.Handler
    if log_file is not None and log_file.exists():
        handler = _AppendHandler(log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter() if log_format == "json" else Formatter()
    formatter.label = "cli"
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    return logger


def close_logger(logger: logging.Logger) -> None:
    """Flush and close the handlers of a logger of :func:`command_audit_log`."""
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


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


def setup_logging(
    rest_log_level: int,
    log_file: Path | None,
    *,
    own_process: bool,
    log_format: str = "text",
    tracing: bool = False,
) -> None:
    """Install fwrest's handlers: standard error, and ``LogFile`` when set.

    Args:
        rest_log_level: the level in force.
        log_file: ``[HTTPSERVER] LogFile``, resolved.
        log_format: ``[HTTPSERVER] LogFormat``: ``text`` (:class:`Formatter`) or ``json``
            (:class:`JsonFormatter`).
        tracing: ``[HTTPSERVER] Tracing`` is on: the records logged under a span carry its
            ids (:class:`TracedFormatter`, :class:`TracedJsonFormatter`).
        own_process: True under ``fwrest serve``: the application's own loggers (Python's
            root logger) write through the same handlers, at the same level, so that their
            records are formatted, escaped and scrubbed of the request's secrets too (without
            it they reach ``logging``'s last-resort handler, raw). Under ``fwrest.start()``
            the host program's logging is left as it is, and a handler is added to standard
            error only when the host program has configured none.
    """
    global _owns_root
    formatter: logging.Formatter
    if tracing:
        formatter = TracedJsonFormatter() if log_format == "json" else TracedFormatter()
    else:
        formatter = JsonFormatter() if log_format == "json" else Formatter()
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
    for handler in handlers:
        if isinstance(handler, _FileHandler) and handler.mode_warning:
            server_log.warning("%s", handler.mode_warning)
