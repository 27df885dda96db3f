"""``fwrest serve`` end to end: handler results (SPEC 9), path parameters, where handlers run,
UserData, LoadURNs, locations, and the fixed 500 answer for an unhandled exception.

One server (module scope) with three locations: ``/a`` and ``/b`` share the pool and the
environment of ``app.py``; ``/a/v2`` has its own environment (``app2.py``), which makes it the
longest matching prefix for ``/a/v2/...``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import APP_SOURCE, ServerProcess, free_config, run_cli

EXTRA = """

@get("/where/sync")
def where_sync():
    return {"thread": threading.current_thread().name}


@get("/where/async")
async def where_async():
    loop = asyncio.get_running_loop()
    return {"thread": threading.current_thread().name, "loop_running": loop.is_running()}


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


@get("/result/fault")
def result_fault():
    rest.setFault("the ledger is locked")


@get("/result/fault-409")
def result_fault_409():
    rest.setStatusCode(409)
    rest.setFault("the ledger is locked")


@get("/result/fault-after-201")
def result_fault_after_201():
    rest.setStatusCode(201)
    rest.setFault("not created")


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


# -- handler results (SPEC 9) -------------------------------------------------------------------


def test_dict_is_json_200(base: str) -> None:
    r = httpx.get(f"{base}/a/hello")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json()["hello"] == "world"


def test_list_is_json_200(base: str) -> None:
    r = httpx.get(f"{base}/a/result/list")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == [1, "two", {"three": 3}]


def test_str_is_utf8_text(base: str) -> None:
    r = httpx.get(f"{base}/a/text")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.text == "plain text"
    r = httpx.get(f"{base}/a/result/unicode")
    assert r.content == "h\u00e9llo \u2713".encode()


def test_bytes_are_octet_stream(base: str) -> None:
    r = httpx.get(f"{base}/a/bytes")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.content == b"\x00\x01"


def test_response_is_sent_as_it_is(base: str) -> None:
    r = httpx.get(f"{base}/a/result/response")
    assert r.status_code == 418
    assert r.headers["x-tea"] == "earl grey"
    assert r.text == "short and stout"
    r = httpx.get(f"{base}/a/result/response-media")
    assert r.status_code == 201
    assert r.headers["content-type"] == "image/gif"
    assert r.headers["x-kind"] == "picture"
    assert r.content == b"GIF89a"


def test_none_sends_the_set_response_parts_appended(base: str) -> None:
    r = httpx.get(f"{base}/a/result/parts")
    assert r.status_code == 200
    assert r.text == "part one, part two"
    assert r.headers["content-type"].startswith("text/plain")
    r = httpx.get(f"{base}/a/result/json-parts")
    assert r.json() == {"a": 1}


def test_none_without_set_response_is_an_empty_200(base: str) -> None:
    r = httpx.get(f"{base}/a/result/none")
    assert r.status_code == 200
    assert r.content == b""


def test_set_status_code_and_headers(base: str) -> None:
    r = httpx.post(f"{base}/a/result/status")
    assert r.status_code == 201
    assert r.headers["location"] == "/a/items/7"
    assert r.headers["x-request-note"] == "made"
    assert r.json() == {"created": 7}
    r = httpx.get(f"{base}/a/result/status-only")
    assert r.status_code == 202
    assert r.text == "queued"


def test_set_fault_is_500_with_the_error_body(base: str) -> None:
    """SPEC 3: the framework's error body as JSON, with the status set before it when that is
    4xx or 5xx, else 500."""
    r = httpx.get(f"{base}/a/result/fault")
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"code": 500, "detailedMessage": "", "message": "the ledger is locked"}
    r = httpx.get(f"{base}/a/result/fault-409")
    assert r.status_code == 409
    assert r.json() == {"code": 409, "detailedMessage": "", "message": "the ledger is locked"}
    r = httpx.get(f"{base}/a/result/fault-after-201")
    assert r.status_code == 500
    assert r.json() == {"code": 500, "detailedMessage": "", "message": "not created"}


def test_return_value_wins_over_set_response(base: str) -> None:
    r = httpx.get(f"{base}/a/result/return-wins")
    assert r.status_code == 200
    assert r.json() == {"winner": "return value"}
    assert "collected text" not in r.text


# -- parameters, where handlers run, methods ---------------------------------------------------


def test_path_params_passed_by_name_colon_syntax(base: str) -> None:
    r = httpx.get(f"{base}/a/items/42")
    assert r.status_code == 200
    assert r.json() == {"id": "42"}


def test_path_params_passed_by_name_brace_syntax_async(base: str) -> None:
    r = httpx.get(f"{base}/a/users/u-7/orders/o%20x")
    assert r.status_code == 200
    assert r.json() == {"uid": "u-7", "oid": "o x"}


def test_put_patch_delete_decorators(base: str) -> None:
    for verb in ("PUT", "PATCH", "DELETE"):
        r = httpx.request(verb, f"{base}/a/verbs/9")
        assert r.status_code == 200, verb
        assert r.json() == {"verb": verb, "id": "9"}


def test_def_runs_in_a_pool_thread(base: str) -> None:
    names = {httpx.get(f"{base}/a/where/sync").json()["thread"] for _ in range(3)}
    print("sync handler threads:", names)
    assert all(name.startswith("fwrest-") for name in names), names


