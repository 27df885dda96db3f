"""Fixtures and checks shared by the modules of tests/server that read a real ``fwrest serve``:

* ``serve_module(folder, **config)``: a module-scoped fixture serving :func:`free_config`'s
  service (``config`` its keyword arguments) in a folder of its own, stopped after the module;
* ``port_of(section, name)``: a fixture giving that server section's bound port;
* ``assert_hello``: the 200 answer of ``GET /rest/hello`` read off a raw socket.
"""

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
