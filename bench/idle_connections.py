"""Ten thousand idle keep-alive connections on one worker (issue 24, point 2).

Not a case of ``bench.run``: ``python -m bench.idle_connections`` starts ``fwrest serve
--workers 1`` (pinned to core 0, ``rest_log_level=1``), warms it up, and reads the worker's
resident memory; then opens ``--connections`` keep-alive connections, each sending one
request and reading its answer, and reads it again with all of them idle: the growth divided
by the connections is the RSS per idle connection (target: at most 8 KiB on a plain port;
``--tls`` measures the same over TLS, reported only). With ``--rate`` (needs ``wrk``, pinned to
core 1) it also measures the worker's rate on 64 other connections without the idle ones and
with them (target: at least 0.9x): ``--rounds`` wrk runs with the idle connections open, then
as many once they are closed, medians.

The client side raises its own ``RLIMIT_NOFILE`` (the server inherits it); each figure is
read twice, 1 s apart, and the later one is kept (the allocator settles). Run it on a quiet
machine: a load average above 0.5 is printed beside the figures. The helpers :func:`hold`
and :class:`Held` are the idle-connection test's too (tests/faults/test_idle_connections.py).

    .venv/bin/python -m bench.idle_connections                 # plain, 10,000 connections
    .venv/bin/python -m bench.idle_connections --tls --rate    # over TLS, with the rates
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource
import ssl
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import servers, wrk

REQUEST = b"GET /rest/hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
CONNECT_AT_ONCE = 200  # connections being opened at a time (the listen backlog is 256)


@dataclass(slots=True)
class Held:
    """One client connection: when it began to connect, when its request was sent and its
    answer read, when the server closed it, and what it read (the status line of its answer;
    what the server sent before closing)."""

    writer: asyncio.StreamWriter
    connecting_at: float = 0.0
    sent_at: float = 0.0
    answered_at: float = 0.0
    closed_at: float = 0.0
    status: bytes = b""
    tail: bytes = b""
    watch: asyncio.Task[None] | None = field(default=None, repr=False)


async def _watch(held: Held, reader: asyncio.StreamReader) -> None:
    """Read until the server closes the connection; note when."""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            held.tail += data
    except (ConnectionError, ssl.SSLError):
        pass
    held.closed_at = time.monotonic()


async def _open_one(
    host: str,
    port: int,
    request: bytes,
    answer: bool,
    context: ssl.SSLContext | None,
    gate: asyncio.Semaphore,
) -> Held:
    async with gate:
        connecting_at = time.monotonic()
        reader, writer = await asyncio.open_connection(host, port, ssl=context)
        held = Held(writer, connecting_at)
        if request:
            writer.write(request)
        held.sent_at = time.monotonic()
        if answer:
            head = await reader.readuntil(b"\r\n\r\n")
            held.status = head.split(b"\r\n", 1)[0]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
        held.answered_at = time.monotonic()
        held.watch = asyncio.ensure_future(_watch(held, reader))
        return held


async def hold(
    port: int,
    count: int,
    *,
    request: bytes = REQUEST,
    answer: bool = True,
    context: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
) -> list[Held]:
    """Open ``count`` connections, each sending ``request`` and (with ``answer``) reading its
    answer, then left idle; each watches for the server's close from then on. With
    ``answer=False`` ``answered_at`` is when the request was sent (an incomplete head: the
    header deadline runs from the connection's start)."""
    gate = asyncio.Semaphore(CONNECT_AT_ONCE)
    return list(
        await asyncio.gather(
            *(_open_one(host, port, request, answer, context, gate) for _ in range(count))
        )
    )


async def closed(held: list[Held], timeout: float) -> None:
    """Wait until the server has closed every connection, ``timeout`` at most."""
    watches = [h.watch for h in held if h.watch is not None]
    if watches:
        await asyncio.wait(watches, timeout=timeout)


def release(held: list[Held]) -> None:
    """Close the client side of every connection."""
    for h in held:
        if h.watch is not None:
            h.watch.cancel()
        with contextlib.suppress(Exception):
            h.writer.transport.abort()  # no lingering close: the server's socket ends at once
        h.writer.close()  # (a no-op on the aborted transport; marks the writer closed)


def raise_file_limit(wanted: int) -> tuple[int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to ``wanted`` (at most the hard limit);
    returns the limits before, to restore. Child processes inherit the new one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft, hard


# -- the measurement -----------------------------------------------------------------------------
def _worker_rss(running: servers.Running) -> int:
    """Resident bytes of the worker (the supervisor's only child with --workers 1)."""
    procs = running.processes()[1:]
    assert len(procs) == 1, f"expected one worker, found {len(procs)}"
    return int(procs[0].memory_info().rss)


def _settled_rss(running: servers.Running) -> int:
    time.sleep(1.0)
    _worker_rss(running)
    time.sleep(1.0)
    return _worker_rss(running)


def _rate(running: servers.Running, seconds: float) -> float:
    cmd = wrk.wrk_command(
        running.base_url + "/rest/hello", duration_s=seconds, connections=64, threads=1
    )
    return wrk.run(cmd, seconds).rps


def measure(connections: int, *, tls: bool, rates: int, seconds: float) -> dict[str, float]:
    """The figures of one server: RSS per idle connection, and the rates (``rates`` rounds)."""
    folder = Path(tempfile.mkdtemp(prefix="fwrest-idle-"))
    certs = servers.make_certs(folder / "certs") if tls else None
    context: ssl.SSLContext | None = None
    if certs is not None:
        context = ssl.create_default_context(cafile=None)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    config = servers.fwrest_config(
        folder,
        certs=certs,
        server_keys={"KeepAliveTimeout": 600_000, "HeaderTimeout": 600_000},
    )
    running = servers.start_fwrest(config, workers=1, cpus="0")
    port = int(running.base_url.rsplit(":", 1)[1])
    out: dict[str, float] = {}
    try:
        loop = asyncio.new_event_loop()
        # warm-up: as many requests as the idle connections will send, on 64 connections
        for _ in range(max(1, connections // 64)):
            warm = loop.run_until_complete(hold(port, 64, context=context))
            release(warm)
            loop.run_until_complete(asyncio.sleep(0))  # the watches end
        gc.collect()
        before = _settled_rss(running)
        held = loop.run_until_complete(hold(port, connections, context=context))
        statuses = {h.status for h in held}
        assert statuses == {b"HTTP/1.1 200 OK"}, statuses
        after = _settled_rss(running)
        still = sum(1 for h in held if not h.closed_at)
        out.update(
            rss_before_mib=before / 2**20,
            rss_after_mib=after / 2**20,
            per_connection_kib=(after - before) / connections / 1024,
            open_at_the_end=still,
        )
        if rates:
            with_idle = [_rate(running, seconds) for _ in range(rates)]
            release(held)
            loop.run_until_complete(asyncio.sleep(1.0))
            without = [_rate(running, seconds) for _ in range(rates)]
            out.update(
                rate_without=statistics.median(without),
                rate_with=statistics.median(with_idle),
                ratio=statistics.median(with_idle) / statistics.median(without),
            )
        else:
            release(held)
        loop.run_until_complete(asyncio.sleep(0.1))
        loop.close()
    finally:
        running.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_connections", description=__doc__)
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--tls", action="store_true", help="measure over TLS as well")
    parser.add_argument("--rate", action="store_true", help="also the rates (wrk)")
    parser.add_argument("--rounds", type=int, default=3, help="wrk runs per side (with --rate)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of a wrk run")
    args = parser.parse_args(argv)
    raise_file_limit(args.connections + 2048)
    load = os.getloadavg()[0]
    print(f"load average at the start: {load:.2f}{' (not quiet)' if load > 0.5 else ''}")
    for tls in (False, True) if args.tls else (False,):
        figures = measure(
            args.connections, tls=tls, rates=args.rounds if args.rate else 0, seconds=args.seconds
        )
        name = "TLS" if tls else "plain"
        print(
            f"{name}: {args.connections} idle connections: worker RSS "
            f"{figures['rss_before_mib']:.1f} -> {figures['rss_after_mib']:.1f} MiB, "
            f"{figures['per_connection_kib']:.2f} KiB per connection "
            f"({int(figures['open_at_the_end'])} still open when measured)"
        )
        if "ratio" in figures:
            print(
                f"{name}: rate on 64 other connections: {figures['rate_without']:.0f} req/s "
                f"without the idle ones, {figures['rate_with']:.0f} with them: "
                f"{figures['ratio']:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
