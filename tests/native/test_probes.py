"""Probes (SPEC 13.3) on a port and the monitor. In process: the answers and bodies,
``NativeRoutes`` names, the ``MinThreads`` check with a real pool. On a real ``fwrest serve`` and
Redis with a credentialed monitor: probes need none; ready is 503 while Redis is stopped and while
draining after SIGTERM, 200 again after; live and started 200 throughout. On ``fwrest serve
--workers 2`` and ``fwrest.start(workers=2)`` with one worker slow in ``OnStart``: started and ready
503 on the port and the monitor until every worker finished starting; a replacement in its start
makes ready 503, started stays 200."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import fwrest
from fwrest.config.model import EnvironmentConfig, ThreadPoolConfig
from fwrest.server.pool import ThreadPool
from fwrest.server.readiness import Probes
from fwrest.testing import Client
from tests.conftest import (
    APP_SOURCE,
    ServerProcess,
    free_config,
    free_port,
    local_port,
    module_config,
    wait_for,
    wait_ready_workers,
)
from tests.monitor.support import monitor_section
from tests.native.support import in_process, sqlite_client
from tests.redis_support import RedisServer, started
from tests.server.rawhttp import RawConnection, request_bytes

PROBES = ("live", "ready", "started")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with sqlite_client(tmp_path_factory.mktemp("probes"), "probes_app") as http:
        yield http


def test_live_started_and_ready_answer_200(client: Client) -> None:
    for name in ("live", "started"):
        r = client.get(f"/fw/healthcheck/{name}")
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "UP"}

    def ready() -> bool:  # the store's first ping runs as the worker starts
        return client.get("/fw/healthcheck/ready").status_code == 200

    wait_for(ready, 5, "ready")
    body = client.get("/fw/healthcheck/ready").json()
    assert body["status"] == "UP"
    checks = body["checks"]
    assert set(checks) == {"store", "workers", "threads", "started", "draining"}
    assert all(check["status"] == "UP" for check in checks.values()), checks
    assert checks["store"]["kind"] == "sqlite" and checks["store"]["ms"] >= 0
    assert checks["workers"] == {"status": "UP", "alive": 1, "ready": 1, "expected": 1}


def test_the_probes_are_in_the_listing_and_follow_native_routes(tmp_path: Path) -> None:
    config = module_config(
        tmp_path,
        "probes_disabled_app",
        extra={"HTTP_REST": {"FwData": {"NativeRoutes": {"disable": ["healthcheck/ready"]}}}},
    )
    with in_process(config, "HTTP_REST") as http:
        assert http.get("/fw/healthcheck/ready").status_code == 404
        assert http.get("/fw/healthcheck/live").status_code == 200
        listed = str(http.get("/fw/rest/list/service").json())
    assert "/fw/healthcheck/live" in listed and "/fw/healthcheck/started" in listed
    assert "healthcheck/ready" not in listed


def test_ready_is_503_while_a_pool_has_fewer_than_min_threads() -> None:
    loop = asyncio.new_event_loop()
    config = ThreadPoolConfig(
        name="P", environment=EnvironmentConfig(name="E", repository=()), min_threads=3
    )
    pool = ThreadPool(config, loop)
    probes = Probes(None, lambda: (1, 1, 1), lambda: [pool], lambda: False)
    probes.started = True
    try:
        assert pool.threads == 3
        assert probes.answer("ready")[0] == 200
        pool.shutdown()  # its threads end: fewer than MinThreads
        wait_for(lambda: pool.threads < 3, 5, "the threads to end")
        status, body = probes.answer("ready")
        assert status == 503
        assert body["status"] == "DOWN"
        assert set(body["checks"]) == {"threads"}
        assert body["checks"]["threads"]["pools"]["P"]["min"] == 3
        assert probes.answer("live")[0] == 200
    finally:
        loop.close()


def test_ready_and_started_are_503_before_the_start_finished() -> None:
    probes = Probes(None, lambda: (2, 2, 2), lambda: [], lambda: False)
    down = {"status": "DOWN"}
    assert probes.answer("started") == (503, {**down, "checks": {"started": down}})
    status, body = probes.answer("ready")
    assert status == 503 and set(body["checks"]) == {"started"}
    probes.started = True
    assert probes.answer("started")[0] == probes.answer("ready")[0] == 200
    one_of_two = Probes(None, lambda: (1, 1, 2), lambda: [], lambda: False)
    one_of_two.started = True
    workers = {**down, "alive": 1, "ready": 1, "expected": 2}
    assert one_of_two.answer("ready")[1]["checks"] == {"workers": workers}
    # both alive, one still in its start: ready 503, and started until every worker started
    starting = Probes(None, lambda: (2, 1, 2), lambda: [], lambda: False, lambda: False)
    starting.started = True
    workers = {**down, "alive": 2, "ready": 1, "expected": 2}
    assert starting.answer("ready") == (503, {**down, "checks": {"workers": workers}})
    assert starting.answer("started") == (503, {**down, "checks": {"workers": workers}})


# -- a real service: Redis stopped, draining, the monitor's port ---------------------------------


def _get(url: str, **kw: Any) -> httpx.Response:
    return httpx.get(url, timeout=10, **kw)


def test_ready_follows_the_store_and_the_drain(tmp_path: Path, serve: Any) -> None:
    with started(RedisServer(tmp_path)) as redis:
        mon_port = free_port()
        nobody = {"scheme": "basic", "OnAuth": "app.nobody"}
        config = free_config(
            tmp_path,
            extra={
                "HTTPSERVER": {"StateStore": redis.url, "GracefulTimeout": 10000},
                "APP_MONITOR": monitor_section(mon_port, FwData={"Authorization": nobody}),
            },
        )
        (tmp_path / "app.py").write_text(
            (tmp_path / "app.py").read_text()
            + "\n\ndef nobody(user, password):\n    return False\n"
        )
        proc = serve(config)
        base = f"{proc.url()}/fw/healthcheck"
        mon = f"http://127.0.0.1:{mon_port}/api/health"
        urls = {"port": base, "monitor": mon}

        def status(where: str, name: str) -> int:
            return _get(f"{urls[where]}/{name}").status_code

        def all_ready(expect: int) -> bool:
            return all(status(w, "ready") == expect for w in urls)

        wait_for(lambda: all_ready(200), 10, "ready on both ports")
        for where in urls:
            for name in PROBES:
                r = _get(f"{urls[where]}/{name}")
                assert r.status_code == 200, (where, name, r.text)
                assert r.headers["x-request-id"]
        # the monitor asks for credentials, its probes do not
        assert _get(f"http://127.0.0.1:{mon_port}/api/server/metrics").status_code == 401
        assert _get(f"{mon}/ready").json()["checks"]["store"]["kind"] == "redis"

        redis.stop()
        stopped = time.monotonic()
        wait_for(lambda: all_ready(503), 10, "ready 503 on both ports")
        print(f"ready 503 {time.monotonic() - stopped:.2f} s after Redis stopped")
        for where in urls:
            body = _get(f"{urls[where]}/ready").json()
            assert body["status"] == "DOWN"
            assert set(body["checks"]) == {"store"}, body
            assert body["checks"]["store"]["status"] == "DOWN"
            assert status(where, "live") == status(where, "started") == 200

        redis.start()  # the same port
        wait_for(lambda: all_ready(200), 10, "ready again once Redis is back")

        # draining: a request in flight, a probe whose head is on its way when SIGTERM comes
        slow: dict[str, httpx.Response] = {}
        thread = threading.Thread(
            target=lambda: slow.setdefault("r", httpx.get(f"{proc.url()}/sleep/2500", timeout=30))
        )
        thread.start()
        partial = RawConnection(proc.ports["HTTP_REST"], timeout=10)
        whole = request_bytes("GET", "/rest/fw/healthcheck/ready")
        partial.send(whole[:-2])
        time.sleep(0.5)
        proc.signal(signal.SIGTERM)
        time.sleep(0.3)
        partial.send(whole[-2:])
        during = partial.read_response()
        print(f"ready while draining: {during.status} {during.body!r}")
        assert during.status == 503
        assert during.json()["checks"]["draining"] == {"status": "DOWN"}
        partial.close()
        thread.join(30)
        assert slow["r"].status_code == 200  # the request in flight finished
        assert proc.proc.wait(30) == 0


# -- a real service of two workers, one slow to start ------------------------------------------

SLOW_S = 4.0
SLOW_START = """

