"""Raw ASGI apps on uvicorn (httptools + uvloop): no framework, each case's job inline.

uvicorn is started with ``--factory bench.apps.asgi_raw:JOB_app`` (one factory per job).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl

import orjson

from bench.apps import common

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
HEADERS = [(b"content-type", b"application/json")]
MAX_BODY = 16384


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


async def _lifespan(receive: Receive, send: Send) -> None:
    for _ in range(2):  # startup, then shutdown
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _reply(send: Send, status: int, obj: object) -> None:
    await send({"type": "http.response.start", "status": status, "headers": HEADERS})
    await send({"type": "http.response.body", "body": orjson.dumps(obj)})


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    for _ in range(MAX_BODY):  # bounded: each message carries at least one byte or ends
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            break
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _app(job: Callable[[Scope, Receive, Send], Awaitable[None]]) -> App:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        await job(scope, receive, send)

    return app


async def _open(scope: Scope, receive: Receive, send: Send) -> None:
    await _reply(send, 200, common.hello())


async def _basic(scope: Scope, receive: Receive, send: Send) -> None:
    if common.check_basic_header(_header(scope, b"authorization")) is None:
        await _reply(send, 401, {"error": "unauthorized"})
        return
    await _reply(send, 200, common.hello())


async def _bearer(scope: Scope, receive: Receive, send: Send) -> None:
    if common.check_bearer_header(_header(scope, b"authorization")) is None:
        await _reply(send, 401, {"error": "invalid_token"})
        return
    await _reply(send, 200, common.hello())


def token_app() -> App:
    store = common.RefreshStore()

    async def _token(scope: Scope, receive: Receive, send: Send) -> None:
        form = dict(parse_qsl((await _body(receive)).decode("utf-8", "replace")))
        status, body = common.password_grant(form, store)
        await _reply(send, status, body)

    return _app(_token)


def sync_app() -> App:
    pool = ThreadPoolExecutor(8, thread_name_prefix="asgi-sync")

    async def _sync(scope: Scope, receive: Receive, send: Send) -> None:
        result = await asyncio.get_running_loop().run_in_executor(pool, common.blocking_work)
        await _reply(send, 200, result)

    return _app(_sync)


def open_app() -> App:
    return _app(_open)


def basic_app() -> App:
    return _app(_basic)


def bearer_app() -> App:
    return _app(_bearer)
