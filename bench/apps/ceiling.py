"""The ceiling: a bare app on fwrest's own HTTP engine (``fwrest.server.http.HttpProtocol``
on uvloop), doing each case's job in the fewest lines and nothing else: no router, no
request context, no usage figures, no access log.

``python -m bench.apps.ceiling --job open [--cert C --key K]`` prints
``ceiling: serving URL`` once listening, and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qsl

import orjson
import uvloop

from bench.apps import common
from fwrest.config.model import ServerConfig
from fwrest.server.app import Request
from fwrest.server.handler import Reply
from fwrest.server.http import ConnectionSet, HttpProtocol

JSON = [("content-type", "application/json")]
_store = common.RefreshStore()
_pool = ThreadPoolExecutor(8, thread_name_prefix="ceiling")


def _header(req: Request, wanted: str) -> str | None:
    for name, value in req.headers:
        if name == wanted:
            return value
    return None


def _json(status: int, obj: object) -> Reply:
    return Reply(status, list(JSON), orjson.dumps(obj))


async def job_open(req: Request) -> Reply:
    return _json(200, common.hello())


async def job_basic(req: Request) -> Reply:
    if common.check_basic_header(_header(req, "authorization")) is None:
        return _json(401, {"error": "unauthorized"})
    return _json(200, common.hello())


async def job_bearer(req: Request) -> Reply:
    if common.check_bearer_header(_header(req, "authorization")) is None:
        return _json(401, {"error": "invalid_token"})
    return _json(200, common.hello())


async def job_token(req: Request) -> Reply:
    form = dict(parse_qsl(req.body.decode("utf-8", "replace")))
    status, body = common.password_grant(form, _store)
    return _json(status, body)


async def job_sync(req: Request) -> Reply:
    result = await asyncio.get_running_loop().run_in_executor(_pool, common.blocking_work)
    return _json(200, result)


JOBS: dict[str, Callable[[Request], Awaitable[Reply]]] = {
    "open": job_open,
    "basic": job_basic,
    "bearer": job_bearer,
    "token": job_token,
    "sync": job_sync,
}


class CeilingApp:
    """The minimal :class:`fwrest.wire.PortHandler` HttpProtocol serves: the job as
    ``handle``, fwrest's default body limit, every ``100 Continue`` admitted."""

    engine_headers: tuple[tuple[str, str], ...] = ()

    def __init__(self, job: Callable[[Request], Awaitable[Reply]], body_limit: int) -> None:
        self.handle = job
        self._body_limit = body_limit

    def body_limit(self, target: bytes, length: int, chunked: bool) -> int:
        return self._body_limit

    async def admit(self, head: Request) -> Reply | None:
        return None


async def serve(job: str, cert: Path | None, key: Path | None) -> None:
    loop = asyncio.get_running_loop()
    cfg = ServerConfig(
        name="CEILING",
        host="127.0.0.1",
        port=0,
        locations=(),
        ssl_certificate=cert,
        ssl_certificate_key=key,
    )
    app = CeilingApp(JOBS[job], cfg.max_body_size)
    conns = ConnectionSet()
    server = await loop.create_server(
        lambda: HttpProtocol(app, cfg, conns, loop),
        host=cfg.host,
        port=0,
        ssl=cfg.ssl_context(),
        ssl_handshake_timeout=cfg.tls_handshake_timeout_ms / 1000 if cfg.is_tls else None,
        backlog=2048,
    )
    port = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"ceiling: serving {cfg.scheme}://127.0.0.1:{port}", flush=True)
    await stop.wait()
    server.close()
    conns.drain()
    _pool.shutdown(wait=False, cancel_futures=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--job", choices=sorted(JOBS), required=True)
    parser.add_argument("--cert", type=Path)
    parser.add_argument("--key", type=Path)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.job, args.cert, args.key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
