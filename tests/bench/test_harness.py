"""The harness's parser and results writer on captured wrk output; no server, no timing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import report, wrk

# `wrk --latency -t1 -c64 -d2s http://127.0.0.1:PORT/rest/hello` against fwrest
SAMPLE_OK = """\
Running 2s test @ http://127.0.0.1:37101/rest/hello
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.88ms    2.13ms  31.92ms   93.76%
    Req/Sec    40.86k    10.66k   54.97k    55.00%
  Latency Distribution
     50%    1.27ms
     75%    1.68ms
     90%    3.10ms
     99%   12.17ms
  82067 requests in 2.02s, 10.57MB read
Requests/sec:  40545.43
Transfer/sec:      5.22MB
"""

# against a listener answering 503 to every other connection and resetting the rest
SAMPLE_ERRORS = """\
Running 1s test @ http://127.0.0.1:18778/
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    58.05us  114.27us   4.09ms   98.76%
    Req/Sec     7.83k   759.75     8.65k    63.64%
  Latency Distribution
     50%   46.00us
     75%   52.00us
     90%   60.00us
     99%  233.00us
  8542 requests in 1.10s, 492.17KB read
  Socket errors: connect 0, read 8543, write 0, timeout 0
  Non-2xx or 3xx responses: 8542
Requests/sec:   7769.52
Transfer/sec:    447.66KB
"""

# against a listener that never accepts
SAMPLE_NOTHING = """\
Running 2s test @ http://127.0.0.1:18777/
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.00us    0.00us   0.00us    -nan%
    Req/Sec     0.00      0.00     0.00      -nan%
  Latency Distribution
     50%    0.00us
     75%    0.00us
     90%    0.00us
     99%    0.00us
  0 requests in 2.01s, 0.00B read
