"""The REST object (SPEC 3) from handlers in process: every named method, read-only request views,
per-request isolation under concurrency."""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from fwrest.testing import Client
from tests.conftest import local_port, module_config

APP = """
import asyncio
import random
import time

from fwrest import delete, get, patch, post, put, rest

def describe(a, b):
    headers = rest.getHeaderRequest()
    return {
        "args": [a, b], "params": dict(rest.getPathParamsRequest()),
        "query": dict(rest.getQueryRequest()), "header": headers.get("X-Probe"),
        "header_lower": headers["x-probe"], "has_header": "X-PROBE" in headers,
        "body": rest.getBodyRequest(), "method": rest.getMethodRequest(),
        "path": rest.getPathRequest(), "user": rest.getAuthUser(),
        "user_data": rest.getServerUserData(),
        "scheme": rest.getCEntryPointAuthorizationScheme(),
        "on_auth": rest.getCEntryPointAuthorizationOnAuth(),
        "has_callback": rest.getLEntryPointAuthorization(),
        "pool_scheme": rest.getThreadPoolAuthorizationScheme(),
        "pool_on_auth": rest.getThreadPoolAuthorizationOnAuth(),
    }

@get("/ctx/:a/{b}")
@post("/ctx/:a/{b}")
@put("/ctx/:a/{b}")
@patch("/ctx/:a/{b}")
@delete("/ctx/:a/{b}")
def ctx(a, b):
    return describe(a, b)

@post("/actx/:a/{b}")
async def actx(a, b):
    await asyncio.sleep(0)
    return describe(a, b)

def try_mutations():
    results = {}
    views = {
        "header": (rest.getHeaderRequest(), "x-probe"),
        "query": (rest.getQueryRequest(), "q"),
        "params": (rest.getPathParamsRequest(), "p"),
    }
    for name, (view, key) in views.items():
        outcome = []
        try:
            view[key] = "evil"
            outcome.append("set worked")
        except TypeError:
            outcome.append("TypeError")
        try:
            del view[key]
            outcome.append("del worked")
        except TypeError:
            outcome.append("TypeError")
        outcome.append(view[key])
        results[name] = outcome
    return results

@get("/mutate/:p")
def mutate(p):
    return try_mutations()

@get("/amutate/:p")
async def amutate(p):
    return try_mutations()

@get("/userdata/mutate")
def userdata_mutate():
    data = rest.getServerUserData()
    data["tenant"] = "evil"
    data["limits"].append(99)
    return data

@get("/userdata")
def userdata():
    return rest.getServerUserData()

def snapshot(n):
    rest.setKeyHeaderResponse("X-Echo", n)
    rest.setStatusCode(200 + int(n) % 3)
    return {
        "arg": n, "param": rest.getPathParamsRequest()["n"], "query": rest.getQueryRequest().get("q"),
        "header": rest.getHeaderRequest().get("x-n"), "path": rest.getPathRequest(),
        "body": rest.getBodyRequest(),
    }

@post("/iso/sync/:n")
def iso_sync(n):
    time.sleep(random.random() * 0.02)
    return snapshot(n)

@post("/iso/async/{n}")
async def iso_async(n):
    await asyncio.sleep(random.random() * 0.02)
    return snapshot(n)
"""

