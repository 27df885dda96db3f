"""The probes of one worker (SPEC 13.3): live, ready, started, as the native routes
``/fw/healthcheck/live|ready|started`` and the monitor's ``{ApiPath}/health/...`` answer them.

* **live**: 200 whenever it is asked; it is answered on the worker's event loop, so an answer
  at all says the loop turns (a blocked loop answers nothing, and the probe times out).
* **started**: 200 once the worker's start finished (its pools' ``OnStart`` hooks ran) and
  every worker of the host had finished its start at least once; 503 before.
* **ready**: 200 when every check passes, else 503 with the failing ones: the state store
  answers, every worker of the host beats and finished its start (a replacement in its start
  does not count), every thread pool has its ``MinThreads`` threads, the start finished and
  the worker is not draining for a stop (one that drains for a reload answers as the service
  is, since a new generation serves).

The store is not called per probe: a probe is answered from the state a background check
keeps (:class:`StoreCheck`: a ``ping`` through the worker's :class:`StoreClient` every
second, under a short deadline, never two at once), so that a probe costs no store call and a
hung store cannot hold a probe or pile up calls. Owns: those checks and their answers. Must
not know: routes, HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from fwrest.store.calls import StoreClient

__all__ = ["PROBES", "Probes", "StoreCheck"]

PROBES = ("live", "ready", "started")
CHECK_INTERVAL_S = 1.0  # between two pings of the store
CHECK_DEADLINE_S = 0.5  # a ping that takes longer counts as a store that does not answer
# a state older than this is no state (the check stopped, or the loop stalled)
STALE_S = 3 * CHECK_INTERVAL_S + CHECK_DEADLINE_S

Answer = tuple[int, dict[str, Any]]


class StoreCheck:
    """Whether the state store answers, kept by a ping every :data:`CHECK_INTERVAL_S`.

    A store that answers in this process (memory) is always up and never pinged.
    """

    def __init__(
        self,
        client: StoreClient,
        kind: str,
        interval_s: float = CHECK_INTERVAL_S,
        deadline_s: float = CHECK_DEADLINE_S,
    ) -> None:
        self.client = client
        self.kind = kind
        self.interval_s = interval_s
        self.deadline_s = deadline_s
        self.ok: bool | None = None  # None: not checked yet
        self.error = "not checked yet"
        self.ms = 0.0
        self.checked = 0.0  # monotonic time of the last outcome
        self._job: Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """The first ping, awaited (a worker serves with its store's state known, not "not
        checked yet": a reload's new worker would answer ready 503), then one every
        interval in the background."""
        if not self.client.store.in_process:  # (not client.inline: a traced client's is False)
            await self.check()
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.check()

    async def check(self) -> None:
        """One ping, its outcome kept; a ping still running from the last round (a hung
        store holds its thread) is not joined by another."""
        if self._job is not None and not self._job.done():
            self._set(False, f"no answer within {self.deadline_s:g} s")
            return
        began = time.perf_counter()
        job = self._job = self.client.submit(self.client.store.ping)
        try:
            await asyncio.wait_for(asyncio.wrap_future(job), self.deadline_s)
        except TimeoutError:
            self._set(False, f"no answer within {self.deadline_s:g} s")
        except Exception as exc:
            self._set(False, type(exc).__name__)
        else:
            self.ms = round((time.perf_counter() - began) * 1000, 2)
            self._set(True, "")

    def _set(self, ok: bool, error: str) -> None:
        self.ok = ok
        self.error = error
        self.checked = time.monotonic()

    def state(self) -> dict[str, Any]:
        """The check as ``ready`` reports it (``status`` UP or DOWN)."""
        if self.client.store.in_process:
            return {"status": "UP", "kind": self.kind}
        if self.ok is None:
            return {"status": "DOWN", "kind": self.kind, "error": self.error}
        age = time.monotonic() - self.checked
        if age > STALE_S:
            return {"status": "DOWN", "kind": self.kind, "error": f"last checked {age:.1f} s ago"}
        if not self.ok:
            return {"status": "DOWN", "kind": self.kind, "error": self.error}
        return {"status": "UP", "kind": self.kind, "ms": self.ms}


class Probes:
    """The three probes of one worker.

    Args:
        store: the store's check (None: the service has no store).
        workers: (workers whose heartbeat is fresh, workers that finished starting, workers
            expected).
        pools: the worker's thread pools (each with ``name``, ``threads`` and ``config``).
        draining: whether the worker is draining.
        all_started: whether every worker of the host finished starting at least once
            (None: this worker's own start is the host's).
    """

    def __init__(
        self,
        store: StoreCheck | None,
        workers: Callable[[], tuple[int, int, int]],
        pools: Callable[[], Iterable[Any]],
        draining: Callable[[], bool],
        all_started: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.workers = workers
        self.pools = pools
        self.draining = draining
        self.all_started = all_started
        self.started = False

    def answer(self, probe: str) -> Answer:
        """``probe``'s status and body (``live``, ``ready`` or ``started``)."""
        if probe == "live":
            return 200, {"status": "UP"}
        if probe == "started":
            if not self.started:
                return 503, {"status": "DOWN", "checks": {"started": {"status": "DOWN"}}}
            if self.all_started is None or self.all_started():
                return 200, {"status": "UP"}
            return 503, {"status": "DOWN", "checks": {"workers": self._workers()}}
        return self.ready()

    def _workers(self) -> dict[str, Any]:
        alive, ready, expected = self.workers()
        return {
            "status": "UP" if alive >= expected and ready >= expected else "DOWN",
            "alive": alive,
            "ready": ready,
            "expected": expected,
        }

    def ready(self) -> Answer:
        checks: dict[str, dict[str, Any]] = {}
        if self.store is not None:
            checks["store"] = self.store.state()
        checks["workers"] = self._workers()
        short = {
            pool.name: {"threads": pool.threads, "min": pool.config.min_threads}
            for pool in self.pools()
            if pool.threads < pool.config.min_threads
        }
        checks["threads"] = {"status": "DOWN", "pools": short} if short else {"status": "UP"}
        checks["started"] = {"status": "UP" if self.started else "DOWN"}
        checks["draining"] = {"status": "DOWN" if self.draining() else "UP"}
        failing = {name: check for name, check in checks.items() if check["status"] != "UP"}
        if failing:
            return 503, {"status": "DOWN", "checks": failing}
        return 200, {"status": "UP", "checks": checks}
