"""The pipeline in process (``PortApp.handle``): its memory of paths (normalised form and location)
is bounded, never holds a refused target, and never lets a query or parameters reach another
request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import uvloop

from fwrest.config import load_config
from fwrest.server import app as app_module
from fwrest.server.app import PortApp, Request
from fwrest.server.build import build_plan
from fwrest.server.handler import Reply
from fwrest.server.pool import ThreadPool
from tests.conftest import free_config


@pytest.fixture
def port_app(tmp_path: Path) -> Iterator[tuple[PortApp, asyncio.AbstractEventLoop]]:
    loop = uvloop.new_event_loop()
    plan = build_plan(load_config(free_config(tmp_path)))
    port = plan.ports[0]
    pools = {at.pool_name.lower(): ThreadPool(at.config.thread_pool, loop) for at in port.locations}
    try:
        yield PortApp(port, pools), loop
    finally:
        for pool in pools.values():
            pool.shutdown()
        loop.close()


def _ask(app: PortApp, loop: asyncio.AbstractEventLoop, method: str, target: str) -> Reply:
    request = Request(method, target.encode("latin-1"), [("host", "x")], b"", "127.0.0.1", 1)
    return loop.run_until_complete(app.handle(request))


def test_the_remembered_paths_are_bounded(
    port_app: tuple[PortApp, asyncio.AbstractEventLoop],
) -> None:
    app, loop = port_app
    limit = app_module._PATH_CACHE_SIZE
    for i in range(limit + 500):
        assert _ask(app, loop, "GET", f"/rest/nowhere/{i}").status == 404
    assert 0 < len(app._paths) <= limit
    # a target longer than the key limit is served, but not remembered
    long_id = "x" * app_module._PATH_KEY_MAX
    reply = _ask(app, loop, "GET", f"/rest/items/{long_id}")
    assert reply.status == 200 and orjson.loads(reply.body) == {"id": long_id}
    assert f"/rest/items/{long_id}".encode() not in app._paths


def test_a_refused_target_is_refused_every_time_and_not_remembered(
    port_app: tuple[PortApp, asyncio.AbstractEventLoop],
) -> None:
    app, loop = port_app
    for _ in range(3):
        reply = _ask(app, loop, "GET", "/rest/items/a%2Fb")
        assert reply.status == 400, reply.body
        assert b"encoded slash" in reply.body
        assert _ask(app, loop, "GET", "/rest/../../etc").status == 400
        assert _ask(app, loop, "GET", "/rest/items/1?q=\xff").status == 400
    assert not any(b"%2F" in key or b".." in key for key in app._paths)


def test_one_path_with_other_queries_and_spellings_gives_each_request_its_own(
    port_app: tuple[PortApp, asyncio.AbstractEventLoop],
) -> None:
    app, loop = port_app
    seen = []
    for target in (
        "/rest/items/7?a=1",
        "/rest//items/./7/?a=2",
        "/rest/items/%37",
        "/rest/items/8",
    ):
        reply = _ask(app, loop, "GET", target)
        assert reply.status == 200, (target, reply.body)
        seen.append(orjson.loads(reply.body)["id"])
    assert seen == ["7", "7", "7", "8"]
    # the query of one request never reaches the next one on the same path
    for query in ("x=1", "x=2", ""):
        target = "/rest/echo" + (f"?{query}" if query else "")
        reply = _ask(app, loop, "POST", target)
        expected = dict([query.split("=")]) if query else {}
        assert orjson.loads(reply.body)["query"] == expected
    # absolute-form targets resolve like their path
    reply = _ask(app, loop, "GET", "http://example.test/rest/items/9?z=1")
    assert orjson.loads(reply.body) == {"id": "9"}
