"""SPEC 11.1: a def handler and def ``OnSend`` are one pool job; ``OnSelect`` after
authorization."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fwrest.testing import Client
from tests.conftest import module_config


def test_a_def_handler_and_def_on_send_are_one_pool_job(tmp_path: Path) -> None:
    """With one thread, a queued request would run between them were OnSend a second job."""
    app = """
import threading

from fwrest import get, rest

EVENTS = []
a_running = threading.Event()
b_arrived = threading.Event()

async def select():
    if rest.getPathRequest().endswith("/b"):
        b_arrived.set()  # B's job is queued before the loop turns again

def send():
    if rest.getPathRequest() in ("/rest/a", "/rest/b"):
        EVENTS.append("send " + rest.getPathRequest()[-1])

@get("/a")
def a():
    a_running.set()
    assert b_arrived.wait(10)
    EVENTS.append("handler a")

@get("/b")
def b():
    EVENTS.append("handler b")

@get("/events")
async def events():
    return EVENTS
"""
    extra = {
        "HTTP_REST": {"OnSelect": "select"},
        "POOL": {"MinThreads": 1, "MaxThreads": 1, "OnSend": "send"},
    }
    config = module_config(tmp_path, "hooks_one_job_app", app=app, extra=extra)
    with Client(config) as client, ThreadPoolExecutor(1) as ex:
        import hooks_one_job_app as mod  # type: ignore[import-not-found]

        first = ex.submit(client.get, "/rest/a")
        assert mod.a_running.wait(10)
        assert client.get("/rest/b").status_code == 200
        assert first.result().status_code == 200
        assert client.get("/rest/events").json() == ["handler a", "send a", "handler b", "send b"]


def test_on_select_runs_after_authorization(tmp_path: Path) -> None:
    app = """
from fwrest import get

CALLS = []

def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")

def select():
    CALLS.append(1)
    return -2

@get("/hello")
def hello():
    return {}
"""
    basic = {"Authorization": {"scheme": "basic", "OnAuth": "check"}}
    extra = {"HTTP_REST": {"OnSelect": "select", "FwData": basic}}
    config = module_config(tmp_path, "hooks_select_auth_app", app=app, extra=extra)
    with Client(config) as client:
        import hooks_select_auth_app as mod  # type: ignore[import-not-found]

        assert client.get("/rest/hello").status_code == 401
        assert client.get("/rest/nowhere").status_code == 401
        assert mod.CALLS == []
        assert client.get("/rest/hello", auth=("ada", "Ada-Pw-1")).status_code == 503
        assert mod.CALLS == [1]
