"""``/fw/rest/docs`` in a real browser (SPEC 14.2): Debian's Chromium, driven by Playwright,
against ``fwrest serve`` on a Basic port, every request to anything but the server aborted.

The page shows the port's operations from its ``openapi.json`` and runs "Try it out" on one,
showing the server's answer; no request leaves for another host, and the page's
``Content-Security-Policy`` refuses nothing Swagger UI needs.

Chromium is a Debian package (``apt-get install -y chromium``); without it these tests FAIL
(they never skip): the page is part of the product.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import ServerProcess, free_config
from tests.native.support import running

AUTH_SOURCE = """
def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("docs_browser")
    (tmp / "auth.py").write_text(AUTH_SOURCE)
    config = free_config(
        tmp,
        servers={
            "HTTP_BASIC": {
                "HostName": "127.0.0.1",
                "Port": 0,
                "Locations": "ROOT",
                "FwData": {"Authorization": {"scheme": "basic", "OnAuth": "auth.check"}},
            }
        },
        extra={"ENV": {"Repository": "app,auth"}},
    )
    with running(config) as proc:
        yield proc


def test_the_page_lists_the_operations_and_tries_one_without_leaving_the_server(
    browser: Any, server: ServerProcess
) -> None:
    base = server.url("HTTP_BASIC")  # http://127.0.0.1:PORT/rest
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(base))
    outside: list[str] = []
    inside: list[str] = []

    def only_the_server(route: Any) -> None:
        url = route.request.url
        if url.startswith(origin + "/"):
            inside.append(url)
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    # the browser logs in as a user would, answering the port's Basic challenge
    context = browser.new_context(
        viewport={"width": 1200, "height": 900},
        http_credentials={"username": "ada", "password": "Ada-Pw-1"},
    )
    try:
        context.route("**/*", only_the_server)
        page = context.new_page()
        page.set_default_timeout(20_000)
        refused: list[str] = []
        page.on(
            "console",
            lambda msg: refused.append(msg.text) if "Content Security Policy" in msg.text else None,
        )
        page.on("pageerror", lambda exc: refused.append(f"page error: {exc}"))
        answer = page.goto(f"{base}/fw/rest/docs")
        assert answer is not None and answer.status == 200

        # the operations of the document, application and native routes
        hello = page.locator("#operations-default-get__rest_hello")
        hello.wait_for()
        assert page.locator(".opblock").count() >= 10
        assert (
            "/rest/fw/rest/openapi.json" in page.locator(".opblock-summary-path").all_inner_texts()
        )
        assert "fwrest service [HTTP_BASIC]" in page.locator(".info .title").inner_text()

        # Try it out -> Execute: the server's answer shows in the page
        hello.locator(".opblock-summary").click()
        hello.locator("button.try-out__btn").click()
        hello.locator("button.execute").click()
        status = hello.locator(".live-responses-table .response .response-col_status")
        status.first.wait_for()
        assert status.first.inner_text().strip() == "200"
        body = hello.locator(".live-responses-table .response-col_description pre").first
        assert '"hello": "world"' in body.inner_text()
        url = hello.locator(".request-url pre").inner_text()
        assert url == f"{origin}/rest/hello", url

        # the Authorize dialog (the port's Basic scheme, from the document)
        page.locator("button.authorize").first.click()
        dialog = page.locator(".dialog-ux .modal-ux")
        dialog.wait_for()
        assert "basicAuth" in dialog.inner_text()
        dialog.locator("button.close-modal").click()

        assert outside == [], outside
        assert f"{base}/fw/rest/openapi.json" in inside
        assert f"{base}/hello" in inside
        assert any("/fw/rest/docs/swagger-ui-bundle.js?v=" in u for u in inside), inside
        assert refused == [], refused
    finally:
        context.close()
