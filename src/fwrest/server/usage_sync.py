"""The usage figures of the whole service (SPEC 5 ``/fw/rest/usage/time``): each worker's
tables published to the state store every second, merged on request, reset everywhere.

Owns: the publishing loop, the reset epoch, the reset signal between the workers of a host.
Must not know: ports, routes, HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import orjson
import psutil

from fwrest import log
from fwrest.server.usage import UsageTable, merge
from fwrest.store import BlobStore, StoreError
from fwrest.store.calls import StoreClient, call_store

__all__ = ["UsageSync"]

T = TypeVar("T")

_STALE_S = 5.0  # a worker that has not published for this long is gone
_PUBLISH_EVERY_S = 1.0
_PREFIX = "usage:"
_EPOCH = "epoch:usage"


def _siblings(parent_pid: int) -> list[int]:
    """The other workers of this host's supervisor."""
    try:
        children = psutil.Process(parent_pid).children()
    except psutil.Error:
        return []
    return [child.pid for child in children if child.pid != os.getpid()]


class UsageSync:
    """One worker's share of the service's usage figures.

    Args:
        store: the state store (None: this worker's figures only).
        tables: this worker's usage tables (one per port), read when needed.
        parent_pid: the supervisor, whose other children are told of a reset.
        client: how the store is called (the worker's; else asyncio's executor).
    """

    def __init__(
        self,
        store: BlobStore | None,
        tables: Callable[[], Iterable[UsageTable]],
        parent_pid: int | None,
        client: StoreClient | None = None,
    ) -> None:
        self.store = store
        self._client = client
        self.tables = tables
        self.parent_pid = parent_pid
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self._epoch = b""
        self._task: asyncio.Task[None] | None = None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._client is not None:
            return await self._client.call(fn, *args)
        return await call_store(fn, *args)

    def _rows(self) -> list[list[Any]]:
        return [row for table in self.tables() for row in table.export()]

    def _reset_tables(self) -> None:
        for table in self.tables():
            table.reset()

    async def figures(self) -> dict[str, Any]:
        """Usage figures of every live worker of the service."""
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        per_worker: dict[str, list[list[Any]]] = {}
        store = self.store
        if store is not None:
            with contextlib.suppress(StoreError, TimeoutError):
                await self._publish_once()
                blobs = await self._call(store.blobs, _PREFIX)
                now = time.time()
                for name, blob in blobs.items():
                    data = orjson.loads(blob)
                    # a worker that stopped publishing (gone, or a previous run) is left out
                    if isinstance(data, dict) and now - float(data.get("t", 0)) < _STALE_S:
                        per_worker[name[len(_PREFIX) :]] = data.get("rows", [])
        per_worker[self.identity] = self._rows()
        return merge(per_worker)

    async def reset(self) -> None:
        """Start the figures from zero in every worker: at once on this host (SIGUSR1 to the
        other workers), within a second on other hosts (the epoch in the store)."""
        store = self.store
        epoch = secrets.token_hex(8).encode()
        if store is not None:
            # first: a store that fails here leaves every figure as it was (the route's 503)
            await self._call(store.put_blob, _EPOCH, epoch)
        self._reset_tables()
        self._epoch = epoch
        if store is not None:
            # the workers' published figures: each republishes its zeroed ones within a
            # second of seeing the epoch, so a failure here only delays that
            with contextlib.suppress(StoreError, TimeoutError):
                await self._call(store.delete_blobs, _PREFIX)
        if self.parent_pid is not None:
            for pid in _siblings(self.parent_pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGUSR1)

    def on_reset_signal(self, loop: asyncio.AbstractEventLoop) -> None:
        """SIGUSR1 from a sibling that reset the figures."""
        self._reset_tables()
        loop.create_task(self._adopt_epoch())

    async def _adopt_epoch(self) -> None:
        if self.store is None:
            return
        with contextlib.suppress(StoreError, TimeoutError):
            epochs = await self._call(self.store.blobs, _EPOCH)
            self._epoch = epochs.get(_EPOCH, self._epoch)

    async def _publish_once(self) -> None:
        store = self.store
        if store is None:
            return
        epochs = await self._call(store.blobs, _EPOCH)
        epoch = epochs.get(_EPOCH, b"")
        if epoch != self._epoch:
            if self._epoch or epoch:
                self._reset_tables()
            self._epoch = epoch
        blob = orjson.dumps({"t": time.time(), "rows": self._rows()})
        await self._call(store.put_blob, f"{_PREFIX}{self.identity}", blob)

    async def _publish(self) -> None:
        while True:
            await asyncio.sleep(_PUBLISH_EVERY_S)
            try:
                await self._publish_once()
            except (StoreError, TimeoutError) as exc:
                log.server_log.debug("usage figures not published: %s", exc)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._publish())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
