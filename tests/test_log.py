"""fwrest.log: the forms a secret is scrubbed in, and the doctests of every fwrest module."""

from __future__ import annotations

import ast
import doctest
import gc
import importlib
import logging
import os
import pkgutil
import re
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

import fwrest
from fwrest import log
from fwrest.testing import Client
from tests.conftest import APP_SOURCE, local_port, module_config


def test_a_secret_is_scrubbed_plain_and_url_encoded() -> None:
    forms = log.secret_forms("pa ss/w+rd")
    assert forms == ("pa ss/w+rd", "pa%20ss%2Fw%2Brd")
    line = "password=pa%20ss%2Fw%2Brd header pa ss/w+rd"
    assert log.scrub(line, forms) == "password=*** header ***"


def test_a_url_plain_secret_has_one_form() -> None:
    # a JWT's alphabet is left alone by URL encoding: nothing more to look for
    token = "eyJhbGciOi.eyJzdWIiOi-_x.c2lnbmF0dXJl~"
    assert log.secret_forms(token) == (token,)


def test_secrets_too_short_to_scrub_are_left_out() -> None:
    assert log.secret_forms("", "ab", "abc") == ("abc",)
    assert log.scrub("abc ab", log.secret_forms("ab")) == "abc ab"


def test_non_ascii_secret_is_scrubbed_in_its_utf8_percent_form() -> None:
    forms = log.secret_forms("pässwort")
    assert forms == ("pässwort", "p%C3%A4sswort")
    assert log.scrub("q=p%C3%A4sswort", forms) == "q=***"


# -- SPEC 7.1: what a log line may show ---------------------------------------------------------


def test_header_names_that_carry_secrets_are_masked_whole() -> None:
    for name in ("Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "DPoP", "X-Api-Key",
                 "X-Auth-Token", "X-Session-Id", "X-Client-Secret", "X-Password", "Api_Key"):  # fmt: skip
        assert log.mask_header(name, "v-123") == "***", name
    for name in ("Accept", "Content-Type", "User-Agent", "Host", "X-Request-Id"):
        assert log.mask_header(name, "v-123") == "v-123", name
    assert log.mask_header("Accept", "text/html;q=0.9,*/*;q=0.8") == "text/html;q=0.9,*/*;q=0.8"


def test_json_bodies_are_redacted_after_parsing() -> None:
    escaped = '{"p\\u0061ssword": "pw-1", "n": [{"api\\u005Fkey": 7}], "ok": "x"}'
    assert log.redact_body(escaped) == '{"password":"***","n":[{"api_key":"***"}],"ok":"x"}'
    # no secret: shown as sent
    assert log.redact_body(' {"a": 1} ') == ' {"a": 1} '
    # a key given twice, a JSON text inside a string, a form inside a string
    assert log.redact_body('{"password": "a", "password": "b"}') == '{"password":"***"}'
    nested = '{"cfg": "{\\"secret\\": \\"s-1\\"}", "q": "a=1&token=t-1"}'
    assert log.redact_body(nested) == '{"cfg":"{\\"secret\\":\\"***\\"}","q":"a=1&token=***"}'
    # starts like JSON, is none: its length only, whatever the type says
    for text in ('{"password": "x"', "{user=ann&password=x", "[1, 2"):
        assert log.redact_body(text, "application/x-www-form-urlencoded") is None, text
    # nested past any limit: its length only, never a crash
    assert log.redact_body("[" * 100_000 + "]" * 100_000) is None
    # a lone surrogate written as an escape: a character a log file can hold
    assert log.redact_body('{"a": "\\ud800", "token": 1}') == '{"a":"\\ud800","token":"***"}'


