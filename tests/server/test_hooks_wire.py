"""``OnSelect`` on the wire (SPEC 11.1): ``-3`` closes with zero bytes (behind a pipelined request,
after its answer); a hook raising ``SystemExit`` in a real worker is a 500 and the worker serves on
(``-2``'s 503 "Server Busy": test_hooks_calls.py, its status line: test_conformance.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fwrest.testing import Client
from tests.conftest import ServerProcess, exchange, free_config, module_config, serving
from tests.server.rawhttp import request_bytes

APP = """
import os
import sys

from fwrest import get, rest

def _choice():
    path = rest.getPathRequest()
    if path.endswith("/drop"):
        return -3
    if path.endswith("/exit"):
        sys.exit(7)
    return None

def select_def():
    return _choice()

async def select_async():
    return _choice()

def send():
    if rest.getPathRequest().endswith("/send-exit"):
        raise SystemExit(8)

async def on_error(exc):
    raise SystemExit(9)

@get("/pid")
def pid():
    return {"pid": os.getpid()}

@get("/drop")
def drop():
    return {"never": "sent"}

@get("/send-exit")
def send_exit():
    return {}

@get("/boom")
def boom():
    raise RuntimeError("boom")
"""


@pytest.fixture(scope="module", params=["select_def", "select_async"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    hooks = {
        "HTTP_REST": {"OnSelect": request.param},
        "POOL": {"OnSend": "send", "OnError": "on_error"},
    }
    with serving(free_config(tmp_path_factory.mktemp("hooks-wire"), app=APP, extra=hooks)) as proc:
        yield proc


def get(path: str, **headers: str) -> bytes:
    return request_bytes("GET", path, list(headers.items()))


def test_minus_3_closes_the_connection_without_a_byte(server: ServerProcess) -> None:
    port = server.ports["HTTP_REST"]
    assert exchange(port, get("/rest/drop")) == b""
    before = len(server.log())
    # behind a pipelined request: that one is answered, then the connection closes
    data = exchange(port, get("/rest/pid") + get("/rest/drop") + get("/rest/pid"))
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert data.count(b"HTTP/1.1") == 1, data
    assert b'"pid":' in data
    server.wait_log("GET /rest/drop 444", since=before)


@pytest.mark.parametrize("path", ["/exit", "/send-exit", "/boom"])
def test_a_hook_raising_system_exit_is_a_500_and_the_worker_serves_on(
    server: ServerProcess, path: str
) -> None:
    base = server.url()
    pid = httpx.get(f"{base}/pid", timeout=10).json()["pid"]
    r = httpx.get(f"{base}{path}", timeout=10)  # OnSelect, OnSend, OnError raise it
    assert r.status_code == 500
    assert r.json() == {"code": 500, "detailedMessage": "", "message": "Internal Server Error"}
    assert httpx.get(f"{base}/pid", timeout=10).json()["pid"] == pid  # the same worker
    assert "died" not in server.log()


def test_a_port_without_on_select_is_unchanged(tmp_path: Path) -> None:
    with Client(module_config(tmp_path, "hooks_wire_plain", app=APP)) as client:
        answer = client.get("/rest/drop")
    assert (answer.status_code, answer.content) == (200, b'{"never":"sent"}')
