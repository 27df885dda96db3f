"""What a handler returns as a client receives it (SPEC 3, 9), in process (module ``results_app``);
a real server where the wire's bytes matter (no body after 204/304, a refused answer pipelined
before the next)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from fwrest.testing import Client
from tests.conftest import ServerProcess, local_port, module_config, wait_for
from tests.server.rawhttp import RawConnection, request_bytes
from tests.server.support import serve_module

APP = """
import asyncio
import functools

from fwrest import EventStream, Response, get, rest

@get("/intkeys")
def intkeys():
    return {1: "a", 2: "b"}

@get("/bigint")
async def bigint():
    return {"n": 2**70, "items": [2**64, -(2**65)]}

@get("/bigint-list")
def bigint_list():
    return [2**70]

@get("/notjson")
def notjson():
    return {"o": object()}

@get("/views/:id")
def views(id):
    # the read-only views the REST object hands out, inside a result (SPEC 3)
    return {"path": rest.getPathParamsRequest(), "query": rest.getQueryRequest(),
            "headers": rest.getHeaderRequest()}

@get("/views-async/:id")
async def views_async(id):
    rest.setKeyHeaderResponse("X-Async", "1")
    return [rest.getPathParamsRequest(), rest.getQueryRequest()]

@get("/view-alone")
def view_alone():
    return rest.getQueryRequest()

@get("/view-set/:id")
def view_set(id):
    rest.setResponse(rest.getPathParamsRequest())

@get("/nocontent")
def nocontent():
    rest.setStatusCode(204)
    return {"x": 1}

@get("/notmodified")
async def notmodified():
    return Response({"x": 1}, status=304, headers={"ETag": '"v1"'})

@get("/none/:status")
def none_body(status):
    return Response(None, status=int(status))

@get("/own-type/:how")
def own_type(how):
    rest.setStatusCode(204)
    if how == "set":
        rest.setKeyHeaderResponse("Content-Type", "text/x-own")
    return Response(b"", status=304, headers={"content-type": "text/x-own"}) if how == "r" else {}

@get("/none-async")
async def none_async():
    return Response(None, headers={"X-Empty": "1"})

@get("/reset")
def reset():
    return Response("body", status=205)

@get("/dated")
def dated():
    return Response(b"abc", headers={"Date": "yesterday"})

@get("/interim")
def interim():
    rest.setStatusCode(101)
    return {"x": 1}

@get("/setresponse")
def setresponse():
    rest.setResponse({"a": 1, "b": [True, None]})