def test_forms_are_redacted_with_either_separator_and_others_are_not_logged() -> None:
    form = "application/x-www-form-urlencoded; charset=utf-8"
    assert log.redact_body("user=ann;password=a;b&page=2", form) == "user=ann;password=***&page=2"
    assert log.redact_body("a=1&%70wd=x;y=2", form) == "a=1&%70wd=***"
    for text, media in (
        ("<a><password>x</password></a>", "application/xml"),
        ("password x", form),  # a blank: no URL-encoded form
        ("password=x", "text/plain"),
        ("password=x", ""),
        ('--b\r\nContent-Disposition: form-data; name="password"\r\n\r\nx', "multipart/form-data"),
    ):
        assert log.redact_body(text, media) is None, (text, media)


def test_urls_lose_their_userinfo_and_the_secrets_of_their_query() -> None:
    assert log.redact_value("https://ann:p@ss/w@h.example/x") == "https://***@h.example/x"
    assert log.redact_query("next=https%3A%2F%2Fann%3Apw%40h%2Fcb") == "next=https://***@h/cb"
    assert log.redact_query("back=%2Fcb%3Fpassword%3Dpw") == "back=/cb?password=***"
    assert log.redact_query("f=%7B%22token%22%3A%22t%22%7D") == "f=%7B%22token%22:%22***%22%7D"
    line = "calling redis://:s3cret@10.0.0.5:6379/0 and https://h/x?api_key=k&a=1"
    assert (
        log.redact_urls(line)
        == "calling redis://***@10.0.0.5:6379/0 and https://h/x?api_key=***&a=1"
    )
    # a query without its URL's scheme, an authority with its userinfo (a third party's record)
    line = "url: /v1/traces?token=t-1&a=1 (to ann:p@ss@collector:4317) or 'x?pwd=2'"
    assert (
        log.redact_urls(line)
        == "url: /v1/traces?token=***&a=1 (to ***@collector:4317) or 'x?pwd=***'"
    )
    # a decoded query: each field's URL masked on its own, the next field's name kept
    line = "GET /x?next=http://ann:pw-1@host/&plain=http://u:pw-2@h/;o=ftp://v:pw-3@f/"
    masked = "GET /x?next=http://***@host/&plain=http://***@h/;o=ftp://***@f/"
    assert log.redact_urls(line) == masked and log.redact_value(line[4:]) == masked[4:]
    # what holds no userinfo nor secret stays: an e-mail address, a path's "@", a question
    for kept in ("mail ann@example.org", "GET /rest/u@x?page=2", "what? nothing", "a:b @c"):
        assert log.redact_urls(kept) == kept, kept
    # each word read once, whatever it holds (a hang guard, not a speed assertion: a pattern
    # looking for the word around each "@" took minutes)
    started = time.monotonic()
    for worst in ("a=" * 500_000 + ":x@y", "a:b," * 250_000 + "@", "@" * 10**6, ":@" * 500_000,
                  "h://" * 250_000 + "@", "h://" + ":/" * 500_000 + "@"):  # fmt: skip
        log.redact_urls(worst)
    assert time.monotonic() - started < 5


SCRUBBED_APP = """

def _all_of(query, headers, form):
    return (
        f"key={headers.get('x-api-key')} tok={headers.get('x-auth-token')} "
        f"cookie={headers.get('cookie')} bare={headers.get('authorization')} "
        f"pw={query.get('password')} secret={query.get('client_secret')} form={form}"
    )

@post("/fail")
def fail():
    body = rest.getBodyRequest()
    raise RuntimeError(
        "cannot serve " + _all_of(rest.getQueryRequest(), rest.getHeaderRequest(), body)
    )

@post("/fail-async")
async def fail_async():
    raise ValueError("cannot serve " + rest.getBodyRequest())
"""

# each with a slash, a plus and a space: its plain and URL-encoded forms differ
API_KEY = "Api-Key-Cn4ry/1+a b"
AUTH_TOKEN = "Hdr-Tok-Cn4ry/2+c d"
SESSION = "Sess-Cn4ry/3+e f"
BEARER = "Bearer-Cn4ry/4+g h"
QUERY_PW = "Query-Pw-Cn4ry/5+i j"
QUERY_SECRET = "Query-Sec-Cn4ry/6+k l"
FORM_PW = "Form-Pw-Cn4ry/7+m n"
JSON_PIN = "Json-Pin-Cn4ry/8+o p"


