"""The harness's at-once measurement (case 7) and case 8's per-core and per-worker figures, on real
servers and wrk (installed by ``.ci/run``): nothing timed against a limit, but the figures must be
there to the nanosecond, and the ratio come from them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench import report, servers
from bench.run import (
    BASIC_FW_ASYNC,
    Scratch,
    Settings,
    Target,
    fw,
    measure_throughput,
    run_case,
    scaling_case,
)


def test_wrk_is_installed() -> None:
    assert shutil.which("wrk"), "Debian's wrk is needed (apt-get install wrk)"


def test_two_servers_measured_at_once(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    s = Settings(warmup_s=1.0, duration_s=1.0, runs=1, quick=True)
    s.server_cpus, s.wrk_cpus = str(cores[0]), str(cores[-1])
    sc = Scratch(tmp_path)
    targets = [
        Target(
            f"t{trace}",
            "fwrest",
            fw(sc, fw_data=BASIC_FW_ASYNC, log_level=3, trace=trace),
            auth="basic",
        )
        for trace in (0, 2)
    ]
    rows, ratios = measure_throughput(
        targets, s, sc, at_once=[("t2 / t0", "t2", "t0", 0.5)], at_once_rounds=3
    )
    assert [r.get("error") for r in rows] == [None, None]
    assert all(r["rps"] > 0 for r in rows)
    (ratio,) = ratios
    assert ratio["method"] == "at once" and "error" not in ratio
    assert len(ratio["rounds"]) == 3
    for figures in ratio["rounds"]:
        for label in ("t0", "t2"):
            cpu = figures[label]["cpu_s"]
            assert figures[label]["requests"] > 100
            # one core shared by two busy servers 1 s: each a real share (schedstat, not 10 ms
            # ticks)
            assert 0.05 < cpu < 1.5
    recomputed = report.at_once_ratio("t2 / t0", "t2", "t0", 0.5, ratio["rounds"])
    assert ratio["value"] == pytest.approx(recomputed["value"])
    assert 0.5 < ratio["value"] < 2.0


def test_run_seconds_reads_the_scheduler_in_nanoseconds() -> None:
    ran = servers._run_time_s(os.getpid())
    assert ran is not None and ran > 0
    busy = sum(i * i for i in range(200_000))
    assert busy > 0
    again = servers._run_time_s(os.getpid())
    assert again is not None and again > ran
    assert servers._run_time_s(2**22 + 12345) is None  # no such process


def test_case_8_reads_requests_per_cpu_second_and_each_workers_connections(tmp_path: Path) -> None:
    s = Settings(warmup_s=1.0, duration_s=1.0, runs=1, quick=True)
    cores = sorted(os.sched_getaffinity(0))
    s.both_cpus = ",".join(map(str, cores[:2]))
    sc = Scratch(tmp_path)
    case = run_case(scaling_case(s, sc), s, sc, lambda line: None)
    rows = {row["server"]: row for row in case["rows"]}
    assert [row.get("error") for row in rows.values()] == [None] * 4
    for label, row in rows.items():
        (run,) = row["runs"]
        assert run["per_cpu_s"] == pytest.approx(run["requests"] / run["cpu_s"], rel=1e-3)
        assert row["per_cpu_s"] == run["per_cpu_s"] > 0
        # workers (no supervisor) hold wrk's connections, maybe not all accepted yet when loaded
        assert s.connections / 2 < sum(run["connections"]) <= s.connections, label
        assert len(run["connections"]) == len(run["worker_cpu_s"]) == (2 if "2" in label else 1)
        assert run["connections"] == sorted(run["connections"], reverse=True)
        assert sum(run["worker_cpu_s"]) <= run["cpu_s"] + 0.02
        assert row["busiest_share"] == max(run["connections"]) / sum(run["connections"])
    ratios = {r["name"]: r for r in case["ratios"]}
    per_core = ratios["fwrest 2 workers / 1, requests per server CPU second"]
    two, one = rows["fwrest, 2 workers"], rows["fwrest, 1 worker"]
    assert per_core["value"] == pytest.approx(two["per_cpu_s"] / one["per_cpu_s"])
    assert ratios["uvicorn 2 workers / 1, req/s"]["value"] > 0
    text = report.case_markdown(case)
    assert "| fwrest, 2 workers | 2 | " in text and "| uvicorn raw ASGI, 1 worker | 1 | " in text
