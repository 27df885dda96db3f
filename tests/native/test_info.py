"""Usage, environment and health routes (SPEC 5): usage and the workers' count on one ``fwrest serve
--workers 2``; environment and plain health in process; the graceful stop on a service of its own.
"""

from __future__ import annotations

import html
import importlib.metadata
import platform
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from fwrest._native import selected
from fwrest.testing import Client
from tests.conftest import ServerProcess, free_config, local_port, serving
from tests.native.support import JSON_ACCEPT, Base, hit_both_workers, send, sqlite_client, wait_for
from tests.server.rawhttp import RawConnection, request_bytes

NUMBERS = ["calls", "total_us", "mean_us", "max_us", "percent"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("info")
    config = free_config(tmp, extra={"HTTPSERVER": {"StateStore": "sqlite"}})
    with serving(config, workers=2) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """The in-process client of the same service (one worker), base URL ending in ``/rest``."""
    with sqlite_client(tmp_path_factory.mktemp("info_inproc"), "info_app") as client:
        yield client


# -- usage time ---------------------------------------------------------------------------------


def figures(base: str) -> dict[str, Any]:
    r = httpx.get(f"{base}/fw/rest/usage/time", headers=JSON_ACCEPT)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = r.json()
    return body


def calls_of(fig: dict[str, Any], endpoint: str) -> int:
    return sum(
        row["calls"]
        for row in fig["entry_points"]
        if row["endpoint"] == endpoint and row["location"] == "/rest"
    )


def reset(base: str) -> None:
    r = httpx.post(f"{base}/fw/rest/usage/time/reset", json={})
    assert r.status_code == 200, r.text
    wait_for(lambda: calls_of(figures(base), "/hello") == 0, 20, "the reset reaching every worker")
    # a worker zeroes its table when it next publishes (each second): wait for every worker
    time.sleep(1.5)


def tables(page: str) -> dict[str, list[list[str]]]:
    """The page's tables: title (the preceding h2) -> rows of cell texts."""
    found = re.findall(r"<h2[^>]*>(.*?)</h2>\s*<table[^>]*>(.*?)</table>", page, re.S)
    return {
        html.unescape(title): [
            [html.unescape(cell) for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)
        ]
        for title, table in found
    }


def test_usage_time_counts_the_calls_of_both_workers_as_json(
    server: ServerProcess, base: str
) -> None:
    reset(base)
    pids = Counter(hit_both_workers(base, minimum=10))  # GET /hello, on both workers
    for _ in range(3):
        assert httpx.get(f"{base}/items/1").status_code == 200
    made = sum(pids.values())
    seen: list[dict[str, Any]] = []

    def counted() -> bool:
        seen.append(figures(base))
        return calls_of(seen[-1], "/hello") >= made and calls_of(seen[-1], "/items/:id") >= 3

    took = wait_for(counted, 20, f"{made} + 3 calls counted", 0.1)
    print(f"{made} calls on workers {dict(pids)} counted {took:.3f} s after the last one")
    fig = seen[-1]
    assert calls_of(fig, "/hello") == made  # not one more, not one less
    assert calls_of(fig, "/items/:id") == 3
    assert set(fig) >= {"total_us", "entry_points", "workers", "thread_pools"}
    for table in ("entry_points", "workers", "thread_pools"):
        rows = fig[table]
        assert rows, table
        for row in rows:
            for key in NUMBERS:
                assert key in row, (table, row)
            assert row["mean_us"] == row["total_us"] // row["calls"], row
            assert row["max_us"] <= row["total_us"], row
            assert row["mean_us"] <= row["max_us"], row
        assert sum(r["calls"] for r in rows) == sum(r["calls"] for r in fig["entry_points"])
        assert sum(r["total_us"] for r in rows) == fig["total_us"]
        assert abs(sum(r["percent"] for r in rows) - 100) < 0.1 * len(rows) + 0.01, rows
    hello = next(r for r in fig["entry_points"] if r["endpoint"] == "/hello")
    assert (hello["method"], hello["thread_pool"]) == ("GET", "POOL")
    # per worker: two workers of this service, each with at least the calls it answered
    per_worker = {int(r["worker"].rsplit(":", 1)[1]): r["calls"] for r in fig["workers"]}
    print(f"per worker: {per_worker}")
    assert set(per_worker) == set(pids)
    for pid, answered in pids.items():
        assert per_worker[pid] >= answered, (pid, per_worker, pids)
    pools = {r["thread_pool"]: r["calls"] for r in fig["thread_pools"]}
    assert pools["POOL"] >= made + 3


def test_usage_time_is_an_html_page_with_three_tables_and_goes_to_the_log(
    server: ServerProcess, base: str
) -> None:
    reset(base)
    pids = Counter(hit_both_workers(base, minimum=6))
    made = sum(pids.values())
    wait_for(lambda: calls_of(figures(base), "/hello") == made, 20, f"{made} calls counted", 0.1)
    mark = len(server.log())
    r = httpx.get(f"{base}/fw/rest/usage/time")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    found = tables(r.text)
    titles = list(found)
    print(titles)
    entry = next(t for t in titles if "entry point" in t.lower())
    worker = next(t for t in titles if "worker" in t.lower())
    pool = next(t for t in titles if "thread pool" in t.lower())
    head = found[entry][0]
    for key in NUMBERS:
        assert key in head, head
    rows = [dict(zip(head, row, strict=True)) for row in found[entry][1:]]
    hello = next(row for row in rows if row["endpoint"] == "/hello")
    assert int(hello["calls"]) == made
    assert int(hello["mean_us"]) == int(hello["total_us"]) // made
    assert len(found[worker]) - 1 == 2  # one row per worker
    assert any(row[0] == "POOL" for row in found[pool][1:])
    logged = server.wait_log("  pool POOL: calls=", since=mark)  # the record's last part
    assert re.search(rf"GET +/rest/hello \[POOL\] calls={made} total=\d+us mean=\d+us", logged)


def test_usage_reset_starts_from_zero_in_every_worker(base: str) -> None:
    hit_both_workers(base, minimum=6)
    wait_for(lambda: calls_of(figures(base), "/hello") >= 6, 20, "calls counted", 0.1)
    reset(base)  # past one publication of every worker: no old figures come back
    fig = figures(base)
    assert calls_of(fig, "/hello") == 0, fig
    assert all(r["calls"] < 10 for r in fig["workers"]), fig["workers"]


# -- environment -------------------------------------------------------------------------------


def env(base: Base, path: str) -> dict[str, Any]:
    r = send(base, "GET", path)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = r.json()
    for key in ("version", "build", "patch"):
        assert isinstance(body[key], str) and body[key], (path, body)
    return body


def test_fw_environment_is_the_installed_fwrest_version(client: Client) -> None:
    body = env(client, "/fw/environment")
    print(body)
    installed = importlib.metadata.version("fwrest")
    assert f"{body['version']}.{body['patch']}" == installed


def test_server_environment_is_the_python_runtime(client: Client) -> None:
    body = env(client, "/server/environment")
    print(body)
    assert body["version"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert body["patch"] == str(sys.version_info.micro)
    assert platform.python_version() in body["build"]
    # the HTTP engine that serves (FWREST_ENGINE; the start line says the same)
    native = selected()[0] is not None
    assert ("the native engine (llhttp " in body["build"]) is native, body
    assert ("httptools " in body["build"]) is not native, body


def test_vendor_environment_gives_both(client: Client) -> None:
    body = env(client, "/vendor/environment")
    fw, server = env(client, "/fw/environment"), env(client, "/server/environment")
    assert fw["version"] in body["version"] and server["version"] in body["version"]
    assert fw["patch"] in body["patch"] and server["patch"] in body["patch"]
    assert fw["build"] in body["build"] and platform.python_version() in body["build"]


# -- health --------------------------------------------------------------------------------------


def test_healthcheck_is_up_with_its_checks(base: str) -> None:
    r = httpx.get(f"{base}/fw/healthcheck")
    assert r.status_code == 200
    body = r.json()
    print(body)
    assert body["status"] == "UP"
    assert set(body) == {"status", "checks"}
    checks = body["checks"]
    assert checks["store"]["status"] == "UP"
    assert checks["workers"]["alive"] == checks["workers"]["expected"] == 2


def test_healthcheck_ok_is_the_text_ok(client: Client) -> None:
    r = client.get("/fw/healthcheck/ok")
    assert r.status_code == 200
    assert r.text == "ok"
    assert r.headers["content-type"].startswith("text/plain")


def test_healthcheck_datetime_is_iso_8601_with_an_offset(client: Client) -> None:
    r = client.get("/fw/healthcheck/datetime")
    assert r.status_code == 200
    print(r.text)
    when = datetime.fromisoformat(r.text.strip())
    assert when.tzinfo is not None and when.utcoffset() is not None
    assert re.search(r"(Z|[+-]\d\d:\d\d)$", r.text.strip())
    now = datetime.now().astimezone()
    assert abs(now - when) < timedelta(minutes=2), (now, when)


def test_healthcheck_during_a_graceful_stop_is_503_or_refused(tmp_path: Path, serve: Any) -> None:
    """A stop with a request in flight: a health check on its way is 503 DOWN (DRAINING), a new
    connection refused, the idle one closed by the stop (the deadlines outlast the test)."""
    port_config = local_port(KeepAliveTimeout=60000, HeaderTimeout=60000)
    config = free_config(
        tmp_path,
        servers={"HTTP_REST": port_config},
        extra={"HTTPSERVER": {"GracefulTimeout": 20000}},
    )
    proc = serve(config)
    port = proc.ports["HTTP_REST"]
    # an idle keep-alive connection, answered UP before the stop
    idle = RawConnection(port, timeout=30)
    worker = psutil.Process(idle.request("GET", "/rest/hello").json()["pid"])
    before = idle.request("GET", "/rest/fw/healthcheck")
    assert before.status == 200 and before.json()["status"] == "UP"
    # a slow request in flight
    slow: dict[str, Any] = {}

    def call_slow() -> None:
        slow["r"] = httpx.get(f"{proc.url()}/sleep/2500", timeout=30)

    thread = threading.Thread(target=call_slow)
    thread.start()
    # a health check whose head is on the way when the stop comes
    partial = RawConnection(port, timeout=30)
    whole = request_bytes("GET", "/rest/fw/healthcheck")
    partial.send(whole[:-2])

    def accepted() -> bool:  # the worker holds all three connections (none in a backlog)
        conns = worker.net_connections("tcp")
        return sum(c.laddr.port == port and c.status == "ESTABLISHED" for c in conns) >= 3

    wait_for(accepted, 30, "the worker to accept the three connections")
    proc.signal(signal.SIGTERM)
    signalled = time.monotonic()

    # a new connection is refused or closed unanswered: the drain has begun
    def refused() -> bool:
        try:
            with RawConnection(port, timeout=30) as fresh:
                fresh.send(request_bytes("GET", "/rest/fw/healthcheck"))
                return fresh.closed_by_server()  # False: answered (the stop is not seen yet)
        except OSError:
            return True  # refused or reset

    wait_for(refused, 30, "new connections refused")
    # the request that was on its way when the stop came: 503 DOWN (draining)
    partial.send(whole[-2:])
    during = partial.read_response()
    print(f"health check during the stop: {during.status} {during.body!r}")
    assert during.status == 503
    body = during.json()
    assert body["status"] == "DOWN"
    assert body["checks"]["shutdown"]["status"] == "DRAINING"
    # closed by the stop (KeepAliveTimeout is 60 s): its next health check cannot be UP
    idle.wait_closed()
    print(f"idle keep-alive connection closed {time.monotonic() - signalled:.3f} s after SIGTERM")
    assert not idle.send(request_bytes("GET", "/rest/fw/healthcheck")) or idle.closed_by_server()
    thread.join(30)
    assert slow["r"].status_code == 200  # the request in flight finished
    assert proc.proc.wait(60) == 0
    print(f"exited 0 {time.monotonic() - signalled:.3f} s after SIGTERM")
    # closed by the stop once the slow request ended, not by GracefulTimeout's end
    assert "still busy after GracefulTimeout" not in proc.log()
    idle.close()
    partial.close()