def slow_start():
    # OnStart: the first worker to call it (the one that creates MARK) sleeps, then writes DONE;
    # another returns at once. Removing MARK makes the next caller (a replacement) slow again.
    try:
        fd = os.open(MARK, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    time.sleep(SLOW_S)
    with open(DONE, "w") as fh:
        fh.write(str(os.getpid()))
"""
UP_2 = {"status": "UP", "alive": 2, "ready": 2, "expected": 2}


def _answer(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5)
    except httpx.TransportError:  # the worker that accepted it was killed
        return None


def _slow_service(tmp_path: Path, module: str) -> tuple[Path, dict[str, str], Path, Path]:
    """A service (its app in ``module``) whose first worker's ``OnStart`` takes
    :data:`SLOW_S`, on fixed ports (a probe is asked before ``fwrest serve`` names them): its
    config, the URLs of ``ready`` and ``started`` on the port and the monitor, and the paths
    of MARK and DONE."""
    port, mon_port = free_port(), free_port()
    mark, done = tmp_path / "slow.mark", tmp_path / "slow.done"
    config = module_config(
        tmp_path,
        module,
        servers={"HTTP_REST": local_port(Port=port)},
        extra={
            "APP_MONITOR": monitor_section(mon_port),
            "POOL": {"OnStart": f"{module}.slow_start"},
        },
        app=APP_SOURCE
        + f"\nMARK = {str(mark)!r}\nDONE = {str(done)!r}\nSLOW_S = {SLOW_S}\n"
        + SLOW_START,
    )
    urls = {
        f"{where} {name}": f"{base}/{name}"
        for where, base in (
            ("port", f"http://127.0.0.1:{port}/rest/fw/healthcheck"),
            ("monitor", f"http://127.0.0.1:{mon_port}/api/health"),
        )
        for name in ("ready", "started")
    }
    return config, urls, mark, done


def _until_done(urls: dict[str, str], done: Path, started: int = 503) -> dict[str, int]:
    """Ask every probe until DONE exists: each answer given before the slow worker finished its
    start (DONE is written before it serves, so DONE still absent after the answer: the answer
    came first) is a 503 naming one worker of two started, but ``started`` on a ``started``
    probe. How many answers each probe gave."""
    early: dict[str, int] = {}
    while not done.exists():
        for what, url in urls.items():
            r = _answer(url)
            if r is None or done.exists():
                continue
            early[what] = early.get(what, 0) + 1
            if what.endswith("started") and started == 200:
                assert r.status_code == 200, (what, r.text)
                continue
            assert r.status_code == 503, (what, r.text)
            workers = r.json()["checks"]["workers"]
            assert workers["status"] == "DOWN", (what, r.text)
            assert (workers["ready"], workers["expected"]) == (1, 2), (what, r.text)
        time.sleep(0.05)
    print(f"answers before the slow worker finished starting: {early}")
    return early


def _all_200(urls: dict[str, str]) -> bool:
    return all(getattr(_answer(url), "status_code", 0) == 200 for url in urls.values())


def test_started_and_ready_wait_for_every_worker_to_finish_starting(tmp_path: Path) -> None:
    """``fwrest serve --workers 2`` whose first worker's ``OnStart`` takes 4 s: on the port and
    the monitor, ``started`` and ``ready`` are 503 (``"ready": 1`` of 2) until it finished its
    start, though the other worker answers and both are alive; then 200. A replacement in its
    start makes ``ready`` 503 again, ``started`` stays 200."""
    config, urls, mark, done = _slow_service(tmp_path, "app")
    proc = ServerProcess(config, workers=2)
    try:
        wait_for(lambda: _answer(urls["monitor ready"]) is not None, 15, "a worker to answer")
        assert set(_until_done(urls, done)) == set(urls)  # SLOW_S: every probe was asked
        proc.wait_ready()
        wait_for(lambda: _all_200(urls), 10, "every probe 200 once both workers started")
        body = _answer(urls["monitor ready"]).json()  # type: ignore[union-attr]
        assert body["checks"]["workers"] == UP_2

        # a replacement in its start: ready 503 until it finished, started stays 200
        slow_pid = int(done.read_text())
        fast_pid = next(p for p in wait_ready_workers(proc, 2).values() if p != slow_pid)
        mark.unlink()
        done.unlink()
        os.kill(fast_pid, signal.SIGKILL)

        def replacing() -> bool:
            r = _answer(urls["monitor ready"])
            return r is not None and r.status_code == 503

        wait_for(replacing, 10, "ready 503 while the replacement starts")
        assert _until_done(urls, done, started=200)
        wait_for(lambda: _all_200(urls), 10, "every probe 200 once the replacement started")
    finally:
        proc.stop()


def test_start_with_workers_answers_the_probes_as_serve_does(tmp_path: Path) -> None:
    """``fwrest.start(config, workers=2)`` (its supervisor a child process): the probes are
    503 while it starts, its slow worker in ``OnStart``, and 200 on every one as it returns."""
    # start() loads the config in this process too: a module name no other test imported
    config, urls, _, done = _slow_service(tmp_path, "probes_slow_start_app")
    result: dict[str, Any] = {}

    def start() -> None:
        try:
            result["service"] = fwrest.start(config, workers=2)
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=start)
    thread.start()
    try:
        answered = lambda: _answer(urls["monitor ready"]) is not None  # noqa: E731
        wait_for(lambda: "error" in result or answered(), 15, "a worker to answer")
        assert "error" not in result, result
        assert set(_until_done(urls, done)) == set(urls)  # SLOW_S: every probe was asked
        thread.join(30)
        assert "service" in result, result
        for what, url in urls.items():  # as start() returns, without waiting
            r = _answer(url)
            assert r is not None and r.status_code == 200, (what, r and r.text)
            if what.endswith("ready"):
                assert r.json()["checks"]["workers"] == UP_2, (what, r.text)
    finally:
        thread.join(30)
        if "service" in result:
            result["service"].stop()
