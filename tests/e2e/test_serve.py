"""``fwrest serve`` end to end: results (SPEC 9), path parameters, UserData, LoadURNs, locations,
the fixed 500 (where handlers run: tests/server/test_hooks_calls.py, test_results.py). ``/a`` and ``/b`` share ``app.py``'s pool and environment;
``/a/v2`` has its own (``app2.py``), the longest matching prefix."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import APP_SOURCE, ServerProcess, free_config, local_port, run_cli

EXTRA = """

@get("/result/response")
def result_response():
    return Response("short and stout", 418, {"X-Tea": "earl grey"})


@get("/result/response-media")
def result_response_media():
    return Response(b"GIF89a", 201, {"X-Kind": "picture"}, media_type="image/gif")


@get("/result/parts")
def result_parts():
    rest.setResponse("part one, ")
    rest.setResponse("part two")


@get("/result/json-parts")
def result_json_parts():
    rest.setResponse('{"a": ')
    rest.setResponse("1}")


@get("/result/none")
def result_none():
    return None


@post("/result/status")
def result_status():
    rest.setStatusCode(201)
    rest.setKeyHeaderResponse("Location", "/a/items/7")
    rest.setKeyHeaderResponse("X-Request-Note", "made")
    return {"created": 7}


@get("/result/status-only")
def result_status_only():
    rest.setStatusCode(202)
    rest.setResponse("queued")


@get("/result/return-wins")
def result_return_wins():
    rest.setResponse("collected text")
    return {"winner": "return value"}


@get("/result/list")
def result_list():
    return [1, "two", {"three": 3}]


@get("/result/unicode")
def result_unicode():
    return "h\\u00e9llo \\u2713"


@get("/aboom")
async def aboom():
    raise ValueError("async-kaboom-detail")


@get("/v2/hello")
def shadowed():
    return {"from": "app.py /v2/hello"}


@put("/verbs/:id")
def verb_put(id):
    return {"verb": "PUT", "id": id}


@patch("/verbs/:id")
def verb_patch(id):
    return {"verb": "PATCH", "id": id}


@delete("/verbs/:id")
def verb_delete(id):
    return {"verb": "DELETE", "id": id}


def mapped_fn(sku):
    return {"mapped": sku, "path": rest.getPathRequest()}
"""

APP2 = """
from fwrest import get


@get("/hello")
def hello_v2():
    return {"from": "app2.py /hello"}
