"""docs/hooks.md's example service, as the page writes it (its port aside), on a real
``fwrest serve``: each answer the page describes."""

from __future__ import annotations

import configparser
from pathlib import Path

import httpx

from tests.conftest import exchange, ini_text, serving
from tests.docs.blocks import example, substitute
from tests.server.rawhttp import request_bytes


def test_the_guides_hooks_service(tmp_path: Path) -> None:
    (tmp_path / "hooks.py").write_text(example("hooks-module").text)
    parser = configparser.ConfigParser()
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(substitute(example("hooks-config"), {"Port=8080": "Port=0"}))
    sections = {
        "HTTPSERVER": {"Enable": 1, "Servers": "HTTP_REST", "StateStore": "memory"},
        **{name: dict(parser[name]) for name in parser.sections()},
    }
    config = tmp_path / "service.ini"
    config.write_text(ini_text(sections))
    with serving(config, workers=2) as server:
        base = server.url()
        r = httpx.get(f"{base}/orders/7", timeout=10)
        assert r.status_code == 200
        assert r.json()["id"] == "7"
        assert r.json()["db"].startswith("connection of worker ")  # OnStart ran there
        assert r.headers["x-served-by"] == "orders"
        r = httpx.get(f"{base}/orders/0", timeout=10)
        assert r.status_code == 404
        assert r.json() == {"code": 404, "message": "no order 0"}
        r = httpx.get(f"{base}/orders/7", params={"format": "csv"}, timeout=10)
        assert r.status_code == 200 and "x-served-by" not in r.headers  # SLOW_POOL's
        port = server.ports["HTTP_REST"]
        scanner = request_bytes("GET", "/rest/orders/7", [("User-Agent", "sqlmap/1.7")])
        assert exchange(port, scanner) == b""
        assert httpx.get(f"{base}/orders/7", timeout=10).status_code == 200
