"""``fwrest.testing.Client`` (SPEC 14.3): the port's pipeline in process through httpx; each module
named uniquely (``app`` may be another test's)."""

from __future__ import annotations

import gzip
import os
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwrest import ConfigError
from fwrest.testing import Client
from tests.auth.oauth2_support import oauth_section
from tests.conftest import exchange, local_port, module_config, serving, wait_for

APP = """
import asyncio
import os
import sys
import threading

from fwrest import EventStream, Response, get, post, rest

@get("/hello")
def hello():
    return {"hello": "world", "pid": os.getpid(), "thread": threading.current_thread().name}

@get("/items/:id")
async def item(id):
    return {"id": id, "query": dict(rest.getQueryRequest())}

@post("/echo")
def echo():
    rest.setKeyHeaderResponse("X-Echo", "yes")
    return {"body": rest.getBodyRequest(), "user": rest.getAuthUser()}

@get("/boom")
def boom():
    raise RuntimeError("kaboom")

@get("/exit")
async def leave():
    raise SystemExit(2)

@get("/headers")
def headers():
    return dict(rest.getHeaderRequest())

@get("/text")
def text():
    return Response("made", status=201, headers={"X-Made": "1"}, media_type="text/plain")

@get("/status/:code")
def status(code):
    rest.setStatusCode(int(code))
    return {"a": 1}

@get("/gen")
def gen():
    return (f"piece {n}\\n" for n in range(3))

CLOSED = []

@get("/events")
def events():
    async def endless():
        try:
            yield "first"
            while True:
                await asyncio.sleep(0.2)
                yield "tick"
        finally:
            CLOSED.append("events")
    return EventStream(endless())

@get("/slow")
async def slow():
    async def pieces():
        try:
            yield "one"
            await asyncio.sleep(3)
            yield "two"
        finally:
            CLOSED.append("slow")
    return EventStream(pieces())

def check(user, password):
    return user == "ada" and password == "Ada-Pw-7731"

def params():
    return {
        "client_id": "web",
        "client_secret": "Web-Secret-9q",
        "users": [{"username": "ada", "password": "Ada-Pw-7731"}],
        "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"}],
    }
"""


def _service(tmp_path: Path, module: str, servers: dict[str, Any] | None = None) -> Path:
    """``APP`` as module ``module``, its OnAuth and onAuthparams named after it (names unique)."""
    app = APP.replace("check", f"{module}_check").replace("params", f"{module}_params")
    return module_config(tmp_path, module, app=app, servers=servers)


def test_an_open_port_is_served_in_this_process(tmp_path: Path) -> None:
    with Client(_service(tmp_path, "inproc_open")) as client:
        hello = client.get("/rest/hello")
        assert hello.status_code == 200
        assert hello.json()["hello"] == "world"
        assert hello.json()["pid"] == os.getpid()  # no server process: this one
        assert hello.json()["thread"].startswith("fwrest-POOL")  # a def runs in its pool
        item = client.get("/rest/items/7", params={"q": "a b"})
        assert item.json() == {"id": "7", "query": {"q": "a b"}}
        echo = client.post("/rest/echo", content=b"payload")
        assert echo.json()["body"] == "payload" and echo.headers["x-echo"] == "yes"
        made = client.get("/rest/text")
        assert (made.status_code, made.text, made.headers["x-made"]) == (201, "made", "1")
        head = client.head("/rest/hello")
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) == len(hello.content)
        missing = client.get("/rest/nowhere")
        assert missing.status_code == 404 and missing.json()["code"] == 404
        wrong = client.delete("/rest/hello")
        assert wrong.status_code == 405 and "GET" in wrong.headers["allow"]
        boom = client.get("/rest/boom")
        assert boom.status_code == 500 and "kaboom" not in boom.text
        assert client.get("/rest/exit").status_code == 500  # SPEC 7.1, and the test goes on
        listing = client.get("/rest/fw/rest/list/service")
        assert any(e["endpoint"] == "/items/:id" for e in listing.json())
        settings = client.get("/rest/fw/rest/config", headers={"Accept": "application/json"})
        assert "rest_log_level" in settings.json()["settings"]
        usage = client.get("/rest/fw/rest/usage/time", headers={"Accept": "application/json"})
        assert any(r["endpoint"] == "/hello" for r in usage.json()["entry_points"])


