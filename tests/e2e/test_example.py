"""The README's example service for real with two workers (SPEC 8): what
tests/docs/test_examples.py's walk-throughs do not show."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from tests.conftest import FWREST, ROOT, ServerProcess
from tests.e2e.support import example_copy

EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """examples/ copied to a temporary folder, every port set to 0 (the system picks)."""
    ini = example_copy(tmp_path_factory.mktemp("example"))
    server = ServerProcess(ini, workers=2).wait_ready()
    yield server
    assert server.stop() == 0


def test_make_certs_created_a_ca_and_a_server_certificate(example: ServerProcess) -> None:
    certs = example.config.parent / "certs"
    assert (certs / "ca.pem").is_file()
    assert (certs / "server.key").stat().st_mode & 0o777 == 0o600


def test_the_typed_quote_endpoint(example: ServerProcess) -> None:
    base = example.url("HTTP_REST")
    order = {
        "customer": "Kim",
        "lines": [
            {"sku": "tea", "qty": 2, "unit_cents": 350},
            {"sku": "mug", "qty": 1, "unit_cents": 900},
        ],
        "discount_percent": 10,
    }
    quote = httpx.post(f"{base}/quotes", json=order)
    assert quote.status_code == 200
    assert quote.json() == dict(customer="Kim", items=3, subtotal_cents=1600, total_cents=1440)
    order["lines"][1]["qty"] = 0
    refused = httpx.post(f"{base}/quotes", json=order)
    assert refused.status_code == 400
    assert refused.json()["detailedMessage"] == (
        "the body ('order'): Expected `int` >= 1 - at `$.lines[1].qty`"
    )
    demo = httpx.get(f"{base}/quotes/demo/2", params={"customer": "Zoe"}).json()
    assert demo == {"customer": "Zoe", "items": 3, "subtotal_cents": 750, "total_cents": 750}
    assert httpx.get(f"{base}/quotes/demo/11").status_code == 400
    doc = httpx.get(f"{base}/fw/rest/openapi.json").json()
    body = doc["paths"]["/rest/quotes"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/QuoteRequest"}
    validate(doc)  # the example's document, typed routes included, is valid OpenAPI 3.1


def test_example_json_config_is_valid() -> None:
    done = subprocess.run(
        [*FWREST, "check", str(EXAMPLES / "service.json")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_static_page_calls_the_api_in_a_browser(example: ServerProcess, browser: Any) -> None:
    page_url = f"http://127.0.0.1:{example.ports['HTTP_REST']}/app/"
    page_answer = httpx.get(page_url)
    assert page_answer.status_code == 200
    assert page_answer.headers["content-type"] == "text/html; charset=utf-8"
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(page_url)
        page.wait_for_selector("#users li", timeout=10000)
        names = page.locator("#users li").all_inner_texts()
    finally:
        context.close()
    assert "1: Ada" in names


def test_the_example_grants_its_front_end_origin(example: ServerProcess) -> None:
    base = example.url("HTTP_REST")
    asked = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "GET"}
    granted = httpx.options(f"{base}/users", headers=asked)
    assert granted.status_code == 204
    assert granted.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert granted.headers["access-control-allow-credentials"] == "true"
    other = httpx.options(f"{base}/users", headers={**asked, "Origin": "http://evil.example"})
    assert other.status_code == 403
