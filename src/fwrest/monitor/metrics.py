"""Metrics of the whole service (supervisor and every worker) and of the machine (psutil)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import psutil

__all__ = ["METRICS", "Collector"]

# name -> (description, unit)
METRICS: dict[str, tuple[str, str]] = {
    "memory_resident": ("resident set size (RSS) of the whole service", "kb"),
    "memory_virtual": ("virtual memory size of the whole service", "kb"),
    "memory_ram_total": ("the machine's RAM (MemTotal)", "kb"),
    "memory_ram_free": ("the machine's free RAM (MemFree)", "kb"),
    "memory_ram_used": ("the machine's RAM not free (MemTotal - MemFree)", "kb"),
    "memory_ram_available": (
        "RAM available to new programs without swapping (MemAvailable: free RAM plus "
        "reclaimable caches)",
        "kb",
    ),
    "memory_swap_total": ("the machine's swap (SwapTotal)", "kb"),
    "memory_swap_used": ("the machine's swap in use", "kb"),
    "memory_swap_free": ("the machine's free swap (SwapFree)", "kb"),
    "startdate": ("when the service started", ""),
    "cpu_this_process": ("CPU use of the whole service since the last reading", "%"),
    "cpu_all": ("CPU use of the whole machine since the last reading", "%"),
    "threads": ("threads of the whole service", ""),
    "open_files": ("open files and sockets of the whole service", ""),
    "requests_in_flight": ("requests being handled now, all workers", ""),
    "requests_total": ("requests answered since start, all workers", ""),
    "uptime": ("seconds since the service started", "s"),
}


class Collector:
    """Reads metrics on demand.

    Args:
        root_pid: the supervisor (``fwrest serve``) or this process (``fwrest.start``).
        requests: returns (in flight, total) over all workers.
        started: epoch seconds the service started.
        worker_pids: returns the pid of each worker by slot (0: none yet), so that
            ``..._worker_N`` is the worker the log calls ``[wN]``, also after a replacement;
            ``None`` when the service is this one process (``fwrest.start``): then no other
            process counts, not even the calling program's own children.
    """

    def __init__(
        self,
        root_pid: int,
        requests: Callable[[], tuple[int, int]],
        started: float,
        worker_pids: Callable[[], Sequence[int]] | None = None,
    ) -> None:
        self.root_pid = root_pid
        self.requests = requests
        self.started = started
        self.worker_pids = worker_pids
        self._procs: dict[int, psutil.Process] = {}

    def _processes(self) -> tuple[list[psutil.Process], dict[int, psutil.Process]]:
        """(the root and its workers, the workers by number from 1)."""
        try:
            root = self._procs.get(self.root_pid) or psutil.Process(self.root_pid)
            children = {c.pid: c for c in root.children()} if self.worker_pids else {}
        except psutil.Error:
            root, children = psutil.Process(os.getpid()), {}
        workers: dict[int, psutil.Process] = {}
        # a slot's pid counts only while it is a child of the root (a dead worker's pid may
        # be reused by anything)
        slots = self.worker_pids() if self.worker_pids else ()
        for slot, pid in enumerate(slots):
            child = children.get(pid)
            if child is not None:
                known = self._procs.get(pid)  # equal: same pid and same creation time
                workers[slot + 1] = known if known == child else child
        # cpu_percent() measures since the last call on the same object: keep the live ones
        self._procs = {root.pid: root} | {p.pid: p for p in workers.values()}
        return [root, *workers.values()], workers

    def collect(self, names: list[str]) -> list[dict[str, Any]]:
        """One entry per name; an unknown name gets ``{"name", "error"}`` (never raises)."""
        stamp = datetime.now().astimezone().isoformat(timespec="seconds")
        values = self._values(names)
        out: list[dict[str, Any]] = []
        for name in names:
            if name not in values:
                out.append({"name": name, "error": "unknown metric"})
                continue
            description, unit = _describe(name)
            out.append(
                {
                    "name": name,
                    "description": description,
                    "collected_in": stamp,
                    "unit": unit,
                    "value": values[name],
                }
            )
        return out

    def all_names(self) -> list[str]:
        _, workers = self._processes()
        per_worker = [
            f"{base}_worker_{n}" for n in workers for base in ("memory_resident", "memory_virtual")
        ]
        return [*METRICS, *per_worker]

    def _values(self, names: list[str]) -> dict[str, Any]:
        wanted = set(names)
        values: dict[str, Any] = {}
        if wanted & {n for n in METRICS if n.startswith("memory_ram")}:
            vm = psutil.virtual_memory()
            values |= {
                "memory_ram_total": vm.total // 1024,
                "memory_ram_free": vm.free // 1024,
                "memory_ram_used": (vm.total - vm.free) // 1024,
                "memory_ram_available": vm.available // 1024,
            }
        if wanted & {n for n in METRICS if n.startswith("memory_swap")}:
            sw = psutil.swap_memory()
            values |= {
                "memory_swap_total": sw.total // 1024,
                "memory_swap_used": sw.used // 1024,
                "memory_swap_free": sw.free // 1024,
            }
        procs, workers = self._processes()
        process_names = {
            "memory_resident",
            "memory_virtual",
            "threads",
            "open_files",
            "cpu_this_process",
        }
        if wanted & process_names or any("_worker_" in n for n in wanted):
            rss = vms = threads = files = 0
            cpu = 0.0
            for proc in procs:
                try:
                    with proc.oneshot():
                        mem = proc.memory_info()
                        rss += mem.rss
                        vms += mem.vms
                        threads += proc.num_threads()
                        files += proc.num_fds() if hasattr(proc, "num_fds") else 0
                        cpu += proc.cpu_percent(None)
                except psutil.Error:
                    continue
            values |= {
                "memory_resident": rss // 1024,
                "memory_virtual": vms // 1024,
                "threads": threads,
                "open_files": files,
                "cpu_this_process": round(cpu, 1),
            }
            for n, proc in workers.items():
                try:
                    mem = proc.memory_info()
                except psutil.Error:
                    continue
                values[f"memory_resident_worker_{n}"] = mem.rss // 1024
                values[f"memory_virtual_worker_{n}"] = mem.vms // 1024
        if "cpu_all" in wanted:
            values["cpu_all"] = psutil.cpu_percent(None)
        in_flight, total = self.requests()
        values |= {
            "requests_in_flight": in_flight,
            "requests_total": total,
            "uptime": int(time.time() - self.started),
            "startdate": datetime.fromtimestamp(self.started)
            .astimezone()
            .isoformat(timespec="seconds"),
        }
        return values


def _describe(name: str) -> tuple[str, str]:
    if name in METRICS:
        return METRICS[name]
    base, _, worker = name.partition("_worker_")
    description, unit = METRICS.get(base, ("", ""))
    return f"{description.replace('of the whole service', '')}of worker {worker}".strip(), unit