"""

USER_DATA = {"tenant": "acme", "limits": [1, 2, 3], "nested": {"Case": "Kept"}}

BOOM_BODY = b'{"code":500,"detailedMessage":"","message":"Internal Server Error"}'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("serve")
    (tmp / "app2.py").write_text(APP2)
    config = free_config(
        tmp,
        app=APP_SOURCE + EXTRA,
        servers={
            "HTTP_REST": {
                "HostName": "127.0.0.1",
                "Port": 0,
                "Locations": "LOC_A, LOC_B, LOC_V2",
                "UserData": USER_DATA,
                "LoadURNs": {
                    "/catalog/:sku": {"GET": {"Function": "app.mapped_fn", "Description": "m"}}
                },
            }
        },
        extra={
            "LOC_A": {"Path": "/a", "ThreadPool": "POOL"},
            "LOC_B": {"Path": "/b", "ThreadPool": "POOL"},
            "LOC_V2": {"Path": "/a/v2", "ThreadPool": "POOL2"},
            "POOL2": {"Environment": "ENV2", "MinThreads": 1, "MaxThreads": 2},
            "ENV2": {"Repository": "app2"},
        },
    )
    proc = ServerProcess(config).wait_ready()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def base(server: ServerProcess) -> str:
    port = server.ports["HTTP_REST"]
    return f"http://127.0.0.1:{port}"


# -- handler results (SPEC 9), parameters, methods, locations ----------------------------------


def fault(code: int, message: str) -> dict[str, object]:
    return {"code": code, "detailedMessage": "", "message": message}


JSON, TEXT = "application/json", "text/plain; charset=utf-8"
NOTE = {"x-request-note": "made"}
# "METHOD /path", status, type (None: unchecked), body (bytes as sent, else JSON), headers
ANSWERS: list[tuple[str, int, str | None, object, dict[str, str]]] = [
    ("GET /a/result/list", 200, JSON, [1, "two", {"three": 3}], {}),
    ("GET /a/text", 200, TEXT, b"plain text", {}),
    ("GET /a/result/unicode", 200, TEXT, "h\u00e9llo \u2713".encode(), {}),
    ("GET /a/bytes", 200, "application/octet-stream", b"\x00\x01", {}),
    # a Response is sent as it is
    ("GET /a/result/response", 418, None, b"short and stout", {"x-tea": "earl grey"}),
    ("GET /a/result/response-media", 201, "image/gif", b"GIF89a", {"x-kind": "picture"}),
    # None sends the setResponse parts appended; without any, an empty 200
    ("GET /a/result/parts", 200, TEXT, b"part one, part two", {}),
    ("GET /a/result/json-parts", 200, None, {"a": 1}, {}),
    ("GET /a/result/none", 200, None, b"", {}),
    ("POST /a/result/status", 201, None, {"created": 7}, {"location": "/a/items/7", **NOTE}),
    ("GET /a/result/status-only", 202, None, b"queued", {}),
    ("GET /a/result/return-wins", 200, None, {"winner": "return value"}, {}),
    # path parameters passed by name, colon and brace syntax (async)
    ("GET /a/items/42", 200, None, {"id": "42"}, {}),
    ("GET /a/users/u-7/orders/o%20x", 200, None, {"uid": "u-7", "oid": "o x"}, {}),
    ("PUT /a/verbs/9", 200, None, {"verb": "PUT", "id": "9"}, {}),
    ("PATCH /a/verbs/9", 200, None, {"verb": "PATCH", "id": "9"}, {}),
    ("DELETE /a/verbs/9", 200, None, {"verb": "DELETE", "id": "9"}, {}),
    ("GET /a/userdata", 200, None, USER_DATA, {}),
    ("GET /a/catalog/sku-1", 200, None, {"mapped": "sku-1", "path": "/a/catalog/sku-1"}, {}),
    # LoadURNs applies to every location of the server
    ("GET /b/catalog/sku-2", 200, None, {"mapped": "sku-2", "path": "/b/catalog/sku-2"}, {}),
    # a route is served under every location, and under no other path
    ("GET /a/items/1", 200, None, {"id": "1"}, {}),
    ("GET /b/items/1", 200, None, {"id": "1"}, {}),
    ("GET /c/items/1", 404, None, None, {}),
    ("GET /items/1", 404, None, None, {}),
    # /a/v2/hello could be /a + /v2/hello (app.py) or /a/v2 + /hello (app2.py): the longer wins
    ("GET /a/v2/hello", 200, None, {"from": "app2.py /hello"}, {}),
    # /b has no /v2 location: there the app.py route answers
    ("GET /b/v2/hello", 200, None, {"from": "app.py /v2/hello"}, {}),
    # the /a/v2 environment holds only app2.py: app.py's routes are not there
    ("GET /a/v2/items/1", 404, None, None, {}),
    # a prefix matches at a segment boundary only: /a/v2x is under /a
    ("GET /a/v2x", 404, None, None, {}),
    ("GET /a/nowhere", 404, None, fault(404, "Not Found"), {}),
]


@pytest.mark.parametrize(
    ("request_line", "status", "media", "body", "headers"), ANSWERS, ids=[a[0] for a in ANSWERS]
)
def test_the_answer_of_each_route(
    base: str,
    request_line: str,
    status: int,
    media: str | None,
    body: object,
    headers: dict[str, str],
) -> None:
    method, path = request_line.split(" ")
    r = httpx.request(method, f"{base}{path}")
    assert r.status_code == status, r.text
    if media is not None:
        assert r.headers["content-type"] == media
    if isinstance(body, bytes):
        assert r.content == body
    elif body is not None:
        assert r.json() == body
    for name, value in headers.items():
        assert r.headers[name] == value


# -- unhandled exceptions ----------------------------------------------------------------------


def test_unhandled_exception_is_a_fixed_500(base: str, server: ServerProcess) -> None:
    for path in ("/a/boom", "/a/aboom"):
        r = httpx.get(f"{base}{path}")
        assert r.status_code == 500
        assert r.headers["content-type"] == "application/json"
        assert r.content == BOOM_BODY
        assert json.loads(r.content) == dict(
            code=500, detailedMessage="", message="Internal Server Error"
        )
        assert "kaboom" not in r.text
        assert "Traceback" not in r.text
    text = server.wait_log("async-kaboom-detail")
    assert "kaboom-secret-detail" in text  # the exception text goes to the log only
    # short by default: the exception and where, not the whole traceback
    assert "Traceback (most recent call last)" not in text
    assert re.search(r"RuntimeError: kaboom-secret-detail at \S*app\.py:\d+", text), text


# -- starts that stop before binding: mistakes every request would pay for --------------------

ABORT_APP = """
from fwrest import get


@get("/ok/:id")
def ok(id):
    return {"id": id}


