"""Request ids (SPEC 13.4) in process: on every answer (the request's own when acceptable, else new)
and on every record logged while it runs, text and JSON; a hostile id never reaches a line. Records
are read by a root-logger handler with fwrest's two formatters."""

from __future__ import annotations

import itertools
import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwrest import log
from fwrest.context.request_id import id_text, new_request_number
from fwrest.testing import Client
from fwrest.wire import Keep, Reply, encode_reply
from tests.conftest import free_config, local_port, module_config, serving, wait_for
from tests.server.rawhttp import ENGINE_REFUSALS, refusal_head

MODULE = "request_ids_app"
APP = """
import logging

from fwrest import get, rest

app_log = logging.getLogger("request_ids_app")

@get("/def-logs")
def def_logs():
    app_log.warning("inside a def handler")
    return {"id": rest.getRequestId()}

@get("/async-logs")
async def async_logs():
    app_log.warning("inside an async handler")
    return {"id": rest.getRequestId()}

@get("/raises")
def raises():
    raise RuntimeError("no luck")

@get("/own-id")
def own_id():
    rest.setKeyHeaderResponse("X-Request-Id", "handler-chose")
    return {"id": rest.getRequestId()}

def on_error(exc):
    app_log.warning("OnError saw %s", type(exc).__name__)
    return None

@get("/stream-fails")
def stream_fails():
    def items():
        app_log.warning("inside a def generator")
        yield "first\\n"
        raise ValueError("mid")
    return items()

@get("/async-stream-fails")
async def async_stream_fails():
    async def items():
        app_log.warning("inside an async generator")
        yield "first\\n"
        raise ValueError("mid")
    return items()

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text for this one")

@get("/unprintable")
def unprintable():
    raise Unprintable()

@get("/after-last")
def after_last():
    rest.setLastChunkedResponse("end")
    raise ValueError("raised after the last piece")

@get("/after-end")
def after_end():
    rest.setLastChunkedResponse("end")
    rest.setChunkedResponse("more")

@get("/chunked-returns")
def chunked_returns():
    rest.setChunkedResponse("a")
    return "b"
"""
ID = re.compile(r"[0-9a-f]{32}")