@pytest.mark.parametrize("full", [0, 1])
def test_the_requests_secret_named_inputs_are_scrubbed_from_a_traceback(
    tmp_path: Path, full: int
) -> None:
    """SPEC 7: every value the access and debug lines mask (secret-named headers, query and form
    fields, JSON keys) is scrubbed from a handler's exception text too, short or whole."""
    config = module_config(
        tmp_path, f"scrubbed_app_{full}", app=APP_SOURCE + SCRUBBED_APP,
        general={"rest_error_full": full},
    )  # fmt: skip
    with Client(config) as client:
        headers = {
            "X-Api-Key": API_KEY, "X-Auth-Token": AUTH_TOKEN, "Cookie": f"lang=en; sid={SESSION}",
            "Authorization": f"Bearer {BEARER}",
        }  # fmt: skip
        query = {"password": QUERY_PW, "client_secret": QUERY_SECRET, "page": "7"}
        form = client.post(
            "/rest/fail", params=query, headers=headers, data={"user": "ann", "password": FORM_PW}
        )
        assert form.status_code == 500
        as_json = client.post("/rest/fail-async", json={"user": "ann", "auth": {"pin": JSON_PIN}})
        assert as_json.status_code == 500
    text = (tmp_path / "server.log").read_text(errors="replace")
    assert "cannot serve key=*** tok=*** cookie=*** bare=*** pw=*** secret=*** form=" in text
    assert re.search(r'cannot serve \{"user": ?"ann", ?"auth": ?\{"pin": ?"\*\*\*"\}\}', text), text
    assert "page=7" in text  # what is not secret stays
    if full:
        assert "Traceback (most recent call last)" in text
    for secret in (API_KEY, AUTH_TOKEN, SESSION, BEARER, QUERY_PW, QUERY_SECRET, FORM_PW):
        for form_of in (secret, quote(secret, safe=""), quote_plus(secret)):
            assert form_of not in text, (form_of, text)
    assert JSON_PIN not in text


def _doctests(name: str) -> list[doctest.DocTest]:
    """Module ``name``'s doctests from its ``.py`` source, run in its namespace: ``doctest`` cannot
    see into compiled functions, yet the examples must run against them."""
    if name.startswith("fwrest._native."):
        return []  # the native engine's Cython extension: no Python source, no examples
    module = importlib.import_module(name)
    source = Path(module.__file__ or "")
    if source.suffix != ".py":
        source = source.with_name(name.rsplit(".", 1)[-1] + ".py")
    tree = ast.parse(source.read_text(encoding="utf-8"))
    parser = doctest.DocTestParser()
    found = []
    todo: list[tuple[str, ast.AST]] = [(name, tree)]
    while todo:
        where, node = todo.pop()
        text = ast.get_docstring(node, clean=False)  # type: ignore[arg-type]
        if text:
            line = getattr(node, "lineno", 0)
            test = parser.get_doctest(text, dict(vars(module)), where, str(source), line)
            if test.examples:
                found.append(test)
        for child in getattr(node, "body", []):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                todo.append((f"{where}.{child.name}", child))
    return found


def _with_examples() -> list[str]:
    """The fwrest modules that hold doctest examples."""
    names = []
    for info in pkgutil.walk_packages(fwrest.__path__, "fwrest."):
        if info.name.endswith("__main__"):
            continue
        if _doctests(info.name):
            names.append(info.name)
    return sorted(names)


MODULES = _with_examples()


