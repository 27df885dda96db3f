"""The smallest end-to-end run: serve, answer, stop with exit 0."""

from __future__ import annotations

import httpx

from tests.e2e.conftest import Served


def test_serve_answers_and_stops_cleanly(served: Served) -> None:
    server = served()
    response = httpx.get(f"{server.url()}/hello")
    assert response.status_code == 200
    assert response.json()["hello"] == "world"
    assert server.stop() == 0
    assert "GET /rest/hello 200" in server.log()