class Lines(logging.Handler):
    """Every record, formatted by both of fwrest's formatters."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.text: list[str] = []
        self.json: list[dict[str, Any]] = []
        self._text = log.Formatter()
        self._json = log.JsonFormatter()

    def emit(self, record: logging.LogRecord) -> None:
        self.text.append(self._text.format(record))
        line = self._json.format(record)
        assert "\n" not in line
        self.json.append(json.loads(line))

    def clear(self) -> None:
        self.text.clear()
        self.json.clear()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    tmp = tmp_path_factory.mktemp("request_ids")
    extra = {
        "HOOKED": {"Path": "/rest/hooked", "ThreadPool": "HOOKPOOL"},
        "HOOKPOOL": {"Environment": "ENV", "MinThreads": 1, "OnError": "on_error"},
        "HTTP_REST": {"Locations": "ROOT,HOOKED"},
    }
    config = module_config(tmp, MODULE, app=APP, extra=extra)
    with Client(config) as http:
        yield http


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def records_of(lines: Lines, rid: str) -> list[str]:
    """The text lines that carry ``rid``, after checking the JSON records agree."""
    in_json = [r for r in lines.json if r.get("request_id") == rid]
    in_text = [t for t in lines.text if f" request_id={rid}" in t]
    assert len(in_json) == len(in_text), (lines.text, lines.json)
    return in_text


@pytest.mark.parametrize(
    ("path", "status"),
    [("/rest/def-logs", 200), ("/rest/nothing", 404), ("/rest/raises", 500), ("/x", 404)],
)
def test_every_answer_carries_a_new_id(client: Client, path: str, status: int) -> None:
    seen = set()
    for _ in range(2):
        r = client.get(path)
        assert r.status_code == status
        assert ID.fullmatch(r.headers["x-request-id"]), r.headers
        seen.add(r.headers["x-request-id"])
    assert len(seen) == 2


def test_new_ids_are_random_not_a_counter(client: Client) -> None:
    """SPEC 13.4 "a new random one": 300 answers' ids (past a batch of 256) share no half and
    none is its neighbour's plus a small step, so no id tells another client's."""
    ids = [client.get("/x").headers["x-request-id"] for _ in range(300)]
    assert all(ID.fullmatch(i) and len(i) == 32 for i in ids), ids[:3]
    assert len({i[:16] for i in ids}) == len({i[16:] for i in ids}) == 300
    numbers = [int(i, 16) for i in ids]
    assert all(abs(b - a) > 1 << 64 for a, b in itertools.pairwise(numbers))


def test_a_carried_id_is_echoed_and_is_the_handlers(client: Client) -> None:
    r = client.get("/rest/def-logs", headers={"X-Request-ID": "order-7:retry.2_x"})
    assert r.headers.get_list("x-request-id") == ["order-7:retry.2_x"]
    assert r.json() == {"id": "order-7:retry.2_x"}
    made = client.get("/rest/async-logs")
    assert made.json()["id"] == made.headers["x-request-id"]


def set_for_a_test(name: str, value: int) -> Any:
    """A fixture: the setting ``name`` is ``value`` (``/fw/rest/config``) for one test."""

    @pytest.fixture
    def fixture(client: Client) -> Iterator[None]:
        r = client.post("/rest/fw/rest/config", json={name: value})
        assert r.status_code == 200, r.text
        try:
            yield
        finally:
            client.post("/rest/fw/rest/config", json={name: None})

    return fixture


debug_level = set_for_a_test("rest_log_level", 5)  # each request's headers are written too
full_errors = set_for_a_test("rest_error_full", 1)  # whole tracebacks


HOSTILE_IDS = {
    "control": b"evil\x01id",
    "escape": b"evil\x1b[31mred",
    "4KiB": b"A" * 4096,
    "non-ascii": "caf\u00e9-\u2603".encode(),
    "space": b"two words",
    "equals": b"a=b",
}
HOSTILE = pytest.mark.parametrize("hostile", list(HOSTILE_IDS.values()), ids=list(HOSTILE_IDS))


@HOSTILE
def test_a_hostile_id_is_replaced_and_never_logged(
    client: Client, lines: Lines, hostile: bytes
) -> None:
    r = client.get("/rest/def-logs", headers=[(b"X-Request-ID", hostile)])
    assert r.status_code == 200
    rid = r.headers["x-request-id"]
    assert ID.fullmatch(rid)
    assert r.json() == {"id": rid}
    text = hostile.decode("latin-1")
    for line in lines.text:
        assert text not in line and text[:64] not in line, line
    for record in lines.json:
        assert text not in json.dumps(record, ensure_ascii=False)
    got = records_of(lines, rid)
    assert any("inside a def handler" in t for t in got) and any("fwrest.access" in t for t in got)


@pytest.mark.parametrize("path", ["/rest/def-logs", "/rest/async-logs"])
def test_a_handlers_own_records_and_the_access_line_carry_the_id(
    client: Client, lines: Lines, path: str
) -> None:
    rid = client.get(path).headers["x-request-id"]
    got = records_of(lines, rid)
    kind = "def" if path.startswith("/rest/def") else "async"
    said = "inside an async handler" if kind == "async" else "inside a def handler"
    assert any(" WARNING request_ids_app " in t and said in t for t in got), got
    access = [t for t in got if " fwrest.access " in t]
    assert len(access) == 1 and access[0].endswith(f"request_id={rid}"), access
    # the JSON access record: its fields (SPEC 13.4)
    record = next(r for r in lines.json if r.get("request_id") == rid and "status" in r)
    assert record["logger"] == "fwrest.access" and record["level"] == "INFO"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["ts"])
    assert record["method"] == "GET" and record["path"] == path and record["status"] == 200
    assert record["route"] == path and record["client"] and record["user"] is None
    assert isinstance(record["duration_us"], int) and record["duration_us"] >= 0
    assert isinstance(record["port"], int)
    # the handler's own record: the id, no request fields
    own = next(r for r in lines.json if r["logger"] == "request_ids_app")
    assert own["request_id"] == rid and "status" not in own


def test_a_traceback_and_an_on_error_record_carry_the_id(client: Client, lines: Lines) -> None:
    rid = client.get("/rest/raises").headers["x-request-id"]
    got = records_of(lines, rid)
    failure = [t for t in got if "unhandled exception in the handler" in t]
    assert failure and "RuntimeError: no luck" in "\n".join(got), got
    record = next(r for r in lines.json if r.get("request_id") == rid and r.get("status"))
    assert record["status"] == 500
    lines.clear()
    # the same route under the location whose pool has an OnError hook
    r = client.get("/rest/hooked/raises", headers={"X-Request-ID": "hooked-1"})
    assert r.status_code == 500
    got = records_of(lines, "hooked-1")
    assert any("OnError saw RuntimeError" in t for t in got), got
    assert any("unhandled exception in the handler" in t for t in got), got
    # no record of the request is without its id
    assert all(r.get("request_id") == "hooked-1" for r in lines.json), lines.json


@pytest.mark.parametrize("kind", ["def", "async"])
def test_a_streamed_answers_records_carry_the_id(client: Client, lines: Lines, kind: str) -> None:
    """A stream runs after the pipeline returned: its own records (a def generator's steps in the
    pool) and its failure's line carry the id; the failure is logged as a handler's."""
    rid = f"stream-{kind}-1"
    path = "/rest/stream-fails" if kind == "def" else "/rest/async-stream-fails"
    with pytest.raises(httpx.RemoteProtocolError):  # cut short: no last chunk
        client.get(path, headers={"X-Request-ID": rid})
    got = records_of(lines, rid)
    assert any(f"inside a{'n' if kind == 'async' else ''} {kind} generator" in t for t in got)
    failed = [t for t in got if "the streamed answer failed" in t]
    assert failed and failed[0].split(" request_id=")[0].endswith(
        f"GET {path}: the streamed answer failed; cut short"
    ), got
    assert any("ValueError: mid at " in t for t in got), got
    assert all(r.get("request_id") == rid for r in lines.json), lines.json


@pytest.mark.usefixtures("full_errors")
def test_a_streamed_answers_failure_has_its_whole_traceback_with_rest_error_full(
    client: Client, lines: Lines
) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        client.get("/rest/stream-fails", headers={"X-Request-ID": "stream-full-1"})
    failed = [r for r in lines.json if "the streamed answer failed" in r["message"]]
    assert len(failed) == 1 and failed[0]["request_id"] == "stream-full-1", lines.json
    trace = failed[0]["exception"]
    assert "Traceback" in trace and "in items" in trace and "ValueError: mid" in trace


def test_an_exception_whose_text_fails_is_logged_with_the_id(client: Client, lines: Lines) -> None:
    r = client.get("/rest/unprintable", headers={"X-Request-ID": "unprintable-1"})
    assert r.status_code == 500
    got = records_of(lines, "unprintable-1")
    assert any("unhandled exception in the handler" in t for t in got), got
    assert any("Unprintable: <exception str() failed>" in t for t in got), got
    assert not any("request pipeline failed" in t for t in lines.text), lines.text
    assert all(r.get("request_id") == "unprintable-1" for r in lines.json), lines.json


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/rest/after-last", "ValueError: raised after the last piece"),
        ("/rest/after-end", "RuntimeError: the chunked answer has ended"),
    ],
)
def test_a_handlers_failure_after_its_last_chunk_is_logged(
    client: Client, lines: Lines, path: str, said: str
) -> None:
    """SPEC 7.1: logged, with the id, as any handler's failure; the answer sent stands."""
    rid = "after-" + path.rsplit("-", 1)[1]
    r = client.get(path, headers={"X-Request-ID": rid})
    assert r.status_code == 200 and r.text == "end"

    def logged() -> list[str]:
        return [t for t in lines.text if f" request_id={rid}" in t and " ERROR " in t]

    wait_for(lambda: any(said in t for t in logged()), 10, "the handler's failure")
    assert any(
        f"GET {path}: unhandled exception in the handler after its chunked answer's first "
        "piece; the answer sent stands" in t
        for t in logged()
    ), logged()


