"""Probes (SPEC 13.3) on a port and the monitor. In process: the answers and bodies,
``NativeRoutes`` names, the ``MinThreads`` check with a real pool. On a real ``fwrest serve`` and
Redis with a credentialed monitor: probes need none; ready is 503 while Redis is stopped and while
draining after SIGTERM, 200 again after; live and started 200 throughout."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwrest.config.model import EnvironmentConfig, ThreadPoolConfig
from fwrest.server.pool import ThreadPool
from fwrest.server.readiness import Probes
from fwrest.testing import Client
from tests.conftest import free_config, free_port, module_config, wait_for
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
    assert checks["workers"] == {"status": "UP", "alive": 1, "expected": 1}


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
    probes = Probes(None, lambda: (1, 1), lambda: [pool], lambda: False)
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
    probes = Probes(None, lambda: (2, 2), lambda: [], lambda: False)
    down = {"status": "DOWN"}
    assert probes.answer("started") == (503, {**down, "checks": {"started": down}})
    status, body = probes.answer("ready")
    assert status == 503 and set(body["checks"]) == {"started"}
    probes.started = True
    assert probes.answer("started")[0] == probes.answer("ready")[0] == 200
    one_of_two = Probes(None, lambda: (1, 2), lambda: [], lambda: False)
    assert one_of_two.answer("ready")[1]["checks"]["workers"] == {**down, "alive": 1, "expected": 2}


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
