"""SPEC 7.1: whatever an application's function raises answers 500 and the worker serves on.
``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, a stray ``CancelledError``,
``StopIteration`` from def and async handlers (with and without ``ActiveTimeout``, which runs an
async handler in a task), ``OnAuth`` and ``onAuthparams``: a 500, a request in flight answered 200
by the same never-replaced worker (far more than the respawn breaker's five in 30 s), and the
graceful stop waits on no open connection. From a stream's iterator (SPEC 10.5: def, async,
``EventStream`` of each), before or after its first item: a 500 if nothing was sent (the first item
is read before the head), else the connection closes without the last chunk; in process, a 500 or
``httpx.RemoteProtocolError`` at once."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from fwrest.testing import Client
from tests.auth.oauth2_support import client_context, oauth_section
from tests.conftest import ServerProcess, exchange, free_config, local_port
from tests.faults.support import FAULT_APP, served_cleanly

APP = (
    FAULT_APP
    + """

import sys as _sys

_RAISE = {
    "exit": lambda: _sys.exit(3),
    "kbd": lambda: (_ for _ in ()).throw(KeyboardInterrupt()),
    "genexit": lambda: (_ for _ in ()).throw(GeneratorExit()),
    "cancel": lambda: (_ for _ in ()).throw(asyncio.CancelledError()),
    "stopiter": lambda: next(iter(())),  # a Future refuses StopIteration: it hung a def's request
}


@get("/def/:kind")
def def_raises(kind):
    _RAISE[kind]()


@get("/async/:kind")
async def async_raises(kind):
    await asyncio.sleep(0)
    _RAISE[kind]()


def check(user, password):
    if user in _RAISE:
        _RAISE[user]()
    return user == "ok" and password == "pw"


async def acheck(user, password):
    if user in _RAISE:
        _RAISE[user]()
    return user == "ok" and password == "pw"


def params():
    _sys.exit(4)


from fwrest import EventStream


def _gen(kind, when):
    if when == "mid":
        yield "one\\n"
    _RAISE[kind]()
    yield "never\\n"


async def _agen(kind, when):
    if when == "mid":
        yield "one\\n"
    await asyncio.sleep(0)
    _RAISE[kind]()
    yield "never\\n"


@get("/stream/gen/:kind/:when")
def stream_gen(kind, when):
    return _gen(kind, when)


@get("/stream/agen/:kind/:when")
async def stream_agen(kind, when):
    return _agen(kind, when)


@get("/stream/events-gen/:kind/:when")
def stream_events_gen(kind, when):
    return EventStream(_gen(kind, when))


@get("/stream/events-agen/:kind/:when")
async def stream_events_agen(kind, when):
    return EventStream(_agen(kind, when))
"""
)

KINDS = ("exit", "kbd", "genexit", "cancel", "stopiter")
# a streamed answer's iterators: def generator (in the pool), async one, an EventStream of each
ITERATORS = ("gen", "agen", "events-gen", "events-agen")


def _service(tmp_path: Path, certs: dict[str, Path], graceful_ms: int = 5000) -> Path:
    def basic(on_auth: str) -> dict[str, Any]:
        return local_port(
            FwData={"Authorization": {"scheme": "basic", "OnAuth": on_auth, "maxFailures": 10**6}}
        )

    servers = {
        "HTTP_REST": {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT,BOUND"},
        "BASIC": basic("app.check"),
        "ABASIC": basic("app.acheck"),
        "OAUTH": oauth_section(certs, onAuthparams="app.params"),
    }
    # any ActiveTimeout runs a handler otherwise; 30 s is far from a starved (nice 10) request
    timed = {"Environment": "ENV", "MaxThreads": 4, "ActiveTimeout": 30000}
    bound = {"Path": "/bound", "ThreadPool": "TIMED"}
    graceful = {"GracefulTimeout": graceful_ms}
    extra = {"BOUND": bound, "TIMED": timed, "POOL": {"MaxThreads": 8}, "HTTPSERVER": graceful}
    return free_config(tmp_path, servers=servers, extra=extra, app=APP)


PREFIXES = ("/rest", "/bound")  # /bound: ActiveTimeout
STREAMS = [
    f"{prefix}/stream/{iterator}/{kind}/{when}"
    for kind, iterator, prefix, when in itertools.product(
        KINDS, ITERATORS, PREFIXES, ("first", "mid")
    )
]


def _read_ahead(path: str) -> bool:
    """A failure before the first item is a 500: a plain iterator's first item is read before
    the head on every location, an EventStream's only under ActiveTimeout (/bound)."""
    return path.endswith("/first") and (path.startswith("/bound") or "/events-" not in path)


