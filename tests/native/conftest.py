"""Fixtures the native-route modules share: the in-process clients of a module's ``config`` (the
ports its ``PORTS`` names), the log file they write, and the URL of a module's ``server``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fwrest.testing import Client
from tests.conftest import ServerProcess
from tests.native.support import FileLog, in_process_ports


@pytest.fixture(scope="module")
def clients(request: pytest.FixtureRequest, config: Path) -> Iterator[dict[str, Client]]:
    """Server section -> its in-process client (base URL ending in ``/rest``)."""
    with in_process_ports(config, request.module.PORTS) as found:
        yield found


@pytest.fixture(scope="module")
def file_log(config: Path) -> FileLog:
    """The ``LogFile`` every client of the module writes."""
    return FileLog(config.parent / "server.log")


@pytest.fixture(scope="module")
def base(server: ServerProcess) -> str:
    """``server``'s ``HTTP_REST`` URL (``http://127.0.0.1:PORT/rest``)."""
    return server.url()
