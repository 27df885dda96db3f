"""Helpers shared by the native-route tests (SPEC 5): servers started once per module, the
settings JSON API, spreading requests over both workers of a ``--workers 2`` service and the
workers' log labels (waited for, never read before they are written). ``wait_for`` is
tests/conftest.py's, named here for the tests that import it from this module.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import READY_LINE, ServerProcess, wait_ready_workers
from tests.conftest import wait_for as wait_for

SETTING_NAMES = (
    "rest_log_level",
    "rest_error_full",
    "rest_trace_time",
    "rest_reload_time",
    "rest_log_stringsize",
)
SETTLE_S = 1.0  # SPEC 5: a change reaches every worker within 1 s
ORANGE = "rgb(255, 165, 0)"

# Every native route of SPEC 5 (the token route only on oAuth2 ports): name, method, path.
NATIVE = (
    ("rest/config", "GET", "/fw/rest/config"),
    ("rest/config", "POST", "/fw/rest/config"),
    ("rest/list/service", "GET", "/fw/rest/list/service"),
    ("rest/openapi.json", "GET", "/fw/rest/openapi.json"),
    ("rest/usage/time", "GET", "/fw/rest/usage/time"),
    ("rest/usage/time", "POST", "/fw/rest/usage/time/reset"),
    ("environment", "GET", "/fw/environment"),
    ("server/environment", "GET", "/server/environment"),
    ("vendor/environment", "GET", "/vendor/environment"),
    ("server/environment", "GET", "/fw/server/environment"),
    ("vendor/environment", "GET", "/fw/vendor/environment"),
    ("healthcheck", "GET", "/fw/healthcheck"),
    ("healthcheck/ok", "GET", "/fw/healthcheck/ok"),
    ("healthcheck/datetime", "GET", "/fw/healthcheck/datetime"),
)
NATIVE_PATHS = sorted({path for _, _, path in NATIVE})

JSON_ACCEPT = {"Accept": "application/json"}


@contextmanager
def running(config: Path, workers: int = 1) -> Iterator[ServerProcess]:
    """``fwrest serve CONFIG`` for the length of the ``with`` block (module fixtures)."""
    proc = ServerProcess(config, workers).wait_ready()
    try:
        yield proc
    finally:
        proc.stop()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


def get_settings(base: str, **kw: Any) -> dict[str, dict[str, Any]]:
    r = httpx.get(f"{base}/fw/rest/config", headers={**JSON_ACCEPT, **kw.pop("headers", {})}, **kw)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    settings: dict[str, dict[str, Any]] = r.json()["settings"]
    return settings


def post_settings(base: str, changes: Any, **kw: Any) -> httpx.Response:
    headers = {"Content-Type": "application/json", **JSON_ACCEPT, **kw.pop("headers", {})}
    return httpx.post(
        f"{base}/fw/rest/config", content=json.dumps(changes), headers=headers, timeout=10, **kw
    )


def change(base: str, changes: dict[str, Any], **kw: Any) -> float:
    """POST a change that must succeed; returns the monotonic time of the answer."""
    r = post_settings(base, changes, **kw)
    assert r.status_code == 200, (r.status_code, r.text)
    for name, value in changes.items():
        assert r.json()["settings"][name]["runtime"] == value, r.json()
    return time.monotonic()


def settle(since: float) -> None:
    """Wait until SPEC 5's bound (1 s) has passed since a change was answered."""
    left = since + SETTLE_S - time.monotonic()
    if left > 0:
        time.sleep(left)


def worker_labels(log: str) -> dict[int, str]:
    """pid -> log label (``w1``, ``w2``) from the workers' ``ready`` lines."""
    return {int(pid): f"w{slot}" for slot, pid in READY_LINE.findall(log)}


def wait_worker_labels(proc: ServerProcess, count: int = 2, timeout: float = 15) -> dict[int, str]:
    """pid -> log label of the workers, once the log has the ``ready`` line of each of ``w1``
    to ``w{count}`` (``fwrest: ready`` may come before them: see ``wait_ready_workers``)."""
    wait_ready_workers(proc, count, timeout)
    return worker_labels(proc.log())


def labels_of(labels: dict[int, str], pids: Iterable[int]) -> set[str]:
    """The log labels of the workers that answered ``pids`` (each must have a ``ready`` line)."""
    unknown = sorted(set(pids) - set(labels))
    assert not unknown, f"pids {unknown} answered but have no ready line in the log: {labels}"
    return {labels[pid] for pid in pids}


def hit_both_workers(base: str, path: str = "/hello", rounds: int = 200) -> list[int]:
    """GET ``path`` (which answers its pid) on fresh connections until two pids answered."""
    pids: list[int] = []
    for _ in range(rounds):
        r = httpx.get(f"{base}{path}", timeout=10)
        assert r.status_code == 200, r.text
        pids.append(r.json()["pid"])
        if len(set(pids)) >= 2 and len(pids) >= 4:
            return pids
    raise AssertionError(f"{rounds} requests never reached a second worker: {set(pids)}")