def test_a_basic_port_runs_its_guard(tmp_path: Path) -> None:
    servers = {
        "BASIC": local_port(
            FwData={"Authorization": {"scheme": "basic", "OnAuth": "inproc_basic_check"}}
        )
    }
    with Client(_service(tmp_path, "inproc_basic", servers), server="basic") as client:
        ok = client.post("/rest/echo", auth=("ada", "Ada-Pw-7731"), content=b"x")
        assert ok.status_code == 200 and ok.json()["user"] == "ada"
        assert client.get("/rest/hello", auth=("ada", "wrong")).status_code == 403
        anonymous = client.get("/rest/nowhere")  # authorization before routing (SPEC 7)
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Basic")
        twice = client.get(
            "/rest/hello",
            headers=[("Authorization", "Basic eDp5"), ("Authorization", "Basic eDp5")],
        )
        assert twice.status_code == 400  # a repeated Authorization, as the engine refuses it


def test_an_oauth2_port_issues_and_checks_its_tokens(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    servers = {
        "SHOP": oauth_section(certs, onAuthparams="inproc_oauth_params"),
        "ADMIN": oauth_section(certs, onAuthparams="inproc_oauth_params"),
    }
    config = _service(tmp_path, "inproc_oauth", servers)
    form = {
        "grant_type": "password", "username": "ada", "password": "Ada-Pw-7731", "client_id": "web",
        "client_secret": "Web-Secret-9q",
    }  # fmt: skip
    with Client(config, server="SHOP") as shop, Client(config, server="ADMIN") as admin:
        assert str(shop.base_url).startswith("https://")
        tokens = shop.post("/rest/fw/oauth2/token", data=form)
        assert tokens.status_code == 200, tokens.text
        access = tokens.json()["access_token"]
        bearer = {"Authorization": f"Bearer {access}"}
        assert shop.get("/rest/hello", headers=bearer).status_code == 200
        assert shop.get("/rest/hello").status_code == 401
        assert admin.get("/rest/hello", headers=bearer).status_code == 401  # aud (SPEC 7.1)
        big = shop.post("/rest/fw/oauth2/token", content=b"a=" + b"x" * 17000)
        assert big.status_code == 413  # the token route's 16 KiB, before the pipeline


def test_the_body_limit_and_an_unknown_server(tmp_path: Path) -> None:
    config = _service(tmp_path, "inproc_limits")
    with pytest.raises(ValueError, match="HTTP_REST"):
        Client(config, server="NOPE")
    with pytest.raises(ConfigError, match="Servers"):
        Client({"HTTPSERVER": {"Enable": 1}})
    client = Client(config)  # without "with": the first request starts it
    try:
        assert client.post("/rest/echo", content=b"x" * (1024 * 1024 + 1)).status_code == 413
        assert client.post("/rest/echo", content=b"x" * 1024).status_code == 200
    finally:
        client.close()
    assert not [t for t in threading.enumerate() if t.name == "fwrest-testing"]


def test_a_coded_body_is_refused_as_the_engine_refuses_it(tmp_path: Path) -> None:
    with Client(_service(tmp_path, "inproc_coding")) as client:
        packed = client.post(
            "/rest/echo", content=gzip.compress(b"x" * 4096), headers={"Content-Encoding": "gzip"}
        )
        assert packed.status_code == 415
        assert packed.headers["accept-encoding"] == "identity"
        assert "Content-Encoding" in packed.json()["detailedMessage"]
        plain = client.post("/rest/echo", content=b"hi", headers={"Content-Encoding": "identity"})
        assert plain.json()["body"] == "hi"


def test_the_hosts_and_header_names_the_engine_refuses(tmp_path: Path) -> None:
    # as over a socket: a Host that is no host[:port] is 400, a name with "_" is dropped
    with Client(_service(tmp_path, "inproc_fields")) as client:
        for host in ("user@127.0.0.1", "127.0.0.1/x", "", "a.example, b.example", "h:70000"):
            refused = client.get("/rest/hello", headers={"Host": host})
            assert refused.status_code == 400, host
            assert refused.json()["detailedMessage"] == (
                "the Host header must be host[:port] and nothing else"
            )
        seen = client.get("/rest/headers", headers={"X_Api_Key": "k", "X-Api-Key": "d"}).json()
        assert seen["x-api-key"] == "d"
        assert "x_api_key" not in seen
        assert client.options("/rest/hello").headers["allow"] == "GET, HEAD, OPTIONS"


# (method, path, request headers, body): answers whose bytes do not depend on the process
SAME_AS_A_SOCKET = [
    ("GET", "/rest/text", {}, b""),
    ("HEAD", "/rest/text", {}, b""),
    ("OPTIONS", "/rest/text", {}, b""),
    ("GET", "/rest/items/7", {}, b""),
    ("GET", "/rest/nowhere", {}, b""),
    ("DELETE", "/rest/text", {}, b""),
    ("GET", "/rest/boom", {}, b""),
    ("GET", "/rest/gen", {}, b""),
    ("HEAD", "/rest/gen", {}, b""),
    ("POST", "/rest/echo", {}, b"x" * (1024 * 1024 + 1)),
    ("GET", "/rest/text", {"X-Request-ID": "client-id-1"}, b""),
    ("GET", "/rest/text", {"Connection": "close"}, b""),  # answered with close (RFC 9112 9.6)
    ("GET", "/rest/gen", {"Connection": "keep-alive, Close"}, b""),
    # no content for a 204 or 304 whatever the handler returned, a 205's is empty
    ("GET", "/rest/status/204", {}, b""),
    ("GET", "/rest/status/304", {}, b""),
    ("GET", "/rest/status/205", {}, b""),
    ("HEAD", "/rest/status/204", {}, b""),
]


def test_the_answers_have_the_headers_a_socket_gives(tmp_path: Path) -> None:
    """SPEC 14.3: the socket's answers, headers too (``nosniff``, chunked streams, ``Content-Length:
    0``, a refusal's close), date and id aside."""
    config = _service(tmp_path, "inproc_parity")

    def seen(response: httpx.Response) -> tuple[int, list[tuple[str, str]], bytes]:
        fields = sorted(
            (name, value)
            for name, value in response.headers.items()
            if name != "date" and not (name == "x-request-id" and value != "client-id-1")
        )
        return response.status_code, fields, response.content

    with serving(config) as proc, Client(config) as client, httpx.Client() as http:
        origin = f"http://127.0.0.1:{proc.ports['HTTP_REST']}"
        for method, path, headers, body in SAME_AS_A_SOCKET:
            over_socket = http.request(method, origin + path, headers=headers, content=body)
            in_process = client.request(method, path, headers=headers, content=body)
            assert seen(in_process) == seen(over_socket), (method, path)
        twice = [("Authorization", "Basic YTpi"), ("Authorization", "Basic YTpi")]
        over_socket = http.get(origin + "/rest/text", headers=twice)
        assert seen(client.get("/rest/text", headers=twice)) == seen(over_socket)
        assert over_socket.headers["connection"] == "close"


# framing refused before the pipeline, and the body bytes after (SPEC 7: 400, close; 417, 501)
FRAMING_REFUSED = [
    ([("Transfer-Encoding", "chunked"), ("Content-Length", "0")], b"0\r\n\r\n"),
    ([("Content-Length", "0"), ("Transfer-Encoding", "chunked")], b"0\r\n\r\n"),
    ([("Content-Length", "2"), ("Content-Length", "2")], b"hi"),
    ([("Content-Length", "2x")], b"hi"),
    ([("Content-Length", "")], b""),
    ([("Content-Length", "99999999999999999999")], b""),
    ([("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")], b"0\r\n\r\n"),
    ([("Transfer-Encoding", "chunked, gzip")], b"0\r\n\r\n"),
    ([("Transfer-Encoding", "")], b""),
    ([("Transfer-Encoding", "gzip, chunked")], b"0\r\n\r\n"),
    ([("Transfer-Encoding", "gzip")], b""),
    ([("Expect", "the-unexpected")], b""),
]


def test_a_204_or_304_has_no_content_in_process_as_over_a_socket(tmp_path: Path) -> None:
    """docs/endpoints.md: a 204 or 304 sends no body, whatever was returned; the client's
    answer is the socket's (a handler returning a body with its 204 gave it in process)."""
    config = _service(tmp_path, "inproc_nocontent")
    with serving(config) as proc, Client(config) as client:
        port = proc.ports["HTTP_REST"]
        for code in (204, 304):
            raw = f"GET /rest/status/{code} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            raw += "Connection: close\r\n\r\n"
            status, fields, body = _raw_answer(exchange(port, raw.encode()))
            assert (status, body) == (code, b"")
            assert "content-length" not in dict(fields)
            answer = client.get(f"/rest/status/{code}")
            assert (answer.status_code, answer.content) == (code, b"")
            assert "content-length" not in answer.headers


def _raw_answer(raw: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    fields = []
    for line in lines:
        name, _, value = line.partition(":")
        if name.lower() not in ("date", "x-request-id"):
            fields.append((name.lower(), value.strip()))
    return int(status_line.split()[1]), sorted(fields), body


def test_framing_the_engine_refuses_is_refused_in_process_with_the_same_answer(
    tmp_path: Path,
) -> None:
    """SPEC 7, 14.3: framing a socket refuses (``Content-Length`` with ``Transfer-Encoding``, bad
    lengths, codings but chunked, unknown expectations): the same answer in process, no handler."""
    config = _service(tmp_path, "inproc_framing")
    with serving(config) as proc, Client(config) as client:
        port = proc.ports["HTTP_REST"]
        for fields, wire_body in FRAMING_REFUSED:
            lines = "".join(f"{name}: {value}\r\n" for name, value in fields)
            raw = f"POST /rest/echo HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{lines}\r\n"
            over_socket = _raw_answer(exchange(port, raw.encode() + wire_body))
            in_process = client.post("/rest/echo", headers=fields, content=b"")
            fields_seen = sorted(
                (name, value)
                for name, value in in_process.headers.items()
                if name not in ("date", "x-request-id")
            )
            assert (in_process.status_code, fields_seen, in_process.content) == over_socket, fields
            assert over_socket[0] in (400, 417, 501), fields
            assert ("connection", "close") in over_socket[1], fields
        # what the engine takes, the in-process client takes too
        plain = client.post("/rest/echo", headers={"Content-Length": "2"}, content=b"hi")
        assert plain.json()["body"] == "hi"


def test_an_expect_list_with_empty_elements_is_taken_in_process(tmp_path: Path) -> None:
    """RFC 9110 5.6.1.2: the engines take ``Expect`` as a list whose empty elements count for
    nothing, and so does the in-process client; another element beside them is still 417."""
    with Client(_service(tmp_path, "inproc_expect")) as client:
        for value in ("100-continue,", ", 100-Continue", ",", ""):
            answer = client.post("/rest/echo", headers={"Expect": value}, content=b"hi")
            assert (answer.status_code, answer.json()["body"]) == (200, "hi"), value
        refused = client.post("/rest/echo", headers={"Expect": "100-continue, x"}, content=b"hi")
        assert refused.status_code == 417


def test_a_stream_is_read_as_it_comes_and_closed_when_the_client_leaves(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """As over a socket: an endless EventStream gives its first event at once (before, the
    call read the stream whole: it hung 300 s, then raised a bare TimeoutError), a response
    closed early closes the stream (its ``finally`` runs), and a piece that does not come
    within the read timeout is httpx's ReadTimeout."""
    config = _service(tmp_path, "inproc_streams")
    with Client(config) as client:
        with client.stream("GET", "/rest/events") as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            lines = answer.iter_lines()
            assert next(lines) == "data: first"
            assert "data: tick" in (next(lines), next(lines), next(lines))
        app = sys.modules["inproc_streams"]
        wait_for(lambda: app.CLOSED == ["events"], 10, "the stream closed")
        with client.stream("GET", "/rest/slow", timeout=1) as answer:
            pieces = answer.iter_bytes()
            assert next(pieces) == b"data: one\n\n"
            with pytest.raises(httpx.ReadTimeout, match="within 1 s"):
                next(pieces)
        wait_for(lambda: app.CLOSED == ["events", "slow"], 10, "the late stream closed")
        # the late piece cancelled, then the stream closed: no error of its own
        assert "closing a streamed answer failed" not in capfd.readouterr().err
        assert client.get("/rest/slow", timeout=5).text == "data: one\n\ndata: two\n\n"


def test_requests_from_many_threads_are_answered_each_its_own(tmp_path: Path) -> None:
    answers: dict[int, Any] = {}
    with Client(_service(tmp_path, "inproc_threads")) as client:

        def ask(n: int) -> None:
            answers[n] = client.get(f"/rest/items/{n}").json()["id"]

        threads = [threading.Thread(target=ask, args=(n,)) for n in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert answers == {n: str(n) for n in range(40)}


def test_the_client_is_an_httpx_client() -> None:
    assert issubclass(Client, httpx.Client)