def test_a_value_returned_after_a_chunked_answer_began_is_said_ignored_once(
    client: Client, lines: Lines
) -> None:
    said = "GET /rest/chunked-returns: the handler returned a str after setChunkedResponse began"
    for rid in ("returns-1", "returns-2"):
        r = client.get("/rest/chunked-returns", headers={"X-Request-ID": rid})
        assert (r.status_code, r.text) == (200, "a")
    wait_for(lambda: any(said in t for t in lines.text), 10, "the warning")
    time.sleep(0.2)  # (a second one would be written by now)
    (line,) = [t for t in lines.text if said in t]
    assert " WARNING " in line and line.endswith(" request_id=returns-1"), line


def test_records_outside_a_request_carry_no_id(lines: Lines) -> None:
    logging.getLogger("request_ids_app").warning("between requests")
    assert lines.text[-1].endswith("between requests")
    assert "request_id" not in lines.json[-1]


def test_a_traceback_keeps_the_id_on_its_first_line() -> None:
    formatter = log.Formatter()
    token = log.request_id.set("rid-1")
    try:
        try:
            raise KeyError("k")
        except KeyError:
            record = logging.LogRecord("x", logging.ERROR, "", 0, "failed", (), sys.exc_info())
        text = formatter.format(record)
        json_line = json.loads(log.JsonFormatter().format(record))
    finally:
        log.request_id.reset(token)
    first, *rest = text.split("\n")
    assert first.endswith("failed request_id=rid-1"), text
    assert rest and all(line.startswith("    ") for line in rest)
    assert json_line["message"] == "failed" and "KeyError" in json_line["exception"]
    assert json_line["request_id"] == "rid-1"


