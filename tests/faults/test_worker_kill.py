"""``kill -9`` of a worker under load (SPEC 7, issue 9): eight threads send ``Connection: close``
requests to 20-40 ms handlers of both kinds on ``--workers 2``, so both workers always have some in
flight. Only requests in flight on the killed worker fail (started before, ended after, at most one
per thread); every later request is 200; a replacement answers within 3 s. Figures printed."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import httpx

from tests.conftest import (
    ServerProcess,
    alive,
    children,
    free_config,
    serving,
    wait_children,
    wait_for,
)
from tests.faults.support import FAULT_APP, Outcome, Recorder, figures

LOAD_THREADS = 8
BEFORE_S = 1.5  # load before the kill
AFTER_S = 4.0  # load after it
REPLACEMENT_S = 3.0  # SPEC/issue: a replacement serves within 3 s
AFTER_KILL_S = 0.05  # a request that started this long after the kill never met the victim


def test_kill_9_of_a_worker_under_load_fails_only_its_requests_in_flight(
    tmp_path: Path,
) -> None:
    config = free_config(tmp_path, app=FAULT_APP, extra={"POOL": {"MaxThreads": 16}})
    proc = ServerProcess(config, workers=2).wait_ready()
    try:
        base = proc.url()
        before = wait_children(proc.proc.pid, 2, 15)
        clients = [httpx.Client(timeout=15) for _ in range(LOAD_THREADS)]

        def one(i: int) -> Outcome:
            path = f"/slow/{20 + i * 3}" if i % 2 == 0 else f"/aslow/{20 + i * 3}"
            started = time.monotonic()
            try:
                response = clients[i].get(base + path, headers={"Connection": "close"})
            except httpx.HTTPError as exc:
                return Outcome(path, started, time.monotonic(), None, type(exc).__name__)
            pid = response.json().get("pid") if response.status_code == 200 else None
            return Outcome(path, started, time.monotonic(), response.status_code, pid=pid)

        load = Recorder()
        load.run("load", LOAD_THREADS, one)
        time.sleep(BEFORE_S)
        victim = min(before)
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        time.sleep(AFTER_S)
        outcomes = load.stop()
        for client in clients:
            client.close()

        failed = [o for o in outcomes if o.status != 200]
        after = [o for o in outcomes if o.started > killed_at + AFTER_KILL_S]
        replacement = [o for o in after if o.status == 200 and o.pid not in before]
        first_new = min((o.ended for o in replacement), default=None)
        pids = Counter(o.pid for o in outcomes if o.status == 200)
        print(
            f"{len(outcomes)} requests by {LOAD_THREADS} threads; worker {victim} killed; "
            f"{len(failed)} failed: {Counter((o.status, o.error) for o in failed)}; "
            f"failed requests lasted {figures(o.took for o in failed)}"
        )
        print(f"answers per pid: {dict(pids)}")
        if first_new is not None:
            print(f"replacement first answered {first_new - killed_at:.3f} s after the kill")

        for o in failed:  # only requests in flight at the kill fail
            assert o.started <= killed_at + AFTER_KILL_S and o.ended >= killed_at, o
        assert len(failed) <= LOAD_THREADS, failed
        assert [o for o in after if o.status != 200] == []
        assert victim not in {o.pid for o in after}
        assert first_new is not None, f"no replacement answered:\n{proc.log()}"
        assert first_new - killed_at <= REPLACEMENT_S
        assert len(after) > 50  # the service kept serving after the kill
        now = wait_children(proc.proc.pid, 2, 15)
        assert victim not in now and len(now & before) == 1
        text = proc.wait_log(f"(pid {victim}) died")
        assert "signal 9" in text and "starting a replacement" in text
    finally:
        code = proc.stop()
    assert code == 0


def test_a_replacement_worker_reads_the_files_general_as_it_is_now(tmp_path: Path) -> None:
    # [GENERAL] edited after the start, due in an hour: a replacement reads it at once
    config = free_config(tmp_path, general={"rest_reload_time": 3600, "rest_log_stringsize": 60})
    with serving(config, workers=2) as proc:
        base = proc.url()
        before = wait_children(proc.proc.pid, 2, 15)
        doc = json.loads(config.read_text())
        doc["GENERAL"]["rest_log_stringsize"] = 77
        config.write_text(json.dumps(doc, indent=2))
        victim = min(before)
        os.kill(victim, signal.SIGKILL)

        def replaced() -> bool:
            live = {kid for kid in children(proc.proc.pid) if alive(kid)}
            return victim not in live and len(live) >= 2

        wait_for(replaced, 15, "a replacement worker")

        def file_value() -> int:
            headers = {"Accept": "application/json", "Connection": "close"}
            response = httpx.get(f"{base}/fw/rest/config", headers=headers, timeout=10)
            assert response.status_code == 200, response.text
            return int(response.json()["settings"]["rest_log_stringsize"]["file"])

        seen = Counter(file_value() for _ in range(40))
        print("file value of rest_log_stringsize seen over 40 requests:", dict(seen))
        assert seen[77] > 0  # the replacement: the file as it is now
        assert set(seen) <= {60, 77}  # the other worker re-reads within the hour only
