"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerProcess, free_config

Served = Callable[..., ServerProcess]


@pytest.fixture
def served(tmp_path: Path, serve: Served) -> Served:
    """``served(workers=1, **keys)``: :func:`~tests.conftest.free_config` served, ready."""

    def start(workers: int = 1, **keys: Any) -> ServerProcess:
        return serve(free_config(tmp_path, **keys), workers)  # type: ignore[no-any-return]

    return start