def test_json_lines_redact_as_text_lines_do() -> None:
    url = "https://u:pw-123@h/x?token=t1&a=1"
    record = logging.LogRecord("x", logging.INFO, "", 0, "calling %s", (url,), None)
    token = log.request_secrets.set(log.secret_forms("s3cret-value"))
    try:
        record2 = logging.LogRecord("x", logging.INFO, "", 0, "got s3cret-value\n", (), None)
        out = [json.loads(log.JsonFormatter().format(r)) for r in (record, record2)]
    finally:
        log.request_secrets.reset(token)
    assert out[0]["message"] == "calling https://***@h/x?token=***&a=1"
    assert out[1]["message"] == "got ***\n"
    # a lone surrogate is written, escaped, not lost with the line
    odd = logging.LogRecord("x", logging.INFO, "", 0, "bad \ud800 text", (), None)
    assert json.loads(log.JsonFormatter().format(odd))["message"] == "bad \\ud800 text"


def test_the_log_file_gets_json_lines(tmp_path: Path) -> None:
    json_log = {"HTTPSERVER": {"LogFormat": "JSON"}}
    config = module_config(tmp_path, "request_ids_json_app", app=APP, extra=json_log)
    with Client(config) as http:
        rid = http.get("/rest/async-logs").headers["x-request-id"]
    lines = (tmp_path / "server.log").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    access = [r for r in records if r.get("request_id") == rid]
    assert access and access[0]["path"] == "/rest/async-logs", records


def test_a_bad_log_format_is_a_config_error(tmp_path: Path) -> None:
    from fwrest.config import load_config
    from fwrest.errors import ConfigError

    xml_log = {"HTTPSERVER": {"LogFormat": "xml"}}
    config = module_config(tmp_path, "request_ids_bad_app", app=APP, extra=xml_log)
    with pytest.raises(ConfigError, match="'xml' is not a log format"):
        load_config(config)


