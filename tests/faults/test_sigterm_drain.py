"""SIGTERM with 50 requests in flight (SPEC 1, 7 "Processes", issue 9).

``--workers 2``; 50 requests of one second each (25 on a ``def`` handler in the thread pool,
25 on an ``async`` one on the event loop) are in flight when the supervisor gets SIGTERM: every
one of them completes with 200, the supervisor exits 0, no worker is left, the port is free.

"In flight" is known, not guessed: each handler appends a line to a file (named in
``UserData``) when it starts, and the signal is sent once the file has 50 lines.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

from tests.conftest import ServerProcess, free_config
from tests.faults.support import FAULT_APP, port_is_free, wait_workers

IN_FLIGHT = 50
SLEEP_MS = 1000
HANG_GUARD_S = 30.0


def test_sigterm_with_50_requests_in_flight_completes_them_all_and_exits_0(
    tmp_path: Path,
) -> None:
    started_file = tmp_path / "started.txt"
    config = free_config(
        tmp_path,
        app=FAULT_APP,
        servers={
            "HTTP_REST": {
                "HostName": "127.0.0.1",
                "Port": 0,
                "Locations": "ROOT",
                "UserData": {"started_file": str(started_file)},
            }
        },
        extra={"POOL": {"MaxThreads": 64}, "HTTPSERVER": {"GracefulTimeout": 20000}},
    )
    proc = ServerProcess(config, workers=2).wait_ready()
    try:
        base, port = proc.url(), proc.ports["HTTP_REST"]
        workers = wait_workers(proc.proc.pid, 2)
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
    finally:
        proc.stop()
