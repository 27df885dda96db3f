"""The memory monitor (SPEC 5) over HTTP: one ``fwrest serve --workers 2`` with ``Enable=1`` for
most tests (hostile requests too), TLS and Basic on their own. Moving figures (RSS, free RAM,
counters) polled with generous guards and printed; no speed asserted."""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fwrest.monitor import Collector, MonitorApp
from tests.conftest import APP_SOURCE, ServerProcess, exchange, free_config, serving, wait_for
from tests.monitor.support import (
    ENTRY_KEYS,
    EXTRA_NAMES,
    ISO_WITH_OFFSET,
    SPEC_NAMES,
    by_name,
    children,
    free_port,
    meminfo,
    metrics,
    monitor_section,
    status_kb,
    values,
    wait_children,
)
from tests.server.rawhttp import RawConnection

MEMORY_APP = (
    APP_SOURCE
    + '''

_KEPT = {}

@get("/grow")
def grow():
    """Keeps 100 MB in this worker (once); the pages are written, so they are resident."""
    if "buf" not in _KEPT:
        _KEPT["buf"] = bytearray(b"\\x01") * (100 * 1024 * 1024)
    return {"pid": os.getpid(), "kept": len(_KEPT["buf"])}

@get("/held")
async def held():  # a stream open until its client leaves
    async def items():
        yield b"first"
        await asyncio.sleep(60)
    return items()

@get("/release")
def release():
    _KEPT.clear()
    return {"pid": os.getpid()}

def check(user, password):
    return user == "mon" and password == "s3cret"
'''
)

GROWTH_KB = 80 * 1024  # of the 100 MB kept, at least this much must show


class Monitor:
    """The monitor's port, origin (``root``), metrics URL (``base``), and its start time."""

    def __init__(self, proc: ServerProcess, port: int, started: float):
        self.proc, self.port, self.started = proc, port, started
        self.root = f"http://127.0.0.1:{port}"
        self.base = f"{self.root}/api/server/metrics"


@pytest.fixture(scope="module")
def mon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitor]:
    tmp = tmp_path_factory.mktemp("monitor")
    port = free_port()
    config = free_config(tmp, app=MEMORY_APP, extra={"APP_MONITOR": monitor_section(port)})
    before = time.time()
    with serving(config, workers=2) as proc:
        yield Monitor(proc, port, before)


# -- the index ------------------------------------------------------------------------------------


