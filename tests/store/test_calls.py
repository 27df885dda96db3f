"""``StoreClient``: a call's deadline measures the store, not the queue (issue 34 defect 13); calls
block on a ``threading.Event``, no sleeps."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from fwrest.store import StoreError
from fwrest.store.calls import StoreBusy, StoreClient, StoreTimeout
from fwrest.store.memory import MemoryStore


class Threaded(MemoryStore):
    """A memory store called through threads, as a Redis store is."""

    in_process = False


@pytest.fixture
def client() -> Iterator[StoreClient]:
    client = StoreClient(Threaded(), threads=1)
    yield client
    client.close()


def test_a_call_queued_behind_a_slow_one_gets_its_deadline_from_its_start(
    client: StoreClient,
) -> None:
    release = threading.Event()
    ran: list[str] = []

    def slow() -> str:
        release.wait(5)
        return "slow"

    def quick() -> str:
        ran.append("quick")
        return "quick"

    async def main() -> tuple[str, str, float]:
        first = asyncio.ensure_future(client.call(slow, deadline=2.0))
        second_job, started = client.submit_timed(quick)
        asyncio.get_running_loop().call_later(0.3, release.set)
        # the second call waits 0.3 s for the one thread, longer than its 0.2 s deadline
        second = await client.wait(second_job, started, deadline=0.2, queue=1.0)
        return await first, second, started.took()

    first, second, took = asyncio.run(main())
    assert (first, second, ran) == ("slow", "quick", ["quick"])
    assert took < 0.2, took  # its own time, not the 0.3 s it waited for the thread


def test_a_call_no_thread_starts_within_its_queue_bound_is_busy_and_never_runs(
    client: StoreClient,
) -> None:
    release = threading.Event()
    ran: list[str] = []

    async def main() -> BaseException:
        hung = asyncio.ensure_future(client.call(release.wait, 5, deadline=3.0))
        await asyncio.sleep(0.05)
        job, started = client.submit_timed(ran.append, "queued")
        began = time.monotonic()
        try:
            await client.wait(job, started, deadline=0.2, queue=0.3)
        except StoreError as exc:
            print(f"refused after {time.monotonic() - began:.3f} s (queue bound 0.3 s)")
            release.set()
            await hung
            return exc
        raise AssertionError("the queued call was answered")

    exc = asyncio.run(main())
    assert isinstance(exc, StoreBusy) and isinstance(exc, TimeoutError)
    assert "no store thread of this worker was free within 0.3 s" in str(exc)
    time.sleep(0.1)
    assert ran == []  # cancelled before a thread took it


def test_a_call_that_hangs_once_started_is_a_timeout_not_busy(client: StoreClient) -> None:
    release = threading.Event()

    async def main() -> BaseException:
        began = time.monotonic()
        try:
            await client.call(release.wait, 5, deadline=0.2)
        except StoreError as exc:
            print(f"gave up after {time.monotonic() - began:.3f} s (deadline 0.2 s)")
            return exc
        finally:
            release.set()
        raise AssertionError("the hung call was answered")

    exc = asyncio.run(main())
    assert type(exc) is StoreTimeout and str(exc) == "no answer within 0.2 s"


def test_a_call_after_the_client_is_closed_is_a_store_error(client: StoreClient) -> None:
    """After the pool shut down: a StoreError the loops catch, no never-retrieved RuntimeError."""
    client.close()

    async def main() -> BaseException:
        try:
            await client.call(time.monotonic)
        except Exception as exc:
            return exc
        raise AssertionError("a closed client made a call")

    exc = asyncio.run(main())
    assert type(exc) is StoreError and "closed" in str(exc), repr(exc)
    with pytest.raises(StoreError):
        client.submit(time.monotonic)