USER_DATA = {"tenant": "acme", "limits": [1, 2]}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    tmp: Path = tmp_path_factory.mktemp("rest")
    config = module_config(
        tmp,
        "rest_object_app",
        app=APP,
        servers={"HTTP_REST": local_port(UserData=USER_DATA)},
        extra={"POOL": {"MaxThreads": 16}},
    )
    with Client(config, base_url="http://127.0.0.1/rest") as client:
        yield client


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_every_request_method_of_the_rest_object(client: Client, method: str) -> None:
    body = b"" if method == "GET" else b"payload \xc3\xa9"
    target = "/ctx/one/t%C3%A9?q=1&name=a%20b&empty="
    r = client.request(method, target, headers={"X-Probe": "probe-value"}, content=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["args"] == ["one", "t\u00e9"]
    assert got["params"] == {"a": "one", "b": "t\u00e9"}
    assert got["query"] == {"q": "1", "name": "a b", "empty": ""}
    assert got["header"] == got["header_lower"] == "probe-value"
    assert got["has_header"] is True
    assert got["body"] == body.decode()
    assert got["method"] == method
    assert got["path"] == "/rest/ctx/one/t\u00e9"
    assert got["user_data"] == USER_DATA


def test_authorization_introspection_on_an_open_port(client: Client) -> None:
    for route in ("ctx", "actx"):
        got = client.post(f"/{route}/x/y", headers={"X-Probe": "p"}).json()
        for key in ("user", "scheme", "on_auth", "pool_scheme", "pool_on_auth"):
            assert got[key] == "", key
        assert got["has_callback"] is False


def test_async_handler_sees_the_same_rest_object(client: Client) -> None:
    r = client.post("/actx/x/y?k=v", headers={"X-Probe": "async"}, content=b"hi")
    got = r.json()
    assert got["params"] == {"a": "x", "b": "y"}
    assert got["query"] == {"k": "v"}
    assert got["header"] == "async"
    assert got["body"] == "hi"
    assert got["method"] == "POST"


def test_set_methods_exist_on_the_rest_object() -> None:
    from fwrest import rest

    names = """getPathParamsRequest getQueryRequest getHeaderRequest getBodyRequest
        getMethodRequest getPathRequest setResponse setStatusCode setKeyHeaderResponse setFault
        getServerUserData getAuthUser getCEntryPointAuthorizationScheme
        getCEntryPointAuthorizationOnAuth getLEntryPointAuthorization
        getThreadPoolAuthorizationScheme getThreadPoolAuthorizationOnAuth"""
    assert len(names.split()) == 17
    for name in names.split():
        assert callable(getattr(rest, name)), name


@pytest.mark.parametrize("route", ["mutate", "amutate"])
def test_request_views_are_read_only(client: Client, route: str) -> None:
    r = client.get(f"/{route}/orig-p?q=orig-q", headers={"X-Probe": "orig-h"})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "header": ["TypeError", "TypeError", "orig-h"],
        "query": ["TypeError", "TypeError", "orig-q"],
        "params": ["TypeError", "TypeError", "orig-p"],
    }
    # nothing leaked into the next request
    got = client.post("/ctx/x/y?q=next", headers={"X-Probe": "next-h"}).json()
    assert got["query"] == {"q": "next"}
    assert got["header"] == "next-h"
    assert got["params"] == {"a": "x", "b": "y"}


def test_user_data_changes_do_not_leak(client: Client) -> None:
    changed = client.get("/userdata/mutate").json()
    assert changed == {"tenant": "evil", "limits": [1, 2, 99]}
    assert client.get("/userdata").json() == USER_DATA


def test_isolation_under_200_concurrent_requests(client: Client) -> None:
    def one(n: int) -> tuple[int, httpx.Response]:
        kind = "sync" if n % 2 else "async"
        headers = {"X-N": f"header-{n}"}
        return n, client.post(f"/iso/{kind}/{n}?q=query-{n}", headers=headers, content=f"body-{n}")

    order = list(range(200))
    random.shuffle(order)
    with ThreadPoolExecutor(max_workers=64) as pool:  # 64 requests in flight at a time
        results = list(pool.map(one, order))
    assert len(results) == 200
    mixed_up = []
    for n, r in results:
        path = f"/rest/iso/{'sync' if n % 2 else 'async'}/{n}"
        expected = {"arg": str(n), "param": str(n), "query": f"query-{n}", "path": path}
        expected |= {"header": f"header-{n}", "body": f"body-{n}"}
        if (
            r.status_code != 200 + n % 3
            or r.headers.get("x-echo") != str(n)
            or r.json() != expected
        ):
            mixed_up.append((n, r.status_code, r.headers.get("x-echo"), r.text))
    assert not mixed_up, mixed_up[:5]
