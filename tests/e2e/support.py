"""Helpers of the end-to-end tests: hosts started together (optionally on one ``redis-server``), a
config's store set after the fact, the oAuth2 and Basic host of the state-sharing tests, each
worker's client, a refused refresh, examples/ served on free ports, a static page server."""

from __future__ import annotations

import functools
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import trustme

from tests.auth.oauth2_support import PID_APP
from tests.conftest import (
    ROOT,
    ServerProcess,
    free_config,
    issue_certs,
    local_port,
    tls_server,
    wait_ready_workers,
)
from tests.redis_support import RedisServer


def with_store(config: Path, store: str | None, **httpserver: Any) -> Path:
    """``config`` with ``StateStore=store`` (None: the default sqlite) and ``httpserver`` keys."""
    sections = json.loads(config.read_text())
    sections["HTTPSERVER"].pop("StateStore", None)
    if store is not None:
        sections["HTTPSERVER"]["StateStore"] = store
    sections["HTTPSERVER"].update(httpserver)
    config.write_text(json.dumps(sections))
    return config


@contextmanager
def hosts_serving(configs: Sequence[tuple[Path, int]]) -> Iterator[list[ServerProcess]]:
    """``fwrest serve CONFIG --workers N`` of each, together, each ready on every worker."""
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


@contextmanager
def one_or_two_hosts(
    ca: trustme.CA,
    root: Path,
    two: bool,
    config_of: Callable[[Path, dict[str, Path], str | None], Path],
    workers: int,
) -> Iterator[list[ServerProcess]]:
    """One host on sqlite, or two (``two``) on one ``redis-server``: ``config_of(folder, certs,
    redis_url or None)`` in ``root/a``, ``root/b``, ``--workers workers``; stopped after."""
    with redis_or_none(root, two) as redis:
        configs = []
        for name in ("a", "b") if redis is not None else ("a",):
            certs = issue_certs(ca, root / name / "certs")
            configs.append((config_of(root / name, certs, redis.url if redis else None), workers))
        with hosts_serving(configs) as started:
            yield started


# PID_APP and a Basic validator of its users
BASIC_APP = (
    PID_APP
    + """

def check(user, password):
    return USERS.get(user) == password
"""
)


def oauth_basic_host(
    folder: Path,
    certs: dict[str, Path],
    store: str | None,
    limit: int,
    data: Path | None = None,
    **oauth: Any,
) -> Path:
    """A :data:`BASIC_APP` host: oAuth2 ``OAUTH`` (``oauth`` added) serving ``ROOT`` and ``LIMITED``
    (``limit`` a minute per user), Basic ``BASIC``; ``store`` (None: sqlite under ``data``)."""
    auth = {"scheme": "oAuth2", "onAuth": "", "onAuthparams": "app.params", **oauth}
    basic = {"scheme": "basic", "OnAuth": "app.check"}
    config = free_config(
        folder,
        app=BASIC_APP,
        servers={
            "OAUTH": tls_server(certs, Locations="ROOT, LIMITED", FwData={"Authorization": auth}),
            "BASIC": local_port(FwData={"Authorization": basic}),
        },
        extra={
            "LIMITED": {"Path": "/limited", "ThreadPool": "POOL", "RateLimit": "RL_USER"},
            "RL_USER": {"Limit": limit, "Window": "60s", "Key": "user"},
        },
    )
    return with_store(config, store, **({"DataPath": str(data)} if data is not None else {}))


Host = TypeVar("Host")


def each_worker(
    hosts: Sequence[Host], workers: Sequence[dict[int, httpx.Client]]
) -> list[tuple[Host, int, httpx.Client]]:
    """(host, pid, its kept-alive client) for every worker of every host."""
    return [
        (host, pid, http)
        for host, clients in zip(hosts, workers, strict=True)
        for pid, http in clients.items()
    ]


def close_all(*groups: dict[int, httpx.Client]) -> None:
    for clients in groups:
        for http in clients.values():
            http.close()


def refresh_refused(http: httpx.Client, url: str, token: str, **options: Any) -> None:
    """``token`` refreshed at ``url`` (``options``: httpx's) is 400 ``invalid_grant``."""
    form = {"grant_type": "refresh_token", "refresh_token": token}
    answer = http.post(url, data=form, **options)
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant", answer.text


def settings_of(http: httpx.Client, base: str, token: str) -> dict[str, Any]:
    """Location ``base``'s run-time settings as its JSON page shows them to ``token``'s bearer."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    answer = http.get(base + "/fw/rest/config", headers=headers)
    assert answer.status_code == 200, answer.text
    settings: dict[str, Any] = answer.json()["settings"]
    return settings


def example_copy(work: Path) -> Path:
    """examples/ in ``work/examples``, certificates made, every ``Port=`` 0: its service.ini."""
    target = work / "examples"
    ignore = shutil.ignore_patterns(".fwrest", "certs", "__pycache__")
    shutil.copytree(ROOT / "examples", target, ignore=ignore)
    subprocess.run([sys.executable, str(target / "make_certs.py")], check=True, capture_output=True)
    ini = target / "service.ini"
    ini.write_text(re.sub(r"(?m)^Port=\d+$", "Port=0", ini.read_text()))
    return ini


class Pages:
    """A static server of ``folder`` (SPA origin, app callback, cross-site page), logging paths;
    on ``host`` (``"::1"``: a native app's IPv6 loopback)."""

    def __init__(self, folder: Path, host: str = "127.0.0.1") -> None:
        self.asked: list[str] = []
        asked = self.asked

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                asked.append(self.path)

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        handler = functools.partial(Handler, directory=str(folder))
        self.httpd = Server((host, 0), handler)
        self.port = int(self.httpd.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        self.origin = f"http://{shown}:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
