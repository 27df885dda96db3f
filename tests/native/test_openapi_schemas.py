"""The document's schemas (SPEC 14.2): parameters and ``required``, request bodies, answers from
return annotations, the 400 error body, msgspec's ``components/schemas``; untyped routes as before.
Validated (OpenAPI 3.1), in process and by ``fwrest openapi``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from openapi_spec_validator import validate

from fwrest.testing import Client
from tests.conftest import module_config, run_cli

APP = """
from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal, TypedDict

import msgspec

from fwrest import Response, get, post, put


class Color(enum.Enum):
    red = "red"
    blue = "blue"


class Line(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    qty: Annotated[int, msgspec.Meta(ge=1)]


class Order(msgspec.Struct):
    items: list[Line]
    color: Color = Color.red


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Tag(TypedDict):
    name: str


@get("/items/:id", description="one item")
def item(id: int, fields: list[str] = [], since: datetime.date | None = None) -> Line:
    return Line("a", id)


@get("/shops/:shop/items/:item")
def shop_item(shop: uuid.UUID, item: Color, limit: Annotated[int, msgspec.Meta(le=50)] = 20):
    return {}


@put("/shops/:other/items/:it")
def other_names(other: str, it: int, need: bool) -> list[Point]:
    return []


@post("/orders")
def create(order: Order) -> Order | Response:
    return order


@post("/more")
def more(
    data: dict[str, int], amount: decimal.Decimal = decimal.Decimal(0),
    lit: Literal["a", "b"] = "a", pair: tuple[int, int] | None = None, uniq: set[int] = set(),
    at: datetime.datetime | None = None, days: list[datetime.datetime] = [],
):
    return {}


@put("/tags")
def tags(tag: Tag | None = None) -> str:
    return "ok"


@get("/stream")
def stream() -> Iterator[str]:
    yield "x"


@get("/raw")
def raw() -> bytes:
    return b"x"


@get("/anything")
def anything() -> Any:
    return {}


@get("/untyped/:id")
def untyped(id):
    return {}


@post("/untyped-post")
def untyped_post() -> dict[str, Any]:
    return {}
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return module_config(tmp_path_factory.mktemp("openapi_typed"), "openapi_typed_app", app=APP)


@pytest.fixture(scope="module")
def doc(config: Path) -> Iterator[dict[str, Any]]:
    with Client(config) as client:
        r = client.get("/rest/fw/rest/openapi.json")
        assert r.status_code == 200
        yield r.json()


def param(name: str, where: str, required: bool, **schema: Any) -> dict[str, Any]:
    """A parameter of an operation as the document writes it."""
    return {"name": name, "in": where, "required": required, "schema": schema}


def test_the_document_is_valid_openapi_3_1(doc: dict[str, Any]) -> None:
    validate(doc)  # raises on an invalid document
    assert doc["openapi"].startswith("3.1")


def test_path_and_query_parameters_have_schemas_and_required(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/rest/items/{id}"]["get"]
    assert op["parameters"] == [
        param("id", "path", True, type="integer"),
        param("fields", "query", False, type="array", items={"type": "string"}, default=[]),
        param("since", "query", False, type="string", format="date"),
    ]
    # the template takes its names from the first route of the shape (PUT's, sorted first)
    op = doc["paths"]["/rest/shops/{other}/items/{it}"]["get"]
    assert op["parameters"] == [
        param("other", "path", True, type="string", format="uuid"),
        param("it", "path", True, **{"$ref": "#/components/schemas/Color"}),
        param("limit", "query", False, type="integer", maximum=50, default=20),
    ]


def test_decimals_literals_datetimes_tuples_sets_and_dict_bodies_have_schemas(
    doc: dict[str, Any],
) -> None:
    op = doc["paths"]["/rest/more"]["post"]
    pair = {"type": "array", "minItems": 2, "maxItems": 2, "items": False}
    assert op["parameters"] == [
        param("amount", "query", False, type="string", format="decimal", default="0"),
        param("lit", "query", False, enum=["a", "b"], default="a"),
        param("pair", "query", False, prefixItems=[{"type": "integer"}] * 2, **pair),
        param("uniq", "query", False, type="array", items={"type": "integer"}, uniqueItems=True,
              default=[]),
        param("at", "query", False, type="string", format="date-time"),  # as date's "date"
        param("days", "query", False, type="array", default=[],
              items={"type": "string", "format": "date-time"}),
    ]  # fmt: skip
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert op["requestBody"]["content"]["application/json"]["schema"] == schema


def test_a_route_naming_its_parameter_otherwise_gets_the_templates_name(
    doc: dict[str, Any],
) -> None:
    op = doc["paths"]["/rest/shops/{other}/items/{it}"]["put"]
    assert op["parameters"] == [
        param("other", "path", True, type="string"),
        param("it", "path", True, type="integer"),
        param("need", "query", True, type="boolean"),
    ]
    answer = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"type": "array", "items": {"$ref": "#/components/schemas/Point"}}


def test_a_struct_body_and_answer_refer_to_components(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/rest/orders"]["post"]
    assert op["requestBody"] == {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Order"}}},
    }
    ok = op["responses"]["200"]
    assert ok["content"] == {
        "application/json": {"schema": {"$ref": "#/components/schemas/Order"}}
    }  # Response left out of Order | Response
    schemas = doc["components"]["schemas"]
    assert schemas["Order"]["required"] == ["items"]
    assert schemas["Order"]["properties"]["items"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/Line"},
    }
    assert schemas["Line"]["additionalProperties"] is False  # forbid_unknown_fields
    assert schemas["Line"]["properties"]["qty"] == {"type": "integer", "minimum": 1}
    assert schemas["Color"]["enum"] == ["blue", "red"]
    assert schemas["Point"]["required"] == ["x", "y"]


def test_an_optional_typeddict_body_and_a_text_answer(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/rest/tags"]["put"]
    body = op["requestBody"]
    assert body["required"] is False
    assert body["content"]["application/json"]["schema"] == {
        "anyOf": [{"$ref": "#/components/schemas/Tag"}, {"type": "null"}]
    }
    assert op["responses"]["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}


def test_answers_msgspec_has_no_schema_for_are_left_undescribed(doc: dict[str, Any]) -> None:
    assert "content" not in doc["paths"]["/rest/stream"]["get"]["responses"]["200"]
    assert "content" not in doc["paths"]["/rest/anything"]["get"]["responses"]["200"]
    raw = doc["paths"]["/rest/raw"]["get"]["responses"]["200"]
    assert raw["content"] == {"application/octet-stream": {"schema": {}}}
    # the other routes' schemas were still written, in one call after the one that failed
    assert doc["paths"]["/rest/orders"]["post"]["requestBody"]["content"]


def test_typed_routes_document_the_400_and_415_answers(doc: dict[str, Any]) -> None:
    error = {"$ref": "#/components/schemas/FwrestError"}
    for path, method in [("/rest/items/{id}", "get"), ("/rest/orders", "post")]:
        bad = doc["paths"][path][method]["responses"]["400"]
        assert bad["content"]["application/json"]["schema"] == error
    assert "415" in doc["paths"]["/rest/orders"]["post"]["responses"]
    assert "415" not in doc["paths"]["/rest/items/{id}"]["get"]["responses"]
    required = doc["components"]["schemas"]["FwrestError"]["required"]
    assert required == ["code", "detailedMessage", "message"]


def test_untyped_routes_are_documented_as_before(doc: dict[str, Any]) -> None:
    op = doc["paths"]["/rest/untyped/{id}"]["get"]
    assert op["parameters"] == [param("id", "path", True, type="string")]
    assert set(op["responses"]) == {"200", "default"}
    assert "content" not in op["responses"]["200"]
    post = doc["paths"]["/rest/untyped-post"]["post"]
    assert set(post["requestBody"]["content"]) == {
        "application/json",
        "application/x-www-form-urlencoded",
    }
    # a return annotation alone documents the answer, and no 400
    assert post["responses"]["200"]["content"] == {
        "application/json": {"schema": {"type": "object"}}
    }
    assert "400" not in post["responses"]
    native = doc["paths"]["/rest/fw/rest/list/service"]["get"]
    assert set(native["responses"]) == {"200", "default"}


def test_an_answer_matches_its_documented_schema(config: Path, doc: dict[str, Any]) -> None:
    """What a typed route answers validates against the schema the document gives it."""
    from jsonschema.exceptions import ValidationError
    from openapi_schema_validator import OAS31Validator

    with Client(config) as client:
        body = {"items": [{"name": "a", "qty": 2}]}
        answer = client.post("/rest/orders", json=body).json()
        refused = client.post("/rest/orders", json={"items": [{"name": "a", "qty": 0}]}).json()
    schemas = doc["components"]["schemas"]
    # the schema with the document's components beside it, so that its $refs resolve
    OAS31Validator({"components": doc["components"], **schemas["Order"]}).validate(answer)
    OAS31Validator(schemas["FwrestError"]).validate(refused)
    with pytest.raises(ValidationError):  # the check can fail
        OAS31Validator({"components": doc["components"], **schemas["Order"]}).validate(refused)
    assert answer == {"items": [{"name": "a", "qty": 2}], "color": "red"}


def test_fwrest_openapi_writes_the_same_schemas(
    config: Path, doc: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "openapi.json"
    done = run_cli("openapi", str(config), "-o", str(out), cwd=config.parent)
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    validate(written)
    assert written["components"]["schemas"] == doc["components"]["schemas"]
    assert written["paths"]["/rest/orders"] == doc["paths"]["/rest/orders"]


SCOPED_APP = """
from fwrest import get


def params():
    return {"client_id": "c", "client_secret": "s", "users": [], "types": []}


@get("/orders/:id", scopes=["orders:read"])
def one_order(id: int, full: bool = False):
    return {"id": id, "full": full}
"""


def test_a_typed_routes_scopes_stand_beside_its_schemas(ca: trustme.CA, tmp_path: Path) -> None:
    """On oAuth2 (SPEC 12.4) the operation names scopes and schemas (as ``fwrest openapi``)."""
    from fwrest import __version__
    from fwrest.config import load_config
    from fwrest.native.listing import build_openapi
    from fwrest.server.build import build_plan
    from tests.auth.oauth2_support import oauth_section
    from tests.conftest import issue_certs

    certs = issue_certs(ca, tmp_path / "certs")
    section = oauth_section(certs, onAuthparams="openapi_scoped_app.params")
    config = module_config(
        tmp_path, "openapi_scoped_app", app=SCOPED_APP, servers={"OAUTH": section}
    )
    doc = build_openapi(build_plan(load_config(config)).ports[0], __version__)
    validate(doc)
    op = doc["paths"]["/rest/orders/{id}"]["get"]
    assert op["security"] == [{"oauth2": ["orders:read"]}]
    assert [(p["name"], p["in"], p["schema"]) for p in op["parameters"]] == [
        ("id", "path", {"type": "integer"}),
        ("full", "query", {"type": "boolean", "default": False}),
    ]
    assert "400" in op["responses"]
    flow = doc["components"]["securitySchemes"]["oauth2"]["flows"]["password"]
    assert "orders:read" in flow["scopes"]
    assert "FwrestError" in doc["components"]["schemas"]
