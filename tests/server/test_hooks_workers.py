"""``OnStart`` and ``OnStop`` (SPEC 11.1) in real workers: hooks append (what, pid, thread) to the
file ``HOOK_MARKS`` names; ``POOL`` has ``def`` hooks, ``APOOL`` ``async def`` ones."""

from __future__ import annotations

import gc
import logging
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import fwrest
from fwrest import ConfigError
from fwrest.testing import Client
from tests.conftest import (
    ServerProcess,
    free_config,
    local_port,
    module_config,
    serving,
    wait_for,
    wait_ready_workers,
)

APP = """
import asyncio
import os
import threading
import time

from fwrest import get

STARTED = {}

def _mark(what):
    with open(os.environ["HOOK_MARKS"], "a") as fh:
        fh.write(f"{what} {os.getpid()} {threading.current_thread().name}\\n")

def start_def():
    time.sleep(0.3)  # a slow start: no request may come before it ends
    _mark("start-def")
    STARTED["def"] = True

async def start_async():
    await asyncio.sleep(0.3)
    _mark("start-async")
    STARTED["async"] = True

def stop_def():
    _mark("stop-def")
    raise RuntimeError("an OnStop that fails does not stop the others")

async def stop_async():
    _mark("stop-async")

def start_fails():
    raise RuntimeError("no database")

async def start_fails_async():
    raise RuntimeError("no database")

def stop_hangs():
    _mark("stop-hang")
    time.sleep(60)

async def stop_stubborn():
    _mark("stop-hang")
    while True:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            pass  # a hook that swallows its cancellation

@get("/started")
def started():
    return {"pid": os.getpid(), **STARTED}

@get("/slow")
def slow():
    _mark("slow-begins")
    time.sleep(1)
    _mark("slow-answered")
    return {"pid": os.getpid()}
"""


def config(tmp_path: Path, pool: dict[str, str], apool: dict[str, str] | None = None) -> Path:
    extra = {
        "POOL": pool,
        "AROOT": {"Path": "/arest", "ThreadPool": "APOOL"},
        "APOOL": {"Environment": "ENV", **(apool or {})},
    }
    servers = {"HTTP_REST": local_port(Locations="ROOT, AROOT")}
    return free_config(tmp_path, app=APP, servers=servers, extra=extra)


def marks(path: Path) -> list[tuple[str, int, str]]:
    if not path.exists():
        return []
    fields = (line.split(" ", 2) for line in path.read_text().splitlines())
    return [(what, int(pid), thread) for what, pid, thread in fields]


def test_each_worker_runs_on_start_before_serving_and_on_stop_after_its_last_request(
    tmp_path: Path,
) -> None:
    marks_file = tmp_path / "marks.txt"
    cfg = config(
        tmp_path,
        {"OnStart": "start_def", "OnStop": "stop_def"},
        {"OnStart": "start_async", "OnStop": "stop_async"},
    )
    with serving(cfg, workers=2, env={"HOOK_MARKS": str(marks_file)}) as server:
        pids = set(wait_ready_workers(server, 2).values())
        seen = marks(marks_file)
        print(f"worker pids {sorted(pids)}; marks after the start: {seen}")
        for what in ("start-def", "start-async"):
            ran = [pid for w, pid, _ in seen if w == what]
            assert sorted(ran) == sorted(pids), f"{what} once in each worker: {seen}"
        # a def hook in the pool's threads, an async one on the worker's loop
        assert all(t.startswith("fwrest-POOL-") for w, _, t in seen if w == "start-def")
        assert all(t == "MainThread" for w, _, t in seen if w == "start-async")
        # no request is served before the worker's OnStart hooks returned
        answered: set[int] = set()
        deadline = time.monotonic() + 15
        while answered != pids and time.monotonic() < deadline:
            body = httpx.get(f"{server.url()}/started", timeout=10).json()
            assert body["def"] is True and body["async"] is True, body
            answered.add(body["pid"])
        assert answered == pids
        # OnStop after the drain: a request in flight at SIGTERM is answered first
        with ThreadPoolExecutor(1) as ex:
            slow = ex.submit(httpx.get, f"{server.url()}/slow", timeout=30)
            wait_for(
                lambda: any(w == "slow-begins" for w, _, _ in marks(marks_file)),
                10,
                "the slow request running",
            )
            server.signal(signal.SIGTERM)
            assert slow.result().status_code == 200
        assert server.proc.wait(30) == 0
    seen = marks(marks_file)
    print(f"marks after the stop: {seen}")
    for what in ("stop-def", "stop-async"):
        ran = [pid for w, pid, _ in seen if w == what]
        assert sorted(ran) == sorted(pids), f"{what} once in each worker: {seen}"
    handled = next(pid for w, pid, _ in seen if w == "slow-answered")
    order = [w for w, pid, _ in seen if pid == handled]
    assert order.index("slow-answered") < order.index("stop-def") < order.index("stop-async")
    log = server.log()
    assert "OnStop app.stop_def of [POOL] raised RuntimeError" in log
    assert "an OnStop that fails does not stop the others" in log