def test_index_is_the_original_products_shape(mon: Monitor) -> None:
    resp = httpx.get(mon.base, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    index = resp.json()
    print("index:", index)
    assert set(index) == {"option1", "option2", "option3", "option4", "metrics"}
    assert index["option1"] == "/api/server/metrics/{metric}"
    assert index["option2"] == "/api/server/metrics?{metric}"
    assert index["option3"] == "/api/server/metrics?{metric1}&{metric2}"
    assert index["option4"] == "/api/server/metrics?{metric1}&{metric2}...&{metricN}"
    listing = index["metrics"]
    assert isinstance(listing, list) and len(listing) == 2
    assert listing[0] == "all"
    assert set(listing[1]) == {"names"}
    names = listing[1]["names"]
    assert len(names) == len(set(names)), names
    missing = [n for n in [*SPEC_NAMES, *EXTRA_NAMES] if n not in names]
    assert not missing, missing
    # with two workers, each has its own figures under its own names
    for n in ("memory_resident_worker_1", "memory_resident_worker_2"):
        assert n in names


@pytest.mark.parametrize("suffix", ["?all", "/all"])
def test_all_gives_every_metric(mon: Monitor, suffix: str) -> None:
    names = httpx.get(mon.base, timeout=10).json()["metrics"][1]["names"]
    entries = metrics(mon.base, suffix)
    assert [e["name"] for e in entries] == names
    for entry in entries:
        assert set(entry) == ENTRY_KEYS, entry
        assert "error" not in entry


@pytest.mark.parametrize(
    ("suffix", "expected"),
    [
        ("?memory_resident", ["memory_resident"]),
        ("?memory_resident&memory_virtual", ["memory_resident", "memory_virtual"]),
        ("?memory_virtual&memory_resident", ["memory_virtual", "memory_resident"]),
        ("/memory_resident", ["memory_resident"]),
        ("/startdate", ["startdate"]),
        ("?memory_resident&memory_resident", ["memory_resident"]),
    ],
)
def test_filters(mon: Monitor, suffix: str, expected: list[str]) -> None:
    entries = metrics(mon.base, suffix)
    assert [e["name"] for e in entries] == expected
    for entry in entries:
        assert set(entry) == ENTRY_KEYS


def test_answer_shape_units_and_dates(mon: Monitor) -> None:
    entries = by_name(metrics(mon.base, "?all"))
    now = datetime.now().astimezone()
    for name, entry in entries.items():
        assert isinstance(entry["description"], str) and entry["description"], entry
        assert re.match(ISO_WITH_OFFSET, entry["collected_in"]), entry
        collected = datetime.fromisoformat(entry["collected_in"])
        assert collected.tzinfo is not None
        assert abs(collected - now) < timedelta(minutes=2), (collected, now)
        if name.startswith("memory_"):
            assert entry["unit"] == "kb", entry
            assert isinstance(entry["value"], int) and entry["value"] >= 0, entry
    start = entries["startdate"]
    print("startdate:", start)
    assert start["unit"] == ""
    assert isinstance(start["value"], str)
    assert re.match(ISO_WITH_OFFSET, start["value"]), start
    started = datetime.fromisoformat(start["value"])
    assert started.tzinfo is not None
    # the service started when the fixture started it (second precision)
    assert mon.started - 2 <= started.timestamp() <= time.time() + 1, (started, mon.started)


@pytest.mark.parametrize("suffix", ["?x", "/x"])
def test_unknown_metric_is_an_entry_not_a_failure(mon: Monitor, suffix: str) -> None:
    entries = metrics(mon.base, suffix)
    assert entries == [{"name": "x", "error": "unknown metric"}]


def test_unknown_mixed_with_known_names(mon: Monitor) -> None:
    entries = metrics(mon.base, "?memory_resident&x&memory_virtual&nope_2")
    assert [e["name"] for e in entries] == ["memory_resident", "x", "memory_virtual", "nope_2"]
    assert entries[1] == {"name": "x", "error": "unknown metric"}
    assert entries[3] == {"name": "nope_2", "error": "unknown metric"}
    for entry in (entries[0], entries[2]):
        assert set(entry) == ENTRY_KEYS
        assert entry["unit"] == "kb" and entry["value"] > 0


@pytest.mark.parametrize("query", ["all&x&nope_2", "x&all&nope_2", "x&all&x&nope_2&all"])
def test_all_keeps_the_unknown_names_beside_it(mon: Monitor, query: str) -> None:
    names = httpx.get(mon.base, timeout=10).json()["metrics"][1]["names"]
    entries = metrics(mon.base, "?" + query)
    errors = [e for e in entries if "error" in e]
    print(query, "->", [e["name"] for e in entries])
    assert errors == [{"name": n, "error": "unknown metric"} for n in ("x", "nope_2")]
    assert sorted(e["name"] for e in entries if "error" not in e) == sorted(names)


def test_extra_names_have_sane_values(mon: Monitor) -> None:
    got = values(mon.base, *EXTRA_NAMES)
    print("extra metrics:", got)
    assert isinstance(got["cpu_this_process"], int | float) and got["cpu_this_process"] >= 0
    assert isinstance(got["cpu_all"], int | float) and 0 <= got["cpu_all"] <= 100
    # a supervisor and two workers, each with at least its main thread
    assert isinstance(got["threads"], int) and got["threads"] >= 3
    pids = [mon.proc.pid, *wait_children(mon.proc.pid, 2)]
    threads = sum(status_kb(pid, "Threads") for pid in pids)
    fds = sum(len(list(Path(f"/proc/{pid}/fd").iterdir())) for pid in pids)
    print(f"processes {pids}: {threads} threads, {fds} fds per /proc")
    assert abs(got["threads"] - threads) <= 16, (got["threads"], threads)
    # listening sockets, logs, pipes of three processes
    assert isinstance(got["open_files"], int) and got["open_files"] >= 6
    assert abs(got["open_files"] - fds) <= 24, (got["open_files"], fds)
    assert isinstance(got["requests_in_flight"], int) and got["requests_in_flight"] >= 0
    assert isinstance(got["requests_total"], int) and got["requests_total"] >= 0
    alive = time.time() - mon.started
    assert isinstance(got["uptime"], int | float)
    assert 0 <= got["uptime"] <= alive + 2, (got["uptime"], alive)


def test_machine_memory_matches_proc_meminfo(mon: Monitor) -> None:
    names = [n for n in SPEC_NAMES if n.startswith(("memory_ram", "memory_swap"))]
    before = meminfo()
    got = values(mon.base, *names)
    after = meminfo()
    print("monitor:", got)
    print("meminfo before:", {k: before[k] for k in ("MemTotal", "MemAvailable", "MemFree")})
    assert got["memory_ram_total"] == before["MemTotal"]

    def bracket(name: str, low: int, high: int) -> None:
        tolerance = max(before["MemTotal"] // 20, 64 * 1024)  # 5%, at least 64 MB
        assert low - tolerance <= got[name] <= high + tolerance, (name, got[name], low, high)

    def both(fn: Any) -> tuple[int, int]:
        a, b = fn(before), fn(after)
        return min(a, b), max(a, b)

    bracket("memory_ram_free", *both(lambda m: m["MemFree"]))
    bracket("memory_ram_used", *both(lambda m: m["MemTotal"] - m["MemFree"]))
    assert got["memory_ram_used"] + got["memory_ram_free"] == got["memory_ram_total"]
    # beside them, what a new program can have without swapping (caches count)
    got |= values(mon.base, "memory_ram_available")
    bracket("memory_ram_available", *both(lambda m: m["MemAvailable"]))
    bracket("memory_swap_total", *both(lambda m: m["SwapTotal"]))
    bracket("memory_swap_free", *both(lambda m: m["SwapFree"]))
    bracket("memory_swap_used", *both(lambda m: m["SwapTotal"] - m["SwapFree"]))


def test_service_rss_sums_supervisor_and_workers(mon: Monitor) -> None:
    got = values(mon.base, *(f"memory_{kind}{of}" for kind in ("resident", "virtual")
                             for of in ("", "_worker_1", "_worker_2")))  # fmt: skip
    workers = wait_children(mon.proc.pid, 2)  # both live (never a worker being replaced)
    pids = [mon.proc.pid, *sorted(workers)]
    proc_rss = {pid: status_kb(pid, "VmRSS") for pid in pids}
    print("monitor:", got)
    print("/proc VmRSS:", proc_rss)
    total, w1, w2 = (got[f"memory_resident{of}"] for of in ("", "_worker_1", "_worker_2"))
    assert w1 > 1024 and w2 > 1024
    assert total > w1 and total > w2
    assert total >= w1 + w2  # plus the supervisor's own
    assert got["memory_virtual"] >= got["memory_virtual_worker_1"] + got["memory_virtual_worker_2"]
    assert len(pids) == 3
    assert children(mon.proc.pid) == workers  # no other child (nor a zombie) beside them
    expected = sum(proc_rss.values())
    assert abs(total - expected) <= max(expected // 10, 8 * 1024), (total, expected)


def test_requests_total_follows_the_rest_port(mon: Monitor) -> None:
    before = values(mon.base, "requests_total")["requests_total"]
    sent = 6
    for _ in range(sent):
        assert httpx.get(mon.proc.url() + "/hello", timeout=10).status_code == 200
    seen = [before]

    def counted() -> bool:
        seen.append(values(mon.base, "requests_total")["requests_total"])
        return seen[-1] >= before + sent

    elapsed = wait_for(counted, 10, "requests_total counting the requests", interval=0.1)
    print(f"requests_total {before} -> {seen[-1]} after {elapsed:.2f}s")
    assert seen[-1] >= before + sent


def test_requests_total_keeps_what_a_reload_s_generation_answered(tmp_path: Path) -> None:
    """SPEC 5 (the whole service) across SPEC 13.1's reload: the requests a generation answered
    just before it drained count, though it drained within its half-second beat of them."""
    port = free_port()
    config = free_config(tmp_path, app=MEMORY_APP, extra={"APP_MONITOR": monitor_section(port)})
    base = f"http://127.0.0.1:{port}/api/server/metrics"
    sent = 60
    with serving(config, workers=2) as proc:
        for generation in (2, 3, 4):
            before = values(base, "requests_total")["requests_total"]
            with httpx.Client(timeout=10) as client:  # closed: the generation drains at once
                for _ in range(sent):
                    assert client.get(proc.url() + "/hello").status_code == 200
            proc.signal(signal.SIGHUP)
            wait_for(lambda n=generation: any(f"reloaded: generation {n}" in line
                                              for line in proc.stdout_lines),
                     30, "the reload")  # fmt: skip
            wait_for(lambda: len(children(proc.proc.pid)) == 2, 30, "the old generation gone")
            total = values(base, "requests_total")["requests_total"]
            print(f"generation {generation}: requests_total {before} -> {total}")
            assert total >= before + sent, (before, total)


def test_requests_in_flight_counts_a_running_request(mon: Monitor) -> None:
    done = threading.Event()
    result: list[int] = []

    def slow() -> None:
        try:
            result.append(httpx.get(mon.proc.url() + "/sleep/1500", timeout=15).status_code)
        finally:
            done.set()

    thread = threading.Thread(target=slow)
    thread.start()
    try:
        started = time.monotonic()
        peak = 0
        while not done.is_set() and time.monotonic() - started < 10:
            peak = max(peak, values(mon.base, "requests_in_flight")["requests_in_flight"])
            if peak >= 1:
                break
            time.sleep(0.05)
        print(f"requests_in_flight peak {peak} after {time.monotonic() - started:.2f}s")
        assert peak >= 1
    finally:
        thread.join(20)
    assert result == [200]

    # a stream is in flight until its end (its client leaving, here), not until its head
    def in_flight() -> int:
        return int(values(mon.base, "requests_in_flight")["requests_in_flight"])

    wait_for(lambda: in_flight() == 0, 10, "the request above no longer in flight")
    with httpx.stream("GET", mon.proc.url() + "/held", timeout=15) as held:
        pieces = held.iter_raw()  # kept: an iterator dropped closes the answer
        assert next(pieces) == b"first"
        wait_for(lambda: in_flight() == 1, 10, "the stream in flight")
    wait_for(lambda: in_flight() == 0, 10, "the stream no longer in flight")


def test_prometheus_format(mon: Monitor) -> None:
    by_query = httpx.get(mon.base + "?format=PROMETHEUS", timeout=10)  # in any case
    by_accept = httpx.get(mon.base + "?all", headers={"Accept": "text/plain"}, timeout=10)
    for query, accept in (("?all", "application/json"), ("?all&format=Json", "text/plain")):
        json_too = httpx.get(mon.base + query, headers={"Accept": accept}, timeout=10)
        assert json_too.headers["content-type"].startswith("application/json")
        assert json_too.json()[0]["version"] == 0
    total = meminfo()["MemTotal"]
    for resp in (by_query, by_accept):
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("text/plain"), resp.headers
        families = {f.name: f for f in text_string_to_metric_families(resp.text)}
        print(sorted(families))
        memory = [n for n in families if "memory" in n]
        for name in ("memory_resident", "memory_virtual", "memory_ram_total", "memory_swap_free"):
            assert any(name in f for f in memory), (name, memory)
        resident = next(f for n, f in families.items() if "memory_resident" in n)
        assert resident.samples[0].value > 0
        ram_total = next(f for n, f in families.items() if "memory_ram_total" in n)
        assert ram_total.samples[0].value == total
        assert any("requests_total" in n for n in families)


def test_prometheus_format_filters(mon: Monitor) -> None:
    resp = httpx.get(mon.base + "?memory_resident&x&format=prometheus", timeout=10)
    assert resp.status_code == 200
    families = list(text_string_to_metric_families(resp.text))
    assert len(families) == 1 and "memory_resident" in families[0].name, resp.text


@pytest.mark.parametrize(
    ("query", "comments"),
    [
        ("x", ["# unknown metric: x"]),
        ("uptime&x&all&y", ["# unknown metric: x", "# unknown metric: y"]),
        ("a%0AHELP%20b%5C", ["# unknown metric: a\\nHELP b\\\\"]),
    ],
)
def test_prometheus_format_names_the_unknown_names(
    mon: Monitor, query: str, comments: list[str]
) -> None:
    """Not an empty answer: a comment line per unknown name, which scrapers ignore."""
    resp = httpx.get(f"{mon.base}?{query}&format=prometheus", timeout=10)
    print(resp.text[-200:])
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert [line for line in resp.text.splitlines() if "unknown" in line] == comments
    families = {f.name for f in text_string_to_metric_families(resp.text)}
    assert ("fwrest_uptime_seconds" in families) == ("uptime" in query), families


def test_resident_grows_when_an_endpoint_keeps_a_buffer(mon: Monitor) -> None:
    names = ("memory_resident", "memory_resident_worker_1", "memory_resident_worker_2")
    before = values(mon.base, *names)
    print("before:", before)
    started = time.monotonic()
    pids: set[int] = set()
    after = before
    try:
        while time.monotonic() - started < 30:
            resp = httpx.get(mon.proc.url() + "/grow", timeout=20)
            assert resp.status_code == 200, resp.text
            pids.add(resp.json()["pid"])
            after = values(mon.base, *names)
            if after["memory_resident"] - before["memory_resident"] >= GROWTH_KB:
                break
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        print(f"after {elapsed:.2f}s (buffers kept in {sorted(pids)}):", after)
        assert after["memory_resident"] - before["memory_resident"] >= GROWTH_KB
        worker_growth = max(
            after["memory_resident_worker_1"] - before["memory_resident_worker_1"],
            after["memory_resident_worker_2"] - before["memory_resident_worker_2"],
        )
        assert worker_growth >= GROWTH_KB, worker_growth
    finally:
        for _ in range(8):
            httpx.get(mon.proc.url() + "/release", timeout=10)


def test_all_keeps_every_worker_with_many_processes() -> None:
    """``all`` lists every worker however many; thirty real children stand in, read by psutil."""
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    kids = [subprocess.Popen(sleep) for _ in range(30)]
    try:
        pids = [kid.pid for kid in kids]
        app = MonitorApp("/api", Collector(os.getpid(), lambda: (0, 0), time.time(), lambda: pids))
        status, _, body = app.respond("GET", "/api/server/metrics", "all", "")
        assert status == 200
        names = [e["name"] for e in json.loads(body)[0]["metrics"]]
        print(len(names), "metrics")
        assert "memory_resident_worker_30" in names
        assert "memory_virtual_worker_30" in names
        assert "uptime" in names
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()


# -- TLS and Basic on servers of their own; hostile requests ----------------------------------


def test_monitor_over_tls(tmp_path: Path, serve: Any, certs: dict[str, Path]) -> None:
    port = free_port()
    section = monitor_section(
        port, SslCertificate=str(certs["cert"]), SslCertificateKey=str(certs["key"])
    )
    proc = serve(free_config(tmp_path, app=MEMORY_APP, extra={"APP_MONITOR": section}))
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    base = f"https://127.0.0.1:{port}/api/server/metrics"
    entries = metrics(base, "?memory_resident", verify=ctx)
    assert entries[0]["name"] == "memory_resident" and entries[0]["value"] > 0
    index = httpx.get(base, verify=ctx, timeout=10).json()
    assert index["option1"] == "/api/server/metrics/{metric}"
    # plain HTTP on the TLS port is not answered with the metrics
    try:
        plain = httpx.get(f"http://127.0.0.1:{port}/api/server/metrics", timeout=10)
    except httpx.HTTPError as exc:
        print("plain HTTP on the TLS port:", type(exc).__name__)
    else:
        assert plain.status_code != 200, plain.text
    # the REST port is not affected: it stays plain HTTP
    assert httpx.get(proc.url() + "/hello", timeout=10).status_code == 200


def test_monitor_with_basic_authorization(tmp_path: Path, serve: Any) -> None:
    port = free_port()
    fw = {"Authorization": {"scheme": "basic", "OnAuth": "app.check"}}
    extra = {"APP_MONITOR": monitor_section(port, FwData=fw)}
    proc = serve(free_config(tmp_path, app=MEMORY_APP, extra=extra))
    base = f"http://127.0.0.1:{port}/api/server/metrics"
    none = httpx.get(base, timeout=10)
    assert none.status_code == 401
    assert none.headers["www-authenticate"].lower().startswith("basic")
    assert none.json() == {"code": 401, "detailedMessage": "", "message": "Unauthorized"}
    # authorization runs before routing: an unknown path without credentials is 401 too
    assert httpx.get(f"http://127.0.0.1:{port}/elsewhere", timeout=10).status_code == 401
    wrong = httpx.get(base, auth=("mon", "nope"), timeout=10)
    assert wrong.status_code == 403
    assert wrong.json()["message"] == "Forbidden"
    good = httpx.get(base, auth=("mon", "s3cret"), timeout=10)
    assert good.status_code == 200, good.text
    assert good.json()["option1"] == "/api/server/metrics/{metric}"
    entries = metrics(base, "/memory_resident", auth=("mon", "s3cret"))
    assert entries[0]["value"] > 0
    # the guard is the monitor's: the open REST port stays open
    assert httpx.get(proc.url() + "/hello", timeout=10).status_code == 200
    assert "s3cret" not in proc.log()


def test_options_answers_the_monitors_methods(mon: Monitor) -> None:
    # RFC 9110 9.3.7: a path of the monitor, a probe, and the server in general (OPTIONS *)
    for url in (mon.base, mon.base + "/uptime", mon.root + "/api/health/live"):
        answer = httpx.options(url, timeout=10)
        assert answer.status_code == 200, (url, answer.text)
        assert answer.headers["allow"] == "GET, HEAD, OPTIONS"
        assert answer.content == b""
    assert httpx.options(mon.root + "/api/nothing", timeout=10).status_code == 404
    with RawConnection(mon.port) as conn:
        server = conn.request("OPTIONS", "*")
        assert server.status_line == "HTTP/1.1 200 OK"
        assert server.header("allow") == "GET, HEAD, OPTIONS"
        assert server.header("content-length") == "0"


def test_bad_requests_get_json_errors_never_5xx(mon: Monitor) -> None:
    # /rest/hello: the REST routes are not on the monitor's port
    cases: list[tuple[str, str, int]] = [
        ("GET", "/", 404), ("GET", "/api", 404), ("GET", "/api/server", 404),
        ("GET", "/api/server/metricsX", 404), ("GET", "/api/server/metrics/a/b", 404),
        ("GET", "/rest/hello", 404), ("GET", "/api/server/metrics/%ZZ", 400),
        ("GET", "/api/server/metricsX?format=xml", 404),
        ("POST", "/api/server/metrics", 405), ("PUT", "/api/server/metrics/memory_resident", 405),
        ("DELETE", "/api/server/metrics", 405),
    ]  # fmt: skip
    for method, path, status in cases:
        resp = httpx.request(method, mon.root + path, timeout=10)
        print(method, path, resp.status_code, resp.text[:120])
        assert resp.status_code == status, (method, path, resp.text)
        assert resp.headers["content-type"].startswith("application/json")
        body = resp.json()
        assert body["code"] == status and set(body) == {"code", "detailedMessage", "message"}
        if status == 405:
            assert resp.headers["allow"] == "GET, HEAD, OPTIONS"
    # a format it does not serve: 400 naming those it does (not the index, as for none)
    for query, said in (
        ("?format=xml", "format must be json or prometheus, got 'xml'"),
        ("/uptime?format=", "format must be json or prometheus, got ''"),
        ("?all&format=json&format=prometheus", "format is given twice"),
    ):
        resp = httpx.get(mon.base + query, timeout=10)
        assert (resp.status_code, resp.json()["detailedMessage"]) == (400, said), resp.text
    # many names, odd bytes: answered, never a 5xx
    many = "&".join(f"n{i}" for i in range(300))
    for suffix in (f"?{many}", "?%ff", "?&&&", "?all=1&all=2", "/%2e%2e"):
        resp = httpx.get(mon.base + suffix, timeout=10)
        print(suffix[:40], resp.status_code)
        assert resp.status_code < 500, (suffix, resp.text)
        assert resp.headers["content-type"].startswith("application/json")
    # an oversized header and a bare-LF request: 4xx on the wire, the port keeps serving
    big_header = b"X-Big: " + b"a" * 40000
    big = b"GET /api/server/metrics HTTP/1.1\r\nHost: x\r\n" + big_header + b"\r\n\r\n"
    lf = b"GET /api/server/metrics HTTP/1.1\nHost: x\n\n"
    for raw in (exchange(mon.port, big, timeout=5), exchange(mon.port, lf, timeout=5)):
        print(raw[:60])
        assert re.match(rb"HTTP/1\.1 4\d\d ", raw), raw[:200]
    assert metrics(mon.base, "?memory_resident")[0]["value"] > 0
    assert "Traceback" not in mon.proc.log()
