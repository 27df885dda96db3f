"""Helpers shared by the end-to-end tests: hosts of one service started together (each
``fwrest serve`` ready with every worker), optionally on one ``redis-server``; a config's state
store set after the fact; the example service of examples/ copied and served on free ports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, ServerProcess, wait_ready_workers
from tests.redis_support import RedisServer


def with_store(config: Path, store: str | None, **httpserver: Any) -> Path:
    """``config`` (a JSON config) with ``[HTTPSERVER] StateStore=store`` (None: the key removed,
    the default store, sqlite) and the other ``httpserver`` keys."""
    sections = json.loads(config.read_text())
    sections["HTTPSERVER"].pop("StateStore", None)
    if store is not None:
        sections["HTTPSERVER"]["StateStore"] = store
    sections["HTTPSERVER"].update(httpserver)
    config.write_text(json.dumps(sections))
    return config


@contextmanager
def hosts_serving(configs: Sequence[tuple[Path, int]]) -> Iterator[list[ServerProcess]]:
    """``fwrest serve CONFIG --workers N`` of each (config, N), started together, each ready
    with the ``ready`` line of every worker; all stopped after the ``with`` block."""
    started: list[ServerProcess] = []
    try:
        for config, workers in configs:
            started.append(ServerProcess(config, workers=workers))
        for proc, (_, workers) in zip(started, configs, strict=True):
            proc.wait_ready()
            wait_ready_workers(proc, workers)
        yield started
    finally:
        for proc in started:
            proc.stop()


@contextmanager
def redis_or_none(folder: Path, wanted: bool = True) -> Iterator[RedisServer | None]:
    """A ``redis-server`` under ``folder`` for the ``with`` block, or None if not ``wanted``."""
    redis = RedisServer(folder).start() if wanted else None
    try:
        yield redis
    finally:
        if redis is not None:
            redis.stop()


def example_copy(work: Path) -> Path:
    """examples/ copied to ``work/examples`` as on a fresh checkout, its certificates made by
    make_certs.py, every ``Port=`` of its service.ini set to 0 (the system picks): that file."""
    target = work / "examples"
    ignore = shutil.ignore_patterns(".fwrest", "certs", "__pycache__")
    shutil.copytree(ROOT / "examples", target, ignore=ignore)
    subprocess.run([sys.executable, str(target / "make_certs.py")], check=True, capture_output=True)
    ini = target / "service.ini"
    ini.write_text(re.sub(r"(?m)^Port=\d+$", "Port=0", ini.read_text()))
    return ini
