"""Helpers shared by the end-to-end tests: hosts of one service started together (each
``fwrest serve`` ready with every worker), optionally on one ``redis-server``; a config's state
store set after the fact; the example service of examples/ copied and served on free ports;
a plain HTTP server of static pages."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
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


class Pages:
    """A plain HTTP server of the test serving the files of ``folder`` (a single-page app, its
    origin; a native app's loopback callback; a cross-site page); it records the paths it was
    asked for."""

    def __init__(self, folder: Path) -> None:
        self.asked: list[str] = []
        asked = self.asked

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                asked.append(self.path)

        handler = functools.partial(Handler, directory=str(folder))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = int(self.httpd.server_address[1])
        self.origin = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
