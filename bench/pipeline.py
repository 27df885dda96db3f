"""Time fwrest's request pipeline in process, without sockets: ``PortApp.handle`` per request.

The throughput cases measure a whole server, where the HTTP layer and the load generator
share the figure; this tool isolates what fwrest adds on top of its engine (normalise, guard,
route, call, serialise, usage figures), so that a change to the pipeline shows as
nanoseconds per request. It builds the ports exactly as a worker does (same config loader,
same plan, same guards), then calls ``handle`` on one prepared request in a loop.

``python -m bench.pipeline`` prints ns per request for each job; ``--profile JOB`` prints the
cProfile top of that job instead.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from bench.apps import common
from bench.run import features_config
from bench.servers import fwrest_config
from fwrest.auth.basic import BasicGuard
from fwrest.config import load_config
from fwrest.server.app import PortApp, Request
from fwrest.server.assembly import location_stages, static_files
from fwrest.server.build import build_plan
from fwrest.server.pool import ThreadPool

_BASIC = "Basic " + base64.b64encode(f"{common.USER}:{common.PASSWORD}".encode()).decode()
# job -> (FwData of the port, path, extra headers)
JOBS: dict[str, tuple[dict[str, Any] | None, str, list[tuple[str, str]]]] = {
    "open": (None, "/rest/hello", []),
    "basic-async": (
        {"Authorization": {"scheme": "basic", "OnAuth": "acheck_user"}},
        "/rest/hello",
        [("authorization", _BASIC)],
    ),
    "basic-def": (
        {"Authorization": {"scheme": "basic", "OnAuth": "check_user"}},
        "/rest/hello",
        [("authorization", _BASIC)],
    ),
    "def-handler": (None, "/rest/hello-sync", []),
    # case 10: the open endpoint with SPEC 10's location features configured, not triggered
    "features": (None, "/rest/hello", [("accept-encoding", "gzip, deflate, br")]),
    "no-features": (None, "/rest/hello", [("accept-encoding", "gzip, deflate, br")]),
    # the open endpoint with an async OnSend that sets one header (SPEC 11.1), beside "open"
    "on-send": (None, "/rest/hello", []),
    # case 16: a typed int path parameter beside an untyped one, a 1 KiB JSON body (SPEC 14.1)
    "typed-path": (None, "/rest/items/12345", []),
    "untyped-path": (None, "/rest/items-text/12345", []),
    "typed-body": (None, "/rest/orders", [("content-type", "application/json")]),
}
_BODIES = {"typed-body": common.ORDER_JSON.encode()}  # POSTed; the other jobs GET
_ON_SEND = {
    "sections": {
        "POOL": {
            "Environment": "ENV",
            "MinThreads": 1,
            "MaxThreads": 8,
            "OnSend": "bench.apps.fw_app.stamp",
        }
    }
}
_HEADERS = [("host", "127.0.0.1"), ("user-agent", "bench"), ("accept", "*/*")]


def build_app(job: str, folder: Path, loop: asyncio.AbstractEventLoop) -> tuple[PortApp, Request]:
    fw_data, path, extra = JOBS[job]
    keys = features_config(folder) if job == "features" else _ON_SEND if job == "on-send" else {}
    config = load_config(fwrest_config(folder, fw_data=fw_data, **keys))
    plan = build_plan(config)
    port = plan.ports[0]
    pools: dict[str, ThreadPool] = {}
    for loc in port.locations:
        pools.setdefault(loc.pool_name.lower(), ThreadPool(loc.config.thread_pool, loop))
    settings = port.auth_settings
    pool = pools[port.locations[0].pool_name.lower()]  # as the worker does
    guard = BasicGuard(settings, port.config.name, None, pool) if settings is not None else None
    early, outgoing = location_stages(port)
    app = PortApp(
        port,
        pools,
        guard,
        early=early,
        outgoing=outgoing,
        files=static_files(port),
        hooks=plan.hooks,
    )
    body = _BODIES.get(job, b"")
    method = "POST" if body else "GET"
    headers = [*_HEADERS, *extra]
    if body:
        headers.append(("content-length", str(len(body))))
    request = Request(method, path.encode(), headers, body, "127.0.0.1", 8080)
    return app, request


async def _client(app: PortApp, request: Request, count: int) -> None:
    handle = app.handle
    for _ in range(count):
        await handle(request)


async def _run(app: PortApp, request: Request, count: int, concurrency: int = 1) -> int:
    """ns per request over ``count`` requests from ``concurrency`` clients (after a warm-up).

    Each client is a task, as each connection's request is in the server; with more than
    one, a ``def`` function's thread hops overlap as they do under load.
    """
    for _ in range(2000):
        reply = await app.handle(request)
        if reply.status != 200:
            raise SystemExit(f"the job answered {reply.status}: {reply.body!r}")
    each = max(1, count // concurrency)
    started = time.perf_counter_ns()
    await asyncio.gather(*(_client(app, request, each) for _ in range(concurrency)))
    return (time.perf_counter_ns() - started) // (each * concurrency)


def measure(job: str, count: int, repeat: int, concurrency: int = 1) -> list[int]:
    with tempfile.TemporaryDirectory(prefix="fwrest-pipeline-") as tmp:
        loop = uvloop.new_event_loop()
        try:
            app, request = build_app(job, Path(tmp), loop)
            return [
                loop.run_until_complete(_run(app, request, count, concurrency))
                for _ in range(repeat)
            ]
        finally:
            loop.close()


def profile(job: str, count: int, top: int, concurrency: int = 1) -> None:
    with tempfile.TemporaryDirectory(prefix="fwrest-pipeline-") as tmp:
        loop = uvloop.new_event_loop()
        try:
            app, request = build_app(job, Path(tmp), loop)
            prof = cProfile.Profile()
            run: Callable[[], Any] = lambda: loop.run_until_complete(  # noqa: E731
                _run(app, request, count, concurrency)
            )
            prof.runcall(run)
        finally:
            loop.close()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(JOBS), help="comma-separated jobs")
    parser.add_argument("--count", type=int, default=100_000, help="requests per repeat")
    parser.add_argument("--repeat", type=int, default=5, help="repeats; the best is shown")
    parser.add_argument(
        "--concurrency", type=int, default=1, help="requests in flight at once (default 1)"
    )
    parser.add_argument("--profile", metavar="JOB", help="print the cProfile top of one job")
    args = parser.parse_args(argv)
    if args.profile:
        profile(args.profile, args.count, 25, args.concurrency)
        return 0
    for job in args.jobs.split(","):
        times = measure(job, args.count, args.repeat, args.concurrency)
        print(f"{job:12s} {min(times):7,d} ns/request (best of {args.repeat}: {times})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
