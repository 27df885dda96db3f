"""Hostile bodies within ``MaxBodySize`` against typed endpoints (SPEC 14.1): 100,000 nesting
levels, a MiB string or numbers, out-of-range numbers, invalid UTF-8, NUL, duplicate keys, a BOM:
2xx, 400 or 415 within a hang guard, the worker serving on. A real ``fwrest serve`` for crashes;
generated JSON in process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fwrest.testing import Client
from tests.conftest import ServerProcess, free_config, local_port, module_config

APP = """
from __future__ import annotations

from typing import Any

import msgspec

from fwrest import post


class Line(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    qty: int
    price: float = 0.0


class Order(msgspec.Struct):
    items: list[Line]
    meta: dict[str, Any] = {}
    note: str = ""


@post("/orders")
def orders(order: Order) -> Order:
    return order


@post("/orders-async")
async def orders_async(order: Order) -> dict[str, int]:
    return {"lines": len(order.items)}
"""

MAX_BODY = 2 * 1024 * 1024
MIB = 1024 * 1024
GUARD_S = 20.0  # a hung decode fails the test instead of hanging it
JSON_TYPE = {"content-type": "application/json"}


def _deep(depth: int, opening: bytes, closing: bytes) -> bytes:
    return b'{"items": [], "meta": {"x": ' + opening * depth + closing * depth + b"}}"


HOSTILE: dict[str, bytes] = {
    "arrays 100k deep": _deep(100_000, b"[", b"]"),
    "objects 100k deep": b'{"items": [], "meta": ' + b'{"a": ' * 100_000 + b"1}" + b"}" * 100_000,
    "unclosed 500k deep": b'{"items": [' + b"[" * 500_000,
    "10 levels where a string is": b'{"items": [], "note": ' + b'{"a": ' * 10 + b"1" + b"}" * 11,
    "one mebibyte string": b'{"items": [], "note": "' + b"x" * MIB + b'"}',
    "a mebibyte of escapes": b'{"items": [], "note": "' + b"\\u0041" * (MIB // 6) + b'"}',
    "a mebibyte of numbers": b'{"items": [], "meta": {"n": ['
    + b",".join(b"1" for _ in range(MIB // 2))
    + b"]}}",
    "many lines": json.dumps({"items": [{"name": "n", "qty": i} for i in range(60_000)]}).encode(),
    "an integer beyond 64 bits": b'{"items": [{"name": "n", "qty": 1' + b"0" * 400 + b"}]}",
    "a float beyond range": b'{"items": [{"name": "n", "qty": 1, "price": 1e999}]}',
    "a number 100k digits long": b'{"items": [], "meta": {"n": ' + b"9" * 100_000 + b"}}",
    "invalid UTF-8": b'{"items": [{"name": "\xff\xfe", "qty": 1}]}',
    "a lone surrogate escape": b'{"items": [{"name": "\\ud800", "qty": 1}]}',
    "NUL bytes": b'{"items": [{"name": "a\x00b", "qty": 1}]}',
    "duplicate keys": b'{"items": [], "items": [{"name": "a", "qty": 1}]}',
    "a byte order mark": b'\xef\xbb\xbf{"items": []}',
    "many unknown fields": b'{"items": [], '
    + b", ".join(b'"k%d": %d' % (i, i) for i in range(50_000))
    + b"}",
    "trailing data": b'{"items": []} {"items": []}',
    "empty object": b"{}",
    "only whitespace": b" " * MIB,
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("typed_hostile")
    servers = {"HTTP_REST": local_port(MaxBodySize=MAX_BODY)}
    proc = ServerProcess(free_config(tmp, app=APP, servers=servers), workers=1).wait_ready()
    yield proc
    assert proc.stop() == 0


def _workers(proc: ServerProcess) -> set[int]:
    return {c.pid for c in psutil.Process(proc.proc.pid).children()}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_body_is_refused_or_served_and_the_worker_serves_on(
    service: ServerProcess, name: str
) -> None:
    body = HOSTILE[name]
    assert len(body) <= MAX_BODY
    before = _workers(service)
    base = service.url("HTTP_REST")
    for path in ("/orders", "/orders-async"):
        r = httpx.post(f"{base}{path}", content=body, headers=JSON_TYPE, timeout=GUARD_S)
        assert r.status_code in (200, 400), (name, path, r.status_code, r.text[:200])
        if r.status_code == 400:
            detail = r.json()["detailedMessage"]
            assert detail.startswith("the body ('order')"), detail
    ok = httpx.post(f"{base}/orders", json={"items": []}, timeout=GUARD_S)
    assert ok.status_code == 200
    assert _workers(service) == before  # no worker died and was replaced


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        ("arrays 100k deep", "the JSON nests too deeply to be decoded"),
        ("10 levels where a string is", "Expected `str`, got `object` - at `$.note`"),
    ],
)
def test_the_deep_bodies_name_what_went_wrong(client: Client, name: str, detail: str) -> None:
    r = client.post("/rest/orders", content=HOSTILE[name], headers=JSON_TYPE)
    assert r.json()["detailedMessage"] == f"the body ('order'): {detail}"


def test_a_body_over_max_body_size_is_still_a_413(service: ServerProcess) -> None:
    base = service.url("HTTP_REST")
    body = b'{"items": [], "note": "' + b"x" * MAX_BODY + b'"}'
    r = httpx.post(f"{base}/orders", content=body, headers=JSON_TYPE, timeout=GUARD_S)
    assert r.status_code == 413


# -- generated JSON ---------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
LINE = st.fixed_dictionaries(
    {"name": JSON_VALUES, "qty": JSON_VALUES}, optional={"price": JSON_VALUES, "x": JSON_VALUES}
)
ORDER = st.fixed_dictionaries(
    {}, optional={"items": st.lists(LINE, max_size=3) | JSON_VALUES, "note": JSON_VALUES}
)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    servers = {"HTTP_REST": local_port(MaxBodySize=MAX_BODY)}
    config = module_config(
        tmp_path_factory.mktemp("typed_props"), "typed_hostile_app", app=APP, servers=servers
    )
    with Client(config) as c:
        yield c


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(ORDER)
def test_generated_json_is_served_when_it_fits_else_a_400(client: Client, order: Any) -> None:
    r = client.post("/rest/orders", json=order)
    fits = (
        isinstance(order.get("items"), list)
        and all(
            isinstance(line, dict)
            and isinstance(line.get("name"), str)
            and "qty" in line
            and type(line["qty"]) is int
            and -(2**63) <= line["qty"] < 2**64
            and type(line.get("price", 0.0)) in (int, float)
            and "x" not in line
            for line in order["items"]
        )
        and isinstance(order.get("note", ""), str)
    )
    assert r.status_code == (200 if fits else 400), (order, r.text)
    if fits:
        assert len(r.json()["items"]) == len(order["items"])
