"""Usage times per entry point (SPEC 5 ``/fw/rest/usage/time``): a few additions per request.

Each worker keeps its own table; the worker publishes it to the state store every second so
that any worker can answer for the whole service.
"""

from __future__ import annotations

from typing import Any

from fwrest.context.views import UsageKey

__all__ = ["UNMATCHED", "UsageTable", "merge"]

UNMATCHED = UsageKey("", "-", "(no route)", "-")


class UsageTable:
    """:class:`UsageKey` -> [calls, total_us, max_us]."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: dict[UsageKey, list[int]] = {}

    def record(self, key: UsageKey, duration_us: int) -> None:
        row = self.rows.get(key)
        if row is None:
            self.rows[key] = [1, duration_us, duration_us]
            return
        row[0] += 1
        row[1] += duration_us
        if duration_us > row[2]:
            row[2] = duration_us

    def reset(self) -> None:
        self.rows = {}

    def export(self) -> list[list[Any]]:
        return [[*key, *row] for key, row in self.rows.items()]


def merge(per_worker: dict[str, list[list[Any]]]) -> dict[str, Any]:
    """The figures of every worker: per entry point, per worker, per thread pool, in total."""
    entries: dict[tuple[str, ...], list[int]] = {}
    workers: dict[str, list[int]] = {}
    pools: dict[str, list[int]] = {}
    total_us = 0
    for worker, rows in per_worker.items():
        for row in rows:
            key = tuple(str(v) for v in row[:4])
            calls, tot, mx = int(row[4]), int(row[5]), int(row[6])
            total_us += tot
            for table, k in ((entries, key), (workers, (worker,)), (pools, (key[3],))):
                agg = table.setdefault(k, [0, 0, 0])  # type: ignore[arg-type]
                agg[0] += calls
                agg[1] += tot
                agg[2] = max(agg[2], mx)

    def rows_of(table: dict[Any, list[int]], names: tuple[str, ...]) -> list[dict[str, Any]]:
        out = []
        for key, (calls, tot, mx) in sorted(table.items(), key=lambda kv: -kv[1][1]):
            item = dict(zip(names, key if isinstance(key, tuple) else (key,), strict=False))
            item.update(
                calls=calls,
                total_us=tot,
                mean_us=tot // calls if calls else 0,
                max_us=mx,
                percent=round(100 * tot / total_us, 2) if total_us else 0.0,
            )
            out.append(item)
        return out

    return {
        "total_us": total_us,
        "entry_points": rows_of(entries, ("location", "method", "endpoint", "thread_pool")),
        "workers": rows_of(workers, ("worker",)),
        "thread_pools": rows_of(pools, ("thread_pool",)),
    }