def test_async_def_runs_on_the_event_loop(base: str) -> None:
    body = httpx.get(f"{base}/a/where/async").json()
    print("async handler thread:", body["thread"])
    assert body["loop_running"] is True
    assert not body["thread"].startswith("fwrest-")


def test_user_data_is_readable(base: str) -> None:
    r = httpx.get(f"{base}/a/userdata")
    assert r.status_code == 200
    assert r.json() == USER_DATA


def test_load_urns_mapped_route(base: str) -> None:
    r = httpx.get(f"{base}/a/catalog/sku-1")
    assert r.status_code == 200
    assert r.json() == {"mapped": "sku-1", "path": "/a/catalog/sku-1"}
    # LoadURNs applies to every location of the server
    r = httpx.get(f"{base}/b/catalog/sku-2")
    assert r.json() == {"mapped": "sku-2", "path": "/b/catalog/sku-2"}


# -- locations ------------------------------------------------------------------------------------


def test_route_is_served_under_every_location(base: str) -> None:
    a = httpx.get(f"{base}/a/items/1")
    b = httpx.get(f"{base}/b/items/1")
    assert (a.status_code, b.status_code) == (200, 200)
    assert a.json() == b.json() == {"id": "1"}
    assert httpx.get(f"{base}/c/items/1").status_code == 404
    assert httpx.get(f"{base}/items/1").status_code == 404


def test_longest_location_prefix_wins(base: str) -> None:
    # /a/v2/hello could be /a + /v2/hello (app.py) or /a/v2 + /hello (app2.py): the longer wins
    assert httpx.get(f"{base}/a/v2/hello").json() == {"from": "app2.py /hello"}
    # /b has no /v2 location: there the app.py route answers
    assert httpx.get(f"{base}/b/v2/hello").json() == {"from": "app.py /v2/hello"}
    # the /a/v2 environment holds only app2.py: app.py's routes are not there
    assert httpx.get(f"{base}/a/v2/items/1").status_code == 404
    # a prefix matches at a segment boundary only: /a/v2x is under /a
    assert httpx.get(f"{base}/a/v2x").status_code == 404


def test_unknown_path_404_and_wrong_method_405(base: str) -> None:
    r = httpx.get(f"{base}/a/nowhere")
    assert r.status_code == 404
    assert r.json() == {"code": 404, "detailedMessage": "", "message": "Not Found"}
    r = httpx.get(f"{base}/a/echo")
    assert r.status_code == 405
    assert "POST" in r.headers["allow"]


# -- unhandled exceptions ----------------------------------------------------------------------


def test_unhandled_exception_is_a_fixed_500(base: str, server: ServerProcess) -> None:
    for path in ("/a/boom", "/a/aboom"):
        r = httpx.get(f"{base}{path}")
        assert r.status_code == 500
        assert r.headers["content-type"] == "application/json"
        assert r.content == BOOM_BODY
        assert json.loads(r.content) == {
            "code": 500,
            "detailedMessage": "",
            "message": "Internal Server Error",
        }
        assert "kaboom" not in r.text
        assert "Traceback" not in r.text
    text = server.wait_log("async-kaboom-detail")
    assert "kaboom-secret-detail" in text  # the exception text goes to the log only
    # short by default: the exception and where, not the whole traceback
    assert "Traceback (most recent call last)" not in text
    assert re.search(r"RuntimeError: kaboom-secret-detail at \S*app\.py:\d+", text), text


def test_the_server_keeps_serving_after_errors(base: str) -> None:
    for _ in range(3):
        assert httpx.get(f"{base}/a/boom").status_code == 500
    assert httpx.get(f"{base}/a/hello").status_code == 200


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
    """``fwrest serve CONFIG`` must exit 2 before serving, with one error naming
    ``fragments``; returns its standard error."""
    result = run_cli("serve", str(config), cwd=config.parent, timeout=30)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "serving" not in result.stdout and "ready" not in result.stdout, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in {result.stderr!r}"
    return result.stderr


def _abort_config(tmp: Path, app: str = ABORT_APP, fmt: str = "json", **server: object) -> Path:
    return free_config(
        tmp,
        app=app,
        fmt=fmt,
        servers={"HTTP_REST": {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT", **server}},
    )


def test_a_mapped_function_whose_parameter_the_route_lacks_stops_the_start(
    tmp_path: Path,
) -> None:
    """``/bm/:q`` mapped to ``mapped(foo)``: every request would be a 500 (the function is
    called without ``foo``); the start says so instead."""
    config = _abort_config(tmp_path, LoadURNs={"/bm/:q": {"GET": {"Function": "app.mapped"}}})
    serve_fails(
        config, "[HTTP_REST] LoadURNs:", "GET /rest/bm/:q", "app.mapped", "'foo'", "default"
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
    """JSON keeps the last of two equal keys without a word: the first mapping would vanish.
    The INI string form and the JSON config file's own object are both refused."""
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
    """Request paths are normalised before they are located: a prefix with a dot segment
    would never match, so the location would silently serve nothing."""
    config = _abort_config(tmp_path)
    data = json.loads(config.read_text())
    data["ROOT"]["Path"] = path
    config.write_text(json.dumps(data))
    serve_fails(config, "[ROOT] Path:", ". or .. segment")


def test_a_route_path_with_a_control_character_stops_the_start(tmp_path: Path) -> None:
    app = ABORT_APP + '\n\n@get("/tab\\x01x")\ndef ctl():\n    return {}\n'
    serve_fails(_abort_config(tmp_path, app=app), "[ENV] Repository:", "not a valid path")
