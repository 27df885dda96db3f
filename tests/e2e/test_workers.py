"""Workers of ``fwrest serve`` (SPEC 7): they share the ports; a blocked one is replaced (killed:
tests/faults/test_worker_kill.py); SIGTERM and SIGINT drain and exit 0; the port is free after;
workers exit with a killed supervisor. ``WorkerTimeout=1000``; generous hang guards, figures
printed."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import (
    APP_SOURCE,
    ServerProcess,
    alive,
    free_config,
    port_is_free,
    wait_children,
    wait_for,
)

EXTRA = """

_lock = threading.Lock()
_running = 0


@get("/held")
def held():
    # in flight until the test writes release beside this module (60 s at most)
    global _running
    with _lock:
        _running += 1
    try:
        release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "release")
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"released": os.path.exists(release), "pid": os.getpid()}
    finally:
        with _lock:
            _running -= 1


@get("/running")
async def running():
    return {"running": _running}


@get("/block")
async def block():
    time.sleep(10)  # blocks the event loop: the supervisor must notice
    return {"blocked": False}
"""


def config(tmp_path: Path, **http: object) -> Path:
    return free_config(
        tmp_path,
        app=APP_SOURCE + EXTRA,
        extra={"HTTPSERVER": dict(http), "POOL": {"MaxThreads": 24}},
    )


def wait_running(base: str, count: int, timeout: float = 30) -> None:
    def in_flight() -> bool:
        return bool(httpx.get(f"{base}/running", timeout=5).json()["running"] >= count)

    wait_for(in_flight, timeout, f"{count} requests in flight at once", 0.02)


def refused(base: str) -> bool:
    """A new connection is refused or closed unanswered (a slow answer is not a refusal)."""
    try:
        httpx.get(f"{base}/hello", timeout=10)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        return True
    return False


def test_two_workers_answer_from_two_pids(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(config(tmp_path), workers=2)
    workers = wait_children(server.proc.pid, 2)
    assert server.pid == server.proc.pid
    seen: set[int] = set()
    deadline = time.monotonic() + 15
    while len(seen) < 2 and time.monotonic() < deadline:
        seen.add(httpx.get(f"{server.url()}/hello", timeout=5).json()["pid"])
    print(f"worker pids {sorted(workers)}; answering pids {sorted(seen)}")
    assert seen == workers
    assert server.proc.pid not in seen


def test_blocked_event_loop_worker_is_replaced(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(config(tmp_path, WorkerTimeout=1000), workers=1)
    (old,) = wait_children(server.proc.pid, 1)
    base = server.url()
    started = time.monotonic()
    with pytest.raises(httpx.TransportError):
        # the worker is killed under this request: the connection breaks, it never answers
        httpx.get(f"{base}/block", timeout=15)
    broke = time.monotonic() - started
    text = server.wait_log("its event loop has been blocked")
    assert f"(pid {old})" in text and "WorkerTimeout=1000 ms" in text
    print(f"blocked worker {old} killed; the blocked request broke after {broke:.3f} s")
    r = httpx.get(f"{base}/hello", timeout=10)
    assert r.status_code == 200
    assert r.json()["pid"] != old
    print(f"replacement {r.json()['pid']} answered {time.monotonic() - started:.3f} s after /block")
    assert not alive(old)


@pytest.mark.parametrize(("sig", "count"), [(signal.SIGTERM, 20), (signal.SIGINT, 3)])
def test_a_stop_signal_drains_the_requests_in_flight_and_exits_0(  # type: ignore[no-untyped-def]
    tmp_path: Path, serve, sig: signal.Signals, count: int
) -> None:
    server: ServerProcess = serve(config(tmp_path), workers=1)
    base, port = server.url(), server.ports["HTTP_REST"]
    workers = wait_children(server.proc.pid, 1)
    limits = httpx.Limits(max_connections=40)
    # in flight until the drain began (new connections refused), however late a loaded machine is
    with ThreadPoolExecutor(count) as ex, httpx.Client(limits=limits, timeout=60) as client:
        futures = [ex.submit(client.get, f"{base}/held") for _ in range(count)]
        wait_running(base, count)
        signalled = time.monotonic()
        server.signal(sig)
        wait_for(lambda: refused(base), 30, f"new connections refused after {sig.name}")
        assert server.proc.poll() is None, "the server exited with requests in flight"
        (tmp_path / "release").write_text("")
        answers = [f.result() for f in futures]
    code = server.proc.wait(30)
    print(f"drained {count} requests, exited {time.monotonic() - signalled:.3f} s after {sig.name}")
    assert [a.status_code for a in answers] == [200] * count
    assert all(a.json()["released"] for a in answers)
    assert code == 0
    assert not any(alive(pid) for pid in workers)
    assert port_is_free(port)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/hello", timeout=5)


def test_workers_exit_when_the_supervisor_is_killed(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    server: ServerProcess = serve(config(tmp_path), workers=2)
    port = server.ports["HTTP_REST"]
    workers = wait_children(server.proc.pid, 2)
    killed_at = time.monotonic()
    server.signal(signal.SIGKILL)
    server.proc.wait(10)
    deadline = killed_at + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    took = time.monotonic() - killed_at
    print(f"workers {sorted(workers)} exited {took:.3f} s after the supervisor was killed")
    orphans = [pid for pid in workers if alive(pid)]
    for pid in orphans:  # do not leave them behind when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not orphans, server.log()
    assert "the supervisor is gone" in server.log()
    assert port_is_free(port)


def effective_level(base: str, level: int, timeout: float = 10) -> None:
    """Wait until ten answers in a row (from either worker) report ``rest_log_level=level``."""
    deadline = time.monotonic() + timeout
    streak = 0
    while streak < 10 and time.monotonic() < deadline:
        r = httpx.get(f"{base}/fw/rest/config", headers={"Accept": "application/json"}, timeout=5)
        seen = r.json()["settings"]["rest_log_level"]["effective"]
        streak = streak + 1 if seen == level else 0
    assert streak >= 10, f"rest_log_level {level} never in force everywhere"


def kill_and_wait_replacement(server: ServerProcess, base: str) -> int:
    before = wait_children(server.proc.pid, 2)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if httpx.get(f"{base}/hello", timeout=5).json()["pid"] not in before:
            return victim
    raise AssertionError(f"no replacement for {victim} answered")


def test_the_supervisor_follows_a_log_level_changed_in_the_file(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    def write(level: int) -> Path:
        general = {"rest_log_level": level, "rest_reload_time": 1}
        return free_config(tmp_path, app=APP_SOURCE + EXTRA, general=general)

    server = serve(write(3), workers=2)
    base = server.url()
    write(0)  # off: the supervisor's "worker died" line must not be written either
    effective_level(base, 0)
    time.sleep(0.5)  # the supervisor looks every 0.1 s
    mark = len(server.log())
    victim = kill_and_wait_replacement(server, base)
    time.sleep(0.5)
    assert f"(pid {victim}) died" not in server.log()[mark:], server.log()[mark:]
    write(1)  # errors: now it is
    effective_level(base, 1)
    time.sleep(0.5)
    mark = len(server.log())
    victim = kill_and_wait_replacement(server, base)
    text = server.wait_log(f"(pid {victim}) died", since=mark)
    assert "ERROR" in text and "INFO" not in text, text
    assert server.stop() == 0