def test_an_id_the_handler_set_is_sent_alone(client: Client) -> None:
    r = client.get("/rest/own-id", headers={"X-Request-ID": "from-client"})
    assert r.headers.get_list("x-request-id") == ["handler-chose"]


@HOSTILE
@pytest.mark.usefixtures("debug_level")
def test_a_hostile_id_is_not_in_the_header_lines_of_level_5(
    client: Client, lines: Lines, hostile: bytes
) -> None:
    rid = client.get("/rest/def-logs", headers=[(b"X-Request-ID", hostile)]).headers["x-request-id"]
    (headers,) = [t for t in records_of(lines, rid) if "request headers {" in t]
    assert "x-request-id: (not a request id, replaced)" in headers
    text = hostile.decode("latin-1")
    assert all(text[:64] not in line for line in lines.text)
    # an acceptable one is shown as it is
    lines.clear()
    client.get("/rest/def-logs", headers={"X-Request-ID": "fine-1"})
    assert any("x-request-id: fine-1" in t for t in records_of(lines, "fine-1"))


def test_the_engines_own_refusals_carry_an_id_on_the_answer_and_the_log(tmp_path: Path) -> None:
    """Over a real ``fwrest serve``: the engine's own refusals (bare LF, 20 KB header,
    ``Content-Length`` with ``Transfer-Encoding``, body over the limit, a head that never ends)
    carry ``X-Request-ID`` (the client's when read far enough, new for a hostile one), and so do
    their lines."""
    # its own head deadline port: a worker descheduled 0.7 s would answer other refusals 408
    servers = {"HTTP_REST": local_port(), "HTTP_QUICK": local_port(HeaderTimeout=700)}
    config = free_config(tmp_path, servers=servers)
    # (a field is read once the next line begins: llhttp looks for a continuation)
    slow = b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nX-Request-ID: slow-1\r\nX-Next: 1\r\n"
    cases = [(*case, "HTTP_REST") for case in ENGINE_REFUSALS]
    cases.append(("headers too slow", slow, 408, "slow-1", "HTTP_QUICK"))
    with serving(config) as proc:
        sent = []
        for name, request, status, carried, section in cases:
            port = proc.ports[section]
            got, headers = refusal_head(port, request)
            assert got == status, name
            rid = headers["x-request-id"]
            assert rid == carried if carried is not None else ID.fullmatch(rid), (name, rid)
            sent.append((status, rid, port))
        text = proc.wait_log(f"request_id={sent[-1][1]}")
    for status, rid, port in sent:
        ours = f" {status} protocol error (", f" request_id={rid}"
        (line,) = [ln for ln in text.splitlines() if ours[0] in ln and ln.endswith(ours[1])]
        assert f"port={port}" in line
        assert rid != "large-1" or " POST /rest/echo 413 protocol error (" in line
    slow_lines = [line for line in text.splitlines() if "request_id=slow-1" in line]
    assert any("sent no complete headers within 700 ms" in line for line in slow_lines)
    assert "bad id" not in text


def test_a_new_id_is_kept_as_its_integer_and_its_line_made_by_the_encoder() -> None:
    """A new id is an integer: the encoder writes its 32-digit line from it."""
    number = new_request_number()
    text = id_text(number)
    assert ID.fullmatch(text) and int(text, 16) == number
    reply = Reply(200, [("content-type", "application/json")], b"{}", request_id=number)
    head = encode_reply(reply, Keep.OPEN).split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert head.count(f"x-request-id: {text}".encode()) == 1
    token = log.request_id.set(number)
    try:
        record = logging.LogRecord("t", logging.INFO, __file__, 1, "m", None, None)
        assert log.Formatter().format(record).endswith(f" request_id={text}")
        assert json.loads(log.JsonFormatter().format(record))["request_id"] == text
    finally:
        log.request_id.reset(token)
