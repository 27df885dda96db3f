"""A bounded soak (issue 9): mixed traffic on every port kind against ``fwrest serve --workers 2``
for ``FWREST_SOAK_SECONDS`` (default 60) after a warm-up: 0 unexpected answers (each request kind
has one expected status; a transport error counts), and the service's RSS (supervisor and workers)
grows under 1 MiB from the end of the warm-up. Rates and RSS printed; ``bench/soak.py`` runs it 30
minutes (``make soak``); ``rest_log_level=2`` keeps access lines off the disk;
``MALLOC_ARENA_MAX=2`` is docs/security.md's advice.

The warm-up lasts at least 60 s, then until the RSS settled (under 96 KiB in the last 30 s, a fifth
of the limit's rate; at most 180 s). Why: in the first minutes the Python heap is flat and malloc's
handed-out memory grows 30-80 KiB a minute per worker, but the memory malloc holds free grows up to
0.5 MiB a minute per worker (fragmentation of sqlite, OpenSSL and request buffers across threads)
until it levels off (``mallinfo2``, issue 9); a 45-50 s warm-up measured +350 to +880 KiB in five
runs. Bounded caches (verified tokens) fill meanwhile too; a leak still shows after."""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.auth.oauth2_support import NO_THROTTLE, TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import ServerProcess, free_config, local_port
from tests.faults.support import app_with, oauth_params, service_rss
from tests.server.rawhttp import RawConnection

