"""Streamed answers (SPEC 10.5) on ``fwrest serve``: iterators sent chunked as items come, ``def``
generators advanced in the pool, a slow reader never making the worker hold the whole stream, the
iterator closed within 1 s of the client leaving, HEAD, piecewise compression, a failure midway;
``setChunkedResponse``'s handler told its client left (the thread freed), and what it takes. An
HTTP/1.0 stream's framing, on both engines: tests/server/test_engines.py."""

from __future__ import annotations

import gzip
import json
import re
import signal
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from fwrest.testing import Client
from tests.conftest import (
    ServerProcess,
    exchange,
    free_config,
    local_port,
    module_config,
    serving,
    wait_for,
)

APP = """
import asyncio
import os
import threading
from pathlib import Path

from fwrest import EventStream, Response, get, rest

MARKS = Path(os.environ["STREAM_MARKS"])

def mark(name, text=""):
    (MARKS / name).write_text(text)

def wait_mark(name):  # until the test has read the first piece and written the mark
    import time
    for _ in range(200):
        if (MARKS / name).exists():
            return
        time.sleep(0.05)

@get("/lines")
def lines():
    def items():
        for i in range(3):
            yield f"line {i} {threading.current_thread().name}\\n"
    return items()

def reads():  # what the REST object reads of the request being streamed
    return "%s %s %s %s\\n" % (
        dict(rest.getPathParamsRequest()), dict(rest.getQueryRequest()),
        rest.getHeaderRequest().get("x-who"), rest.getRequestId(),
    )

@get("/reading/:name")
def reading_def(name):
    def items():
        yield reads()
        yield reads()  # a later step, in the pool again
    return items()

@get("/areading/:name")
async def reading_async(name):
    async def items():
        yield reads()
        await asyncio.sleep(0)
        yield reads()
    return Response(items())

@get("/chunk-in-stream")
def chunk_in_stream():
    def items():
        yield "first\\n"
        rest.setChunkedResponse("not here")  # the answer is this stream: RuntimeError
        yield "never\\n"
    return items()

@get("/gated")
def gated():
    def items():
        yield "first\\n"
        wait_mark("go")
        yield "second\\n"
    return items()

@get("/ndjson")
async def ndjson():
    async def items():
        for i in range(3):
            await asyncio.sleep(0)
            yield b'{"n": %d}\\n' % i
    return Response(items(), media_type="application/x-ndjson", headers={"X-Kind": "nd"})

@get("/endless")
async def endless():
    async def items():
        try:
            n = 0
            while True:
                n += 1
                yield b"tick\\n"
                await asyncio.sleep(0.05)
        finally:
            import time
            mark("closed", str(time.time()))
    return items()

@get("/sparse")
async def sparse():  # one item (size: its length), then one every 30 s
    size = int(rest.getQueryRequest().get("size", "0"))
    async def items():
        try:
            yield b" " * size + b"tick\\n"
            while True:
                await asyncio.sleep(30)
                yield b"tick\\n"
        finally:
            import time
            mark("sparse-closed", str(time.time()))
    return items()

@get("/events-idle")
async def events_idle():  # one event, then comments every 15 s
    async def items():
        try:
            yield "tick"
            await asyncio.sleep(300)
        finally:
            import time
            mark("idle-closed", str(time.time()))
    return EventStream(items())

@get("/big")
def big():
    def items():
        for i in range(200):
            mark("produced", str(i + 1))
            yield b"x" * 1048576
    return items()

@get("/broken")
async def broken():
    async def items():
        yield b"part\\n"
        raise RuntimeError("the feed broke")
    return items()

@get("/def-broken")
def def_broken():
    def items():
        yield b"part\\n"
        raise RuntimeError("the feed broke")
    return items()

@get("/chunked")
def chunked():
    rest.setStatusCode(201)
    rest.setKeyHeaderResponse("X-Chunked", "yes")
    rest.setChunkedResponse("a,")
    wait_mark("go-chunked")
    rest.setChunkedResponse(b"b,")
    rest.setLastChunkedResponse("c")
    return {"ignored": True}

@get("/chunked-async")
async def chunked_async():
    rest.setChunkedResponse("no")

HELD = []  # the application keeps its generators (a registry): only close() ends them

@get("/def-endless")
def def_endless():
    gap = float(rest.getQueryRequest().get("gap", "0.2"))
    def items():
        import time
        try:
            while True:
                yield b"tick\\n"
                time.sleep(gap)  # the client leaves during this step, in the pool
        finally:
            mark("def-closed", str(time.time()))
    HELD.append(items())
    return HELD[-1]

@get("/events-def-endless")
def events_def_endless():
    def items():
        import time
        try:
            while True:
                yield "tick"
                time.sleep(0.2)
        finally:
            mark("events-closed", str(time.time()))
    HELD.append(items())
    return EventStream(HELD[-1])

DENSE = {"pieces": 0}

@get("/dense")
async def dense():
    async def items():
        piece = b"compressible text, over and over. " * 2000  # 68 KB, about 300:1 gzipped
        while True:  # never awaits: only the writer's waits give the loop a turn
            DENSE["pieces"] += 1
            yield piece
    return items()

@get("/dense-count")
async def dense_count():
    return dict(DENSE)

@get("/text")
def text():
    def items():
        for i in range(50):
            yield "compressible text, over and over. " * 20
    return items()
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("streaming")
    marks = tmp / "marks"
    marks.mkdir()
    config = free_config(tmp, app=APP, servers={"HTTP_REST": local_port(Compression="gzip")})
    with serving(config, env={"STREAM_MARKS": str(marks)}) as proc:
        yield proc, marks


def test_a_def_generator_is_sent_chunked_from_the_pool(served: tuple[ServerProcess, Path]) -> None:
    proc, _ = served
    with httpx.stream("GET", proc.url() + "/lines", timeout=10) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        body = response.read().decode()
    lines = body.splitlines()
    assert [line.split()[1] for line in lines] == ["0", "1", "2"]
    assert all("MainThread" not in line for line in lines)  # the pool's threads


@pytest.mark.parametrize("route", ["reading", "areading"])
def test_the_rest_object_reads_the_request_inside_its_stream(
    served: tuple[ServerProcess, Path], route: str
) -> None:
    """A ``def`` generator (its steps in the pool) and an async generator read the request they
    stream for through ``rest`` (it raised NoRequestError), each its own request's."""
    proc, _ = served
    for who in ("ada", "bob"):
        rid = f"req-{who}-{route}"
        response = httpx.get(
            f"{proc.url()}/{route}/{who}?q={who}",
            headers={"X-Who": who, "X-Request-Id": rid, "Accept-Encoding": "identity"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        expected = f"{{'name': '{who}'}} {{'q': '{who}'}} {who} {rid}"
        assert response.text.splitlines() == [expected, expected], response.text
    if route == "areading":
        return
    # setChunkedResponse in a def generator's step: the stream is cut, the reason logged
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(proc.url() + "/chunk-in-stream", timeout=10)
    wait_for(lambda: "a returned iterator yields them" in proc.log(), 15, "the reason")


def test_items_go_out_as_they_come(served: tuple[ServerProcess, Path]) -> None:
    proc, marks = served
    (marks / "go").unlink(missing_ok=True)
    plain = {"Accept-Encoding": "identity"}
    with httpx.stream("GET", proc.url() + "/gated", headers=plain, timeout=10) as response:
        pieces = response.iter_raw()
        assert next(pieces) == b"first\n"  # before the generator could go on
        (marks / "go").write_text("")
        assert b"".join(pieces) == b"second\n"


def test_an_async_iterator_in_a_response(served: tuple[ServerProcess, Path]) -> None:
    proc, _ = served
    response = httpx.get(proc.url() + "/ndjson", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.headers["x-kind"] == "nd"
    assert response.text == '{"n": 0}\n{"n": 1}\n{"n": 2}\n'
    head = httpx.head(proc.url() + "/ndjson", timeout=10)
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["x-kind"] == "nd"
    # GET's length is not known before its content is made: none (RFC 9110 8.6), never 0
    assert "content-length" not in head.headers, head.headers


def time_mark(path: Path, what: str) -> float:
    """The app's time mark once whole (the file is made empty first: a read may see it partial)."""
    seen: list[float] = []

    def whole() -> bool:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return False
        if not re.fullmatch(r"\d+\.\d+", text):
            return False  # not yet written (str(time.time()) always has a fraction)
        seen.append(float(text))
        return True

    wait_for(whole, 15, what)
    return seen[-1]


@pytest.mark.parametrize(
    ("path", "name", "ticks", "reset"),
    [
        ("/endless", "closed", 1, False),
        ("/def-endless", "def-closed", 2, True),
        ("/events-def-endless", "events-closed", 2, True),
        ("/def-endless?gap=0.5", "def-closed", 2, False),
        ("/sparse", "sparse-closed", 1, False),
        ("/sparse?size=8388608", "sparse-closed", 1, False),
        ("/events-idle", "idle-closed", 1, False),
    ],
)
def test_the_iterator_is_closed_when_the_client_goes_away(
    served: tuple[ServerProcess, Path], path: str, name: str, ticks: int, reset: bool
) -> None:
    """Within 1 s (SPEC 10.5): an async iterator at once; a running ``def`` generator (``reset``,
    0.2 s per item) cannot be closed, so its step closes it on return. A close (FIN) is seen at
    once, not at the second write after it (an idle stream's: 30 s), also after the writer waited
    for the client (8 MiB first) and on an idle ``EventStream``."""
    proc, marks = served
    (marks / name).unlink(missing_ok=True)
    with socket.create_connection(("127.0.0.1", proc.ports["HTTP_REST"]), timeout=10) as sock:
        sock.sendall(f"GET /rest{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        seen, tail = 0, b""
        # head and first piece may come apart; after a def generator's second step, the third runs
        while seen < ticks:
            piece = sock.recv(65536)
            assert piece, tail
            seen, tail = seen + (tail[-3:] + piece).count(b"tick"), piece
        if reset:
            time.sleep(0.05)
            # gone at once (a reset): the worker learns it now, while the third step runs
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone = time.time()
    closed_at = time_mark(marks / name, "the iterator's finally")
    print(f"{path}: the iterator's finally ran {closed_at - gone:.3f} s after the client left")
    assert closed_at - gone < 1.0  # SPEC 10.5; a def generator's running step ends within 0.2 s


@pytest.mark.parametrize("path", ["/ndjson", "/lines"])
def test_a_client_that_ends_its_input_with_its_request_reads_the_whole_stream(
    served: tuple[ServerProcess, Path], path: str
) -> None:
    """A raw client's request and its end at once (a half-close): it waits for the answer, so the
    stream is sent whole; an end after the stream began is a client gone (above)."""
    proc, _ = served
    with socket.create_connection(("127.0.0.1", proc.ports["HTTP_REST"]), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)  # the end goes with the request
        sock.sendall(f"GET /rest{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while piece := sock.recv(65536):
            data += piece
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"\r\n0\r\n\r\n"), data


def test_a_compressed_stream_that_never_awaits_leaves_the_loop_to_others(
    served: tuple[ServerProcess, Path],
) -> None:
    """An async iterator never awaiting, of pieces compressing to almost nothing, to a client
    reading nothing: others are answered, and it stops once the buffers fill."""
    proc, _ = served
    port = proc.ports["HTTP_REST"]
    base = httpx.get(proc.url() + "/dense-count", timeout=10).json()["pieces"]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before its window is set
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /rest/dense HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
        waits: list[float] = []
        counts: list[int] = []
        with httpx.Client(timeout=10) as other:  # another connection
            started = time.monotonic()
            while time.monotonic() - started < 30:
                asked = time.monotonic()
                counts.append(other.get(proc.url() + "/dense-count").json()["pieces"] - base)
                waits.append(time.monotonic() - asked)
                if len(counts) >= 4 and counts[-1] == counts[-4]:
                    break  # the stream waits for the client
                time.sleep(0.25)
        taken = counts[-1] * 68000
        print(
            f"dense stream: {taken / 1048576:.0f} MiB taken in {time.monotonic() - started:.1f}"
            f" s; longest wait of another request {max(waits) * 1000:.0f} ms"
        )
        assert max(waits) < 1.0, waits  # the loop was never held for long
        assert counts[-1] == counts[-4], counts  # it stopped: the writer waits for the client
        # what the socket buffers hold, compressed (a few MiB), times the compression ratio
        assert taken < 4 << 30


def test_a_slow_reader_holds_the_generator_back(served: tuple[ServerProcess, Path]) -> None:
    proc, marks = served
    (marks / "produced").unlink(missing_ok=True)
    worker = psutil.Process(proc.pid).children()[0]
    before = worker.memory_info().rss
    with socket.create_connection(("127.0.0.1", proc.ports["HTTP_REST"]), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(b"GET /rest/big HTTP/1.1\r\nHost: x\r\n\r\n")
        got = 0
        while got < 2 * 1048576:
            got += len(sock.recv(65536))
        time.sleep(1.5)  # a reader that stops: the generator must stop too
        produced = int((marks / "produced").read_text())
        growth = (worker.memory_info().rss - before) / 1048576
        print(
            f"slow reader: read {got / 1048576:.1f} MiB, generator produced {produced} MiB, "
            f"worker RSS {growth:+.1f} MiB"
        )
        assert produced < 16, produced  # of 200: bounded by the socket buffers, not the stream
        assert growth < 32
        while got < 200 * 1048576:
            data = sock.recv(1 << 20)
            if not data:
                break
            got += len(data)
    assert int((marks / "produced").read_text()) == 200


@pytest.mark.parametrize("name", ["broken", "def-broken"])
def test_a_stream_that_fails_is_cut_short(served: tuple[ServerProcess, Path], name: str) -> None:
    """Cut (no last chunk), logged as a handler's failure with its id and where in the app it
    was raised, a ``def`` generator's too (SPEC 3, 13.4)."""
    proc, _ = served
    request = f"GET /rest/{name} HTTP/1.1\r\nHost: x\r\nX-Request-ID: {name}-1\r\n\r\n"
    data = exchange(proc.ports["HTTP_REST"], request.encode())
    assert b"part\n" in data
    assert not data.endswith(b"0\r\n\r\n")  # no last chunk: the client knows it was cut
    said = f"GET /rest/{name} 200 cut=failed port="
    wait_for(lambda: said in proc.log(), 15, "the stream's access line")
    lines = [line for line in proc.log().splitlines() if f"request_id={name}-1" in line]
    assert any(
        "ERROR fwrest.app" in line
        and f"GET /rest/{name}: the streamed answer failed; cut short" in line
        for line in lines
    ), lines
    assert any(re.search(r"RuntimeError: the feed broke at \S+/app\.py:\d", x) for x in lines)
    assert any("WARNING fwrest.access" in line and "200 cut=failed" in line for line in lines)


def test_a_stream_is_compressed_piece_by_piece(served: tuple[ServerProcess, Path]) -> None:
    proc, _ = served
    with httpx.stream(
        "GET", proc.url() + "/text", headers={"Accept-Encoding": "gzip"}, timeout=10
    ) as response:
        assert response.headers["content-encoding"] == "gzip"
        raw = b"".join(response.iter_raw())
    assert gzip.decompress(raw) == ("compressible text, over and over. " * 20 * 50).encode()
    # each piece was flushed: the first raw chunk decodes on its own
    first = zlib.decompressobj(31).decompress(raw[:400])
    assert first.startswith(b"compressible text")


def test_set_chunked_response_sends_pieces_while_the_handler_runs(
    served: tuple[ServerProcess, Path],
) -> None:
    proc, marks = served
    (marks / "go-chunked").unlink(missing_ok=True)
    plain = {"Accept-Encoding": "identity"}
    with httpx.stream("GET", proc.url() + "/chunked", headers=plain, timeout=10) as response:
        assert response.status_code == 201
        assert response.headers["x-chunked"] == "yes"
        assert response.headers["transfer-encoding"] == "chunked"
        pieces = response.iter_raw()
        assert next(pieces) == b"a,"  # while the handler still waits
        (marks / "go-chunked").write_text("")
        assert b"".join(pieces) == b"b,c"
    refused = httpx.get(proc.url() + "/chunked-async", timeout=10)
    assert refused.status_code == 500
    wait_for(lambda: "setChunkedResponse works in a def handler" in proc.log(), 15, "the reason")


TIMED_APP = """
import asyncio
import time

from fwrest import get, rest

@get("/late")
async def late():
    async def items():
        await asyncio.sleep(2)
        yield b"too late"
    return items()

@get("/early-failure")
async def early_failure():
    async def items():
        raise RuntimeError("nothing to send")
        yield b""
    return items()

@get("/fails-midway")
async def fails_midway():
    async def items():
        yield b"part"
        raise RuntimeError("broke midway")
    return items()

@get("/slow-stream")
async def slow_stream():
    async def items():
        for _ in range(3):
            await asyncio.sleep(0.15)
            yield b"piece\\n"
    return items()

@get("/no-content/:kind")
def no_content(kind):  # a 204 whose generator would sleep or raise before its first item
    rest.setStatusCode(204)
    def items():
        if kind == "raise":
            raise RuntimeError("never read")
        time.sleep(2)
        yield b"too late"
    return items()
"""


@pytest.mark.parametrize("active", [0, 1000])
def test_an_answer_without_content_never_reads_its_stream(tmp_path: Path, active: int) -> None:
    """HEAD, 204: the iterator closed unread and the head at once, also under ActiveTimeout
    (which read it ahead once: 503 after 1 s for a late first item, 500 for a failing one)."""
    config = module_config(
        tmp_path,
        f"streams_app_no_content_{active}",
        app=TIMED_APP,
        extra={"POOL": {"ActiveTimeout": active}} if active else None,
    )
    with Client(config) as client:
        for method, path, status in [
            ("HEAD", "/late", 200),
            ("HEAD", "/early-failure", 200),
            ("GET", "/no-content/sleep", 204),
            ("GET", "/no-content/raise", 204),
            ("HEAD", "/no-content/sleep", 204),
        ]:
            started = time.monotonic()
            r = client.request(method, f"/rest{path}")
            took = time.monotonic() - started
            assert (r.status_code, r.content) == (status, b""), (method, path, r.text)
            assert took < 0.5, (method, path, took)
        assert "never read" not in (tmp_path / "server.log").read_text()


def test_active_timeout_bounds_the_first_piece_and_usage_counts_to_the_last(tmp_path: Path) -> None:
    """And the access line of a stream is written as it ends, with its time until then (SPEC 5,
    13.4), saying when it was cut: ``cut=closed`` (the client left), ``cut=failed`` (WARNING)."""
    config = module_config(
        tmp_path,
        "streams_app_timed",
        app=TIMED_APP,
        extra={"POOL": {"ActiveTimeout": 500}, "HTTPSERVER": {"LogFormat": "json"}},
        general={"rest_trace_time": 1},
    )
    with Client(config) as client:
        late = client.get("/rest/late")
        assert late.status_code == 503
        assert late.json()["message"] == "Server Busy"
        failed = client.get("/rest/early-failure")
        assert failed.status_code == 500
        # logged as a handler's failure: where the iterator raised
        said = "GET /rest/early-failure: the streamed answer failed before its first piece"
        text = (tmp_path / "server.log").read_text()
        assert said in text and "RuntimeError: nothing to send at " in text, text[-2000:]
        slow = client.get("/rest/slow-stream")  # 3 pieces, each in time
        assert slow.status_code == 200
        assert slow.text == "piece\n" * 3
        usage = client.get("/rest/fw/rest/usage/time", headers={"Accept": "application/json"})
        rows = [r for r in usage.json()["entry_points"] if r["endpoint"] == "/slow-stream"]
        assert rows[0]["calls"] == 1
        assert rows[0]["total_us"] >= 400_000  # until the last piece, not the head
        with client.stream("GET", "/rest/slow-stream") as left:
            next(left.iter_raw())
        with pytest.raises(httpx.RemoteProtocolError):
            client.get("/rest/fails-midway")

        def access() -> list[dict[str, Any]]:
            records = map(json.loads, (tmp_path / "server.log").read_text().splitlines())
            return [r for r in records if r["logger"] == "fwrest.access" and "-" in r["path"]]

        wait_for(lambda: len(access()) == 4, 10, "the access lines of the streams")
        whole, left_early, failed = access()[1:]
        assert (whole["level"], whole["status"], whole.get("cut")) == ("INFO", 200, None), whole
        assert whole["duration_us"] >= 400_000, whole  # not the 0.15 s of the head
        assert re.search(r"200 total=(\d+)us", whole["message"])[1] == str(whole["duration_us"])
        assert (left_early["level"], left_early["cut"]) == ("INFO", "closed"), left_early
        assert " 200 cut=closed total=" in left_early["message"], left_early
        assert (failed["level"], failed["cut"]) == ("WARNING", "failed"), failed
        assert failed["message"].startswith("GET /rest/fails-midway 200 cut=failed total="), failed


HOOKED_APP = """
import sys

from fwrest import get, rest

def on_error(exc):
    return {"recovered": repr(exc)}

def on_send():
    rest.setKeyHeaderResponse("X-Sent", "yes")

@get("/chunked-fails/:kind")
def chunked_fails(kind):
    rest.setChunkedResponse("a,")
    if kind == "exit":
        sys.exit(5)
    raise RuntimeError("the chunked answer broke")
"""


@pytest.mark.parametrize("kind", ["exit", "error"])
def test_a_chunked_answer_that_fails_in_a_hooked_pool_is_cut(tmp_path: Path, kind: str) -> None:
    """``OnError`` and ``OnSend`` (def: one job with the handler) cannot answer after the chunked
    head went out: cut, as without hooks."""
    config = free_config(
        tmp_path,
        app=HOOKED_APP,
        servers={"HTTP_REST": {**local_port(), "Locations": "ROOT, SENDING"}},
        extra={
            "POOL": {"OnError": "on_error", "OnSend": "on_send"},
            "SENDING": {"Path": "/sending", "ThreadPool": "SENDPOOL"},
            "SENDPOOL": {"Environment": "ENV", "OnSend": "on_send"},
        },
    )
    with serving(config) as proc:
        port = proc.ports["HTTP_REST"]
        for prefix in ("/rest", "/sending"):
            request = f"GET {prefix}/chunked-fails/{kind} HTTP/1.1\r\nHost: x\r\n\r\n"
            data = exchange(port, request.encode())
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK") and b"chunked" in head, data
            assert body.startswith(b"2\r\na,\r\n"), body
            assert not body.endswith(b"0\r\n\r\n"), body  # cut: the client knows
            assert b"recovered" not in body


GONE_APP = """
import contextlib
import os
import time
from pathlib import Path

from fwrest import get, rest

MARKS = Path(os.environ["STREAM_MARKS"])

def ended(name, how):  # written whole at once: the test reads it when it has two fields
    (MARKS / f"{name}.tmp").write_text(f"{time.time()} {how}")
    (MARKS / f"{name}.tmp").rename(MARKS / name)

@contextlib.contextmanager
def recorded(name):  # how the handler ended: ``Class:is-a-ConnectionError`` or ``whole``
    try:
        yield
    except BaseException as exc:
        ended(name, f"{type(exc).__name__}:{isinstance(exc, ConnectionError)}")
        raise
    ended(name, "whole")

@get("/many/:name")
def many(name):
    with recorded(name):
        for i in range(40):
            rest.setChunkedResponse(f"piece {i}\\n")
            time.sleep(0.05)
        rest.setLastChunkedResponse("")

@get("/late/:name")
def late(name):  # the client leaves before the first piece
    for _ in range(200):
        if (MARKS / f"go-{name}").exists():
            break
        time.sleep(0.02)
    with recorded(name):
        for i in range(40):
            rest.setChunkedResponse(f"piece {i}\\n")
        rest.setLastChunkedResponse("")

@get("/flood/:name")
def flood(name):  # for a client that reads nothing
    with recorded(name):
        while True:
            rest.setChunkedResponse(b"f" * 65536)

@get("/ping")
def ping():
    return "pong"
"""
GONE_BODY_TIMEOUT_MS = 1000


@pytest.fixture(scope="module")
def gone_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """Two pool threads (two stuck handlers would starve every def route); BodyTimeout 1 s."""
    tmp = tmp_path_factory.mktemp("streaming_gone")
    marks = tmp / "marks"
    marks.mkdir()
    config = free_config(
        tmp,
        app=GONE_APP,
        servers={"HTTP_REST": local_port(BodyTimeout=GONE_BODY_TIMEOUT_MS)},
        extra={"POOL": {"MinThreads": 1, "MaxThreads": 2, "AcceptTimeout": 1000}},
    )
    with serving(config, env={"STREAM_MARKS": str(marks)}) as proc:
        yield proc, marks


def handler_end(path: Path, what: str, timeout: float = 15) -> tuple[float, str]:
    """When and how a GONE_APP handler ended (``Class:is-a-ConnectionError`` or ``whole``)."""
    wait_for(path.exists, timeout, what)
    at, how = path.read_text().split()
    return float(at), how


def ping_200(proc: ServerProcess) -> Callable[[], bool]:
    def answered() -> bool:
        try:
            return httpx.get(proc.url() + "/ping", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    return answered


def test_a_chunked_handler_whose_client_left_raises_and_frees_its_thread(
    gone_served: tuple[ServerProcess, Path],
) -> None:
    """SPEC 10.5: after the client left, the next setChunkedResponse raises ClientDisconnected
    within 1 s, freeing the thread; def routes answer again (they were 503 for good)."""
    proc, marks = gone_served
    port = proc.ports["HTTP_REST"]
    left: dict[str, float] = {}
    for name in ("gone-1", "gone-2"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(f"GET /rest/many/{name} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            seen = b""
            while b"piece 0" not in seen:
                piece = sock.recv(4096)
                assert piece, seen
                seen += piece
        left[name] = time.time()
    for name in left:
        at, how = handler_end(marks / name, f"the end of handler {name}")
        print(f"{name}: the handler raised {how} {at - left[name]:.3f} s after its client left")
        assert how == "ClientDisconnected:True"
        assert at - left[name] < 1.0  # SPEC 10.5, as for an iterator
    took = wait_for(ping_200(proc), 15, "a def route's 200 after two abandoned streams")
    print(f"a def route answered 200 {took:.2f} s after both handlers ended")


def test_a_chunked_handler_asked_with_head_runs_to_its_end(
    gone_served: tuple[ServerProcess, Path],
) -> None:
    """HEAD: pieces thrown away, never waited for (it hung after the 16th), no client gone told."""
    proc, marks = gone_served
    head = httpx.head(proc.url() + "/many/head-1", timeout=10)
    assert head.status_code == 200 and head.content == b""
    assert "content-length" not in head.headers and "transfer-encoding" not in head.headers
    _, how = handler_end(marks / "head-1", "the end of the handler asked with HEAD")
    assert how == "whole"


def test_a_chunked_handler_whose_client_left_before_its_first_piece_is_told(
    gone_served: tuple[ServerProcess, Path],
) -> None:
    """A reset before the first piece: that answer is never written and the handler is told at its
    next piece (it waited for ever after the 16th)."""
    proc, marks = gone_served
    with socket.create_connection(("127.0.0.1", proc.ports["HTTP_REST"]), timeout=10) as sock:
        sock.sendall(b"GET /rest/late/early-1 HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.2)  # the request is read, the handler waits for its mark
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.2)  # the worker learns of the reset
    (marks / "go-early-1").write_text("")
    _, how = handler_end(marks / "early-1", "the end of the handler whose client left first")
    assert how == "ClientDisconnected:True"
    wait_for(ping_200(proc), 15, "a def route's 200")


def test_a_chunked_handler_whose_client_reads_nothing_is_told_at_the_write_deadline(
    gone_served: tuple[ServerProcess, Path],
) -> None:
    """Taking nothing: closed after BodyTimeout (SPEC 7.1), and the waiting handler raises."""
    proc, marks = gone_served
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", proc.ports["HTTP_REST"]))
        sock.sendall(b"GET /rest/flood/stuck-1 HTTP/1.1\r\nHost: x\r\n\r\n")
        asked = time.time()
        at, how = handler_end(marks / "stuck-1", "the end of the handler of a stuck client")
    print(f"a flood to a stuck client: the handler raised {how} {at - asked:.2f} s after the ask")
    assert how == "ClientDisconnected:True"
    # not sooner than the write deadline (a timer of the loop may fire a little early)
    assert at - asked >= 0.8 * GONE_BODY_TIMEOUT_MS / 1000
    wait_for(ping_200(proc), 15, "a def route's 200")


CHUNK_TYPES_APP = """
from fwrest import get, rest

@get("/piece/:kind")
def piece(kind):
    data = {"int": 5, "big": 10**10, "list": [1, 2], "none": None, "dict": {"a": 1}}.get(kind)
    if kind == "bytearray":
        data = bytearray(b"ba")
    elif kind == "memoryview":
        data = memoryview(b"mv")
    rest.setChunkedResponse(data)
    rest.setLastChunkedResponse(b"!")
"""


@pytest.mark.parametrize(
    ("kind", "name"), [("int", "int"), ("big", "int"), ("list", "list"), ("none", "NoneType"),
                       ("dict", "dict")],
)  # fmt: skip
def test_set_chunked_response_takes_text_or_bytes_alone(
    tmp_path: Path, kind: str, name: str
) -> None:
    """str, bytes, bytearray, memoryview only: a number is no count of NULs (10**10 allocated 10
    GB), a list no bytes. A TypeError naming the type; before the first piece, a 500."""
    config = module_config(tmp_path, f"chunk_types_{kind}", app=CHUNK_TYPES_APP)
    with Client(config) as client:
        refused = client.get(f"/rest/piece/{kind}")
        assert refused.status_code == 500
        assert refused.json()["message"] == "Internal Server Error"
        said = f"TypeError: setChunkedResponse takes str or bytes, not {name}"
        wait_for(lambda: said in (tmp_path / "server.log").read_text(), 10, "the reason")
        for kind_ok, sent in (("bytearray", "ba!"), ("memoryview", "mv!")):
            answer = client.get(f"/rest/piece/{kind_ok}")
            assert (answer.status_code, answer.text) == (200, sent)


DRAIN_APP = """
import os
import time

from fwrest import get, rest

def note(what):  # one line each, in the order they come
    with open(os.environ["DRAIN_NOTES"], "a") as notes:
        notes.write(what + "\\n")

@get("/slow-gen")
def slow_gen():
    def items():
        try:
            while True:
                yield b"tick\\n"
                time.sleep(0.3)  # the deadline comes while a step runs, in the pool
        finally:
            note("generator closed")
    return items()

@get("/slow-chunks")
def slow_chunks():
    try:
        while True:
            rest.setChunkedResponse(b"tick\\n")
            time.sleep(0.3)
    finally:
        note("chunked handler ended")

def on_stop():
    note("OnStop")
"""


def test_a_stop_deadline_closes_running_streams_before_on_stop(tmp_path: Path) -> None:
    """GracefulTimeout passes with a ``def`` generator and a chunked handler running in the pool:
    the worker waits for their steps (2 s at most), which end them, then runs ``OnStop`` (SPEC
    10.5, 11.1); they were abandoned, the worker gone 1 ms after closing their connections."""
    notes = tmp_path / "notes"
    config = free_config(
        tmp_path,
        app=DRAIN_APP,
        extra={"HTTPSERVER": {"GracefulTimeout": 500}, "POOL": {"OnStop": "on_stop"}},
    )
    with serving(config, env={"DRAIN_NOTES": str(notes)}) as proc:
        socks = []
        for path in ("/slow-gen", "/slow-chunks"):
            sock = socket.create_connection(("127.0.0.1", proc.ports["HTTP_REST"]), timeout=10)
            socks.append(sock)
            sock.sendall(f"GET /rest{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            seen = b""
            while b"tick" not in seen:
                piece = sock.recv(4096)
                assert piece, seen
                seen += piece
        proc.signal(signal.SIGTERM)
        assert proc.proc.wait(30) == 0
        for sock in socks:
            sock.close()
    said = notes.read_text().splitlines()
    print(f"after the stop's deadline: {said}")
    assert sorted(said[:2]) == ["chunked handler ended", "generator closed"], said
    assert said[2:] == ["OnStop"], said
