"""``OnSend``, ``OnError`` and ``OnSelect`` (SPEC 11.1) through the port's pipeline, in process (the
socket-only parts: test_hooks_wire.py, test_hooks_workers.py). Pools ``PDEF`` (``def`` hooks),
``PASYNC`` (``async def``), ``PLAIN`` (none), ``PSDEF``/``PSASYNC`` (an ``OnSend`` alone) serve
``/d``, ``/a``, ``/p``, ``/sd``, ``/sa``; ``HTTP_DEF``/``HTTP_ASYNC`` have a ``def``/``async def``
``OnSelect``. Headers ``x-send``, ``x-error``, ``x-select`` choose what a hook does. A hook that
raises, hangs past ``ActiveTimeout`` or returns nonsense gets the standard error body, and the next
request is served."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwrest import log
from fwrest.testing import Client
from tests.conftest import local_port, module_config

APP = """
import asyncio
import sys
import threading
import time

from fwrest import Response, get, rest

SEEN = []  # (hook, thread name) as hooks run
SENT = []  # (the path, the request's x-mark) of each OnSend run

def _what(name):
    return rest.getHeaderRequest().get(name, "")

def _send():
    what = _what("x-send")
    SENT.append((rest.getPathRequest(), _what("x-mark")))
    rest.setKeyHeaderResponse("X-Sent", rest.getPathRequest())
    rest.setKeyHeaderResponse("X-Send-Thread", threading.current_thread().name)
    rest.setKeyHeaderResponse("X-Was", str(rest.getStatusCode()))
    if what == "status":
        rest.setStatusCode(202)
    elif what == "unavailable":
        rest.setStatusCode(503)
    elif what == "nocontent":
        rest.setStatusCode(204)
    elif what == "raise":
        raise RuntimeError("send-secret-detail")
    elif what == "exit":
        sys.exit(4)
    elif what == "badstatus":
        rest.setStatusCode(99)
    elif what == "badheader":
        rest.setKeyHeaderResponse("X-Bad", "a\\r\\nSet-Cookie: x=1")
    return "nonsense the answer ignores"

def _error(exc):
    what = _what("x-error")
    if what == "status":
        rest.setStatusCode(418)
        return "teapot: " + type(exc).__name__
    if what == "none":
        rest.setKeyHeaderResponse("X-Dropped", "1")
        return None
    if what == "fault":
        rest.setStatusCode(503)
        rest.setFault("the database is down")
        return None
    if what == "raise":
        raise KeyError("error-secret-detail")
    if what == "nonsense":
        return object()
    if what == "response":
        return Response("plain", media_type="text/plain", headers={"X-From": "OnError"})
    if what == "response503":
        return Response({"busy": True}, status=503)
    return {"error": type(exc).__name__, "thread": threading.current_thread().name}

def _select():
    what = _what("x-select")
    if what == "raise":
        raise ValueError("select-secret-detail")
    if what == "exit":
        sys.exit(5)
    if what == "sees":
        SEEN.append((rest.getMethodRequest(), rest.getPathRequest(), _what("x-probe"), rest.getClientIP()))
    if what.startswith("pool:"):
        return what[5:]
    return {"busy": -2, "true": True, "minus1": -1, "float": -2.0, "list": ["PDEF"]}.get(what)

"""
# each hook twice, a def and an async def (hanging in its own way): send_def, send_async, ...
HOOK = """
def {kind}_def({arg}):
    if _what("x-{kind}") == "hang":
        time.sleep(2)
    return _{kind}({arg})

async def {kind}_async({arg}):
    if _what("x-{kind}") == "hang":
        await asyncio.sleep(2)
    return _{kind}({arg})
"""
HOOKS = [("send", ""), ("error", "exc"), ("select", "")]
APP += "".join(HOOK.format(kind=kind, arg=arg) for kind, arg in HOOKS)
APP += """
@get("/hello")
def hello():
    rest.setKeyHeaderResponse("X-Handler", "def")
    return {"thread": threading.current_thread().name}

@get("/pool")
def pool():
    return [rest.getThreadPoolName(), rest.getThreadPoolMaxThreads(), rest.getThreadPoolActiveTimeout()]

@get("/ahello")
async def ahello():
    return {"thread": threading.current_thread().name}

@get("/resp")
def resp():
    return Response({"r": 1}, status=201, headers={"X-Handler": "1"})

@get("/boom")
def boom():
    rest.setKeyHeaderResponse("X-Handler", "before-the-raise")
    raise ValueError("boom-secret-detail")

@get("/aboom")
async def aboom():
    raise ValueError("aboom-secret-detail")

@get("/exit")
def exits():
    sys.exit(3)

