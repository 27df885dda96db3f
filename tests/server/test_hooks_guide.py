"""docs/hooks.md's example service as written, in process: each answer the page describes. Named
``hooks_guide_app``: another test's module may be named ``hooks``."""

from __future__ import annotations

import configparser
import os
from pathlib import Path

import httpx
import pytest

from fwrest.testing import Client
from tests.conftest import ini_text
from tests.docs.blocks import example, substitute


def test_the_guides_hooks_service(tmp_path: Path) -> None:
    (tmp_path / "hooks_guide_app.py").write_text(example("hooks-module").text)
    parser = configparser.ConfigParser()
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    replacements = {"Port=8080": "Port=0", "Repository=hooks": "Repository=hooks_guide_app"}
    parser.read_string(substitute(example("hooks-config"), replacements))
    sections = {
        "HTTPSERVER": {"Enable": 1, "Servers": "HTTP_REST", "StateStore": "memory"},
        **{name: dict(parser[name]) for name in parser.sections()},
    }
    config = tmp_path / "service.ini"
    config.write_text(ini_text(sections))
    with Client(config) as client:
        r = client.get("/rest/orders/7")
        assert r.status_code == 200
        assert r.json() == {"id": "7", "db": f"connection of worker {os.getpid()}"}  # OnStart
        assert r.headers["x-served-by"] == "orders"
        r = client.get("/rest/orders/0")
        assert r.status_code == 404
        assert r.json() == {"code": 404, "message": "no order 0"}
        r = client.get("/rest/orders/7", params={"format": "csv"})
        assert r.status_code == 200 and "x-served-by" not in r.headers  # SLOW_POOL's
        with pytest.raises(httpx.RemoteProtocolError):  # closed without an answer
            client.get("/rest/orders/7", headers={"User-Agent": "sqlmap/1.7"})
        assert client.get("/rest/orders/7").status_code == 200
