"""SPEC 7: the revocation cache's loop ends at ``stop()`` even when the cancel is lost (3.11's
``wait_for`` drops a cancel arriving as the call ends; the loop ran again against the closed client:
"Task exception was never retrieved")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from fwrest.auth.oauth2.params import ParamsSource
from fwrest.auth.oauth2.tokens import TokenService
from fwrest.store.calls import BACKGROUND_DEADLINE_S, StoreClient
from fwrest.store.memory import MemoryStore

T = TypeVar("T")


class Threaded(MemoryStore):
    """A memory store called through threads, as a Redis store is."""

    in_process = False


class AnswersAsCancelled(StoreClient):
    """Each call answers as its caller is cancelled, the cancel dropped (3.11's ``wait_for``)."""

    def __init__(self, store: Threaded) -> None:
        super().__init__(store, threads=1)
        self.calls = 0
        self.entered = asyncio.Event()

    async def call(
        self, fn: Callable[..., T], *args: Any, deadline: float = BACKGROUND_DEADLINE_S
    ) -> T:
        self.calls += 1
        answer = await super().call(fn, *args, deadline=deadline)
        self.entered.set()
        with contextlib.suppress(asyncio.CancelledError):  # dropped: the caller goes on
            await asyncio.sleep(30)
        return answer


@pytest.mark.anyio
async def test_the_revocation_loop_ends_at_stop_when_its_cancel_is_dropped() -> None:
    store = Threaded()
    client = AnswersAsCancelled(store)
    params = {"client_id": "web", "username": "ada", "password": "Ada-Pw-1"}
    service = TokenService(port_name="OAUTH", key=b"k" * 32, store=store,
                           source=ParamsSource(lambda: params, None), max_failures=10,
                           allow_get=False, client=client)  # fmt: skip
    service.start()
    loop_task = service._refresher
    assert loop_task is not None
    await asyncio.wait_for(client.entered.wait(), 5)
    service.stop()  # the cancel lands on the call, which drops it
    client.close()  # the service's shutdown closes the store's threads next
    done, _ = await asyncio.wait({loop_task}, timeout=2.0)  # 4 rounds of 0.5 s
    if not done:
        loop_task.cancel()
    assert done, f"the loop still ran after stop ({client.calls} store calls)"
    exc = None if loop_task.cancelled() else loop_task.exception()
    assert exc is None, repr(exc)
    assert client.calls == 1