def logged(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper

@get("/wrapped/:id")
@logged
async def wrapped(id):
    await asyncio.sleep(0)
    return {"id": id, "loop": asyncio.get_running_loop() is not None}

@get("/hello")
def hello():
    return {"hello": "world"}

@get("/reflect")
def reflect():
    # an open redirect's mistake: the Location taken from the query as it is
    return Response(b"", status=302, headers={"Location": rest.getQueryRequest()["to"]})

@get("/reflect-rest")
def reflect_rest():
    rest.setStatusCode(302)
    rest.setKeyHeaderResponse("Location", rest.getQueryRequest()["to"])
    return ""

@get("/status/:n")
async def status(n):
    return Response({"n": n}, status=int(n))

@get("/status-text/:n")
def status_text(n):
    return Response("x", status=n)

@get("/bytes-header")
def bytes_header():
    # bytes values are written as they are (latin-1, as Starlette takes raw headers)
    return Response(b"x", headers={"X-V": b"abc", "X-L": bytearray(b"caf\\xe9")})

@get("/header-name")
def header_name():
    return Response(b"x", headers={rest.getQueryRequest()["name"]: "1"})

@get("/cookies")
def cookies():  # pairs: a name given twice is sent twice, unless the REST object sets it
    rest.setKeyHeaderResponse("X-A", "rest")
    pairs = [("Set-Cookie", "a=1"), ("X-A", "1"), ("set-cookie", "b=2"), ("X-A", "2")]
    if rest.getQueryRequest().get("as") == "dict":
        pairs = dict([("Set-Cookie", "a=1"), ("set-cookie", "b=2")])  # one line a name
    body = iter(["streamed"]) if rest.getQueryRequest().get("as") == "stream" else "whole"
    return Response(body, headers=pairs)

@get("/media")
def media():
    return Response(b"x", media_type=rest.getQueryRequest()["type"])

STEPS = {}  # the items streams without content gave (none: closed unread), how handlers ended

def counted(name):
    def items():
        STEPS[name] = STEPS.get(name, 0) + 1
        yield "body of " + name
    return items()

@get("/quiet/gen")
def quiet_gen():
    rest.setStatusCode(204)
    return counted("gen")

@get("/quiet/response")
def quiet_response():
    return Response(counted("response"), status=204)

@get("/quiet/async")
async def quiet_async():
    async def items():
        STEPS["async"] = STEPS.get("async", 0) + 1
        yield "body of async"
    return Response(items(), status=304, headers={"ETag": '"v1"'})

@get("/quiet/chunked")
def quiet_chunked():
    rest.setStatusCode(204)
    try:
        for i in range(40):  # more than the 16 a client may be behind
            rest.setChunkedResponse(f"piece {i}")
        rest.setLastChunkedResponse("end")
    except BaseException as exc:
        STEPS["chunked"] = type(exc).__name__
        raise
    STEPS["chunked"] = "whole"

@get("/quiet/events")
def quiet_events():
    rest.setStatusCode(204)
    return EventStream(counted("events"))

@get("/steps")
def steps():
    return STEPS

def first_fails(kind):
    if kind == "raise":
        raise LookupError("no first item")
    yield {"int": 5, "none": None}[kind]

async def first_fails_async():
    raise LookupError("no first item")
    yield "never"

@get("/first/:kind")
def first(kind):  # no ActiveTimeout: the first item is read before the head all the same
    return first_fails_async() if kind == "async" else Response(first_fails(kind), 201)

def on_send():
    rest.setStatusCode(304)

@get("/sent")
def sent():
    return counted("sent")
"""

# the same routes under /quiet, whose pool's OnSend makes every answer a 304
server = serve_module(
    "results",
    app=APP,
    servers={"HTTP_REST": local_port(Locations="ROOT, QUIET")},
    extra={
        "QUIET": {"Path": "/quiet", "ThreadPool": "QUIETPOOL"},
        "QUIETPOOL": {"Environment": "ENV", "MinThreads": 1, "OnSend": "on_send"},
    },
)


@pytest.fixture(scope="module")
def client_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return module_config(tmp_path_factory.mktemp("results_inproc"), "results_app", app=APP)


@pytest.fixture(scope="module")
def client(client_config: Path) -> Iterator[Client]:
    """The in-process client of the same service; paths are full (``/rest/...``)."""
    with Client(client_config) as client:
        yield client


def client_log(config: Path) -> str:
    """The in-process service's ``LogFile`` (the client logs in the test process)."""
    path = config.parent / "server.log"
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/intkeys", {"1": "a", "2": "b"}),  # number keys: JSON's string keys
        # integers beyond 64 bits, sent exactly (Python's json reads big integers exactly)
        ("/bigint", {"n": 2**70, "items": [2**64, -(2**65)]}),
        ("/bigint-list", [2**70]),
        ("/setresponse", {"a": 1, "b": [True, None]}),  # setResponse with a dict
        ("/wrapped/42", {"id": "42", "loop": True}),  # async, behind a decorator: on the loop
    ],
    ids=["number-keys", "bigint", "bigint-list", "set-response-dict", "async-behind-a-decorator"],
)
def test_what_a_handler_gives_is_sent_as_json(client: Client, path: str, expected: object) -> None:
    r = client.get("/rest" + path)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == expected