MIB = 1024 * 1024
SOAK_SECONDS = float(os.environ.get("FWREST_SOAK_SECONDS", "60"))
WARMUP_SECONDS = 60.0  # at least; then until RSS settles (see run_soak)
WARMUP_MAX_SECONDS = 180.0
WARM_EVERY = 5.0
SETTLE_WINDOW = 30.0  # settled: the RSS grew less than SETTLE_STEP over the last SETTLE_WINDOW s
SETTLE_STEP = 96 * 1024  # about 0.19 MiB a minute, a fifth of the limit's rate
# glibc gives each allocating thread an arena (up to 8 per core), whose slow fill looks like growth
# for minutes: 2 arenas, as we advise
MALLOC_ARENA_MAX = 2
GROWTH_LIMIT = 1 * MIB
LOAD_THREADS = 4
USER, PASSWORD = "soak", "Soak-Pw-5521"
PARAMS = oauth_params([(USER, PASSWORD)], long_lived=True)
BAD_REQUESTS = [
    b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET /rest/hello HTTP/1.1\nHost: x\n\n",
    b"GET /rest/he\x00llo HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /rest/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


@dataclass
class SoakResult:
    seconds: float
    requests: int
    per_kind: Counter[str]
    unexpected: Counter[str]
    examples: list[str]
    rss_start: int
    rss_end: int
    rss_series: list[tuple[float, int]]
    per_process_start: dict[int, int]
    per_process_end: dict[int, int]
    workers: int
    warmup: float
    error_lines: list[str] = field(default_factory=list)

    @property
    def growth(self) -> int:
        return self.rss_end - self.rss_start

    def summary(self) -> str:
        series = ", ".join(f"{t:.0f}s {rss / MIB:.2f}" for t, rss in self.rss_series)
        per_start = {pid: round(v / MIB, 2) for pid, v in self.per_process_start.items()}
        per_end = {pid: round(v / MIB, 2) for pid, v in self.per_process_end.items()}
        return (
            f"soak: {self.requests} requests in {self.seconds:.0f} s = "
            f"{self.requests / self.seconds:.0f} requests/s over {len(self.per_kind)} kinds "
            f"({LOAD_THREADS} client threads); unexpected {sum(self.unexpected.values())} "
            f"{dict(self.unexpected)}\n"
            f"  RSS of supervisor + {self.workers} workers: {self.rss_start / MIB:.2f} MiB after "
            f"the warm-up ({self.warmup:.0f} s), {self.rss_end / MIB:.2f} MiB at the end: growth "
            f"{self.growth / 1024:+.0f} KiB ({self.growth / MIB / (self.seconds / 60):+.3f} "
            f"MiB/min)\n  per process (MiB) start {per_start} end {per_end}\n"
            f"  series (MiB): {series}\n  kinds: {dict(sorted(self.per_kind.items()))}"
        )


class Traffic:
    """One load thread's clients and token chain; ``step()`` sends one request."""

    def __init__(self, urls: dict[str, str], ports: dict[str, int], ctx: Any, seed: int):
        self.urls, self.ports, self.ctx, self.rng = urls, ports, ctx, random.Random(seed)
        self.plain = httpx.Client(timeout=30)
        self.tls = httpx.Client(verify=ctx, timeout=30)
        self.access = self.refresh = ""
        self.kinds: list[tuple[str, int, Callable[[], int]]] = []
        o, b, p = urls["OAUTH"], urls["BASIC"], urls["OPEN"]
        bearer = lambda: {"Authorization": f"Bearer {self.access}"}  # noqa: E731
        creds = (USER, PASSWORD)
        weighted: list[tuple[int, str, int, Callable[[], int]]] = [
            (8, "open def", 200, lambda: self.plain.get(p + "/hello").status_code),
            (6, "open async", 200, lambda: self.plain.get(p + "/users/7/orders/9").status_code),
            (3, "open POST json", 200, lambda: self.plain.post(p + "/echo", json={"a": [1, 2]}).status_code),
            (3, "open 404", 404, lambda: self.plain.get(p + "/no/such/route").status_code),
            (2, "open 405", 405, lambda: self.plain.delete(p + "/hello").status_code),
            (2, "bad request", 400, lambda: self.bad_request("OPEN", None)),
            (6, "basic def", 200, lambda: self.plain.get(b + "/hello", auth=creds).status_code),
            (4, "basic async", 200, lambda: self.plain.get(b + "/apid", auth=creds).status_code),
            (2, "basic wrong", 403, lambda: self.plain.get(b + "/hello", auth=(USER, "x")).status_code),
            (2, "basic missing", 401, lambda: self.plain.get(b + "/hello").status_code),
            (8, "bearer def", 200, lambda: self.tls.get(o + "/hello", headers=bearer()).status_code),
            (6, "bearer async", 200, lambda: self.tls.get(o + "/users/3/orders/4", headers=bearer()).status_code),
            (2, "bearer 404", 404, lambda: self.tls.get(o + "/nope", headers=bearer()).status_code),
            (2, "bearer missing", 401, lambda: self.tls.get(o + "/hello").status_code),
            (2, "bearer forged", 401, lambda: self.tls.get(o + "/hello", headers={"Authorization": "Bearer e30.e30.x"}).status_code),
            (3, "token grant", 200, self.grant),
            (3, "token refresh", 200, self.refresh_chain),
            (1, "token bad grant", 400, lambda: self.tls.post(o + TOKEN, data={"grant_type": "nope"}).status_code),
            (1, "TLS bad request", 400, lambda: self.bad_request("OAUTH", self.ctx)),
        ]  # fmt: skip
        for weight, name, expect, call in weighted:
            self.kinds += [(name, expect, call)] * weight
        self.grant()

    def grant(self) -> int:
        return self.token({"grant_type": "password", "username": USER, "password": PASSWORD})

    def refresh_chain(self) -> int:
        return self.token({"grant_type": "refresh_token", "refresh_token": self.refresh})

    def token(self, data: dict[str, str]) -> int:
        """A token request; the tokens of a 200 become the chain's."""
        response = self.tls.post(self.urls["OAUTH"] + TOKEN, data=data)
        if response.status_code == 200:
            body = response.json()
            self.access, self.refresh = body["access_token"], body["refresh_token"]
        return response.status_code

    def bad_request(self, server: str, tls: Any) -> int:
        with RawConnection(self.ports[server], tls=tls, timeout=30) as conn:
            conn.send(self.rng.choice(BAD_REQUESTS))
            status = conn.read_response().status
            if not conn.closed_by_server():
                return -1  # the connection must close after a 400
            return status

    def step(self) -> tuple[str, int, int | str]:
        name, expect, call = self.rng.choice(self.kinds)
        try:
            return name, expect, call()
        except (httpx.HTTPError, OSError, AssertionError) as exc:
            return name, expect, f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        self.plain.close()
        self.tls.close()


def _rss(pid: int, samples: int = 3) -> tuple[int, dict[int, int]]:
    """The median of a few samples 0.2 s apart (the load keeps running meanwhile)."""
    taken = []
    for i in range(samples):
        if i:
            time.sleep(0.2)
        taken.append(service_rss(pid))
    totals = [t for t, _ in taken]
    median = statistics.median_low(totals)
    return median, taken[totals.index(median)][1]


def run_soak(
    folder: Path,
    seconds: float,
    warmup: float = WARMUP_SECONDS,
    *,
    warmup_max: float = WARMUP_MAX_SECONDS,
    workers: int = 2,
    ca: trustme.CA | None = None,
    sample_every: float = 5.0,
    malloc_arena_max: int = MALLOC_ARENA_MAX,
    progress: bool = False,
    report: Callable[[str], None] = print,
) -> SoakResult:
    """Start the service in ``folder``, warm it up, run ``seconds`` of mixed traffic, stop."""
    certs = issue_certs(ca or trustme.CA(), folder / "certs")
    open_port = local_port()
    auth = {"scheme": "basic", "OnAuth": "app.basic_check", "maxFailures": NO_THROTTLE}
    basic = {**open_port, "FwData": {"Authorization": auth}}
    oauth = oauth_section(certs, onAuthparams="app.params", onAuthNoCheckUri="app.public")
    config = free_config(
        folder,
        app=app_with(PARAMS, {USER: PASSWORD}),
        servers={"OPEN": open_port, "BASIC": basic, "OAUTH": oauth},
        general={"rest_log_level": 2},
        extra={"HTTPSERVER": {"StateStore": "sqlite"}, "POOL": {"MaxThreads": 8}},
    )
    env = {"MALLOC_ARENA_MAX": str(malloc_arena_max)} if malloc_arena_max else {}
    proc = ServerProcess(config, workers=workers, env=env).wait_ready()
    ctx = client_context(certs)
    stop = threading.Event()
    measuring = threading.Event()
    lock = threading.Lock()
    per_kind: Counter[str] = Counter()
    unexpected: Counter[str] = Counter()
    examples: list[str] = []
    crashed: list[BaseException] = []

    def load(index: int) -> None:
        traffic = None
        try:
            traffic = Traffic(proc.urls, proc.ports, ctx, seed=index)
            while not stop.is_set():
                name, expect, got = traffic.step()
                if not measuring.is_set():
                    if got != expect:  # warm-up surprises count too
                        with lock:
                            unexpected[f"{name} (warm-up): {got}"] += 1
                    continue
                with lock:
                    per_kind[name] += 1
                    if got != expect:
                        unexpected[f"{name}: expected {expect}, got {str(got)[:80]}"] += 1
                        if len(examples) < 20:
                            examples.append(f"{name}: {got}")
        except BaseException as exc:  # reported by run_soak's caller
            crashed.append(exc)
        finally:
            if traffic is not None:
                traffic.close()

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(LOAD_THREADS)]
    try:
        for thread in threads:
            thread.start()
        # Warm-up: at least ``warmup`` s, then until the RSS grew less than SETTLE_STEP over
        # SETTLE_WINDOW s, at most ``warmup_max`` (see the module's docstring); not settled by then,
        # the run is measured all the same, against the same limit.
        warm_began = time.monotonic()
        history: list[tuple[float, int]] = []
        while True:
            elapsed = time.monotonic() - warm_began
            history.append((elapsed, service_rss(proc.proc.pid)[0]))
            window = [rss for t, rss in history if t >= elapsed - SETTLE_WINDOW - 0.5]
            settled = history[0][0] <= elapsed - SETTLE_WINDOW and (
                window[-1] - min(window) < SETTLE_STEP
            )
            if elapsed >= warmup_max or (elapsed >= warmup and settled):
                break
            time.sleep(WARM_EVERY)
        warmed = time.monotonic() - warm_began
        start_rss, start_per = _rss(proc.proc.pid)
        measuring.set()
        began = time.monotonic()
        series = [(0.0, start_rss)]
        report(
            f"soak: warm-up {warmed:.0f} s done ({'settled' if settled else 'not settled'}: "
            f"{(window[-1] - min(window)) / 1024:+.0f} KiB in the last {SETTLE_WINDOW:.0f} s), "
            f"RSS {start_rss / MIB:.2f} MiB; {seconds:.0f} s to go"
        )
        while time.monotonic() - began < seconds:
            time.sleep(min(sample_every, max(0.0, seconds - (time.monotonic() - began))))
            series.append((time.monotonic() - began, service_rss(proc.proc.pid)[0]))
            if progress:
                with lock:
                    done, odd = sum(per_kind.values()), sum(unexpected.values())
                report(
                    f"soak: {series[-1][0]:.0f} s, {done} requests, {odd} unexpected, "
                    f"RSS {series[-1][1] / MIB:.2f} MiB"
                )
        end_rss, end_per = _rss(proc.proc.pid)
        elapsed = time.monotonic() - began
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        code = proc.stop()
    assert not crashed, crashed
    assert code == 0, f"the service exited {code}"
    error_lines = [
        line for line in proc.file_log().splitlines() if " ERROR " in line or " CRITICAL " in line
    ]
    requests = sum(per_kind.values())
    return SoakResult(elapsed, requests, per_kind, unexpected, examples, start_rss, end_rss,
                      series, start_per, end_per, workers, warmed, error_lines)  # fmt: skip


@pytest.mark.timeout(SOAK_SECONDS + WARMUP_MAX_SECONDS + 120)
def test_soak_mixed_traffic_no_errors_no_growth(ca: trustme.CA, tmp_path: Path) -> None:
    result = run_soak(tmp_path, SOAK_SECONDS, ca=ca)
    print(result.summary())
    for line in result.error_lines[:10]:
        print("  log:", line)
    assert result.unexpected == Counter(), result.examples
    assert result.error_lines == []
    assert len(result.per_kind) == 19  # every kind of request was sent
    assert len(result.per_process_end) == 3  # the supervisor and its 2 workers
    assert set(result.per_process_end) == set(result.per_process_start)  # no worker replaced
    assert result.growth < GROWTH_LIMIT, f"RSS grew {result.growth / MIB:.2f} MiB"