@get("/genexit")
def genexit():
    raise GeneratorExit()

@get("/stopiter")
def stopiter():
    raise StopIteration()

@get("/chunked")
def chunked():  # fast: its pieces are all given before the loop writes the head
    rest.setChunkedResponse("part1,")
    rest.setChunkedResponse(b"part2,")
    rest.setLastChunkedResponse("end")
"""

SERVERS = {
    "HTTP_DEF": local_port(Locations="D, A, P, SD, SA", OnSelect="select_def"),
    "HTTP_ASYNC": local_port(Locations="D, A, P, SD, SA", OnSelect="select_async"),
}
# ActiveTimeout 1 s: a loaded machine runs the quick hooks within it
HOOKED = {"Environment": "ENV", "MaxThreads": 4, "ActiveTimeout": 1000}
POOLS: dict[str, dict[str, Any]] = {
    "D": {"Path": "/d", "ThreadPool": "PDEF"},
    "A": {"Path": "/a", "ThreadPool": "PASYNC"},
    "P": {"Path": "/p", "ThreadPool": "PLAIN"},
    "SD": {"Path": "/sd", "ThreadPool": "PSDEF"},
    "SA": {"Path": "/sa", "ThreadPool": "PSASYNC"},
    "PDEF": {**HOOKED, "OnSend": "send_def", "OnError": "error_def"},
    "PASYNC": {**HOOKED, "OnSend": "send_async", "OnError": "error_async"},
    "PLAIN": {"Environment": "ENV", "MaxThreads": 2},
    "PSDEF": {"Environment": "ENV", "MaxThreads": 2, "OnSend": "send_def"},
    "PSASYNC": {"Environment": "ENV", "MaxThreads": 2, "OnSend": "send_async"},
}
STANDARD_500 = {"code": 500, "detailedMessage": "", "message": "Internal Server Error"}
HANDLERS = ("/hello", "/ahello")
LOOP = "fwrest-testing"  # the thread of the in-process client's event loop


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hooks")
    return module_config(folder, "hooks_calls_app", app=APP, servers=SERVERS, extra=POOLS)


@pytest.fixture(scope="module", params=["HTTP_DEF", "HTTP_ASYNC"])
def client(request: pytest.FixtureRequest, service: Path) -> Iterator[Client]:
    with Client(service, server=request.param) as c:
        yield c


def log_text(service: Path) -> str:
    log.flush()
    return (service.parent / "server.log").read_text()


def served(client: Client) -> None:
    """The worker still serves, after whatever the test did."""
    r = client.get("/p/hello")
    assert r.status_code == 200, r.text


def hook(loc: str, kind: str) -> str:
    """The pool and hook as the log names them: ``hooks_calls_app.send_def of [PDEF]``."""
    pool, which = ("PDEF", "def") if loc == "/d" else ("PASYNC", "async")
    return f"hooks_calls_app.{kind}_{which} of [{pool}]"


def assert_standard(r: httpx.Response, status: int = 500) -> None:
    assert r.status_code == status, r.text
    if status == 500:
        assert r.json() == STANDARD_500
    assert "secret-detail" not in r.text and "Traceback" not in r.text


# -- OnSend ----------------------------------------------------------------------------------


@pytest.mark.parametrize("loc", ["/d", "/a"])
@pytest.mark.parametrize("route", HANDLERS)
def test_on_send_sets_headers_and_status_of_every_handler(
    client: Client, loc: str, route: str
) -> None:
    r = client.get(f"{loc}{route}")
    assert r.status_code == 200
    assert r.headers["x-sent"] == f"{loc}{route}"  # it read the request through the REST object
    r = client.get(f"{loc}{route}", headers={"x-send": "status"})
    assert r.status_code == 202
    assert r.headers["x-sent"] == f"{loc}{route}"


def test_a_def_on_send_runs_in_the_pool_and_an_async_one_on_the_loop(client: Client) -> None:
    r = client.get("/d/hello")
    assert r.headers["x-send-thread"] == r.json()["thread"]  # one job: the handler's thread
    assert r.json()["thread"].startswith("fwrest-PDEF-")
    r = client.get("/d/ahello")  # an async handler: the def OnSend in the pool after it
    assert r.headers["x-send-thread"].startswith("fwrest-PDEF-")
    assert r.json()["thread"] == LOOP
    r = client.get("/a/hello")
    assert r.json()["thread"].startswith("fwrest-PASYNC-")
    assert r.headers["x-send-thread"] == LOOP


@pytest.mark.parametrize("loc", ["/d", "/a"])
def test_on_send_changes_the_status_of_a_returned_response(client: Client, loc: str) -> None:
    r = client.get(f"{loc}/resp")
    assert r.status_code == 201 and r.headers["x-handler"] == "1"
    r = client.get(f"{loc}/resp", headers={"x-send": "status"})
    assert r.status_code == 202
    assert r.headers["x-handler"] == "1" and r.headers["x-sent"] == f"{loc}/resp"
    assert client.get(f"{loc}/resp").status_code == 201  # the handler's object unchanged


@pytest.mark.parametrize("loc", ["/d", "/a", "/sd", "/sa"])
def test_on_send_cannot_change_a_chunked_answers_head(
    client: Client, service: Path, loc: str
) -> None:
    """setChunkedResponse's first piece commits the status and headers (docs/hooks.md): what
    OnSend sets when the handler returns is ignored every time, however fast the handler."""
    for _ in range(10):
        r = client.get(f"{loc}/chunked", headers={"x-send": "nocontent"})
        assert r.status_code == 200, r.headers
        assert "x-sent" not in r.headers
        assert r.text == "part1,part2,end"
    r = client.get(f"{loc}/chunked", headers={"x-send": "raise"})  # logged, the answer stands
    assert r.status_code == 200 and r.text == "part1,part2,end"
    served(client)
    assert f"GET {loc}/chunked: OnSend " in log_text(service)
    assert "raised; the chunked answer stands (its head went with its first piece)" in log_text(
        service
    )


def test_on_send_does_not_run_for_native_routes_nor_other_pools(client: Client) -> None:
    r = client.get("/d/fw/healthcheck")
    assert r.status_code == 200 and "x-sent" not in r.headers
    r = client.get("/p/hello")
    assert r.status_code == 200 and "x-sent" not in r.headers


@pytest.mark.parametrize("loc", ["/d", "/a"])
@pytest.mark.parametrize("route", HANDLERS)
@pytest.mark.parametrize("what", ["raise", "exit", "badstatus", "badheader"])
def test_an_on_send_that_fails_is_a_500_logged(
    client: Client, service: Path, loc: str, route: str, what: str
) -> None:
    r = client.get(f"{loc}{route}", headers={"x-send": what})
    assert_standard(r)
    assert "x-sent" not in r.headers
    served(client)
    assert f"GET {loc}{route}: OnSend {hook(loc, 'send')} raised; answered 500" in log_text(service)


# -- OnError ---------------------------------------------------------------------------------


@pytest.mark.parametrize("loc", ["/d", "/a"])
@pytest.mark.parametrize("route", ["/boom", "/aboom", "/exit", "/genexit", "/stopiter"])
def test_on_error_answers_with_status_500(
    client: Client, service: Path, loc: str, route: str
) -> None:
    # a def handler's GeneratorExit and StopIteration too: a Future cannot carry them to an async
    # OnError (the first closed the coroutines past OnError, the second hung the request)
    r = client.get(f"{loc}{route}")
    assert r.status_code == 500
    body = r.json()
    raised = {"/exit": "SystemExit", "/genexit": "GeneratorExit", "/stopiter": "StopIteration"}
    assert body["error"] == raised.get(route, "ValueError")
    if loc == "/d":
        assert body["thread"].startswith("fwrest-PDEF-")  # a def OnError: in the pool
    if loc == "/a":
        assert body["thread"] == LOOP
    assert "secret-detail" not in r.text
    assert "x-handler" not in r.headers  # what the handler set before it raised is dropped
    assert r.headers["x-sent"] == f"{loc}{route}"  # OnSend runs on OnError's answer too
    served(client)
    # the handler's failure is logged as before, and who answers it
    line = f"GET {loc}{route}: unhandled exception in the handler; OnError {hook(loc, 'error')}"
    assert f"{line} answers it" in log_text(service)


@pytest.mark.parametrize("loc", ["/d", "/a"])
def test_on_error_sets_its_own_status_and_body(client: Client, loc: str) -> None:
    r = client.get(f"{loc}/boom", headers={"x-error": "status"})
    assert r.status_code == 418
    assert r.text == "teapot: ValueError"
    assert r.headers["content-type"].startswith("text/plain")
    r = client.get(f"{loc}/boom", headers={"x-error": "fault"})
    assert r.status_code == 503
    assert r.json() == {"code": 503, "detailedMessage": "", "message": "the database is down"}
    r = client.get(f"{loc}/aboom", headers={"x-error": "response"})
    assert r.status_code == 500  # a Response of the default status: 500
    assert r.text == "plain" and r.headers["x-from"] == "OnError"
    r = client.get(f"{loc}/aboom", headers={"x-error": "response503"})
    assert r.status_code == 503 and r.json() == {"busy": True}


@pytest.mark.parametrize("loc", ["/d", "/a"])
@pytest.mark.parametrize("what", ["none", "nonsense"])
def test_an_on_error_returning_none_or_nonsense_is_the_standard_500(
    client: Client, service: Path, loc: str, what: str
) -> None:
    r = client.get(f"{loc}/boom", headers={"x-error": what})
    assert_standard(r)
    assert "x-dropped" not in r.headers
    served(client)
    if what == "nonsense":
        assert "returned a object, which fwrest cannot send; answered 500" in log_text(service)


@pytest.mark.parametrize("loc", ["/d", "/a"])
@pytest.mark.parametrize("route", ["/boom", "/aboom"])
def test_an_on_error_that_raises_is_the_standard_500_both_logged(
    client: Client, service: Path, loc: str, route: str
) -> None:
    r = client.get(f"{loc}{route}", headers={"x-error": "raise"})
    assert_standard(r)
    served(client)
    text = log_text(service)
    assert f"GET {loc}{route}: unhandled exception in the handler; OnError" in text
    assert f"ValueError: {route[1:]}-secret-detail" in text  # the handler's
    assert f"GET {loc}{route}: OnError {hook(loc, 'error')} raised" in text
    assert "KeyError: 'error-secret-detail'" in text  # OnError's own


def test_a_pool_without_on_error_answers_the_standard_500(client: Client) -> None:
    assert_standard(client.get("/p/boom"))
    assert_standard(client.get("/p/exit"))


# -- OnSend on every answer of the route's call (SPEC 11.1) ----------------------------------


def sends(client: Client, path: str, **headers: str) -> tuple[httpx.Response, list[str]]:
    """The answer and the paths OnSend saw for this request, told by a mark: an earlier test's hung
    OnError runs its OnSend seconds later, during another request."""
    import hooks_calls_app  # type: ignore[import-not-found]

    before = len(hooks_calls_app.SENT)
    mark = f"m{next(_MARKS)}"
    r = client.get(path, headers={**headers, "x-mark": mark})
    return r, [sent for sent, of in hooks_calls_app.SENT[before:] if of == mark]


_MARKS = itertools.count()


@pytest.mark.parametrize("loc", ["/d", "/a"])
@pytest.mark.parametrize("route", ["/boom", "/aboom"])
def test_on_send_runs_once_on_the_answer_on_error_builds(
    client: Client, loc: str, route: str
) -> None:
    r, ran = sends(client, f"{loc}{route}", **{"x-error": "status"})
    assert r.status_code == 418 and r.text == "teapot: ValueError"
    assert r.headers["x-sent"] == f"{loc}{route}" and ran == [f"{loc}{route}"]
    # OnSend changes OnError's status, a Response's too
    r, ran = sends(client, f"{loc}{route}", **{"x-error": "response503", "x-send": "status"})
    assert r.status_code == 202 and r.json() == {"busy": True} and r.headers["x-was"] == "503"
    assert ran == [f"{loc}{route}"]
    # OnError's None and OnError's failure: the standard 500 body, OnSend's headers on it
    for what in ("none", "raise", "nonsense"):
        r, ran = sends(client, f"{loc}{route}", **{"x-error": what})
        assert_standard(r)
        assert r.headers["x-sent"] == f"{loc}{route}" and ran == [f"{loc}{route}"], what
        assert "x-dropped" not in r.headers


@pytest.mark.parametrize("loc", ["/sd", "/sa"])
@pytest.mark.parametrize("route", ["/boom", "/aboom", "/exit"])
def test_on_send_runs_once_on_the_standard_500_of_a_pool_without_on_error(
    client: Client, service: Path, loc: str, route: str
) -> None:
    line = f"GET {loc}{route}: unhandled exception in the handler; answered 500"
    logged = log_text(service).count(line)
    r, ran = sends(client, f"{loc}{route}")
    assert_standard(r)
    assert r.headers["x-sent"] == f"{loc}{route}" and ran == [f"{loc}{route}"]
    assert "x-handler" not in r.headers  # what the handler set before it raised is dropped
    # the body's code is the status sent: a 2xx OnSend sets is refused (logged), a 503 taken
    r, ran = sends(client, f"{loc}{route}", **{"x-send": "status"})
    assert r.status_code == 500 and r.json() == STANDARD_500 and r.headers["x-was"] == "500"
    assert ran == [f"{loc}{route}"]
    assert f"GET {loc}{route}: setStatusCode(202) on an answer with fwrest's" in log_text(service)
    r, ran = sends(client, f"{loc}{route}", **{"x-send": "unavailable"})
    assert r.json() == {"code": 503, "detailedMessage": "", "message": "Service Unavailable"}
    # logged as any handler's failure, once per request
    assert log_text(service).count(line) == logged + 3
    served(client)


@pytest.mark.parametrize("loc", ["/d", "/a", "/sd", "/sa"])
def test_an_on_send_that_fails_on_an_error_answer_is_not_asked_again(
    client: Client, service: Path, loc: str
) -> None:
    r, ran = sends(client, f"{loc}/boom", **{"x-send": "raise"})
    assert_standard(r)
    assert "x-sent" not in r.headers and ran == [f"{loc}/boom"]
    assert "send-secret-detail" in log_text(service)
    served(client)


# -- OnSelect --------------------------------------------------------------------------------


def test_on_select_picks_the_pool_the_call_runs_in(client: Client) -> None:
    r = client.get("/p/hello", headers={"x-select": "pool:PDEF"})
    assert r.status_code == 200
    assert r.json()["thread"].startswith("fwrest-PDEF-")
    # the picked pool's hooks come with it
    assert r.headers["x-sent"] == "/p/hello"
    r = client.get("/d/hello", headers={"x-select": "pool:plain"})  # names: any case
    assert r.json()["thread"].startswith("fwrest-PLAIN-")
    assert "x-sent" not in r.headers
    r = client.get("/d/hello", headers={"x-select": "none"})
    assert r.json()["thread"].startswith("fwrest-PDEF-")
    r = client.get("/p/boom", headers={"x-select": "pool:PASYNC"})
    assert r.status_code == 500 and r.json()["error"] == "ValueError"  # PASYNC's OnError


def test_the_pool_getters_report_the_pool_on_select_picked(client: Client) -> None:
    """SPEC 11.3's getters describe the pool the request runs in (SPEC 11.1)."""
    assert client.get("/p/pool").json() == ["PLAIN", 2, 0]
    assert client.get("/p/pool", headers={"x-select": "pool:PDEF"}).json() == ["PDEF", 4, 1000]
    assert client.get("/d/pool", headers={"x-select": "pool:plain"}).json() == ["PLAIN", 2, 0]
    assert client.get("/d/pool", headers={"x-select": "none"}).json() == ["PDEF", 4, 1000]