def test_the_rest_objects_views_are_sent_as_json_objects(client: Client) -> None:
    """``getPathParamsRequest``/``getQueryRequest`` (mappingproxy) and ``getHeaderRequest``
    (``Headers``) in a result, alone, or given to ``setResponse``: JSON objects (were a 500)."""
    r = client.get("/rest/views/7?a=1&b=2", headers={"X-View": "v"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["path"] == {"id": "7"}
    assert body["query"] == {"a": "1", "b": "2"}
    assert body["headers"]["x-view"] == "v"
    r = client.get("/rest/views-async/8?c=3")
    assert (r.status_code, r.headers["x-async"]) == (200, "1"), r.text
    assert r.json() == [{"id": "8"}, {"c": "3"}]
    r = client.get("/rest/view-alone?d=4")
    assert (r.status_code, r.headers["content-type"]) == (200, "application/json"), r.text
    assert r.json() == {"d": "4"}
    r = client.get("/rest/view-set/9")
    assert (r.status_code, r.json()) == (200, {"id": "9"}), r.text


def test_a_response_of_none_is_an_empty_body(client: Client) -> None:
    """``Response(None, ...)`` is ``Response(b"", ...)`` for any status (it was a 500); a 204
    or 304 has no ``Content-Type`` (RFC 9110 15.3.5) unless the application set one."""
    for status in (204, 200, 404):
        r = client.get(f"/rest/none/{status}")
        assert (r.status_code, r.content) == (status, b""), r.text
        assert ("content-type" in r.headers) is (status != 204), r.headers
    for path, media in [("/nocontent", None), ("/own-type/set", "text/x-own")]:
        r = client.get(f"/rest{path}")
        assert (r.headers.get("content-type"), r.headers.get("content-length")) == (media, None)
    r = client.get("/rest/own-type/r")
    assert (r.status_code, r.headers["content-type"]) == (304, "text/x-own"), r.headers
    r = client.get("/rest/none-async")
    assert (r.status_code, r.content, r.headers["x-empty"]) == (200, b"", "1")


def test_data_that_is_not_json_is_500_and_logged(client: Client, client_config: Path) -> None:
    r = client.get("/rest/notjson")
    assert r.status_code == 500
    assert r.json()["code"] == 500
    assert "object" not in r.text  # the reason goes to the log, not to the client
    # a worker's lines leave at the end of its loop's turn, after the answer
    wait_for(
        lambda: "a handler returned data that is not JSON" in client_log(client_config),
        10,
        "the reason in the log",
    )


@pytest.mark.parametrize(
    ("query", "cookies"),
    [("", ["a=1", "b=2"]), ("?as=stream", ["a=1", "b=2"]), ("?as=dict", ["b=2"])],
)
def test_a_response_given_pairs_sends_a_repeated_name_each_time(
    client: Client, query: str, cookies: list[str]
) -> None:
    r = client.get(f"/rest/cookies{query}")
    assert r.status_code == 200, r.text
    assert r.headers.get_list("set-cookie") == cookies
    assert r.headers.get_list("x-a") == ["rest"]


@pytest.mark.parametrize("kind", ["raise", "async", "int", "none"])
def test_a_stream_that_fails_before_its_first_item_is_a_clean_500(
    client: Client, client_config: Path, kind: str
) -> None:
    r = client.get(f"/rest/first/{kind}")
    assert (r.status_code, r.json()["code"]) == (500, 500)
    said = f"GET /rest/first/{kind}: the streamed answer failed before its first piece"
    wait_for(lambda: said in client_log(client_config), 10, "the failure in the log")


@pytest.mark.parametrize(("path", "status"), [("/nocontent", 204), ("/notmodified", 304)])
def test_a_status_without_content_sends_no_body_and_keeps_the_connection(
    server: ServerProcess, path: str, status: int
) -> None:
    port = server.ports["HTTP_REST"]
    with RawConnection(port) as conn:
        # pipelined: a body after the 204/304 would be read as the next response
        conn.send(request_bytes("GET", "/rest" + path) + request_bytes("GET", "/rest/hello"))
        first = conn.read_response()
        assert first.status == status, first.head
        assert first.header("content-length") is None, first.head
        assert first.header("content-type") is None, first.head
        second = conn.read_response()
        assert second.status_line == "HTTP/1.1 200 OK", (first.head, second.head, conn.buffer)
        assert second.json() == {"hello": "world"}
    # HEAD: no body and no length either (RFC 9110 8.6: none on 204 and 304)
    with RawConnection(port) as conn:
        head = conn.request("HEAD", "/rest" + path)
        assert head.status == status and head.header("content-length") is None, head.head
        assert conn.request("GET", "/rest/hello").json() == {"hello": "world"}
    # and a client library reusing its connection sees the same
    with httpx.Client() as client:
        assert client.get(f"http://127.0.0.1:{port}/rest{path}").status_code == status
        assert client.get(f"http://127.0.0.1:{port}/rest/hello").json() == {"hello": "world"}


QUIET = [
    ("/rest/quiet/gen", 204),  # setStatusCode, then a generator
    ("/rest/quiet/response", 204),  # Response(generator, status=204)
    ("/rest/quiet/async", 304),  # Response(async generator, status=304)
    ("/rest/quiet/chunked", 204),  # setStatusCode, then setChunkedResponse
    ("/rest/quiet/events", 204),  # setStatusCode, then an EventStream
    ("/quiet/sent", 304),  # OnSend sets the status of a streamed answer
]


@pytest.mark.parametrize(("path", "status"), QUIET)
def test_a_streamed_answer_without_content_is_not_chunked(
    server: ServerProcess, path: str, status: int
) -> None:
    """RFC 9112 6.1, RFC 9110 15.4.5: a streamed 204/304 goes without Transfer-Encoding or body, so
    the next answer reads right; its iterator is closed unread."""
    port = server.ports["HTTP_REST"]
    with RawConnection(port) as conn:
        conn.send(request_bytes("GET", path) + request_bytes("GET", "/rest/hello"))
        first = conn.read_response()
        assert first.status == status, first.head
        assert first.header("transfer-encoding") is None, first.head
        assert first.header("content-length") is None, first.head
        second = conn.read_response()
        assert second.status_line == "HTTP/1.1 200 OK", (first.head, second.head, conn.buffer)
        assert second.json() == {"hello": "world"}
        # HEAD of the same: the head alone, the connection still in step
        head = conn.request("HEAD", path)
        assert head.status == status and head.header("transfer-encoding") is None, head.head
        assert conn.request("GET", "/rest/hello").json() == {"hello": "world"}


def test_streams_without_content_are_closed_unread(server: ServerProcess) -> None:
    """After the tests above: no iterator gave an item; the chunked handler ran to its end."""
    for path, _ in QUIET:
        with RawConnection(server.ports["HTTP_REST"]) as conn:
            conn.request("GET", path)

    def steps() -> dict[str, object]:
        with RawConnection(server.ports["HTTP_REST"]) as conn:
            return conn.request("GET", "/rest/steps").json()  # type: ignore[no-any-return]

    wait_for(lambda: "chunked" in steps(), 15, "the chunked handler's end")
    assert steps() == {"chunked": "whole"}


def test_a_205_sends_no_content_and_keeps_the_connection(server: ServerProcess) -> None:
    """RFC 9110 15.3.6: no content in a 205; its length of 0 frames the next pipelined answer."""
    with RawConnection(server.ports["HTTP_REST"]) as conn:
        conn.send(request_bytes("GET", "/rest/reset") + request_bytes("GET", "/rest/hello"))
        first = conn.read_response()
        assert first.status == 205 and first.body == b"", first.head
        assert first.header("content-length") == "0", first.head
        assert conn.read_response().json() == {"hello": "world"}
        head = conn.request("HEAD", "/rest/reset")
        assert head.status == 205 and head.header("content-length") == "0", head.head


def test_the_date_line_is_the_servers_alone(server: ServerProcess) -> None:
    """A handler's ``Date`` is dropped: one ``Date`` line (RFC 9110 5.3), the server's (6.6.1)."""
    with RawConnection(server.ports["HTTP_REST"]) as conn:
        answer = conn.request("GET", "/rest/dated")
    assert answer.body == b"abc"
    dates = answer.header_all("date")
    assert len(dates) == 1 and dates[0].endswith(" GMT") and dates[0] != "yesterday", dates


def test_an_interim_status_is_refused_as_a_handler_error(client: Client) -> None:
    r = client.get("/rest/interim")
    assert r.status_code == 500
    assert r.json()["code"] == 500


# -- what a handler's Response may not write (SPEC 7.1) --------------------------------------

INJECTED = "/ok\r\nSet-Cookie: evil=1"
# (path, query) of answers that cannot be written as the handler gave them: each a 500
REFUSED = [
    ("/reflect", {"to": INJECTED}),
    ("/reflect", {"to": "/ok\nSet-Cookie: evil=1"}),
    ("/reflect", {"to": "/ok\rSet-Cookie: evil=1"}),
    ("/reflect", {"to": "/ok\x00Set-Cookie: evil=1"}),
    ("/reflect", {"to": "/caf\u20ac"}),  # not ISO-8859-1: never written as "/caf?"
    ("/reflect-rest", {"to": INJECTED}),
    ("/status/100", {}),
    ("/status/101", {}),
    ("/status/99", {}),
    ("/status/199", {}),
    ("/status/600", {}),
    ("/status/0", {}),
    ("/status-text/200", {}),  # a status given as text
    ("/header-name", {"name": "Set-Cookie: evil=1; x"}),  # a name that writes another header
    ("/header-name", {"name": "X-A\r\nSet-Cookie"}),
    ("/header-name", {"name": ""}),
    ("/media", {"type": "text/plain\r\nSet-Cookie: evil=1"}),
]


def _target(path: str, query: dict[str, str]) -> str:
    return "/rest" + path + (("?" + urlencode(query)) if query else "")


def test_a_response_that_would_inject_a_header_or_break_the_next_answer_is_500(
    server: ServerProcess,
) -> None:
    """Pipelined, each followed by a normal answer: no injected header line, and the next answer
    reads as its own (a 1xx status would pass for an interim answer)."""
    port = server.ports["HTTP_REST"]
    mark = len(server.log())
    with RawConnection(port) as conn:
        sent = b"".join(
            request_bytes("GET", _target(path, query)) + request_bytes("GET", "/rest/hello")
            for path, query in REFUSED
        )
        conn.send(sent)
        for path, query in REFUSED:
            refused = conn.read_response()
            assert refused.status == 500, (path, query, refused.head)
            assert refused.json()["code"] == 500
            assert b"evil" not in refused.head.lower(), refused.head
            assert refused.header("set-cookie") is None and refused.header("location") is None
            after = conn.read_response()
            assert after.status_line == "HTTP/1.1 200 OK", (path, after.head, conn.buffer)
            assert after.json() == {"hello": "world"}
        assert conn.buffer == b""
    # a good redirect still is one
    with RawConnection(port) as conn:
        moved = conn.request("GET", _target("/reflect", {"to": "/ok?a=1"}))
        assert moved.status == 302 and moved.header("location") == "/ok?a=1", moved.head
        assert conn.request("GET", "/rest/status/299").json() == {"n": "299"}
    text = server.wait_log("GET /rest/media", since=mark)
    for path, _query in REFUSED:
        assert re.search(rf"GET /rest{re.escape(path)}(\?\S*)? 500 ", text), path
    assert text.count("a handler returned a Response that cannot be sent") >= 14, text
    assert "HTTP status is a number in 200-599, not 100" in text
    assert "holds CR, LF, NUL or another control character" in text
    assert "holds characters outside ISO-8859-1" in text
    assert "a header name is a token" in text
    assert "evil=1" not in text.replace("evil=1; x'", "")  # only the refused name, quoted
    assert "\r" not in text


def test_the_in_process_client_refuses_the_same_answers(client: Client) -> None:
    for path, query in REFUSED:
        r = client.get("/rest" + path, params=query)
        assert r.status_code == 500, (path, query, r.headers)
        assert "set-cookie" not in r.headers and "location" not in r.headers
        assert all("evil" not in f"{n}{v}" for n, v in r.headers.items()), r.headers
    moved = client.get("/rest/reflect", params={"to": "/ok"})
    assert moved.status_code == 302 and moved.headers["location"] == "/ok"
    raw = client.get("/rest/bytes-header").headers.raw
    assert (b"x-v", b"abc") in raw and (b"x-l", b"caf\xe9") in raw, raw
    assert client.get("/rest/status/201").status_code == 201
