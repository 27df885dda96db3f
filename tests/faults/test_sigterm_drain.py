"""SIGTERM with 50 requests in flight (SPEC 1, 7, issue 9), ``--workers 2``, 25 on a ``def`` and 25
on an ``async`` handler, one second each: all 200, the supervisor exits 0, no worker left, the port
free. "In flight" is known: each handler appends a line to a file (``UserData``) and the signal goes
at 50 lines. With ``--workers 1`` and a monitor, the drain is observable (SPEC 5, 13.3)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import (
    ServerProcess,
    free_config,
    free_port,
    local_port,
    serving,
    wait_children,
    wait_for,
)
from tests.faults.support import FAULT_APP, port_is_free
from tests.server.rawhttp import RawConnection, request_bytes

IN_FLIGHT = 50
SLEEP_MS = 1000
HANG_GUARD_S = 30.0


def _config(tmp_path: Path, started_file: Path, extra: dict[str, dict[str, object]]) -> Path:
    """The fault app on one port, each request started noted in ``started_file``."""
    servers = {"HTTP_REST": local_port(UserData={"started_file": str(started_file)})}
    extra = {"HTTPSERVER": {"GracefulTimeout": 20000}, **extra}
    return free_config(tmp_path, app=FAULT_APP, servers=servers, extra=extra)


def test_sigterm_with_50_requests_in_flight_completes_them_all_and_exits_0(
    tmp_path: Path,
) -> None:
    started_file = tmp_path / "started.txt"
    config = _config(tmp_path, started_file, {"POOL": {"MaxThreads": 64}})
    with serving(config, workers=2) as proc:
        base, port = proc.url(), proc.ports["HTTP_REST"]
        workers = wait_children(proc.proc.pid, 2, 15)
        paths = [f"/slow/{SLEEP_MS}", f"/aslow/{SLEEP_MS}"] * (IN_FLIGHT // 2)
        limits = httpx.Limits(max_connections=IN_FLIGHT + 10)
        with (
            ThreadPoolExecutor(IN_FLIGHT) as pool,
            httpx.Client(limits=limits, timeout=HANG_GUARD_S) as client,
        ):
            futures = [pool.submit(client.get, base + path) for path in paths]
            deadline = time.monotonic() + HANG_GUARD_S
            lines: list[str] = []
            while len(lines) < IN_FLIGHT and time.monotonic() < deadline:
                lines = started_file.read_text().splitlines() if started_file.exists() else []
                time.sleep(0.005)
            assert len(lines) == IN_FLIGHT, f"only {len(lines)} requests ever started"
            signalled = time.monotonic()
            proc.signal(signal.SIGTERM)
            answers = [f.result(HANG_GUARD_S) for f in futures]
            answered = time.monotonic() - signalled
        code = proc.proc.wait(HANG_GUARD_S)
        exited = time.monotonic() - signalled
        per_worker = Counter(line.split()[1] for line in lines)
        kinds = Counter(line.split()[0] for line in lines)
        print(
            f"{IN_FLIGHT} requests in flight ({dict(kinds)}; per worker pid {dict(per_worker)}) "
            f"at SIGTERM: statuses {dict(Counter(a.status_code for a in answers))}; all "
            f"answered {answered:.3f} s and the supervisor exited {code} {exited:.3f} s "
            "after the signal"
        )
        assert [a.status_code for a in answers] == [200] * IN_FLIGHT
        assert all(a.json()["slept"] == SLEEP_MS for a in answers)
        assert {int(pid) for pid in per_worker} <= workers
        assert code == 0
        assert not [pid for pid in workers if psutil.pid_exists(pid)], "a worker outlived the stop"
        assert port_is_free(port)
        assert "fwrest: stopped" in proc.stdout_lines


@pytest.mark.parametrize("workers", [0, 2])
def test_a_second_signal_forces_the_stop(tmp_path: Path, workers: int) -> None:
    """SPEC 7: "a second signal forces", with or without a supervisor (``--workers 0``): a
    request sleeping 10 s does not hold the stop; exit 0, the port free, the pid file gone."""
    started_file = tmp_path / "started.txt"
    pid_file = tmp_path / "fwrest.pid"
    config = _config(tmp_path, started_file, {})
    with serving(config, workers=workers, args=("--pid-file", str(pid_file))) as proc:
        port = proc.ports["HTTP_REST"]
        with ThreadPoolExecutor(1) as pool, httpx.Client(timeout=HANG_GUARD_S) as client:
            pending = pool.submit(client.get, proc.url() + "/slow/10000")
            wait_for(started_file.exists, 10, "the slow request started")
            proc.signal(signal.SIGTERM)
            wait_for(lambda: "stopping: draining" in "\n".join(proc.stdout_lines), 10, "drain")
            began = time.monotonic()
            proc.signal(signal.SIGTERM)
            code = proc.proc.wait(HANG_GUARD_S)
            took = time.monotonic() - began
            with pytest.raises(httpx.HTTPError):
                pending.result()  # dropped: not served
        print(f"--workers {workers}: stopped {took:.2f} s after the second signal, exit {code}")
        assert code == 0
        assert took < 5, took  # not the 10 s request, nor GracefulTimeout's 20 s
        assert "second signal: forcing the stop" in "\n".join(proc.stdout_lines)
        assert port_is_free(port) and not pid_file.exists()


def test_the_drain_is_observable_on_open_connections_and_the_monitor_port(
    tmp_path: Path,
) -> None:
    """Until the request in flight ends: the monitor listens, ready 503; a kept-alive request gets
    ``/fw/healthcheck`` 503 and ``close``, a pipelined one after it; new connections refused (SPEC
    1)."""
    started_file = tmp_path / "started.txt"
    mon_port = free_port()
    monitor = {"Enable": 1, "HostName": "127.0.0.1", "Port": mon_port}
    config = _config(tmp_path, started_file, {"APP_MONITOR": monitor})
    proc = ServerProcess(config, workers=1).wait_ready()
    conns: list[RawConnection] = []
    try:
        port = proc.ports["HTTP_REST"]
        service, mon, piped = (RawConnection(p, timeout=10) for p in (port, mon_port, port))
        conns += (service, mon, piped)
        # kept-alive connections, idle when the signal comes
        assert service.request("GET", "/rest/fw/healthcheck").status == 200
        assert mon.request("GET", "/api/health/ready").status == 200
        piped.send(request_bytes("GET", "/rest/slow/2000") + request_bytes("GET", "/rest/pid"))
        wait_for(started_file.exists, HANG_GUARD_S, "the slow request to start")
        signalled = time.monotonic()
        proc.signal(signal.SIGTERM)

        def monitor_ready() -> int:  # a new connection: the monitor's port still listens
            with RawConnection(mon_port, timeout=10) as fresh:
                return fresh.request("GET", "/api/health/ready").status

        wait_for(lambda: monitor_ready() == 503, 5, "the monitor's ready 503 once draining")
        health = service.request("GET", "/rest/fw/healthcheck")
        assert health.status == 503, health.body
        assert health.json()["status"] == "DOWN"
        assert health.header("connection") == "close"
        assert service.closed_by_server()
        ready = mon.request("GET", "/api/health/ready")
        assert ready.status == 503, ready.body
        assert ready.json()["checks"]["draining"] == {"status": "DOWN"}
        assert mon.request("GET", "/api/health/live").status == 200
        with pytest.raises(ConnectionRefusedError):
            RawConnection(port, timeout=10).close()

        slow, behind = piped.read_response(), piped.read_response()
        drained = time.monotonic() - signalled
        assert (slow.status, slow.json()["slept"]) == (200, 2000)
        assert behind.status == 200
        assert behind.header("connection") == "close"
        assert piped.closed_by_server()
        code = proc.proc.wait(HANG_GUARD_S)
        exited = time.monotonic() - signalled
        print(f"in flight answered {drained:.3f} s, exit {code} {exited:.3f} s after SIGTERM")
        assert code == 0
        assert mon.closed_by_server()
        assert port_is_free(mon_port)
        assert exited < 5  # the idle connections did not hold the drain
    finally:
        for conn in conns:
            conn.close()
        proc.stop()