def test_the_doctests_are_found() -> None:
    assert {"fwrest.log", "fwrest.server.app"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in _doctests(name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{name}: {result.failed} doctest(s) failed"


def test_a_closed_log_file_is_not_opened_again_by_a_late_record(tmp_path: Path) -> None:
    """A thread may log after its service stopped (or another took the log over) and closed the
    handler: FileHandler reopened the file for good (a later ResourceWarning)."""
    handler = log._FileHandler(tmp_path / "server.log")
    handler.emit(logging.makeLogRecord({"msg": "before"}))
    handler.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        handler.emit(logging.makeLogRecord({"msg": "late"}))
        assert handler.stream is None
        gc.collect()
    assert (tmp_path / "server.log").read_text() == "before\n"


BIG_BODY_APP = """

@post("/big")
def big():
    # a long answer with a token before and past the first rest_log_stringsize characters
    items = [{"i": n, "k": "v"} for n in range(40000)]
    return {"access_token": "Resp-Tok-Early-C4n", "items": items, "token": "Resp-Tok-Late-C4n"}
"""


def test_a_large_body_is_logged_at_level_5_by_its_size_and_type_only(tmp_path: Path) -> None:
    """Level 5 parsed and redacted a whole body on the event loop before cutting it to
    ``rest_log_stringsize`` (1 MB: half a second, 45 MB: ten); a body over
    ``DEBUG_BODY_MAX`` is described by its size and type, without a secret, in bounded time."""
    config = module_config(
        tmp_path, "big_body_app", app=APP_SOURCE + BIG_BODY_APP, general={"rest_log_level": 5}
    )
    items = ",".join(f'{{"i":{n},"k":"v"}}' for n in range(40000))
    sent = '{"password":"Req-Pw-Early-C4n","items":[' + items + '],"pwd":"Req-Pw-Late-C4n"}'
    form = "password=Form-Pw-Early-C4n&" + "a=1&" * 200000 + "pwd=Form-Pw-Late-C4n"
    with Client(config) as client:
        started = time.monotonic()
        as_json = client.post("/rest/big", content=sent, headers={"content-type": JSON})
        assert as_json.status_code == 200
        as_form = client.post("/rest/echo", content=form, headers={"content-type": FORM})
        assert as_form.status_code == 200
        took = time.monotonic() - started
    text = (tmp_path / "server.log").read_text()
    assert f"body ({len(sent)} bytes application/json, not logged: over 65536 bytes)" in text
    assert f"body ({len(form)} bytes {FORM}, not logged: over 65536 bytes)" in text
    assert text.count("response 200 body (") == 2, text[-2000:]
    for secret in ("Req-Pw-Early", "Req-Pw-Late", "Form-Pw-Early", "Form-Pw-Late", "Resp-Tok"):
        assert secret not in text
    assert '"i":1' not in text  # no part of a large body
    assert took < 30, took  # a hang guard only


FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


LOGGING_APP = """

import logging


@post("/logs")
def logs_its_body():
    logging.getLogger("fwrest.app").warning("got %s", rest.getBodyRequest())
    return {"ok": True}
"""


def _logged(tmp_path: Path, module: str, *bodies: tuple[str, str], **keys: Any) -> str:
    """:data:`LOGGING_APP` as ``module`` (``keys``: :func:`module_config`'s): each ``(media,
    body)`` posted to the handler that logs it, answered 200; the log's text."""
    config = module_config(tmp_path, module, app=APP_SOURCE + LOGGING_APP, **keys)
    with Client(config) as client:
        for media, body in bodies:
            answer = client.post("/rest/logs", content=body, headers={"content-type": media})
            assert answer.status_code == 200
    return (tmp_path / "server.log").read_text()


@pytest.mark.parametrize(
    ("media", "body", "secrets"),
    [
        (JSON, '{"password":"Dup-Pw-First-C4n","password":"Dup-Pw-Second-C4n"}',
         ["Dup-Pw-First-C4n"]),
        (JSON, '{"user": "ann", "password": "Cut-Pw-C4n", ', ["Cut-Pw-C4n"]),
        (JSON, '{"password": "Bad-Pw-C4n", "x": nope}', ["Bad-Pw-C4n"]),
        (JSON, "[" * 3000 + '{"password":"Deep-Pw-C4n"}' + "]" * 3000, ["Deep-Pw-C4n"]),
        (JSON, '{"password":"Esc-Pw-\\u0042-C4n"}', ["Esc-Pw-\\u0042-C4n", "Esc-Pw-B-C4n"]),
        (JSON, '{"auth": {"pin": "Nested-Pin-C4n", "more": ["Nested-Item-C4n"]}',
         ["Nested-Pin-C4n"]),
        (JSON, '{"user": "ann", auth: 1, "password": "Word-Pw-C4n"}', ["Word-Pw-C4n"]),
        # ``password=;tail``: an ``&``-only parser (the REST object's) reads ``;tail`` as the
        # value; the scan skipped the field for its empty value before the ``;``
        (FORM, "user=ann&password=;Tail-Pw-C4n", ["Tail-Pw-C4n"]),
    ],
    ids=["duplicate", "truncated", "invalid", "deep", "escaped", "cut-nested", "bare-word",
         "form-value-after-a-semicolon"],
)  # fmt: skip
def test_every_value_of_a_secret_key_is_scrubbed_from_a_handlers_record(
    tmp_path: Path, media: str, body: str, secrets: list[str]
) -> None:
    """SPEC 7: a handler that logs its body: the values of its secret keys were taken from a
    parse, which kept a duplicated key's last value only, and none of JSON that does not parse
    (cut, invalid, nested deeper than the parser goes) nor the escaped text as sent."""
    text = _logged(tmp_path, "logging_app", (media, body))
    assert "WARNING fwrest.app [main] got " in text, text[-2000:]
    for secret in secrets:
        assert secret not in text, (secret, text[-2000:])


def test_a_request_with_too_many_secret_values_has_its_records_withheld(tmp_path: Path) -> None:
    """Past ``SECRETS_MAX`` values to scrub (a pass over the record each), a request's records
    are withheld rather than written unscrubbed or scrubbed at that cost."""
    body = "[" + ",".join(f'{{"password":"Many-Pw-{n:05d}"}}' for n in range(1200)) + "]"
    text = _logged(tmp_path, "many_app", (JSON, body), general={"rest_log_level": 5})
    assert "record withheld: its request holds more than 1000 secret values" in text, text
    assert "request headers and bodies not logged: more than 1000 secret values" in text
    assert "Many-Pw-" not in text


CODE_APP = """

@post("/code")
def code():
    return {"code": "Auth-Code-C4n", "authenticated": True, "auth_method": None, "state": "s"}
"""


def test_an_error_bodys_integer_code_shows_at_level_5_and_a_string_code_does_not(
    tmp_path: Path,
) -> None:
    """Level 5 masked every ``code`` and every value under a key holding ``auth``: the status
    of each error body (``{"code":"***",...}``), ``"authenticated":"***"``. A number under
    ``code`` and true, false and null under any key are no secret; a string ``code`` (the code
    grant's authorization code) still is."""
    config = module_config(
        tmp_path, "code_app", app=APP_SOURCE + CODE_APP, general={"rest_log_level": 5}
    )
    with Client(config) as client:
        assert client.get("/rest/no/such/route").status_code == 404
        assert client.post("/rest/code", json={"code": 12345, "password": True}).status_code == 200
    text = (tmp_path / "server.log").read_text()
    assert 'response 404 body {"code":404,"detailedMessage":"","message":"Not Found"}' in text
    assert 'body {"code":12345,"password":true}' in text, text
    assert '"code":"***","authenticated":true,"auth_method":null,"state":"s"' in text, text
    assert "Auth-Code-C4n" not in text


def test_an_existing_log_file_is_made_0600_or_warned_about_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC 7: ``LogFile`` is 0600; an existing 0644 file kept its mode, with no word of it."""
    config = module_config(tmp_path, "mode_app")
    logfile = tmp_path / "server.log"
    logfile.write_text("")
    logfile.chmod(0o644)
    with Client(config) as client:
        assert client.get("/rest/hello").status_code == 200
    assert logfile.stat().st_mode & 0o777 == 0o600
    assert "could not be made 0600" not in logfile.read_text()

    logfile.chmod(0o644)

    def refused(fd: int, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refused)
    with Client(config) as client:
        assert client.get("/rest/hello").status_code == 200
    text = logfile.read_text()
    assert text.count("LogFile") == 1, text
    assert f"[HTTPSERVER] LogFile {logfile}: its mode could not be made 0600" in text, text


MiB = 1 << 20
# the bodies that made the secret scans quadratic (a pattern retried at each part or escape
# and read to the field's end each time; a search for a string's opening quote from the
# body's start at every hit outside a string), and their kin
WORST_BODIES = {
    "form-plus": (FORM, "msg=" + "word+" * (MiB // 5)),
    "form-part": (FORM, "msg=" + "key" * (MiB // 3)),
    "form-escape": (FORM, "msg=" + "%" * MiB),
    "form-part-no-eq": (FORM, "key" * (MiB // 3)),
    "form-fields": (FORM, "&key" * (MiB // 4)),
    "form-semicolons": (FORM, "x=1&" + "pwd=abcd;" * (MiB // 9)),
    "json-escaped-quotes": (JSON, "[" + '\\"' * (MiB // 2)),
    "json-parts": (JSON, "[" + "key" * (MiB // 3)),
    "json-backslashes": (JSON, "[" + "\\" * MiB),
    "json-part-quote": (JSON, "[" + 'key"' * (MiB // 4)),
    "json-escapes-in-string": (JSON, '["' + '\\"key' * (MiB // 5)),
    "json-backslash-runs": (JSON, "[" + ("\\" * 1000 + '"') * (MiB // 1001)),
}


class _Inputs:
    def __init__(self, media: str, body: str, query: str = "") -> None:
        self.raw_headers = [("content-type", media)]
        self.query_string = query
        self.body = body.encode()


@pytest.mark.parametrize("shape", list(WORST_BODIES))
def test_the_secret_scans_of_a_worst_case_body_take_linear_time(shape: str) -> None:
    """The scans for a request's secret values ran for every record written during it (an
    error line, the auth lines, on the event loop) over its whole body, and at level 5 over a
    body of up to 64 KiB: quadratic in its size (100 KB of ``msg=word+word+...``: 3 s; 16 KB
    of ``[\\"\\"...``: 8 s; 64 KiB: two minutes). 1 MiB of each shape, as a body and as a
    query, within a hang guard (not a speed assertion)."""
    media, body = WORST_BODIES[shape]
    started = time.monotonic()
    log.input_secrets(_Inputs(media, body))
    if media == FORM:
        log.input_secrets(_Inputs(JSON, "", body))
    took = time.monotonic() - started
    assert took < 5, (shape, took)


def test_a_forms_values_up_to_the_next_ampersand_are_taken_once_per_run_of_fields() -> None:
    """A secret field followed by ``;`` is also taken up to the next ``&`` (as the query parser
    reads it): each of ``pwd=abcd;`` * N was, every one a copy of the rest of the body (64 KiB:
    75 MB held, 1 MiB: 1.5 GB). Once per run of ``;`` fields (the later ones' are parts of the
    first's)."""
    body = "x=1&" + "pwd=abcd;" * (65536 // 9) + "pwd=Last-Pw-C4n&y=2"
    tracemalloc.start()
    try:
        found = log.input_secrets(_Inputs(FORM, body))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB, peak
    assert found == (log.TOO_MANY,)  # 7282 values
    few = "x=1&pwd=a1b2;pwd=c3d4;other=e5f6&pwd=g7h8;i9"
    taken = {"a1b2;pwd=c3d4;other=e5f6", "g7h8;i9", "a1b2", "c3d4", "g7h8"}
    assert taken <= set(log.input_secrets(_Inputs(FORM, few)))


def test_a_handlers_record_of_a_worst_case_body_is_written_in_bounded_time(
    tmp_path: Path,
) -> None:
    """Through a request: a handler that logs a 64 KiB body of each quadratic shape (its
    record scanned for the request's secrets), and the secrets of such a body still
    scrubbed."""
    half = 32 * 1024
    bodies = [
        (JSON, '{"password":"Worst-Pw-Json-C4n","x":[' + '\\"' * half + "]}"),
        (FORM, "password=Worst-Pw-Form-C4n&msg=" + "word+" * (2 * half // 5)),
    ]  # fmt: skip
    started = time.monotonic()  # the in-process start counted too: a stricter guard
    text = _logged(tmp_path, "worst_logging_app", *bodies)
    took = time.monotonic() - started
    assert text.count("WARNING fwrest.app [main] got ") == 2, text[-2000:]
    assert "Worst-Pw-" not in text
    assert took < 20, took  # a hang guard only


LOCKOUT_AUTH = """

def check(user, password):
    return password == "Right-Pw-C4n"
"""


def test_a_lock_out_is_logged_whatever_secret_values_the_attempts_add(tmp_path: Path) -> None:
    """A request of more than SECRETS_MAX secret values has its records withheld: a
    brute-forcer adding ``?pwd=0&pwd=1&...`` (1001 values, 8 KB) to each attempt withheld the
    throttle's lock-out warning, the OnAuth refusals and the lock-out's audit line. fwrest's own
    lines of those (its words, counts, the user name cut) are written; the application's
    records of such a request are still withheld."""
    auth = "lockout_log_auth"
    (tmp_path / f"{auth}.py").write_text(LOCKOUT_AUTH, encoding="utf-8")
    basic = {"Authorization": {"scheme": "basic", "OnAuth": f"{auth}.check", "maxFailures": 3}}
    servers = {"HTTP_BASIC": local_port(FwData=basic)}
    extra = {"ENV": {"Repository": f"lockout_log_app,{auth}"}}
    config = module_config(tmp_path, "lockout_log_app", app=APP_SOURCE, servers=servers,
                           extra=extra)  # fmt: skip
    query = "&".join(f"pwd={n}" for n in range(1001))  # under MaxHeaderSize
    with Client(config, server="HTTP_BASIC") as client:
        for n in range(3):
            answer = client.get(f"/rest/hello?{query}", auth=("ada", f"Guess-Pw-{n}-C4n"))
            assert answer.status_code == 403, answer.text
        answer = client.get(f"/rest/hello?{query}", auth=("ada", "Guess-Pw-3-C4n"))
        assert answer.status_code == 429, answer.text
    text = (tmp_path / "server.log").read_text()
    assert text.count("OnAuth refused user 'ada'") == 3, text[-3000:]
    assert "locked out for" in text, text[-3000:]
    assert "user:ada" in text
    assert "fwrest.audit [main] lockout actor='ada'" in text, text[-3000:]
    assert "Guess-Pw-" not in text


ECHO_APP = """

@post("/echo-password")
def echo_password():
    import json

    return {"echo": json.loads(rest.getBodyRequest())["password"]}
"""


def test_a_large_bodys_secret_echoed_in_the_answer_is_not_logged_at_level_5(
    tmp_path: Path,
) -> None:
    """Level 5 does not read a request body over 64 KiB for its secrets: the answer's body
    (64 KiB or less) was written, not scrubbed of them: ``{"echo":"hunter22"}``. Its body is
    then described by its size and type only."""
    config = module_config(
        tmp_path, "echo_pw_app", app=APP_SOURCE + ECHO_APP, general={"rest_log_level": 5}
    )
    body = '{"password":"hunter22","pad":"' + "x" * 70000 + '"}'
    with Client(config) as client:
        answer = client.post("/rest/echo-password", content=body, headers={"content-type": JSON})
        assert answer.status_code == 200
        assert answer.json() == {"echo": "hunter22"}
    text = (tmp_path / "server.log").read_text()
    assert "response 200 body (" in text, text[-2000:]
    assert "not read for its secrets" in text, text[-2000:]
    assert "hunter22" not in text
