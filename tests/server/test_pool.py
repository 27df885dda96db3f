"""A location's pool over HTTP: ``AcceptTimeout`` (503 "Server Busy"), ``ActiveTimeout`` (503 and a
log line), ``MaxThreads``; ``async def`` handlers are not bound by it. Deadlines shortened; figures
printed, never asserted."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import APP_SOURCE, free_config, wait_for

TRACKING = """

_lock = threading.Lock()
_running = 0
_max_seen = 0

@get("/track/:ms")
def track(ms):
    global _running, _max_seen
    with _lock:
        _running += 1
        _max_seen = max(_max_seen, _running)
    try:
        time.sleep(int(ms) / 1000)
        pool_threads = sum(t.name.startswith("fwrest-POOL") for t in threading.enumerate())
        return {"thread": threading.current_thread().name, "pool_threads": pool_threads}
    finally:
        with _lock:
            _running -= 1

@get("/stats")
async def stats():
    return {"running": _running, "max": _max_seen}
"""


def pool_config(tmp_path: Path, **pool: Any) -> Path:
    return free_config(
        tmp_path,
        app=APP_SOURCE + TRACKING,
        extra={"POOL": {"MinThreads": 1, **pool}},
    )


def wait_running(base: str, count: int) -> None:
    running = f"{count} handler(s) running at once"
    wait_for(lambda: httpx.get(f"{base}/stats").json()["running"] >= count, 10, running)


def test_accept_timeout_answers_503_server_busy(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(pool_config(tmp_path, MaxThreads=1, AcceptTimeout=300))
    base = server.url()
    with ThreadPoolExecutor(1) as ex:
        first = ex.submit(httpx.get, f"{base}/track/2000", timeout=30)
        wait_running(base, 1)  # the only thread is busy (an async handler answers meanwhile)
        started = time.monotonic()
        second = httpx.get(f"{base}/track/10", timeout=30)
        waited = time.monotonic() - started
        print(f"second sync request answered {second.status_code} after {waited:.3f} s")
        assert second.status_code == 503
        assert second.json()["message"] == "Server Busy"
        assert second.json()["code"] == 503
        assert waited >= 0.25  # it did wait for a thread before giving up
        # async handlers do not need a pool thread: they answer while the pool is full
        started = time.monotonic()
        r = httpx.get(f"{base}/asleep/50", timeout=30)
        print(f"async request while the pool is full: {time.monotonic() - started:.3f} s")
        assert r.status_code == 200
        assert not first.done()
        assert first.result().status_code == 200
    assert "waited 300 ms for a free thread" in server.wait_log("Server Busy")


def test_a_queued_request_is_served_when_a_thread_frees_in_time(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    base = serve(pool_config(tmp_path, MaxThreads=1, AcceptTimeout=5000)).url()
    with ThreadPoolExecutor(2) as ex:
        first = ex.submit(httpx.get, f"{base}/track/300", timeout=30)
        wait_running(base, 1)
        second = ex.submit(httpx.get, f"{base}/track/10", timeout=30)
        assert first.result().status_code == 200
        assert second.result().status_code == 200


def test_active_timeout_answers_503_and_logs(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(pool_config(tmp_path, MaxThreads=2, ActiveTimeout=300))
    base = server.url()
    started = time.monotonic()
    r = httpx.get(f"{base}/sleep/2000", timeout=30)
    took = time.monotonic() - started
    print(f"/sleep/2000 with ActiveTimeout=300 answered {r.status_code} after {took:.3f} s")
    assert r.status_code == 503
    assert r.json()["message"] == "Server Busy"
    text = server.wait_log("ActiveTimeout")
    assert "GET /rest/sleep/2000 ran longer than ActiveTimeout=300 ms" in text
    # a short request is not affected
    assert httpx.get(f"{base}/sleep/10", timeout=30).status_code == 200


def test_async_handlers_are_not_limited_by_the_pool(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    base = serve(pool_config(tmp_path, MaxThreads=1, AcceptTimeout=200)).url()

    def get(path: str) -> httpx.Response:
        return httpx.get(f"{base}{path}", timeout=30)

    with ThreadPoolExecutor(12) as ex:
        started = time.monotonic()
        answers = list(ex.map(get, ["/asleep/500"] * 12))
        took = time.monotonic() - started
    print(f"12 concurrent async requests of 500 ms with MaxThreads=1: {took:.3f} s")
    # with one thread and AcceptTimeout=200 ms, sync handlers would mostly get 503
    assert [a.status_code for a in answers] == [200] * 12


def test_max_threads_bounds_concurrency(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    base = serve(pool_config(tmp_path, MaxThreads=3, AcceptTimeout=20000)).url()

    def get(_: int) -> httpx.Response:
        return httpx.get(f"{base}/track/300", timeout=30)

    with ThreadPoolExecutor(9) as ex:
        answers = list(ex.map(get, range(9)))
    assert [a.status_code for a in answers] == [200] * 9
    stats = httpx.get(f"{base}/stats").json()
    threads = {a.json()["thread"] for a in answers}
    pool_threads = max(a.json()["pool_threads"] for a in answers)
    print(f"max concurrent handlers {stats['max']}, threads used {sorted(threads)}")
    assert stats["max"] == 3
    assert len(threads) <= 3
    assert pool_threads <= 3
    assert all(name.startswith("fwrest-POOL") for name in threads)


def test_sync_handler_concurrency_uses_several_threads(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    # the pool grows from MinThreads=1 when requests queue
    base = serve(pool_config(tmp_path, MaxThreads=4, AcceptTimeout=20000)).url()
    with ThreadPoolExecutor(4) as ex:
        futures = [ex.submit(httpx.get, f"{base}/track/400", timeout=30) for _ in range(4)]
        wait_running(base, 4)
        assert all(f.result().status_code == 200 for f in futures)
    assert httpx.get(f"{base}/stats").json()["max"] == 4