@contextlib.contextmanager
def serving_on(http: httpx.Client, base: str, slow_ms: int) -> Iterator[None]:
    """A request in flight throughout: 200 from the same process, its log naming what was raised."""
    pid = http.get(base + "/slow/0").json()["pid"]
    slow: dict[str, Any] = {}
    in_flight = threading.Thread(
        target=lambda: slow.update(r=http.get(f"{base}/slow/{slow_ms}")), daemon=True
    )
    in_flight.start()
    time.sleep(0.2)
    yield
    in_flight.join(10)
    assert slow["r"].status_code == 200 and slow["r"].json()["pid"] == pid
    after = http.get(base + "/slow/0")
    assert after.status_code == 200 and after.json()["pid"] == pid  # the same worker


def assert_not_replaced(log: str) -> None:
    assert "worker died" not in log and "respawn" not in log.lower()
    assert "SystemExit" in log and "KeyboardInterrupt" in log and "GeneratorExit" in log


def test_base_exceptions_of_the_application_answer_500_and_keep_the_worker(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    # graceful stop 30 s, far above the bound below: a stop waiting on a connection shows, a starved
    # one (nice 10) does not fail
    proc = ServerProcess(_service(tmp_path, certs, graceful_ms=30000)).wait_ready()
    http = httpx.Client(timeout=10)
    tls = httpx.Client(timeout=10, verify=client_context(certs))
    try:
        base, bound = proc.url(), proc.url().replace("/rest", "/bound")
        answers: dict[str, int] = {}
        with serving_on(http, base, 1500):
            for kind in KINDS:
                for prefix, style in itertools.product((base, bound), ("def", "async")):
                    with httpx.Client(timeout=10) as one:
                        response = one.get(f"{prefix}/{style}/{kind}")
                    answers[f"{prefix.rsplit('/', 1)[1]} {style} {kind}"] = response.status_code
                    assert response.json()["code"] == 500, response.text
                for server in ("BASIC", "ABASIC"):
                    response = http.get(proc.url(server) + "/hello", auth=(kind, "pw"))
                    answers[f"{server} OnAuth {kind}"] = response.status_code
            grant = tls.post(
                proc.url("OAUTH") + "/fw/oauth2/token",
                data={"grant_type": "password", "username": "u", "password": "p"},
            )
            answers["onAuthparams exit"] = grant.status_code
            print("answers:", answers)
            assert set(answers.values()) == {500}, answers
        assert http.get(proc.url("BASIC") + "/hello", auth=("ok", "pw")).status_code == 200
        assert_not_replaced(proc.log())
        assert "OnAuth app.check raised SystemExit" in proc.log()
    finally:
        http.close()
        tls.close()
        started = time.monotonic()
        code = proc.stop(timeout=60)
        took = time.monotonic() - started
    print(f"graceful stop took {took:.2f} s")
    assert code == 0
    assert took < 15, "the stop waited on a connection a BaseException left open"


def _streamed(port: int, path: str) -> tuple[int, bytes, bytes]:
    """The status, head and body of ``GET path``, read until the server closes."""
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    data = exchange(port, request)
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body


def test_base_exceptions_of_a_streams_iterator_cut_it_and_keep_the_worker(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    with served_cleanly(_service(tmp_path, certs)) as proc, httpx.Client(timeout=10) as http:
        port = proc.ports["HTTP_REST"]
        outcomes: dict[str, str] = {}
        with serving_on(http, proc.url(), 3000):
            for path in STREAMS:
                status, head, body = _streamed(port, path)
                if _read_ahead(path):
                    # nothing was sent: the first item is read before the head
                    assert status == 500, (path, head, body)
                    assert json.loads(body)["code"] == 500
                    outcomes[path] = "500"
                    continue
                assert status == 200 and b"chunked" in head, (path, head)
                assert not body.endswith(b"0\r\n\r\n"), (path, body)  # cut
                assert b"never" not in body
                if path.endswith("/mid"):
                    assert b"one" in body, (path, body)
                outcomes[path] = "cut"
            print("outcomes:", sorted(set(outcomes.values())), len(outcomes), "requests")
        assert_not_replaced(proc.log())


def test_base_exceptions_of_a_streams_iterator_in_process(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    config = _service(tmp_path, certs)
    outcomes: dict[str, str] = {}

    def ask_all() -> None:
        with Client(config) as client:
            for path in STREAMS:
                try:
                    response = client.get(path)
                except httpx.RemoteProtocolError:
                    outcomes[path] = "cut"
                else:
                    assert response.json()["code"] == 500, response.text
                    outcomes[path] = "500"
            assert client.get("/rest/slow/0").status_code == 200  # it serves on

    asking = threading.Thread(target=ask_all, daemon=True)
    started = time.monotonic()
    asking.start()
    asking.join(60)  # a hang guard: a stream's SystemExit ended the client's event loop
    print(f"{len(outcomes)} streams in {time.monotonic() - started:.2f} s")
    assert not asking.is_alive(), f"hung after {len(outcomes)} answers: {outcomes}"
    assert len(outcomes) == len(KINDS) * len(ITERATORS) * 4
    for path, outcome in outcomes.items():
        expected = "500" if _read_ahead(path) else "cut"
        assert outcome == expected, (path, outcome)
