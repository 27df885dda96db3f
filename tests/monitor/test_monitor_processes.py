"""Which processes the monitor counts (SPEC 5: the whole service, and each worker by name), on real
servers against ``/proc``: a worker's name is the log's, after a replacement too; with
``fwrest.start()`` the calling process alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import free_config, ready_workers, wait_for, wait_ready_workers
from tests.monitor.support import free_port, monitor_section, status_kb, values
from tests.monitor.test_monitor import GROWTH_KB, MEMORY_APP


def test_worker_names_follow_the_logs_numbers_after_a_replacement(
    tmp_path: Path, serve: Any
) -> None:
    port = free_port()
    config = free_config(tmp_path, app=MEMORY_APP, extra={"APP_MONITOR": monitor_section(port)})
    proc = serve(config, workers=2)
    base = f"http://127.0.0.1:{port}/api/server/metrics"
    # both ready lines: they may follow "fwrest: ready" (worker 2's alone left pids[1] missing)
    pids = wait_ready_workers(proc, 2, timeout=60)  # hang guard: a loaded machine starts slowly
    print("workers:", pids)

    # worker 2 keeps 100 MB (a request lands on either worker: ask until worker 2 answered)
    def kept_by_worker_2() -> bool:
        resp = httpx.get(proc.url() + "/grow", timeout=30)
        assert resp.status_code == 200, resp.text
        return bool(resp.json()["pid"] == pids[2])

    wait_for(kept_by_worker_2, 60, "a request on worker 2")
    # worker 1 dies; its replacement's pid is above worker 2's
    since = len(proc.log())
    os.kill(pids[1], signal.SIGKILL)
    proc.wait_log("worker 1 ready", timeout=60, since=since)
    pids = ready_workers(proc.log())
    print("workers after the replacement:", pids)
    assert pids[1] > pids[2]
    names = ("memory_resident_worker_1", "memory_resident_worker_2")
    listed = httpx.get(base, timeout=30).json()["metrics"][1]["names"]
    assert [n for n in listed if n.startswith("memory_resident_worker_")] == list(names)
    got = values(base, *names)
    proc_rss = {n: status_kb(pids[n], "VmRSS") for n in (1, 2)}
    print("monitor:", got, "/proc VmRSS by worker:", proc_rss)
    assert got["memory_resident_worker_2"] >= GROWTH_KB, got
    assert got["memory_resident_worker_1"] < GROWTH_KB, got
    for n in (1, 2):
        assert abs(got[f"memory_resident_worker_{n}"] - proc_rss[n]) <= 8 * 1024, (got, proc_rss)


PROGRAM = textwrap.dedent(
    """
    import json
    import subprocess
    import sys
    import time

    import httpx

    import fwrest

    # a child of the calling program that is no part of the service: 200 MB resident
    kid = subprocess.Popen(
        [sys.executable, "-c", "b = bytearray(b'1') * (200 << 20); import time; time.sleep(60)"]
    )
    time.sleep(2)
    service = fwrest.start(sys.argv[1])
    try:
        base = sys.argv[2]
        listed = httpx.get(base, timeout=10).json()["metrics"][1]["names"]
        entries = httpx.get(base + "?memory_resident&memory_resident_worker_1", timeout=10)
        own, kid_rss = (
            next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS:"))
            for pid in ("self", kid.pid)
        )
        print(json.dumps({"listed": listed, "entries": entries.json()[0]["metrics"],
                          "own": own, "kid": kid_rss}))
    finally:
        service.stop()
        kid.kill()
    """
)


def test_start_counts_the_calling_process_alone(tmp_path: Path) -> None:
    port = free_port()
    config = free_config(tmp_path, extra={"APP_MONITOR": monitor_section(port)})
    (tmp_path / "program.py").write_text(PROGRAM)
    base = f"http://127.0.0.1:{port}/api/server/metrics"
    command = [sys.executable, "program.py", str(config), base]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    print(got)
    assert got["kid"] >= 150 * 1024  # the child really holds its 200 MB
    assert not [n for n in got["listed"] if "_worker_" in n], got["listed"]
    resident, worker = got["entries"]
    assert worker == {"name": "memory_resident_worker_1", "error": "unknown metric"}
    # the service is this process: its RSS, not its child's beside it
    assert abs(resident["value"] - got["own"]) <= 16 * 1024, (resident, got["own"])