@get("/some/:a/:b")
def some(a):  # declares only some of the route's parameters: fine
    return {"a": a}


def mapped(foo):
    return {"foo": foo}


def mapped_default(foo=None):
    return {"foo": foo}
"""


def serve_fails(config: Path, *fragments: str) -> str:
    """Exit 2 before serving, one error naming ``fragments``; returns stderr."""
    result = run_cli("serve", str(config), cwd=config.parent, timeout=30)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "serving" not in result.stdout and "ready" not in result.stdout, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in {result.stderr!r}"
    return result.stderr


def _abort_config(tmp: Path, app: str = ABORT_APP, fmt: str = "json", **server: object) -> Path:
    return free_config(tmp, app=app, fmt=fmt, servers={"HTTP_REST": local_port(**server)})


def test_a_mapped_function_whose_parameter_the_route_lacks_stops_the_start(tmp_path: Path) -> None:
    """``/bm/:q`` mapped to ``mapped(foo)`` would be a 500 each request: the start says so."""
    config = _abort_config(tmp_path, LoadURNs={"/bm/:q": {"GET": {"Function": "app.mapped"}}})
    serve_fails(
        config, "[HTTP_REST] LoadURNs:", "GET /rest/bm/:q", "app.mapped", "'foo'", "type hint"
    )


def test_an_annotated_function_whose_parameter_the_route_lacks_stops_the_start(
    tmp_path: Path,
) -> None:
    app = ABORT_APP + '\n\n@get("/items/:item_id")\ndef item(id):\n    return {}\n'
    serve_fails(_abort_config(tmp_path, app=app), "GET /rest/items/:item_id", "app.item", "'id'")


def test_parameters_with_defaults_or_some_of_them_are_served(
    tmp_path: Path, serve: Callable[..., ServerProcess]
) -> None:
    config = _abort_config(
        tmp_path, LoadURNs={"/bm/:q": {"GET": {"Function": "app.mapped_default"}}}
    )
    server = serve(config)
    base = f"http://127.0.0.1:{server.ports['HTTP_REST']}/rest"
    assert httpx.get(f"{base}/bm/1").json() == {"foo": None}
    assert httpx.get(f"{base}/some/x/y").json() == {"a": "x"}


def test_one_shape_with_other_parameter_names_names_both_paths(tmp_path: Path) -> None:
    load_urns = {
        "/m/:id": {"GET": {"Function": "app.mapped_default"}},
        "/m/{other}": {"GET": {"Function": "app.mapped_default"}},
    }
    serve_fails(
        _abort_config(tmp_path, LoadURNs=load_urns),
        "GET /rest/m/:id and GET /rest/m/:other",
        "twice",
        'LoadURNs "/m/:id"',
        'LoadURNs "/m/{other}"',
    )


@pytest.mark.parametrize("fmt", ["ini", "json"])
def test_a_load_urns_path_given_twice_stops_the_start(tmp_path: Path, fmt: str) -> None:
    """JSON silently keeps the last of two equal keys: both INI and JSON forms are refused."""
    first = '{"GET": {"Function": "app.mapped_default"}}'
    second = '{"POST": {"Function": "app.mapped_default"}}'
    config = _abort_config(tmp_path, fmt=fmt, LoadURNs="@LOADURNS@")
    marker = '"@LOADURNS@"' if fmt == "json" else "@LOADURNS@"
    text = config.read_text()
    assert marker in text, text
    config.write_text(text.replace(marker, f'{{"/twice": {first}, "/twice": {second}}}'))
    if fmt == "ini":
        serve_fails(
            config,
            "[HTTP_REST] LoadURNs:",
            "'/twice' twice",
            "the second time at line 1, column 57",
        )
    else:  # the config file's own object: where in the file
        serve_fails(config, "service.json", "'/twice' twice", "the second time at line")


@pytest.mark.parametrize("path", ["/a/../rest", "/rest/.", "/./rest"])
def test_a_location_path_no_request_can_reach_stops_the_start(tmp_path: Path, path: str) -> None:
    """Paths are normalised first: a prefix with a dot segment would silently serve nothing."""
    config = _abort_config(tmp_path)
    data = json.loads(config.read_text())
    data["ROOT"]["Path"] = path
    config.write_text(json.dumps(data))
    serve_fails(config, "[ROOT] Path:", ". or .. segment")


def test_a_route_path_with_a_control_character_stops_the_start(tmp_path: Path) -> None:
    app = ABORT_APP + '\n\n@get("/tab\\x01x")\ndef ctl():\n    return {}\n'
    serve_fails(_abort_config(tmp_path, app=app), "[ENV] Repository:", "not a valid path")
