"""CORS (SPEC 10.1) as Chromium (Playwright) sees it on ``fwrest serve``: a page of one
origin ``fetch``es a Basic port's API on another with credentials (preflighted for
``Authorization``) and reads the JSON, a route's or a static file's (SPEC 10.3); from an unlisted
origin the browser blocks it; the settings route stays closed to the allowed origin (the raw
preflights' headers, granted and refused: test_cors.py). Without Chromium these FAIL, never
skip."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.conftest import ServerProcess, free_config, local_port, serving

APP = """
from fwrest import get, rest

@get("/hello")
def hello():
    return {"message": "hi", "user": rest.getAuthUser()}

def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")
"""

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>front-end</title></head>
<body><p id="state">loaded</p></body></html>
"""

CALL = """async ([url, auth]) => {
    try {
        const response = await fetch(url, {
            credentials: "include",
            headers: auth ? {"Authorization": auth} : {},
        });
        return {status: response.status, body: await response.json(),
                exposed: response.headers.get("X-Total-Count")};
    } catch (error) {
        return {blocked: String(error)};
    }
}"""

ADA = "Basic YWRhOkFkYS1Qdy0x"  # ada:Ada-Pw-1


@pytest.fixture(scope="module")
def front_end(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A static server for the page, on a port of its own (the front-end's origin)."""
    folder = tmp_path_factory.mktemp("front_end")
    (folder / "index.html").write_text(PAGE)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, front_end: int) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("cors_api")
    (tmp / "www").mkdir()
    (tmp / "www" / "data.json").write_text('{"file": true}')
    basic = {"scheme": "basic", "OnAuth": "app.check"}
    config = free_config(
        tmp,
        app=APP,
        servers={"HTTP_API": local_port(FwData={"Authorization": basic})},
        extra={
            "ROOT": {"CORS": "CORS_WEB", "RootPath": str(tmp / "www")},
            "CORS_WEB": {
                "AllowOrigins": f"http://127.0.0.1:{front_end}",
                "AllowCredentials": 1,
                "ExposeHeaders": "X-Total-Count",
            },
        },
    )
    with serving(config) as proc:
        yield proc


Call = Callable[..., dict[str, Any]]


@pytest.fixture
def call(browser: Any, front_end: int, api: ServerProcess) -> Call:
    """``call(path, auth, host="127.0.0.1")``: what ``fetch`` read on the page from ``host``."""

    def fetch(path: str, auth: str | None, host: str = "127.0.0.1") -> dict[str, Any]:
        with contextlib.closing(browser.new_context()) as context:
            page = context.new_page()
            page.goto(f"http://{host}:{front_end}/index.html")
            result: dict[str, Any] = page.evaluate(CALL, [api.url("HTTP_API") + path, auth])
            return result

    return fetch


def test_a_page_of_an_allowed_origin_reads_the_api(call: Call, api: ServerProcess) -> None:
    result = call("/hello", ADA)
    assert result == {"status": 200, "body": {"message": "hi", "user": "ada"}, "exposed": None}
    # the browser's preflight reached the service, before authorization
    log = (api.config.parent / "server.log").read_text()
    assert "OPTIONS /rest/hello 204" in log


def test_a_page_of_an_allowed_origin_reads_a_protected_file(call: Call, api: ServerProcess) -> None:
    # the preflight of a static file's GET is granted, as a route's (it was 403: blocked)
    result = call("/data.json", ADA)
    assert result == {"status": 200, "body": {"file": True}, "exposed": None}
    log = (api.config.parent / "server.log").read_text()
    assert "OPTIONS /rest/data.json 204" in log


def test_an_error_is_readable_by_the_allowed_origin(call: Call) -> None:
    result = call("/hello", "Basic " + "eDp5")  # x:y, refused by OnAuth
    assert result["status"] == 403
    assert result["body"]["code"] == 403


def test_a_page_of_another_origin_is_blocked(call: Call) -> None:
    # localhost is another origin than 127.0.0.1, although the same server
    result = call("/hello", ADA, host="localhost")
    assert "blocked" in result, result
    assert "Failed to fetch" in result["blocked"]


def test_the_settings_route_stays_closed_to_the_allowed_origin(call: Call) -> None:
    result = call("/fw/rest/config", ADA)
    assert "blocked" in result, result
