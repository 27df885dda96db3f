"""Typed endpoints (SPEC 14.1) in process (module ``typed_app``): path and query parameters
converted by their hints, JSON bodies validated by msgspec (structs, dataclasses, TypedDicts),
results encoded; a failure is a 400 naming the parameter or field path."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fwrest.errors import ConfigError
from fwrest.testing import Client
from tests.conftest import local_port, module_config

HINTS = "int:int float:float bool:bool str:str uuid:uuid.UUID date:datetime.date"
APP = (
    """
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal, TypedDict

import msgspec

from fwrest import Response, get, patch, post, put, rest

class Color(enum.Enum):
    red = "red"
    blue = "blue"

class Level(enum.IntEnum):
    low = 1
    high = 2

class Line(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    qty: Annotated[int, msgspec.Meta(ge=1)]

class Order(msgspec.Struct):
    items: list[Line]
    note: str = ""

@dataclasses.dataclass
class Point:
    x: int
    y: int

class Tag(TypedDict):
    name: str
    weight: float

class Loose(msgspec.Struct):
    data: Any = None

def kind(value):
    return {"value": value if not isinstance(value, (uuid.UUID, datetime.date, enum.Enum))
            else str(value), "type": type(value).__name__}

"""
    + "".join(  # a route a hint: /int/:v, /float/:v, ...
        f'@get("/{name}/:v")\ndef as_{name}(v: {hint}):\n    return kind(v)\n\n'
        for name, hint in (pair.split(":") for pair in HINTS.split())
    )
    + """
@get("/color/:v")
async def as_color(v: Color):
    await asyncio.sleep(0)
    return kind(v)

@get("/level/:v")
def as_level(v: Level):
    return {"value": v.value, "type": type(v).__name__}

@get("/untyped/:v")
def untyped(v):
    return kind(v)

@get("/kwargs/:a/:b")
def with_kwargs(a: int, **rest_of):
    return {"a": a, "rest": rest_of}

@get("/search")
def search(
    tag: list[str], limit: Annotated[int, msgspec.Meta(ge=1, le=100)] = 10,
    color: Color | None = None, since: datetime.date | None = None, ids: list[int] = [],
    days: list[datetime.date] | None = None,
):
    return {"tag": tag, "limit": limit, "color": color.value if color else None,
            "since": str(since) if since else None, "ids": ids,
            "days": [str(d) for d in days] if days is not None else None}

@get("/more")
def more(
    amount: decimal.Decimal = decimal.Decimal(0), lit: Literal["a", "b"] = "a",
    n: Literal[1, 2] = 1, pair: tuple[int, str] | None = None, uniq: set[int] = set(),
    few: Annotated[tuple[int, ...], msgspec.Meta(max_length=2)] = (),
):
    return {"amount": str(amount), "lit": lit, "n": n, "pair": pair, "uniq": sorted(uniq),
            "few": few}

@post("/mapping")
def mapping(data: dict[str, int] = {}):
    return {"got": data}

@get("/need")
async def need(n: int):
    return {"n": n}

@get("/measure")
def measure(x: float, scale: Annotated[float, msgspec.Meta(ge=0)] = 1.0, marks: list[float] = []):
    return {"x": x, "scale": scale, "marks": marks}

@get("/mixed/:id")
def mixed(id: int, verbose: bool = False):
    # the REST object still sees the request as it came
    return {"id": id, "verbose": verbose, "query": dict(rest.getQueryRequest()),
            "params": dict(rest.getPathParamsRequest())}

@post("/orders")
def create_order(order: Order) -> Order:
    rest.setStatusCode(201)
    rest.setKeyHeaderResponse("X-Items", str(len(order.items)))
    return order

@post("/orders-async/:shop")
async def create_order_async(shop: int, order: Order, dry: bool = False) -> dict[str, Any]:
    return {"shop": shop, "lines": [l.name for l in order.items], "dry": dry,
            "raw": rest.getBodyRequest()[:1]}

@put("/points")
def move(p: Point) -> Point:
    return Point(p.x + 1, p.y + 1)

@patch("/tags")
def tag(t: Tag) -> list[Tag]:
    return [t, t]

@post("/bulk")
async def bulk(lines: list[Line]) -> dict[str, Any]:
    return {"qty": sum(l.qty for l in lines)}

@post("/optional")
def optional(order: Order | None = None) -> dict[str, Any]:
    return {"got": order is not None}

@post("/loose")
def loose(body: Loose) -> dict[str, Any]:
    return {"ok": True}

@get("/points")
def points() -> list[Point]:
    return [Point(1, 2), Point(3, 4)]

@get("/order-or-404/:n")
def order_or_404(n: int) -> Order | Response:
    if n == 0:
        return Response({"error": "none"}, status=404)
    return Order([Line("a", n)])

@get("/nothing")
def nothing() -> Order | None:
    rest.setResponse("set")
    return None

@get("/bad-result")
def bad_result() -> Order:
    return object()

@get("/unhinted-struct")
def unhinted_struct():
    return Line("a", 1)

@get("/unhinted-list")
async def unhinted_list():
    return [Line("a", 1), Point(1, 2)]

@get("/unhinted-dict")
def unhinted_dict():
    return {"line": Line("b", 2)}

@get("/unhinted-set")
def unhinted_set():
    rest.setResponse({"point": Point(3, 4)})

@get("/stream/:n")
def stream(n: int, word: str = "x") -> Iterator[str]:
    # a typed handler's iterator is still a stream (SPEC 10.5), not a result to encode
    for i in range(n):
        yield f"{word}{i};"
"""
)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    tmp = tmp_path_factory.mktemp("typed")
    servers = {"HTTP_REST": local_port(MaxBodySize=2 * 1024 * 1024)}
    config = module_config(tmp, "typed_app", app=APP, servers=servers)
    with Client(config) as c:
        yield c


EXAMPLES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


UUID = "12345678-1234-5678-1234-567812345678"


def refused(r: httpx.Response, status: int = 400) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"code", "detailedMessage", "message"}
    assert body["code"] == status
    detail: str = body["detailedMessage"]
    return detail


# -- path parameters --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "kind"),
    [
        ("/int/42", 42, "int"),
        ("/int/-7", -7, "int"),
        ("/float/2.5", 2.5, "float"),
        ("/float/3", 3.0, "float"),
        ("/bool/true", True, "bool"),
        ("/bool/0", False, "bool"),
        ("/str/abc", "abc", "str"),
        (f"/uuid/{UUID}", UUID, "UUID"),
        ("/date/2024-02-29", "2024-02-29", "date"),
        ("/color/blue", "Color.blue", "Color"),
        ("/level/2", 2, "Level"),
        ("/untyped/42", "42", "str"),
    ],
)
def test_a_path_parameter_arrives_as_its_annotated_type(
    client: Client, path: str, value: Any, kind: str
) -> None:
    r = client.get(f"/rest{path}")
    assert r.status_code == 200, r.text
    assert r.json() == {"value": value, "type": kind}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/int/x1", "the path parameter 'v': expected an integer, got 'x1'"),
        ("/int/1.5", "the path parameter 'v': expected an integer, got '1.5'"),
        ("/int/1.0", "the path parameter 'v': expected an integer, got '1.0'"),
        ("/int/1e3", "the path parameter 'v': expected an integer, got '1e3'"),
        ("/int/+5", "the path parameter 'v': expected an integer, got '+5'"),
        ("/int/%D9%A1", "the path parameter 'v': expected an integer, got '\u0661'"),
        ("/float/abc", "the path parameter 'v': expected a finite number, got 'abc'"),
        ("/bool/yes", "the path parameter 'v': expected true or false (or 1 or 0), got 'yes'"),
        ("/uuid/nope", "the path parameter 'v': expected a UUID, got 'nope'"),
        ("/date/2023-02-29", "the path parameter 'v': expected a date (YYYY-MM-DD), got"),
        ("/color/green", "the path parameter 'v': expected one of 'red', 'blue', got 'green'"),
        ("/level/3", "the path parameter 'v': expected one of 1, 2, got '3'"),
    ],
)
def test_a_path_parameter_that_does_not_convert_is_a_400_naming_it(
    client: Client, path: str, expected: str
) -> None:
    assert refused(client.get(f"/rest{path}")).startswith(expected)


def test_a_refused_value_is_quoted_cut_short(client: Client) -> None:
    detail = refused(client.get("/rest/int/" + "9" * 30 + "x" * 200))
    assert len(detail) < 150
    assert detail.endswith("...")


def test_kwargs_takes_the_other_path_parameters_as_text(client: Client) -> None:
    assert client.get("/rest/kwargs/1/two").json() == {"a": 1, "rest": {"b": "two"}}


@EXAMPLES
@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_any_integer_round_trips_through_a_path(client: Client, n: int) -> None:
    assert client.get(f"/rest/int/{n}").json() == {"value": n, "type": "int"}


@EXAMPLES
@given(st.text(min_size=1, max_size=20))
def test_any_text_is_an_int_or_a_400_never_a_500(client: Client, text: str) -> None:
    r = client.get("/rest/int/" + quote(text, safe=""))
    assert r.status_code in (200, 400, 404), r.text
    if r.status_code == 200:
        assert str(r.json()["value"]) == text.lstrip("+") or int(text) == r.json()["value"]


# -- query parameters -------------------------------------------------------------------------


def test_query_parameters_convert_with_lists_defaults_and_optionals(client: Client) -> None:
    r = client.get(
        "/rest/search",
        params=[("tag", "a"), ("tag", "b"), ("limit", "5"), ("color", "red"), ("ids", "3")],
    )
    got = {"tag": ["a", "b"], "limit": 5, "color": "red", "since": None, "ids": [3], "days": None}
    assert r.json() == got
    r = client.get("/rest/search?tag=only&since=2024-01-02&ids=1&ids=2&days=2024-03-01")
    got = {"tag": ["only"], "limit": 10, "color": None, "since": "2024-01-02", "ids": [1, 2]}
    assert r.json() == {**got, "days": ["2024-03-01"]}


@EXAMPLES
@given(st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=8), st.text(max_size=12))
def test_query_lists_and_text_round_trip(client: Client, ids: list[int], tag: str) -> None:
    params = [("tag", tag), *(("ids", str(i)) for i in ids)]
    r = client.get("/rest/search", params=params)
    assert r.status_code == 200, r.text
    assert (r.json()["ids"], r.json()["tag"]) == (ids, [tag])


def test_a_missing_required_query_parameter_is_a_400(client: Client) -> None:
    assert refused(client.get("/rest/search")) == (
        "the query parameter 'tag' is required (a list of text)"
    )
    assert refused(client.get("/rest/need")) == ("the query parameter 'n' is required (an integer)")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("tag=a&limit=0", "the query parameter 'limit': Expected `int` >= 1 (got '0')"),
        ("tag=a&limit=ten", "the query parameter 'limit': expected an integer, got 'ten'"),
        ("tag=a&limit=5.0", "the query parameter 'limit': expected an integer, got '5.0'"),
        ("tag=a&color=green", "the query parameter 'color': expected one of 'red', 'blue'"),
        ("tag=a&ids=1&ids=x", "the query parameter 'ids': expected an integer, got 'x'"),
        ("tag=a&since=", "the query parameter 'since': expected a date (YYYY-MM-DD), got ''"),
    ],
)
def test_a_query_parameter_that_does_not_convert_is_a_400(
    client: Client, query: str, expected: str
) -> None:
    assert refused(client.get(f"/rest/search?{query}")).startswith(expected)


def test_a_float_parameter_is_a_finite_number(client: Client) -> None:
    """No NaN or infinity (as in JSON bodies), whether a word or an overflow."""
    ok = client.get("/rest/measure?x=-2.5e3&scale=0.5&marks=1&marks=2.25")
    assert ok.json() == {"x": -2500.0, "scale": 0.5, "marks": [1.0, 2.25]}
    for text in ("nan", "NaN", "-nan", "inf", "-Infinity", "1e999", "-1e400"):
        assert refused(client.get(f"/rest/measure?x={text}")) == (
            f"the query parameter 'x': expected a finite number, got {text!r}"
        )
        # a constrained one: msgspec's words where it refuses first ("Number out of range")
        assert refused(client.get(f"/rest/measure?x=1&scale={text}")).startswith(
            "the query parameter 'scale': "
        )
        assert refused(client.get(f"/rest/measure?x=1&marks=1&marks={text}")).startswith(
            "the query parameter 'marks': expected a finite number"
        )
        assert refused(client.get(f"/rest/float/{text}")) == (
            f"the path parameter 'v': expected a finite number, got {text!r}"
        )


MORE = {"amount": "0", "lit": "a", "n": 1, "pair": None, "uniq": [], "few": []}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("amount=12.50&lit=b&n=2", {"amount": "12.50", "lit": "b", "n": 2}),
        (
            "pair=3&pair=x&uniq=2&uniq=1&uniq=2&few=4",
            {"pair": [3, "x"], "uniq": [1, 2], "few": [4]},
        ),
        ("amount=1e3", {"amount": "1E+3"}),
        ("amount=NaN", "the query parameter 'amount': expected a decimal number, got 'NaN'"),
        ("amount=%2012", "the query parameter 'amount': expected a decimal number, got ' 12'"),
        ("lit=c", "the query parameter 'lit': expected one of 'a', 'b', got 'c'"),
        ("n=3", "the query parameter 'n': expected one of 1, 2, got '3'"),
        ("pair=1", "the query parameter 'pair': expected 2 values (the name repeated), got 1"),
        ("pair=x&pair=y", "the query parameter 'pair': expected an integer, got 'x'"),
        ("uniq=1&uniq=z", "the query parameter 'uniq': expected an integer, got 'z'"),
        ("few=1&few=2&few=3", "the query parameter 'few': Expected `array` of length <= 2"),
    ],
)
def test_decimals_literals_tuples_and_sets_come_from_the_query(
    client: Client, query: str, expected: dict[str, Any] | str
) -> None:
    r = client.get(f"/rest/more?{query}")
    if isinstance(expected, str):
        assert refused(r) == expected
    else:
        assert r.json() == {**MORE, **expected}


def test_a_dict_parameter_is_the_json_body(client: Client) -> None:
    assert client.post("/rest/mapping", json={"a": 1}).json() == {"got": {"a": 1}}
    assert client.post("/rest/mapping").json() == {"got": {}}
    detail = refused(client.post("/rest/mapping", json={"a": "x"}))
    assert detail == "the body ('data'): Expected `int`, got `str` - at `$[...]`"


def test_a_repeated_scalar_takes_the_last_value_as_the_rest_object(client: Client) -> None:
    r = client.get("/rest/mixed/7?verbose=0&verbose=1")
    assert r.json() == {"id": 7, "verbose": True, "query": {"verbose": "1"}, "params": {"id": "7"}}


# -- bodies -----------------------------------------------------------------------------------


def test_a_struct_body_is_decoded_and_a_struct_answer_encoded(client: Client) -> None:
    order = {"items": [{"name": "tea", "qty": 2}], "note": "x"}
    r = client.post("/rest/orders", json=order)
    assert r.status_code == 201  # setStatusCode holds for a typed answer
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-items"] == "1"
    assert r.json() == order
    r = client.post("/rest/orders", json={"items": []})
    assert r.json() == {"items": [], "note": ""}  # the default, encoded


def test_an_async_handler_takes_path_query_and_body(client: Client) -> None:
    r = client.post(
        "/rest/orders-async/9?dry=true",
        content=b'{"items":[{"name":"a","qty":1},{"name":"b","qty":3}]}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert r.json() == {"shop": 9, "lines": ["a", "b"], "dry": True, "raw": "{"}


def test_a_dataclass_body_and_answer(client: Client) -> None:
    assert client.put("/rest/points", json={"x": 1, "y": 2}).json() == {"x": 2, "y": 3}
    detail = refused(client.put("/rest/points", json={"x": 1}))
    assert detail == "the body ('p'): Object missing required field `y`"


def test_a_typeddict_body_and_a_list_answer(client: Client) -> None:
    tag = {"name": "n", "weight": 0.5}
    assert client.patch("/rest/tags", json=tag).json() == [tag, tag]
    detail = refused(client.patch("/rest/tags", json={"name": "n", "weight": "heavy"}))
    assert detail == "the body ('t'): Expected `float`, got `str` - at `$.weight`"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"items": [{"name": "a", "qty": 1}, {"name": "b", "qty": "2"}]},
            "Expected `int`, got `str` - at `$.items[1].qty`",
        ),
        ({"items": [{"name": "a", "qty": 0}]}, "Expected `int` >= 1 - at `$.items[0].qty`"),
        ({"note": "x"}, "Object missing required field `items`"),
        ({"items": [{"name": "a"}]}, "Object missing required field `qty` - at `$.items[0]`"),
        (
            {"items": [{"name": "a", "qty": 1, "price": 3}]},
            "Object contains unknown field `price` - at `$.items[0]`",
        ),
        ([1, 2], "Expected `object`, got `array`"),
    ],
)
def test_a_body_that_does_not_validate_is_a_400_naming_the_field(
    client: Client, body: Any, expected: str
) -> None:
    assert refused(client.post("/rest/orders", json=body)) == "the body ('order'): " + expected


def test_a_struct_without_forbid_unknown_fields_ignores_extra_fields(client: Client) -> None:
    r = client.post("/rest/orders", json={"items": [], "extra": 1})
    assert r.status_code == 201


@pytest.mark.parametrize("body", [b"{", b"not json", b'{"items": [}', b"\xff\xfe"])
def test_a_body_that_is_not_json_is_a_400(client: Client, body: bytes) -> None:
    r = client.post("/rest/orders", content=body, headers={"content-type": "application/json"})
    assert refused(r).startswith("the body ('order') is not valid JSON: ")


def test_a_list_of_structs_is_a_json_array_body(client: Client) -> None:
    lines = [{"name": "a", "qty": 2}, {"name": "b", "qty": 3}]
    assert client.post("/rest/bulk", json=lines).json() == {"qty": 5}
    detail = refused(client.post("/rest/bulk", json=[*lines, {"name": "c"}]))
    assert detail == "the body ('lines'): Object missing required field `qty` - at `$[2]`"


def test_a_missing_body_is_a_400_unless_the_parameter_has_a_default(client: Client) -> None:
    detail = refused(client.post("/rest/orders"))
    assert detail == "the body ('order') is required: the request has no body"
    assert client.post("/rest/optional").json() == {"got": False}
    assert client.post("/rest/optional", json={"items": []}).json() == {"got": True}
    assert client.post("/rest/optional", json=None).json() == {"got": False}  # null


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_sent_as_another_media_type_is_a_415(client: Client, media: str | None) -> None:
    headers = {"content-type": media} if media else {}
    r = client.post("/rest/orders", content=b'{"items":[]}', headers=headers)
    detail = refused(r, 415)
    assert detail.startswith("the body ('order') must be JSON (Content-Type: application/json)")


def test_a_json_suffix_media_type_is_json(client: Client) -> None:
    r = client.post(
        "/rest/orders", content=b'{"items":[]}', headers={"content-type": "application/vnd.x+json"}
    )
    assert r.status_code == 201


def test_a_deeply_nested_body_is_a_400(client: Client) -> None:
    depth = 100_000
    deep = b'{"data":' + b"[" * depth + b"]" * depth + b"}"
    r = client.post("/rest/loose", content=deep, headers={"content-type": "application/json"})
    assert refused(r) == "the body ('body'): the JSON nests too deeply to be decoded"
    ten = json.dumps({"items": [{"name": "a", "qty": 1}], "note": _nested(10)})
    r = client.post("/rest/orders", content=ten, headers={"content-type": "application/json"})
    assert refused(r) == "the body ('order'): Expected `str`, got `object` - at `$.note`"
    # the service goes on
    assert client.get("/rest/int/1").status_code == 200


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def test_a_one_mebibyte_body_is_decoded_or_refused_whole(client: Client) -> None:
    many = {"items": [{"name": "x" * 40, "qty": n + 1} for n in range(17_000)]}
    data = json.dumps(many).encode()
    assert 1024 * 1024 <= len(data) < 2 * 1024 * 1024
    r = client.post("/rest/orders", content=data, headers={"content-type": "application/json"})
    assert r.status_code == 201
    assert len(r.json()["items"]) == 17_000
    bad = data[:-200] + b"]}"  # cut inside an item: not JSON
    r = client.post("/rest/orders", content=bad, headers={"content-type": "application/json"})
    assert refused(r).startswith("the body ('order') is not valid JSON")
    wrong = data.replace(b'"qty": 16999', b'"qty": "16999"')
    r = client.post("/rest/orders", content=wrong, headers={"content-type": "application/json"})
    assert refused(r).endswith("- at `$.items[16998].qty`")


# -- answers ----------------------------------------------------------------------------------


def test_typed_answers(client: Client) -> None:
    assert client.get("/rest/points").json() == [{"x": 1, "y": 2}, {"x": 3, "y": 4}]
    assert client.get("/rest/order-or-404/2").json() == {
        "items": [{"name": "a", "qty": 2}],
        "note": "",
    }
    missing = client.get("/rest/order-or-404/0")  # a Response goes on as it is
    assert (missing.status_code, missing.json()) == (404, {"error": "none"})
    assert client.get("/rest/nothing").text == "set"  # None: what setResponse gathered


def test_typed_values_without_a_return_hint_are_sent_as_json(client: Client) -> None:
    line = {"name": "a", "qty": 1}
    assert client.get("/rest/unhinted-struct").json() == line
    assert client.get("/rest/unhinted-list").json() == [line, {"x": 1, "y": 2}]
    assert client.get("/rest/unhinted-dict").json() == {"line": {"name": "b", "qty": 2}}
    r = client.get("/rest/unhinted-set")
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"point": {"x": 3, "y": 4}}


def test_an_answer_that_cannot_be_encoded_is_a_500(client: Client) -> None:
    r = client.get("/rest/bad-result")
    assert r.status_code == 500
    assert r.json()["detailedMessage"] == ""


def test_a_typed_handler_may_still_stream(client: Client) -> None:
    assert client.get("/rest/stream/3?word=w").text == "w0;w1;w2;"


HOOKED = """
import msgspec

from fwrest import post, rest

calls = []

class Item(msgspec.Struct):
    name: str

@post("/items/:n")
def create(n: int, item: Item) -> Item:
    return Item(f"{item.name} x{n}")

def stamp():
    rest.setStatusCode(202)
    rest.setKeyHeaderResponse("X-Stamped", "1")

def recover(exc):
    calls.append(repr(exc))
    return {"recovered": True}
"""


def test_typed_handlers_meet_their_pools_hooks(tmp_path: Path) -> None:
    """OnSend sees the typed answer; a conversion's 400 is fwrest's, never OnError's (SPEC 11.1)."""
    pool = {"POOL": {"OnSend": "typed_hooked.stamp", "OnError": "typed_hooked.recover"}}
    config = module_config(tmp_path, "typed_hooked", app=HOOKED, extra=pool)
    with Client(config) as c:
        r = c.post("/rest/items/2", json={"name": "tea"})
        assert (r.status_code, r.headers["x-stamped"], r.json()) == (202, "1", {"name": "tea x2"})
        assert refused(c.post("/rest/items/two", json={"name": "tea"})) == (
            "the path parameter 'n': expected an integer, got 'two'"
        )
        assert refused(c.post("/rest/items/2", json={})) == (
            "the body ('item'): Object missing required field `name`"
        )
    assert sys.modules["typed_hooked"].calls == []  # OnError was never called


# -- the start --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        (
            "@get('/x/:id')\ndef f(id: list[int]):\n    return {}\n",
            "its path parameter 'id' is annotated list[int]",
        ),
        (
            "import msgspec\nclass A(msgspec.Struct):\n    a: int\n"
            "@post('/x')\ndef f(a: A, b: A):\n    return {}\n",
            "its parameters 'a', 'b' are each annotated as the JSON body",
        ),
        (
            "@get('/x')\ndef f(a: 'Missing'):\n    return {}\n",
            "the annotation of its parameter 'a' ('Missing') cannot be resolved",
        ),
        # with a default or not: a value the client sends is never dropped for the default
        ("@get('/x')\ndef f(a: bytes = b''):\n    return {}\n", "'a' is annotated bytes, which"),
        ("@post('/x')\ndef f(a: list = []):\n    return {}\n", "'a' is annotated list, which"),
        ("@get('/x')\ndef f(a: 'int | str'):\n    return {}\n", "annotated int | str, which"),
    ],
)
def test_a_hint_fwrest_cannot_fill_stops_the_start(
    tmp_path: Path, source: str, needle: str
) -> None:
    app = "from fwrest import get, post\n" + source
    name = f"typed_bad_{uuid.uuid4().hex[:8]}"
    config = module_config(tmp_path, name, app=app)
    with pytest.raises(ConfigError) as err:
        Client(config).__enter__()
    assert needle in str(err.value)
    assert "[HTTP_REST] Locations" in str(err.value)
