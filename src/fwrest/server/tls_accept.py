"""TLS ports: at most :data:`MAX_HANDSHAKES` handshakes in progress per worker (SPEC 7.1).

A connection whose TLS handshake is in progress costs the worker about 50 KB (uvloop's
``SSLProtocol`` and OpenSSL's state and buffers), and a client that opens connections and sends
nothing holds each one for ``TlsHandshakeTimeout``; the loop's own ``create_server`` holds as
many as arrive, so a wave of stalled handshakes grew a worker by hundreds of MB (docs/security.md,
second review). Here the worker accepts on its TLS sockets itself and counts the handshakes in
progress; a connection accepted while :data:`MAX_HANDSHAKES` are in progress ends the oldest one
(its socket is shut down, so the loop's TLS layer fails it and frees its state). A client
completes its handshake within a few round trips, so only a handshake that waits while the cap's
worth of newer connections arrive is ended; not accepting instead would let the cap's worth of
silent connections shut the port for everyone. The heap that a wave leaves free is given back to
the system (glibc's ``malloc_trim``) when the last handshake of a large wave ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import platform
import socket
import ssl
from collections.abc import Callable
from typing import Any

from fwrest import log

__all__ = ["MAX_HANDSHAKES", "HandshakeGate", "TlsListener"]

MAX_HANDSHAKES = 256  # per worker, over all its TLS ports (docs/decisions.md)
TRIM_AFTER = 64  # a wave at least this high gives its free heap back when it ends
_ACCEPT_BATCH = 64  # connections accepted per wake-up of a listening socket
_ACCEPT_RETRY_S = 1.0  # after EMFILE/ENFILE/ENOBUFS/ENOMEM, as asyncio's own servers do


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None elsewhere (musl, macOS)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # pragma: no cover - glibc always has it
        return None
    return trim


class HandshakeGate:
    """The TLS handshakes in progress of one worker, over all its TLS ports."""

    def __init__(self, limit: int = MAX_HANDSHAKES) -> None:
        self.limit = limit
        self.pending = 0  # handshakes whose task has not ended, evicted ones included
        self.peak = 0  # highest `pending` since the heap was last trimmed
        self.evicted = 0  # handshakes ended by the cap, over the worker's life
        # the handshakes that may still be evicted, oldest first (their sockets)
        self.live: dict[asyncio.Task[Any], socket.socket] = {}
        self._warned = False  # this wave's eviction was logged
        self._trim = _malloc_trim()

    def enter(self, task: asyncio.Task[Any], conn: socket.socket) -> None:
        """A new handshake: above the cap, the oldest one in progress ends."""
        if len(self.live) >= self.limit:
            oldest = self.live.pop(next(iter(self.live)))
            self.evicted += 1
            if not self._warned:
                self._warned = True
                log.server_log.warning(
                    "%d TLS handshakes in progress: ending the oldest as new connections arrive",
                    self.limit,
                )
            with contextlib.suppress(OSError):  # already closed by the loop
                oldest.shutdown(socket.SHUT_RDWR)
        self.live[task] = conn
        self.pending += 1
        self.peak = max(self.peak, self.pending)

    def leave(self, task: asyncio.Task[Any]) -> None:
        self.live.pop(task, None)
        self.pending -= 1
        if self.pending == 0:
            self._warned = False
            if self.peak >= TRIM_AFTER:
                self.peak = 0
                if self._trim is not None:
                    self._trim(0)


class TlsListener:
    """Accepts on one TLS listening socket, the handshakes counted by a :class:`HandshakeGate`.

    Has the ``close()`` of the server ``create_server`` returns (stop accepting; the socket
    stays the supervisor's).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        context: ssl.SSLContext,
        handshake_timeout_s: float,
        gate: HandshakeGate,
    ) -> None:
        self.loop = loop
        self.sock = sock
        self.factory = factory
        self.context = context
        self.handshake_timeout_s = handshake_timeout_s
        self.gate = gate
        self.port = sock.getsockname()[1]
        self.tasks: set[asyncio.Task[Any]] = set()
        self._reading = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        sock.setblocking(False)
        self._resume()

    def _resume(self) -> None:
        self._retry = None
        if not self._reading and not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)
            self._reading = True

    def _pause(self) -> None:
        if self._reading:
            self.loop.remove_reader(self.sock.fileno())
            self._reading = False

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # out of descriptors or memory: wait, as asyncio does
                log.server_log.error("accepting a TLS connection failed: %s", exc)
                self._pause()
                self._retry = self.loop.call_later(_ACCEPT_RETRY_S, self._resume)
                return
            conn.setblocking(False)
            task = self.loop.create_task(self._handshake(conn, peer))
            self.gate.enter(task, conn)
            self.tasks.add(task)
            task.add_done_callback(self._done)

    async def _handshake(self, conn: socket.socket, peer: Any) -> None:
        try:
            await self.loop.connect_accepted_socket(
                self.factory,
                conn,
                ssl=self.context,
                ssl_handshake_timeout=self.handshake_timeout_s,
                ssl_shutdown_timeout=2.0,
            )
        except Exception as exc:  # any failure ends this connection only
            # the deadline passed, the client left, spoke no TLS, sent no certificate or one
            # of an unknown CA (SPEC 11.2), or was evicted: the loop closed it (a closed socket
            # object has no descriptor left: this closes nothing twice). The loop's TLS layer
            # sends no alert then: the client sees the connection end.
            conn.close()
            if log.server_log.isEnabledFor(log.VERBOSE):  # rest_log_level 4 and 5
                where = peer[0] if isinstance(peer, tuple) and peer else "?"
                reason = getattr(exc, "reason", None) or type(exc).__name__
                log.write(
                    log.server_log,
                    log.VERBOSE,
                    "TLS handshake with %s failed: %s port=%d",
                    where,
                    reason,
                    self.port,
                )

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        self.gate.leave(task)

    def close(self, *, handshakes: bool = True) -> None:
        """Stop accepting and end the handshakes in progress (graceful drain); for a reload
        (``handshakes=False``) let them finish: their connections are served."""
        self._closed = True
        self._pause()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if handshakes:
            for task in list(self.tasks):
                task.cancel()