Requests/sec:      0.00
Transfer/sec:       0.00B
"""


def test_parse_a_clean_run() -> None:
    r = wrk.parse(SAMPLE_OK)
    assert r.requests == 82067
    assert r.duration_s == pytest.approx(2.02)
    assert r.rps == pytest.approx(40545.43)
    assert (r.p50_ms, r.p75_ms, r.p90_ms, r.p99_ms) == pytest.approx((1.27, 1.68, 3.10, 12.17))
    assert r.non_2xx == 0 and r.socket_errors == {} and r.errors == 0


def test_parse_counts_non_2xx_and_socket_errors() -> None:
    r = wrk.parse(SAMPLE_ERRORS)
    assert r.requests == 8542
    assert r.p50_ms == pytest.approx(0.046)
    assert r.p99_ms == pytest.approx(0.233)
    assert r.non_2xx == 8542
    assert r.socket_errors == {"connect": 0, "read": 8543, "write": 0, "timeout": 0}
    assert r.errors == 8542 + 8543
    assert r.as_dict()["errors"] == r.errors


def test_parse_a_run_without_answers() -> None:
    r = wrk.parse(SAMPLE_NOTHING)
    assert r.requests == 0 and r.rps == 0.0 and r.p99_ms == 0.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("812.00us", 812e-6), ("1.20ms", 1.2e-3), ("2.00s", 2.0), ("1.50m", 90.0), ("1.00h", 3600.0)],
)
def test_parse_duration_units(text: str, seconds: float) -> None:
    assert wrk.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("output", [
    "", "unable to connect to 127.0.0.1:1 Connection refused\n",
    SAMPLE_OK.replace("  Latency Distribution\n", "").replace("     99%   12.17ms\n", ""),
])  # fmt: skip
def test_parse_refuses_incomplete_output(output: str) -> None:
    with pytest.raises(wrk.WrkError):
        wrk.parse(output)


def test_wrk_command_pins_and_rounds() -> None:
    cmd = wrk.wrk_command("https://127.0.0.1:9/rest/hello", duration_s=0.4, connections=64,
                          threads=1, headers=("Authorization: Bearer abc",),
                          script=Path("/tmp/token.lua"), cpus="1")  # fmt: skip
    assert cmd[:3] == ["taskset", "-c", "1"]
    assert cmd[cmd.index("-d") + 1] == "1s"  # whole seconds, at least 1
    assert cmd[cmd.index("-H") + 1] == "Authorization: Bearer abc"
    assert cmd[cmd.index("-s") + 1] == "/tmp/token.lua"
    assert "--latency" in cmd and cmd[-1] == "https://127.0.0.1:9/rest/hello"
    unpinned = wrk.wrk_command(
        "http://127.0.0.1:9/", duration_s=3, connections=8, threads=2, cpus=None
    )
    assert unpinned[0] == "wrk" and unpinned[unpinned.index("-d") + 1] == "3s"


# -- the writer ---------------------------------------------------------------------------------
def _row(label: str, role: str, samples: list[str], cpu: list[float]) -> dict[str, object]:
    runs = [{**wrk.parse(s).as_dict(), "cpu_pct": c} for s, c in zip(samples, cpu, strict=True)]
    return {
        "server": label, "role": role, "detail": "", "runs": runs, **report.median_row(runs, cpu),
    }  # fmt: skip


def _results() -> dict[str, object]:
    slower = SAMPLE_OK.replace("Requests/sec:  40545.43", "Requests/sec:  10000.00")
    rows = [
        _row("fwrest", "fwrest", [SAMPLE_OK, SAMPLE_OK, slower], [98.0, 99.0, 97.0]),
        _row("ceiling (fwrest engine)", "ceiling", [SAMPLE_OK] * 3, [100.0] * 3),
        _row("FastAPI", "peer", [slower] * 3, [100.0] * 3),
        _row("Broken", "peer", [SAMPLE_ERRORS], [50.0]),
        {"server": "Missing", "role": "peer", "error": "uvicorn did not start"},
    ]
    ratios = [
        report.ratio(rows, "fwrest / ceiling", "fwrest", "ceiling (fwrest engine)", 0.8),
        report.ratio(rows, "fwrest / FastAPI", "fwrest", "FastAPI", 3.0),
        report.ratio(rows, "FastAPI / ceiling", "FastAPI", "ceiling (fwrest engine)", 0.5),
        report.ratio(rows, "fwrest / Broken", "fwrest", "Broken", 1.0),
        report.ratio(rows, "fwrest / Missing", "fwrest", "Missing", None),
    ]
    memory = {
        "id": "9", "title": "resident memory", "measures": "RSS", "kind": "memory",
        "rows": [{"server": "fwrest open JSON", "role": "fwrest", "rss_idle_mib": 70.0,
                  "rss_after_1_mib": 72.0, "rss_after_2_mib": 72.5, "rss_after_3_mib": 72.75,
                  "batch_requests": 100_000, "requests": [100_512, 201_003],
                  "growth_from_idle_mib": 2.0, "growth_new_connections_mib": 0.5,
                  "growth_mib": 0.25, "errors": 0}],
        "ratios": [],
    }  # fmt: skip
    memory["ratios"] = [
        report.ceiling_check(memory["rows"][0], "open: growth 2nd to 3rd", "growth_mib", 1.0),
        report.ceiling_check(
            memory["rows"][0], "open: growth idle to 1st", "growth_from_idle_mib", 1.5
        ),
    ]
    return {
        "meta": {
            "date": "2026-11-22 18:00 UTC",
            "versions": {"Python": "3.11.7", "fwrest": "0.1.0", "wrk": "debian/4.1.0-3+b2"},
            "machine": {"cpu_model": "AMD EPYC", "cores": 2, "memory_gib": 24.0, "platform": "Linux"},
            "settings": {"warmup_s": 1.0, "duration_s": 3.0, "runs": 3, "connections": 64,
                         "threads": 1, "server_cpus": "0", "wrk_cpus": "1", "memory_batch": 100_000},
            "quick": False,
            "load_start": "0.10, 0.20, 0.30",
            "load_end": "1.00, 0.50, 0.40",
            "note": "Taken with other load on the machine.",
        },
        "cases": [{"id": "1", "title": "open JSON endpoint", "measures": "GET /rest/hello",
                   "kind": "throughput", "rows": rows, "ratios": ratios}, memory],
    }  # fmt: skip


def test_median_row_takes_medians_and_sums_errors() -> None:
    results = _results()
    fw = results["cases"][0]["rows"][0]  # type: ignore[index]
    assert fw["rps"] == pytest.approx(40545.43)  # median of 40545, 40545, 10000
    assert fw["p99_ms"] == pytest.approx(12.17)
    assert fw["cpu_pct"] == pytest.approx(98.0)
    assert fw["errors"] == 0
    broken = results["cases"][0]["rows"][3]  # type: ignore[index]
    assert broken["errors"] == 8542 + 8543
    assert report.median_row([], [])["rps"] is None


def test_ratios_name_their_target_and_skip_invalid_rows() -> None:
    ratios = {r["name"]: r for r in _results()["cases"][0]["ratios"]}  # type: ignore[index]
    assert ratios["fwrest / ceiling"]["value"] == pytest.approx(1.0)
    assert ratios["fwrest / ceiling"]["met"] is True
    assert ratios["fwrest / FastAPI"]["value"] == pytest.approx(4.054543)
    assert ratios["fwrest / FastAPI"]["met"] is True
    assert ratios["FastAPI / ceiling"]["met"] is False
    # a row with errors or one that failed gives no ratio rather than a wrong one
    assert ratios["fwrest / Broken"]["value"] is None and ratios["fwrest / Broken"]["met"] is None
    assert ratios["fwrest / Missing"]["value"] is None


def test_a_ratio_of_rows_run_in_turns_is_the_median_of_the_run_by_run_ratios() -> None:
    def row(label: str, rps: list[float]) -> dict[str, object]:
        runs = [{"rps": x} for x in rps]
        return {"server": label, "rps": sorted(rps)[len(rps) // 2], "errors": 0, "runs": runs}

    # the host slowed midway: each pair of runs agrees, the rows' medians (100 vs 60) would not
    rows = [row("a", [100, 100, 60, 60, 60]), row("b", [99, 101, 59, 61, 60])]
    paired = report.ratio(rows, "b / a", "b", "a", 0.95)
    assert paired["value"] == pytest.approx(1.0)
    assert paired["met"] is True
    # fewer than 3 runs: the ratio of the medians
    short = [row("a", [100, 60]), row("b", [60, 100])]
    assert report.ratio(short, "b / a", "b", "a", None)["value"] == pytest.approx(1.0)
    uneven = [row("a", [100, 100, 100]), row("b", [50, 50, 50, 50])]
    assert report.ratio(uneven, "b / a", "b", "a", None)["value"] == pytest.approx(0.5)


def test_markdown_has_a_table_per_case_versions_and_caveats() -> None:
    text = report.markdown(_results())  # type: ignore[arg-type]
    assert "### Case 1: open JSON endpoint" in text
    assert "### Case 9: resident memory" in text
    assert "| fwrest | 40,545 | 1.27 | 12.17 | 98 | - |  |" in text
    assert "| fwrest / ceiling | 1.00x | >= 0.8x | yes |" in text
    assert "| FastAPI / ceiling | 0.25x | >= 0.5x | **no** |" in text
    assert "FAILED: uvicorn did not start" in text
    assert "17085 errors/non-2xx" in text
    row = "| fwrest open JSON | 70.0 | 72.0 | 72.5 | 72.8 | 100,512 + 201,003 | 2.0 | 0.50 | 0.25 |  |"
    assert row in text
    assert (
        "Python 3.11.7" in text and "wrk debian/4.1.0-3+b2" in text and "AMD EPYC, 2 cores" in text
    )
    assert "Taken with other load on the machine." in text
    for line in text.splitlines():
        if line.startswith("|"):
            assert line.endswith("|"), line


def test_write_produces_markdown_and_json(tmp_path: Path) -> None:
    results = _results()
    paths = report.write(results, tmp_path, with_chart=False)  # type: ignore[arg-type]
    assert set(paths) == {"md", "json"}
    assert json.loads(paths["json"].read_text()) == results
    assert paths["md"].read_text().startswith("# fwrest benchmark results")


def test_update_readme_replaces_only_the_marked_part(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# Bench\n\nintro\n\n{report.README_START}\nold table\n{report.README_END}\n\nafter\n"
    )
    assert report.update_readme(readme, _results())  # type: ignore[arg-type]
    text = readme.read_text()
    assert "old table" not in text
    assert text.startswith("# Bench\n\nintro\n") and text.endswith("after\n")
    # the ratios that carry a target (a memory check by its limit), the tables left to results.md
    assert "| 1 | fwrest / ceiling | 1.00x | >= 0.8x | yes |" in text
    assert "| 9 | open: growth 2nd to 3rd | 0.25 MiB | <= 1 MiB | yes |" in text
    assert "fwrest / Missing" not in text and "### Case" not in text and "(results.md)" in text
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    assert not report.update_readme(plain, _results())  # type: ignore[arg-type]


def test_chart_is_a_png(tmp_path: Path) -> None:
    path = tmp_path / "results.png"
    report.chart(_results(), path)  # type: ignore[arg-type]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _round(a: tuple[int, float], b: tuple[int, float]) -> dict[str, dict[str, float]]:
    return {"a": {"requests": a[0], "cpu_s": a[1]}, "b": {"requests": b[0], "cpu_s": b[1]}}


def test_a_ratio_at_once_is_requests_per_cpu_second_median_over_rounds() -> None:
    # b answered less for less of the shared core: per CPU second as fast as a, then 4 %, 10 %
    # slower
    rounds = [_round((20_000, 1.0), (18_000, 0.9)), _round((20_000, 1.0), (19_200, 1.0)),
              _round((20_000, 1.0), (18_000, 1.0))]  # fmt: skip
    r = report.at_once_ratio("b / a", "b", "a", 0.95, rounds)
    assert r["value"] == pytest.approx(0.96)
    assert r["met"] is True
    assert r["method"] == "at once" and r["rounds"] == rounds
    assert report.at_once_ratio("b / a", "b", "a", 0.97, rounds)["met"] is False


def test_a_ratio_at_once_with_a_missing_figure_or_an_error_has_no_value() -> None:
    rounds = [_round((20_000, 1.0), (18_000, 0.9)), {"a": {"requests": 1, "cpu_s": 1.0}}]
    assert report.at_once_ratio("b / a", "b", "a", 0.95, rounds)["value"] is None
    failed = report.at_once_ratio("b / a", "b", "a", 0.95, [], "WrkError: no answer")
    assert failed["value"] is None and failed["met"] is None
    assert failed["error"] == "WrkError: no answer"
    # the markdown shows it as a ratio without a value, not as met
    lines = report._ratio_lines([failed])
    assert lines[-1] == "| b / a | - | >= 0.95x | - |"


def test_requests_per_cpu_second_and_each_workers_connections() -> None:
    def run(
        requests: int, cpu_s: float, held: list[int], worker_cpu: list[float]
    ) -> dict[str, Any]:
        per = report.per_cpu_second(requests, cpu_s)
        return {"rps": requests, "p50_ms": 1.0, "p99_ms": 2.0, "requests": requests,
                "cpu_s": cpu_s, "per_cpu_s": per, "connections": held,
                "worker_cpu_s": worker_cpu}  # fmt: skip

    one = [run(n, 1.0, [64], [1.0]) for n in (30_000, 20_000, 30_000)]
    two = [run(50_000, 2.0, [33, 31], [1.0, 1.0]), run(36_000, 2.0, [48, 16], [1.5, 0.5]),
           run(57_000, 2.0, [40, 24], [1.2, 0.8])]  # fmt: skip
    rows = [
        {"server": label, "role": "fwrest", "runs": runs, **report.median_row(runs, [100.0] * 3)}
        for label, runs in (("w1", one), ("w2", two))
    ]
    assert rows[1]["per_cpu_s"] == pytest.approx(25_000)  # median of 25,000, 18,000, 28,500
    assert rows[1]["busiest_share"] == pytest.approx(40 / 64)  # median of 33, 48, 40 of 64
    assert report.per_cpu_second(1, 0.0) is None
    # run by run (0.83, 0.90, 0.95): the median of the paired ratios, not 25,000 / 30,000
    per_core = report.ratio(rows, "w2 / w1", "w2", "w1", None, "per_cpu_s")
    assert per_core["value"] == pytest.approx(0.9)
    text = report.case_markdown({"id": "8", "title": "workers", "rows": rows, "ratios": [per_core]})
    assert "| w2 | 50,000 | 1.00 | 2.00 | 100 | 25,000 |  |" in text
    assert "| w2 | 2 | 33/31, 48/16, 40/24 | 62 % | 50/50 %, 75/25 %, 60/40 % |" in text
    assert "| w1 | 1 | 64, 64, 64 | 100 % | 100 %, 100 %, 100 % |" in text