def test_on_select_sees_the_request_through_the_rest_object(client: Client) -> None:
    import hooks_calls_app  # type: ignore[import-not-found]

    hooks_calls_app.SEEN.clear()
    r = client.delete("/d/hello", headers={"x-select": "sees", "x-probe": "p-1"})
    assert r.status_code == 405  # it ran before routing: a wrong method is still the router's
    # method, path, a header and the client's address (the test client's, 127.0.0.1)
    assert hooks_calls_app.SEEN == [("DELETE", "/d/hello", "p-1", "127.0.0.1")]


def test_on_select_minus_2_is_503_server_busy(client: Client) -> None:
    r = client.get("/d/hello", headers={"x-select": "busy"})
    assert r.status_code == 503
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"code": 503, "detailedMessage": "", "message": "Server Busy"}
    served(client)


@pytest.mark.parametrize("what", ["unknown", "true", "minus1", "float", "list", "raise", "exit"])
def test_on_select_returning_nonsense_or_raising_is_a_500_logged(
    client: Client, service: Path, what: str
) -> None:
    headers = {"x-select": "pool:NO_SUCH_POOL" if what == "unknown" else what}
    r = client.get("/d/hello", headers=headers)
    assert_standard(r)
    served(client)
    text = log_text(service)
    if what == "unknown":
        assert "returned the thread pool 'NO_SUCH_POOL', which no location of the service " in text
    elif what in ("raise", "exit"):
        assert "GET /d/hello: OnSelect hooks_calls_app.select_" in text
    else:
        assert "which is neither a thread pool's name, None, -2 nor -3; answered 500" in text


# -- a hook that hangs (the ActiveTimeout of [PDEF], [PASYNC]: 1 s) -------------------------


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("send", "/d/hello"),
        ("send", "/a/hello"),
        ("error", "/d/boom"),
        ("error", "/a/boom"),
        ("select", "/d/hello"),
    ],
)
def test_a_hook_that_hangs_is_bounded_by_active_timeout(
    client: Client, kind: str, path: str
) -> None:
    started = time.monotonic()
    r = client.get(path, headers={f"x-{kind}": "hang"})
    took = time.monotonic() - started
    print(f"{kind} hook of {path} hanging 2 s: {r.status_code} after {took:.3f} s")
    assert r.status_code == 503
    assert r.json()["message"] == "Server Busy"
    assert took < 1.9
    served(client)
