"""Slowloris (SPEC 7, issue 9): 256 connections trickle a byte every 100 ms, ``HeaderTimeout`` 1000
ms: each is 408 and closed at about the deadline while a normal client is served (latencies
printed). One worker: all share one loop, the hardest case."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from pathlib import Path

import httpx

from tests.conftest import ServerProcess, free_config, local_port
from tests.faults.support import FAULT_APP, figures

CONNECTIONS = 256
TRICKLE_S = 0.1  # one byte per connection every 100 ms
DEADLINE_MS = 1000  # HeaderTimeout, shortened
HANG_GUARD_S = 10.0  # the whole attack must end within this (it ends after about 1 s)
# A head that never completes at 10 bytes a second: the request line and a long header.
SLOW_HEAD = b"GET /rest/hello HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 500


class Slow:
    __slots__ = ("closed_at", "connected_at", "first_byte_at", "received", "sent", "sock")

    def __init__(self, port: int) -> None:
        # before the connect: the server's clock starts at accept (taken after, on a loaded machine,
        # the life looks shorter than the deadline)
        self.connected_at = time.monotonic()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setblocking(False)
        self.sent = 0
        self.received = b""
        self.first_byte_at = 0.0
        self.closed_at = 0.0

    def trickle(self) -> None:
        try:
            self.sock.send(SLOW_HEAD[self.sent : self.sent + 1])
        except (BrokenPipeError, ConnectionResetError):
            self.closed(time.monotonic())
            return
        except BlockingIOError:
            return
        if self.sent == 0:
            self.first_byte_at = time.monotonic()
        self.sent += 1

    def readable(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except BlockingIOError:
            return
        except ConnectionResetError:
            chunk = b""
        if chunk:
            self.received += chunk
        else:
            self.closed(time.monotonic())

    def closed(self, when: float) -> None:
        if not self.closed_at:
            self.closed_at = when
        self.sock.close()


def attack(port: int) -> list[Slow]:
    """Open the connections, trickle bytes until the server has closed every one of them."""
    slows = [Slow(port) for _ in range(CONNECTIONS)]
    selector = selectors.DefaultSelector()
    try:
        for slow in slows:
            selector.register(slow.sock, selectors.EVENT_READ, slow)
        guard = time.monotonic() + HANG_GUARD_S
        next_tick = time.monotonic()
        while time.monotonic() < guard:
            open_ = [s for s in slows if not s.closed_at]
            if not open_:
                break
            if time.monotonic() >= next_tick:
                for slow in open_:
                    slow.trickle()
                next_tick += TRICKLE_S
            for key, _ in selector.select(max(0.0, next_tick - time.monotonic())):
                slow = key.data
                if not slow.closed_at:
                    slow.readable()
                    if slow.closed_at:
                        selector.unregister(slow.sock)
    finally:
        for slow in slows:
            if not slow.closed_at:
                slow.sock.close()
        selector.close()
    return slows


def test_slowloris_connections_close_at_the_deadline_while_others_are_served(
    tmp_path: Path,
) -> None:
    servers = {"HTTP_REST": local_port(HeaderTimeout=DEADLINE_MS)}
    config = free_config(tmp_path, app=FAULT_APP, servers=servers)
    proc = ServerProcess(config, workers=1).wait_ready()
    try:
        base, port = proc.url(), proc.ports["HTTP_REST"]
        latencies: list[tuple[float, float, int | str]] = []  # (started, took, status)
        done = threading.Event()

        def normal_client() -> None:
            with httpx.Client(timeout=HANG_GUARD_S) as client:
                while not done.is_set():
                    started = time.monotonic()
                    try:
                        status: int | str = client.get(
                            f"{base}/hello", headers={"Connection": "close"}
                        ).status_code
                    except httpx.HTTPError as exc:
                        status = repr(exc)
                    latencies.append((started, time.monotonic() - started, status))
                    time.sleep(0.01)

        client = threading.Thread(target=normal_client, daemon=True)
        client.start()
        time.sleep(0.3)  # a baseline before the attack
        began = time.monotonic()
        slows = attack(port)
        ended = time.monotonic()
        time.sleep(0.3)
        done.set()
        client.join(HANG_GUARD_S + 5)
        assert not client.is_alive()

        still_open = [s for s in slows if not s.closed_at]
        assert not still_open, f"{len(still_open)} slow connections were never closed"
        lives = [s.closed_at - s.connected_at for s in slows]
        after_first_byte = [s.closed_at - s.first_byte_at for s in slows]
        sent = [s.sent for s in slows]
        print(
            f"{CONNECTIONS} slow connections, HeaderTimeout={DEADLINE_MS} ms: closed after "
            f"{figures(lives)} (from connect); {figures(after_first_byte)} (from the first "
            f"byte); {min(sent)}-{max(sent)} bytes sent each; attack lasted {ended - began:.3f} s"
        )
        answers = {s.received.split(b"\r\n", 1)[0] for s in slows}
        assert answers == {b"HTTP/1.1 408 Request Timeout"}, answers
        # closed at about the deadline: never before it, and not long after it
        assert min(lives) >= DEADLINE_MS / 1000 * 0.95, sorted(lives)[:5]
        assert max(lives) <= DEADLINE_MS / 1000 + 2.0, sorted(lives)[-5:]
        assert max(sent) < len(SLOW_HEAD)  # no head ever completed

        during = [(t, took, st) for t, took, st in latencies if began <= t <= ended]
        statuses = {st for _, _, st in latencies}
        print(
            f"normal client: {len(latencies)} requests, {len(during)} during the attack; "
            f"latency during the attack {figures(took for _, took, _ in during)}; "
            f"before/after {figures(took for t, took, _ in latencies if not began <= t <= ended)}"
        )
        assert statuses == {200}, statuses
        assert len(during) >= 5, f"the normal client got only {len(during)} answers meanwhile"
    finally:
        code = proc.stop()
    log = proc.log()
    timeouts = log.count(f"sent no complete headers within {DEADLINE_MS} ms")
    print(f"server log: {timeouts} header-timeout lines; exit code {code}")
    assert timeouts == CONNECTIONS
    assert code == 0
