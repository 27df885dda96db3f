"""``/fw/rest/docs`` in Chromium via Playwright (SPEC 14.2), every request but the server's aborted:
the port's operations shown, "Try it out" answered, nothing leaves for another host, the CSP refuses
nothing Swagger UI needs. Without Chromium (``apt-get install -y chromium``) these FAIL, never skip:
the page is part of the product."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import trustme

from tests.conftest import ServerProcess, local_port, serving
from tests.native.support import auth_service, oauth2_port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("docs_browser")
    config = auth_service(
        tmp,
        servers={
            "HTTP_BASIC": local_port(
                FwData={"Authorization": {"scheme": "basic", "OnAuth": "auth.check"}}
            ),
            "HTTPS_OAUTH": oauth2_port(
                tmp, ca, "auth.params", NativeRoutes={"public": ["rest/docs", "rest/openapi.json"]}
            ),
        },
    )
    with serving(config) as proc:
        yield proc


class Outside:
    """Lets a context reach only ``origin``: every other request is aborted and recorded."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.outside: list[str] = []
        self.inside: list[str] = []

    def __call__(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(self.origin + "/"):
            self.inside.append(url)
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()


def open_page(context: Any, base: str) -> tuple[Any, Outside, list[str]]:
    """The docs page, reaching nothing else; the console's policy messages, the page's errors."""
    gate = Outside("{0.scheme}://{0.netloc}".format(urlsplit(base)))
    context.route("**/*", gate)
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
    return page, gate, refused


def try_it_out(operation: Any) -> tuple[str, str]:
    """ "Try it out" -> "Execute" on an operation: the status and body the page shows."""
    operation.locator(".opblock-summary").click()
    operation.locator("button.try-out__btn").click()
    operation.locator("button.execute").click()
    status = operation.locator(".live-responses-table .response .response-col_status").first
    status.wait_for()
    body = operation.locator(".live-responses-table .response-col_description pre").first
    return status.inner_text().strip(), body.inner_text()


def test_the_page_lists_the_operations_and_tries_one_without_leaving_the_server(
    browser: Any, server: ServerProcess
) -> None:
    # not the document's servers entry (127.0.0.1): the page puts its own origin there
    base = server.url("HTTP_BASIC").replace("127.0.0.1", "localhost")
    # the browser logs in as a user would, answering the port's Basic challenge
    context = browser.new_context(
        viewport={"width": 1200, "height": 900},
        http_credentials={"username": "ada", "password": "Ada-Pw-1"},
    )
    try:
        page, gate, refused = open_page(context, base)
        # the operations of the document, application and native routes
        hello = page.locator("#operations-default-get__rest_hello")
        hello.wait_for()
        assert page.locator(".opblock").count() >= 10
        paths = page.locator(".opblock-summary-path").all_inner_texts()
        assert "/rest/fw/rest/openapi.json" in paths
        assert "fwrest service [HTTP_BASIC]" in page.locator(".info .title").inner_text()

        # Try it out -> Execute: the server's answer shows in the page
        status, body = try_it_out(hello)
        assert status == "200"
        assert '"hello": "world"' in body
        url = hello.locator(".request-url pre").inner_text()
        assert url == f"{gate.origin}/rest/hello", url

        # the Authorize dialog (the port's Basic scheme, from the document)
        page.locator("button.authorize").first.click()
        dialog = page.locator(".dialog-ux .modal-ux")
        dialog.wait_for()
        assert "basicAuth" in dialog.inner_text()
        dialog.locator("button.close-modal").click()

        assert gate.outside == [], gate.outside
        assert f"{base}/fw/rest/openapi.json" in gate.inside
        assert f"{base}/hello" in gate.inside
        assert any("/fw/rest/docs/swagger-ui-bundle.js?v=" in u for u in gate.inside)
        assert refused == [], refused
    finally:
        context.close()


def test_on_an_oauth2_port_authorize_gets_a_token_that_try_it_out_sends(
    browser: Any, server: ServerProcess
) -> None:
    """As docs/operations.md tells: page and document public, "Authorize" by the password flow,
    credentials in "Request body"."""
    base = server.url("HTTPS_OAUTH")
    context = browser.new_context(viewport={"width": 1200, "height": 900}, ignore_https_errors=True)
    try:
        page, gate, refused = open_page(context, base)
        hello = page.locator("#operations-default-get__rest_hello")
        hello.wait_for()
        status, body = try_it_out(hello)
        assert status == "401", body  # no token yet

        page.locator("button.authorize").first.click()
        dialog = page.locator(".dialog-ux .modal-ux")
        dialog.wait_for()
        dialog.locator("#oauth_username").fill("ada")
        dialog.locator("#oauth_password").fill("Ada-Pw-7731")
        dialog.locator("#password_type").select_option("request-body")
        dialog.locator(".auth-btn-wrapper button.authorize").click()
        dialog.get_by_role("button", name="Remove authorization").wait_for()  # authorized
        assert "Authorized" in dialog.inner_text()
        dialog.locator("button.close-modal").click()

        hello.locator("button.execute").click()
        page.wait_for_function(
            "() => document.querySelector('#operations-default-get__rest_hello "
            ".live-responses-table .response .response-col_status').innerText.trim() === '200'"
        )
        body = hello.locator(".live-responses-table .response-col_description pre").first
        assert '"hello": "world"' in body.inner_text()
        sent = hello.locator(".curl-command").inner_text()
        assert "Authorization: Bearer ey" in sent, sent
        assert any(u.endswith("/rest/fw/oauth2/token") for u in gate.inside), gate.inside
        assert gate.outside == [], gate.outside
        assert refused == [], refused
    finally:
        context.close()
