"""Helpers of the memory-monitor tests: ports, the monitor's URL, /proc readings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.conftest import children as children
from tests.conftest import free_port as free_port
from tests.conftest import port_is_free as port_is_free
from tests.conftest import wait_children as wait_children

# The names SPEC 5 lists for the memory monitor.
SPEC_NAMES = [
    "memory_resident", "memory_virtual", "memory_ram_total", "memory_ram_free", "memory_ram_used",
    "memory_swap_total", "memory_swap_used", "memory_swap_free", "startdate",
]  # fmt: skip
EXTRA_NAMES = [
    "cpu_this_process", "cpu_all", "threads", "open_files", "requests_in_flight", "requests_total",
    "uptime",
]  # fmt: skip
ENTRY_KEYS = {"name", "description", "collected_in", "unit", "value"}
ISO_WITH_OFFSET = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)$"


def monitor_section(port: int, **more: Any) -> dict[str, Any]:
    return {"Enable": 1, "HostName": "127.0.0.1", "Port": port, "ApiPath": "/api", **more}


def metrics(base: str, suffix: str = "", **kw: Any) -> list[dict[str, Any]]:
    """GET ``{base}{suffix}``; checks the answer's outer shape, returns its ``metrics`` list."""
    resp = httpx.get(base + suffix, timeout=10, **kw)
    assert resp.status_code == 200, (suffix, resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert isinstance(body, list) and len(body) == 1, body
    assert set(body[0]) == {"version", "metrics"}, body
    assert body[0]["version"] == 0
    return list(body[0]["metrics"])


def by_name(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e for e in entries}


def values(base: str, *names: str, **kw: Any) -> dict[str, Any]:
    """The values of ``names``, read in one request."""
    found = by_name(metrics(base, "?" + "&".join(names), **kw))
    missing = [n for n in names if n not in found or "error" in found[n]]
    assert not missing, (missing, found)
    return {n: found[n]["value"] for n in names}


def meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in kB."""
    out: dict[str, int] = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0])
    return out


def status_kb(pid: int, key: str) -> int:
    """A ``/proc/PID/status`` figure in kB (``VmRSS``, ``VmSize``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{key} not in /proc/{pid}/status")