@pytest.mark.parametrize("hook", ["start_fails", "start_fails_async"])
def test_an_on_start_that_raises_fails_the_service_start(tmp_path: Path, hook: str) -> None:
    cfg = config(tmp_path, {"OnStart": hook})
    server = ServerProcess(cfg, workers=2, env={"HOOK_MARKS": str(tmp_path / "marks")})
    try:
        code = server.proc.wait(60)
    finally:
        server.stop()
    log = server.log()
    print(log[-1500:])
    assert code == 1
    assert not any(line.startswith("fwrest: ready") for line in server.stdout_lines)
    assert f"OnStart app.{hook} of [POOL] raised RuntimeError; the worker does not start" in log
    assert "RuntimeError: no database" in log  # its traceback
    assert "(its OnStart failed: see above); the service does not start" in log
    assert "starting a replacement" not in log


@pytest.mark.parametrize("how", ["start", "client"])
def test_an_on_start_that_raises_fails_start_in_process(tmp_path: Path, how: str) -> None:
    """fwrest.start() and the test client say it alike (docs/hooks.md): a ConfigError."""
    extra = {"POOL": {"OnStart": "start_fails"}}
    name = f"hooks_start_fails_{how}_app"
    cfg = module_config(tmp_path, name, app=APP, extra=extra)
    with pytest.raises(ConfigError) as caught:
        if how == "start":
            fwrest.start(cfg)
        else:
            Client(cfg).__enter__()
    message = str(caught.value)
    assert f"[POOL] OnStart: the service did not start: OnStart {name}." in message
    assert "raised RuntimeError: no database" in message


def test_a_failed_on_start_leaves_no_background_task_pending(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Background tasks (store check, settings sync, usage figures) start with ``OnStart``: a failed
    start cancels them and lets them end before the loop closes."""
    extra = {"POOL": {"OnStart": "start_fails"}, "HTTPSERVER": {"StateStore": "sqlite"}}
    cfg = module_config(tmp_path, "hooks_start_fails_tasks_app", app=APP, extra=extra)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(ConfigError):
            fwrest.start(cfg)
        gc.collect()  # the loop closed: what it held is let go
    errors = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert errors == []


def test_a_hung_on_stop_keeps_the_worker_at_most_10_s(tmp_path: Path) -> None:
    """A sleeping and a cancellation-ignoring ``OnStop`` stopped at once: 10 s waited once."""
    servers: dict[str, ServerProcess] = {}
    marks_files: dict[str, Path] = {}
    took: dict[str, float] = {}
    codes: dict[str, int] = {}
    try:
        for hook in ("stop_hangs", "stop_stubborn"):
            folder = tmp_path / hook
            folder.mkdir()
            marks_files[hook] = folder / "marks.txt"
            cfg = config(folder, {"OnStop": hook})
            env = {"HOOK_MARKS": str(marks_files[hook])}
            servers[hook] = ServerProcess(cfg, workers=1, env=env)
        for server in servers.values():
            server.wait_ready()
            assert httpx.get(f"{server.url()}/started", timeout=10).status_code == 200
        signalled = time.monotonic()
        for server in servers.values():
            server.signal(signal.SIGTERM)
        for hook, server in servers.items():
            codes[hook] = server.proc.wait(40)
            took[hook] = time.monotonic() - signalled
    finally:
        for server in servers.values():
            server.stop()
    for hook, server in servers.items():
        print(f"{hook}: stopped {took[hook]:.1f} s after SIGTERM, exit code {codes[hook]}")
        assert codes[hook] == 0
        assert any(w == "stop-hang" for w, _, _ in marks(marks_files[hook]))
        assert 9.5 <= took[hook] < 30
        log = server.log()
        assert f"OnStop app.{hook} of [POOL] did not return within 10 s; the worker stops" in log
        assert "worker 1 stopped after" in log
        assert "SIGKILL" not in log and "forcing" not in "\n".join(server.stdout_lines)


def test_on_stop_waits_for_the_thread_a_timed_out_request_still_holds(tmp_path: Path) -> None:
    """SPEC 11.1: a request ActiveTimeout answered keeps its thread; with MaxThreads=1 OnStop waits
    for it (it waited AcceptTimeout, then was skipped)."""
    marks_file = tmp_path / "marks.txt"
    pool = {"OnStop": "stop_def", "MaxThreads": "1", "AcceptTimeout": "300",
            "ActiveTimeout": "300"}  # fmt: skip
    cfg = config(tmp_path, pool)
    with serving(cfg, workers=1, env={"HOOK_MARKS": str(marks_file)}) as server:
        timed_out = httpx.get(f"{server.url()}/slow", timeout=30)
        assert timed_out.status_code == 503, timed_out.text  # its thread sleeps on (1 s)
        server.signal(signal.SIGTERM)
        assert server.proc.wait(30) == 0
    seen = [what for what, _, _ in marks(marks_file)]
    print(f"marks: {seen}")
    assert seen.index("slow-answered") < seen.index("stop-def"), seen
    assert "raised ServiceUnavailable" not in server.log()
