"""The smallest end-to-end run: serve, answer, stop with exit 0."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import free_config


def test_serve_answers_and_stops_cleanly(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(free_config(tmp_path))
    response = httpx.get(f"{server.url()}/hello")
    assert response.status_code == 200
    assert response.json()["hello"] == "world"
    assert server.stop() == 0
    assert "GET /rest/hello 200" in server.log()
