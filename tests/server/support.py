"""Shared by tests/server modules on a real ``fwrest serve``: ``serve_module(folder, **config)`` (a
module-scoped :func:`free_config` server), ``port_of(section, name)`` and ``assert_hello``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ServerProcess, free_config, serving
from tests.server.rawhttp import RawResponse


def serve_module(folder: str, name: str = "server", **config: Any) -> Any:
    """A module-scoped fixture ``name``: ``fwrest serve`` of ``free_config(FOLDER, **config)``."""

    @pytest.fixture(scope="module", name=name)
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
        with serving(free_config(tmp_path_factory.mktemp(folder), **config)) as proc:
            yield proc

    return fixture


def port_of(section: str, name: str = "port") -> Any:
    """A fixture ``name``: the port ``server``'s section ``section`` is bound to."""

    @pytest.fixture(name=name)
    def fixture(server: ServerProcess) -> int:
        return server.ports[section]

    return fixture


def assert_hello(response: RawResponse) -> None:
    assert response.status_line == "HTTP/1.1 200 OK", response.head
    assert response.json()["hello"] == "world"
