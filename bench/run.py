"""The side-by-side benchmark of issue 8: fwrest, the bare ceiling on fwrest's own engine, and
the peers (raw ASGI, Starlette, FastAPI on uvicorn with httptools + uvloop; the raw ASGI app
and a raw RSGI app on granian), in one run.

    python -m bench.run                 # every case; writes bench/results.{md,json,png}
    python -m bench.run --quick         # 1 run of 1 s per server: a smoke test
    python -m bench.run --cases 1,2     # some cases only

Each server is pinned to core 0 and wrk to core 1 (``taskset -c``), on loopback, with
keep-alive; each gets a warm-up and then ``--runs`` runs; the tables show medians. Only a full
run (every case, not ``--quick``) writes into bench/ and updates bench/README.md by default;
other runs write into a temporary folder unless ``--out`` says where.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import importlib.metadata
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

from bench import report, servers, wrk
from bench.apps import common
from bench.apps.fw_routes import route_path, routes_source
from fwrest.features.compression import GZIP_LEVEL

BENCH = Path(__file__).resolve().parent
ALL_CASES = (
    "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17",
    "18", "19",
)  # fmt: skip
MIB = 1024 * 1024


@dataclass
class Settings:
    warmup_s: float = 1.0
    duration_s: float = 3.0
    runs: int = 3
    connections: int = 64
    threads: int = 1
    server_cpus: str = "0"
    wrk_cpus: str = "1"
    both_cpus: str = "0,1"
    memory_batch: int = 100_000
    quick: bool = False


@dataclass
class Target:
    """One server of a case: how to start it and which request wrk repeats."""

    label: str
    role: str  # "fwrest", "ceiling" or "peer"
    start: Callable[[Path], servers.Running]
    path: str = "/rest/hello"
    detail: str = ""
    auth: str | None = None  # "basic", "bearer-fwrest", "bearer-peer"
    token_form: bool = False  # POST the password-grant form (case 4)
    refresh_chain: bool = False  # POST refresh grants, each of a token an answer gave (case 18)
    json_body: bool = False  # POST common.ORDER_JSON as application/json (case 16)
    expect_key: str = "message"
    expect_value: str | None = None
    expect: str = "json"  # "json" (expect_key in it), "gzip" (gzip of JSON), or "static"
    headers: dict[str, str] = field(default_factory=dict)  # sent on every request
    server_cpus: str | None = None  # default: Settings.server_cpus
    wrk_cpus: str | None = None  # default: Settings.wrk_cpus; "" leaves wrk unpinned
    wrk_threads: int | None = None
    per_worker: bool = False  # count each worker's connections in the middle of each run
    # (case 8: the accept distribution)


@dataclass
class Case:
    id: str
    title: str
    measures: str
    targets: list[Target]
    # (name, numerator, denominator, target[, field]): field "rps" unless given
    ratios: list[tuple[str, str, str, float | None] | tuple[str, str, str, float | None, str]] = (
        field(default_factory=list)
    )
    kind: str = "throughput"
    note: str = ""
    runs: int | None = None  # more runs than Settings.runs, for targets that read a few %
    duration_s: float | None = None  # their length (default Settings.duration_s)
    # ratios of two rows measured with both servers under load AT ONCE (see measure_at_once)
    at_once: list[tuple[str, str, str, float | None]] = field(default_factory=list)
    at_once_rounds: int = 9


class Scratch:
    """Folders, certificates and scripts of one bench run, under one temporary folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._n = 0
        self._redis: dict[str, tuple[subprocess.Popen[bytes], str, Path | None]] = {}
        self._compiled: Path | None = None
        self.certs = servers.make_certs(root / "certs")
        self.token_script = root / "token.lua"
        self.token_script.write_text(
            'wrk.method = "POST"\n'
            f'wrk.body = "{common.TOKEN_FORM}"\n'
            'wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"\n'
        )
        # case 18: each answer's refresh token is refreshed once by the next request (a
        # password grant when none is at hand: the first request of each connection)
        client = common.TOKEN_FORM[common.TOKEN_FORM.index("&client_id=") :]
        self.refresh_script = root / "refresh.lua"
        self.refresh_script.write_text(
            'wrk.method = "POST"\n'
            'wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"\n'
            "local tokens = {}\n"
            "request = function()\n"
            "  local t = table.remove(tokens)\n"
            f'  if t then return wrk.format(nil, nil, nil, "grant_type=refresh_token&refresh_token=" .. t .. "{client}") end\n'
            f'  return wrk.format(nil, nil, nil, "{common.TOKEN_FORM}")\n'
            "end\n"
            "response = function(status, headers, body)\n"
            '  local t = body:match(\'"refresh_token"%s*:%s*"([^"]+)"\')\n'
            "  if t then table.insert(tokens, t) end\n"
            "end\n"
        )
        self.order_script = root / "order.lua"
        self.order_script.write_text(  # a Lua long string: the JSON needs no escaping
            'wrk.method = "POST"\n'
            f"wrk.body = [[{common.ORDER_JSON}]]\n"
            'wrk.headers["Content-Type"] = "application/json"\n'
        )

    def redis_keys(self, store: str) -> dict[str, Any]:
        """``[HTTPSERVER]``'s keys of the run's Redis store, started on first use: ``redis``
        (plain TCP), ``rediss`` (TLS, SPEC 15: its own ``redis-server``) or ``cluster`` (a
        Redis Cluster of three masters and three replicas, SPEC 17.1)."""
        if store not in self._redis:
            if store == "cluster":
                self._redis[store] = servers.start_redis_cluster(self.root / store)
            else:
                self._redis[store] = servers.start_redis(self.root / store, tls=store == "rediss")
        _proc, url, ca_file = self._redis[store]
        return {"StateStore": url} | ({"StateStoreCA": str(ca_file)} if ca_file else {})

    def compiled(self) -> Path:
        """The folder of fwrest's compiled build (mypyc), built on first use (about 1.5 min)."""
        if self._compiled is None:
            self._compiled = servers.compiled_build(self.root / "build")
        return self._compiled

    def close(self) -> None:
        for proc, _url, _ca in self._redis.values():
            proc.terminate()
            proc.wait(10)
        servers.stop_redis_clusters()

    def folder(self, name: str) -> Path:
        self._n += 1
        path = self.root / f"{self._n:02d}-{''.join(c if c.isalnum() else '-' for c in name)}"
        path.mkdir(parents=True)
        return path


# -- the servers --------------------------------------------------------------------------------
BASIC_FW = {"Authorization": {"scheme": "basic", "OnAuth": "check_user"}}
BASIC_FW_ASYNC = {"Authorization": {"scheme": "basic", "OnAuth": "acheck_user"}}
# case 2's argon2id validator (as the example service's) with OnAuthCache (SPEC 4.1)
BASIC_FW_ARGON2 = {
    "Authorization": {"scheme": "basic", "OnAuth": "check_user_argon2", "OnAuthCache": "300s"}
}
OAUTH_FW = {"Authorization": {"scheme": "oAuth2", "onAuthparams": "oauth_params"}}
OAUTH_FW_ASYNC = {"Authorization": {"scheme": "oAuth2", "onAuthparams": "aoauth_params"}}


def fw(
    scratch: Scratch,
    *,
    fw_data: dict[str, Any] | None = None,
    tls: bool = False,
    workers: int = 1,
    cpus: str = "0",
    log_level: int = 1,
    trace: int = 0,
    store: str = "memory",
    routes: int | None = None,
    features: bool = False,
    pool_keys: dict[str, Any] | None = None,
    httpserver_keys: dict[str, Any] | None = None,
    location_keys: dict[str, Any] | None = None,
    sections: dict[str, dict[str, Any]] | None = None,
    compiled: bool = False,
    engine: str | None = None,
) -> Callable[[Path], servers.Running]:
    """A fwrest server of a case, on the pure-Python sources, or on the compiled build
    (``compiled``: issue 24's rows of cases 1-3); ``engine``: its HTTP engine
    (``FWREST_ENGINE``: the native engine's rows of cases 1 and 2)."""

    def start(folder: Path) -> servers.Running:
        extra: dict[str, Any] = {"pool_keys": pool_keys, "httpserver_keys": httpserver_keys}
        if location_keys or sections:
            extra.update(location_keys=location_keys, sections=sections)
        if features:
            extra.update(features_config(folder))
        if store in ("redis", "rediss", "cluster"):  # local redis-servers; rediss: on TLS
            keys = scratch.redis_keys(store)
            extra["httpserver_keys"] = {**keys, **(httpserver_keys or {})}
        repository = "bench.apps.fw_app"
        if routes is not None:
            (folder / "routes_app.py").write_text(routes_source(routes))
            repository = "routes_app"
        config = servers.fwrest_config(
            folder,
            repository=repository,
            fw_data=fw_data,
            certs=scratch.certs if tls else None,
            log_level=log_level,
            trace=trace,
            store=store if store in ("memory", "sqlite") else "memory",
            **extra,
        )
        build = scratch.compiled() if compiled else servers.PURE
        return servers.start_fwrest(config, workers=workers, cpus=cpus, build=build, engine=engine)

    return start


def features_config(folder: Path) -> dict[str, Any]:
    """The location features of SPEC 10 on the bench's port and its location ``/rest`` (case
    10 and 11): CORS, security headers (HSTS needs TLS: the other two), static files (the
    1 MiB file of case 11 beside an index page), compression and a charset; streaming needs
    no key. Returns the keyword arguments of :func:`servers.fwrest_config`."""
    www = folder / "www"
    www.mkdir(parents=True, exist_ok=True)
    (www / "index.html").write_text("<!doctype html><title>bench</title>\n")
    (www / common.STATIC_NAME).write_bytes(common.static_bytes())
    return {
        "server_keys": {"Compression": "gzip, br", "Charset": "CP1252"},
        "location_keys": {
            "CORS": "BENCH_CORS",
            "XFrameOptions": "DENY",
            "ContentSecurityPolicy": "default-src 'self'",
            "RootPath": "www",
            "DefaultPage": "index.html",
        },
        "sections": {"BENCH_CORS": {"AllowOrigins": "https://app.example.com"}},
    }


def nginx(scratch: Scratch) -> Callable[[Path], servers.Running]:
    """nginx serving case 11's JSON and file under /rest, gzip at fwrest's level."""

    def start(folder: Path) -> servers.Running:
        root = folder / "root"
        (root / "rest").mkdir(parents=True)
        (root / "rest" / "big.json").write_bytes(
            json.dumps(common.BIG, separators=(",", ":")).encode()
        )
        (root / "rest" / common.STATIC_NAME).write_bytes(common.static_bytes())
        return servers.start_nginx(folder, root, gzip_level=GZIP_LEVEL)

    return start


def ceiling(
    scratch: Scratch, job: str, *, tls: bool = False, engine: str | None = None
) -> Callable[[Path], servers.Running]:
    def start(folder: Path) -> servers.Running:
        return servers.start_ceiling(
            folder, job, certs=scratch.certs if tls else None, engine=engine
        )

    return start


def uvicorn(
    scratch: Scratch, factory: str, *, tls: bool = False, workers: int = 1, cpus: str = "0"
) -> Callable[[Path], servers.Running]:
    def start(folder: Path) -> servers.Running:
        return servers.start_uvicorn(
            folder,
            f"bench.apps.{factory}",
            certs=scratch.certs if tls else None,
            workers=workers,
            cpus=cpus,
        )

    return start


def granian(
    scratch: Scratch, factory: str, *, tls: bool = False, interface: str = "asgi"
) -> Callable[[Path], servers.Running]:
    def start(folder: Path) -> servers.Running:
        return servers.start_granian(
            folder,
            f"bench.apps.{factory}",
            certs=scratch.certs if tls else None,
            interface=interface,
        )

    return start


# -- the cases ----------------------------------------------------------------------------------
GRAN = "granian raw ASGI"
RSGI = "granian RSGI hello"
RSGI_BASIC = "granian RSGI (Basic inline)"
FWC = "fwrest, compiled"  # the same server on the mypyc build (issue 24)
# the native HTTP engine's rows (issue 39): the same servers with FWREST_ENGINE=native; the
# other fwrest rows and the ceiling say FWREST_ENGINE=pure
FWN, FWCN, CEILN = "fwrest, native", "fwrest, compiled, native", "ceiling, native"
FW, CEIL, ASGI, STAR, FAPI = (
    "fwrest",
    "ceiling (fwrest engine)",
    "uvicorn raw ASGI",
    "Starlette",
    "FastAPI",
)


def build_cases(s: Settings, sc: Scratch) -> list[Case]:
    cases: list[Case] = []
    cases.append(
        Case(
            "1",
            "open JSON endpoint",
            'GET /rest/hello answering `{"message": "Hello, world!"}` from an async handler. '
            "The raw app runs on uvicorn and on granian (ASGI); granian's RSGI hello answers "
            "the same bytes on granian's own protocol (`proto.response_bytes`), no ASGI "
            "messages. The case's target sits within a few per cent of the host's noise, so this case (and "
            "case 2) takes 7 runs of 2 s per server, in turns.",
            [
                Target(FW, "fwrest", fw(sc, engine="pure")),
                Target(FWC, "fwrest", fw(sc, compiled=True, engine="pure")),
                Target(FWN, "fwrest", fw(sc, engine="native")),
                Target(FWCN, "fwrest", fw(sc, compiled=True, engine="native")),
                Target(CEIL, "ceiling", ceiling(sc, "open", engine="pure")),
                Target(CEILN, "ceiling", ceiling(sc, "open", engine="native")),
                Target(ASGI, "peer", uvicorn(sc, "asgi_raw:open_app")),
                Target(GRAN, "peer", granian(sc, "asgi_raw:open_app")),
                Target(RSGI, "peer", granian(sc, "rsgi_raw:open_app", interface="rsgi")),
                Target(STAR, "peer", uvicorn(sc, "starlette_app:open_app")),
                Target(FAPI, "peer", uvicorn(sc, "fastapi_app:open_app")),
            ],
            [
                ("fwrest / ceiling", FW, CEIL, 0.8),
                ("fwrest / FastAPI", FW, FAPI, 3.0),
                ("fwrest / Starlette", FW, STAR, None),
                ("fwrest / uvicorn raw ASGI", FW, ASGI, None),
                ("fwrest / granian RSGI", FW, RSGI, None),
                ("fwrest, compiled / fwrest", FWC, FW, 1.5),
                ("fwrest, compiled / granian RSGI", FWC, RSGI, None),
                ("fwrest, native / fwrest", FWN, FW, None),
                ("fwrest, compiled, native / fwrest, compiled", FWCN, FWC, None),
                ("fwrest, compiled, native / uvicorn raw ASGI", FWCN, ASGI, None),
                ("fwrest, compiled, native / granian RSGI", FWCN, RSGI, None),
                ("ceiling, native / ceiling", CEILN, CEIL, None),
                ("ceiling / uvicorn raw ASGI (engine vs engine)", CEIL, ASGI, None),
                ("ceiling / granian raw ASGI (engine vs engine)", CEIL, GRAN, None),
            ],
            runs=7,
            duration_s=2.0,
        )
    )
    fw_def = "fwrest (def OnAuth)"
    fw_def_c = "fwrest (def OnAuth), compiled"
    fw_def_cn = "fwrest (def OnAuth), compiled, native"
    fw_argon2 = "fwrest (def argon2id OnAuth, OnAuthCache)"
    fapi_def = "FastAPI (def dependency)"
    cases.append(
        Case(
            "2",
            "Basic-protected JSON endpoint",
            "The same endpoint behind HTTP Basic with a trivial validator (constant-time compare "
            "of one user and password), checked on the event loop as the peers do: fwrest with "
            "an `async def` OnAuth, the ceiling and granian's RSGI app inline, Starlette with "
            "`AuthenticationMiddleware` + `@requires`, FastAPI with an `HTTPBasic` dependency "
            "(an `async def`). The extra rows run the check as a `def`: fwrest's OnAuth (as in "
            "examples/app/auth.py) in the port's thread pool, FastAPI's dependency in its "
            "thread pool: the same check plus a thread hop per request. The argon2id row "
            "checks an argon2id hash (the example service's validator, about 0.1-0.5 s of CPU "
            'each) with `"OnAuthCache": "300s"`: the check request pays the one hash check, '
            "every request of the run passes on the cache (SPEC 4.1).",
            [
                Target(FW, "fwrest", fw(sc, fw_data=BASIC_FW_ASYNC, engine="pure"), auth="basic"),
                Target(fw_def, "fwrest", fw(sc, fw_data=BASIC_FW, engine="pure"), auth="basic"),
                Target(
                    FWC,
                    "fwrest",
                    fw(sc, fw_data=BASIC_FW_ASYNC, compiled=True, engine="pure"),
                    auth="basic",
                ),
                Target(
                    fw_def_c,
                    "fwrest",
                    fw(sc, fw_data=BASIC_FW, compiled=True, engine="pure"),
                    auth="basic",
                ),
                Target(
                    FWCN,
                    "fwrest",
                    fw(sc, fw_data=BASIC_FW_ASYNC, compiled=True, engine="native"),
                    auth="basic",
                ),
                Target(
                    fw_def_cn,
                    "fwrest",
                    fw(sc, fw_data=BASIC_FW, compiled=True, engine="native"),
                    auth="basic",
                ),
                Target(fw_argon2, "fwrest", fw(sc, fw_data=BASIC_FW_ARGON2), auth="basic"),
                Target(CEIL, "ceiling", ceiling(sc, "basic", engine="pure"), auth="basic"),
                Target(ASGI, "peer", uvicorn(sc, "asgi_raw:basic_app"), auth="basic"),
                Target(
                    RSGI_BASIC,
                    "peer",
                    granian(sc, "rsgi_raw:basic_app", interface="rsgi"),
                    auth="basic",
                ),
                Target(STAR, "peer", uvicorn(sc, "starlette_app:basic_app"), auth="basic"),
                Target(FAPI, "peer", uvicorn(sc, "fastapi_app:basic_app"), auth="basic"),
                Target(fapi_def, "peer", uvicorn(sc, "fastapi_app:basic_sync_app"), auth="basic"),
            ],
            [
                ("fwrest / ceiling", FW, CEIL, 0.8),
                ("fwrest / FastAPI", FW, FAPI, 3.0),
                ("fwrest (def OnAuth) / FastAPI (def dependency)", fw_def, fapi_def, 3.0),
                ("fwrest (def OnAuth) / ceiling", fw_def, CEIL, None),
                (f"{fw_argon2} / {fw_def}", fw_argon2, fw_def, 0.9),
                (f"{fw_def} / granian RSGI", fw_def, RSGI_BASIC, None),
                ("fwrest / granian RSGI", FW, RSGI_BASIC, None),
                ("fwrest, compiled / fwrest", FWC, FW, 1.5),
                (f"{fw_def_c} / {fw_def}", fw_def_c, fw_def, 1.5),
                (f"{fw_def_c} / granian RSGI", fw_def_c, RSGI_BASIC, 0.8),
                ("fwrest, compiled, native / fwrest, compiled", FWCN, FWC, None),
                (f"{fw_def_cn} / {fw_def_c}", fw_def_cn, fw_def_c, None),
                ("fwrest, compiled, native / granian RSGI", FWCN, RSGI_BASIC, None),
                (f"{fw_def_cn} / granian RSGI", fw_def_cn, RSGI_BASIC, None),
            ],
            runs=7,
            duration_s=2.0,
        )
    )
    ceil_noauth = "ceiling, no auth (TLS)"
    cases.append(
        Case(
            "3",
            "Bearer-protected JSON endpoint on TLS",
            "The same endpoint on an HTTPS port behind a Bearer JWT (HS256), tokens issued "
            "before the run (fwrest's from its own token route) and sent by wrk as a header. "
            "The ceiling and the raw ASGI app verify the token with PyJWT inline; FastAPI uses "
            "an `HTTPBearer` dependency + PyJWT; Starlette `AuthenticationMiddleware` + PyJWT. "
            "The row without auth is the TLS hello on the bare engine.",
            [
                Target(FW, "fwrest", fw(sc, fw_data=OAUTH_FW, tls=True), auth="bearer-fwrest"),
                Target(
                    FWC,
                    "fwrest",
                    fw(sc, fw_data=OAUTH_FW, tls=True, compiled=True),
                    auth="bearer-fwrest",
                ),
                Target(CEIL, "ceiling", ceiling(sc, "bearer", tls=True), auth="bearer-peer"),
                Target(ceil_noauth, "ceiling", ceiling(sc, "open", tls=True)),
                Target(
                    ASGI, "peer", uvicorn(sc, "asgi_raw:bearer_app", tls=True), auth="bearer-peer"
                ),
                Target(
                    STAR,
                    "peer",
                    uvicorn(sc, "starlette_app:bearer_app", tls=True),
                    auth="bearer-peer",
                ),
                Target(
                    FAPI,
                    "peer",
                    uvicorn(sc, "fastapi_app:bearer_app", tls=True),
                    auth="bearer-peer",
                ),
            ],
            [
                ("fwrest / ceiling (same job)", FW, CEIL, 0.7),
                ("fwrest / ceiling without auth", FW, ceil_noauth, 0.7),
                ("fwrest / FastAPI", FW, FAPI, 3.0),
                ("fwrest, compiled / fwrest", FWC, FW, 1.5),
            ],
        )
    )
    fw_sqlite = "fwrest (sqlite store)"
    fw_def_params = "fwrest (def onAuthparams)"
    fapi_def_token = "FastAPI (def endpoint)"
    token = "/rest/fw/oauth2/token"

    def grant(label: str, role: str, start: Callable[[Path], servers.Running]) -> Target:
        """A server of case 4: wrk POSTs the password-grant form to its token route."""
        return Target(label, role, start, path=token, token_form=True, expect_key="access_token")

    cases.append(
        Case(
            "4",
            "token issuance (password grant, TLS)",
            "wrk POSTs `grant_type=password` with client id/secret as a form (a Lua script); "
            "each answer is an HS256 JWT and a random refresh token whose SHA-256 is kept. "
            "fwrest's `onAuthparams` holds the plain-text password; as the peers build the "
            "grant on the event loop, fwrest's is an `async def` and its state store is "
            "`memory`; the extra rows run a `def` onAuthparams (in the port's thread pool: one "
            "thread hop per request; its same-job peer is FastAPI with a `def` endpoint, run "
            "in FastAPI's thread pool) and the `sqlite` store (fwrest's default; each call on "
            "the token service's threads). The peers keep the refresh hashes in a dict, as "
            "the `memory` store does: the sqlite row writes every refresh token to a file "
            "that all workers share, a job none of the peers does, so its ratio carries no "
            "target. FastAPI uses `OAuth2PasswordRequestForm`.",
            [
                grant(FW, "fwrest", fw(sc, fw_data=OAUTH_FW_ASYNC, tls=True)),
                grant(fw_def_params, "fwrest", fw(sc, fw_data=OAUTH_FW, tls=True)),
                grant(
                    fw_sqlite, "fwrest", fw(sc, fw_data=OAUTH_FW_ASYNC, tls=True, store="sqlite")
                ),
                grant(CEIL, "ceiling", ceiling(sc, "token", tls=True)),
                grant(ASGI, "peer", uvicorn(sc, "asgi_raw:token_app", tls=True)),
                grant(STAR, "peer", uvicorn(sc, "starlette_app:token_app", tls=True)),
                grant(FAPI, "peer", uvicorn(sc, "fastapi_app:token_app", tls=True)),
                grant(fapi_def_token, "peer", uvicorn(sc, "fastapi_app:token_sync_app", tls=True)),
            ],
            [
                ("fwrest / FastAPI", FW, FAPI, 2.0),
                (
                    "fwrest (def onAuthparams) / FastAPI (def endpoint)",
                    fw_def_params,
                    fapi_def_token,
                    2.0,
                ),
                ("fwrest (def onAuthparams) / FastAPI", fw_def_params, FAPI, None),
                ("fwrest (sqlite store) / FastAPI", fw_sqlite, FAPI, None),
                ("fwrest / ceiling", FW, CEIL, None),
            ],
        )
    )
    sync = "/rest/hello-sync"
    cases.append(
        Case(
            "5",
            "`def` handler in the thread pool",
            "GET /rest/hello-sync served by a plain `def` function run in a thread pool of 8: "
            "fwrest's location pool, `run_in_executor` for the ceiling and the raw ASGI app, "
            "Starlette's and FastAPI's own thread pools for sync endpoints.",
            [
                Target(FW, "fwrest", fw(sc), path=sync),
                Target(CEIL, "ceiling", ceiling(sc, "sync"), path=sync),
                Target(ASGI, "peer", uvicorn(sc, "asgi_raw:sync_app"), path=sync),
                Target(STAR, "peer", uvicorn(sc, "starlette_app:sync_app"), path=sync),
                Target(FAPI, "peer", uvicorn(sc, "fastapi_app:sync_app"), path=sync),
            ],
            [("fwrest / FastAPI", FW, FAPI, 2.0), ("fwrest / ceiling", FW, CEIL, None)],
        )
    )
    small, large = common.ROUTE_COUNT_SMALL, common.ROUTE_COUNT_LARGE
    rows6: list[Target] = []
    for label, maker in (
        ("fwrest", lambda n: fw(sc, routes=n)),
        ("Starlette", lambda n: uvicorn(sc, f"starlette_app:routes_{n}_app")),
        ("FastAPI", lambda n: uvicorn(sc, f"fastapi_app:routes_{n}_app")),
    ):
        for n in (small, large):
            rows6.append(
                Target(
                    f"{label}, {n} routes",
                    "fwrest" if label == "fwrest" else "peer",
                    maker(n),
                    path=route_path(n),
                    expect_key="uid",
                    expect_value="42",
                )
            )
    cases.append(
        Case(
            "6",
            "two path parameters among 10 and 1,000 routes",
            f"{small} or {large} routes `/rest/api{{i}}/users/:uid/orders/:oid`, each an async "
            "handler; wrk asks for the last one registered (the worst case of a linear scan). "
            "The target (within 5 %) is read from 9 rounds of 2 s with both fwrest servers "
            "run at once (requests per server CPU second; see case 7), the req/s ratio of the "
            "runs in turns is shown for reference.",
            rows6,
            [
                (
                    f"fwrest {large} / {small} routes, req/s in turns",
                    f"fwrest, {large} routes",
                    f"fwrest, {small} routes",
                    None,
                ),
                (
                    f"Starlette {large} / {small} routes",
                    f"Starlette, {large} routes",
                    f"Starlette, {small} routes",
                    None,
                ),
                (
                    f"FastAPI {large} / {small} routes",
                    f"FastAPI, {large} routes",
                    f"FastAPI, {small} routes",
                    None,
                ),
                (
                    f"fwrest / FastAPI at {large} routes",
                    f"fwrest, {large} routes",
                    f"FastAPI, {large} routes",
                    None,
                ),
            ],
            # a few per cent, like case 7's: read with both fwrest servers at once
            at_once=[
                (
                    f"fwrest {large} / {small} routes, requests per CPU second, at once",
                    f"fwrest, {large} routes",
                    f"fwrest, {small} routes",
                    0.95,
                )
            ],
            at_once_rounds=9,
        )
    )
    rows7: list[Target] = []
    ratios7: list[tuple[str, str, str, float | None]] = []
    once7: list[tuple[str, str, str, float | None]] = []
    for kind, data, tls, auth in (
        ("Basic", BASIC_FW_ASYNC, False, "basic"),
        ("Bearer TLS", OAUTH_FW, True, "bearer-fwrest"),
    ):
        # at log level 1 trace 2 runs the very code of trace 0 (the times are always taken;
        # nothing is written), so that pair would only measure noise: level 1 once, as the
        # access-log-off reference
        for level, trace in ((1, 0), (3, 0), (3, 2)):
            rows7.append(
                Target(
                    f"fwrest {kind}, log {level}, trace {trace}",
                    "fwrest",
                    fw(sc, fw_data=data, tls=tls, log_level=level, trace=trace),
                    auth=auth,
                )
            )
        once7.append(
            (
                f"{kind}, log level 3: trace 2 / trace 0, requests per CPU second, at once",
                f"fwrest {kind}, log 3, trace 2",
                f"fwrest {kind}, log 3, trace 0",
                0.95,
            )
        )
        ratios7.append(
            (
                f"{kind}, log level 3: trace 2 / trace 0, req/s in turns",
                f"fwrest {kind}, log 3, trace 2",
                f"fwrest {kind}, log 3, trace 0",
                None,
            )
        )
        ratios7.append(
            (
                f"{kind}: access log on / off (level 3 / 1, trace 0)",
                f"fwrest {kind}, log 3, trace 0",
                f"fwrest {kind}, log 1, trace 0",
                None,
            )
        )
    cases.append(
        Case(
            "7",
            "usage/time collection: rest_trace_time 0 vs 2",
            "Cases 2 (async OnAuth) and 3 again at `rest_log_level=3` (one access line per "
            "request, written to standard error, redirected to a file) with "
            "`rest_trace_time=0` and `=2` (the line also carries the authorization, handler, "
            "serialization and total times), and at `rest_log_level=1` (no access log) for "
            "reference. The usage figures and the phase times are taken on every request, "
            "whatever the settings (at level 1, trace 2 runs the very code of trace 0). The "
            "target reads a few per cent, finer than the drift of this shared host between "
            "runs taken in turns (5 runs of 2 s per server here; their req/s ratios are shown "
            "for reference): it is read from 9 rounds of 2 s in which the trace 0 and the "
            "trace 2 server run AT ONCE, sharing the server core, each with its own wrk, as "
            "their requests per server CPU second (the inverse of the cost per request), the "
            "median over the rounds.",
            rows7,
            ratios7,
            runs=5,
            duration_s=2.0,
            at_once=once7,
            at_once_rounds=9,
        )
    )
    cases.append(scaling_case(s, sc))
    batch = s.memory_batch
    cases.append(
        Case(
            "9",
            "resident memory at idle and after requests",
            f"RSS of the whole service (supervisor + worker, psutil) at idle, after a 1st batch "
            f"of {batch:,} requests (a wrk run of its own: the warm-up of caches and the "
            f"allocator), then after a 2nd and a 3rd batch of {batch:,} sent in ONE wrk run, "
            "the RSS read between them: from the 2nd to the 3rd, requests on connections that "
            "stay open must not grow it. The 2nd batch opens 64 new connections: on TLS they "
            "cost memory in the TLS layer under every server on uvloop (uvloop issue #565), "
            "which the ceiling row (fwrest's engine alone, on TLS) shows too. Case 1's open "
            "endpoint, case 3's Bearer endpoint on TLS and case 5's `def` endpoint.",
            [
                Target("fwrest open JSON", "fwrest", fw(sc)),
                Target(
                    "fwrest Bearer on TLS",
                    "fwrest",
                    fw(sc, fw_data=OAUTH_FW, tls=True),
                    auth="bearer-fwrest",
                ),
                Target("fwrest def handler", "fwrest", fw(sc), path="/rest/hello-sync"),
                Target("ceiling on TLS (no auth)", "ceiling", ceiling(sc, "open", tls=True)),
            ],
            kind="memory",
        )
    )
    plain, featured = "fwrest, no location feature", "fwrest, six features configured"
    cases.append(
        Case(
            "10",
            "location features configured but not triggered",
            "Case 1's request (wrk's: no `Origin`, no `Accept-Encoding`) to a port without "
            "location features and to one with all of SPEC 10's configured on its location "
            "and server: CORS (not triggered: no `Origin`), `XFrameOptions` and "
            "`ContentSecurityPolicy` (sent on every answer: their whole cost is in the "
            "figure), `RootPath` + `DefaultPage` (the request names a route), "
            "`Compression=gzip, br` (the answer is under `CompressionMinSize`) and "
            "`Charset=CP1252` (a JSON answer stays UTF-8); streaming needs no key. The target "
            "is case 1's figure (req/s, 7 runs of 2 s in turns) within 5 %; the ratio read with "
            "both servers at once (requests per server CPU second, as case 7) shows what the "
            "features cost the server's CPU, the stricter reading.",
            [Target(plain, "fwrest", fw(sc)), Target(featured, "fwrest", fw(sc, features=True))],
            [(f"{featured} / none, req/s in turns", featured, plain, 0.95)],
            runs=7,
            duration_s=2.0,
            at_once=[
                (
                    f"{featured} / none, requests per CPU second, at once",
                    featured,
                    plain,
                    None,
                )
            ],
            at_once_rounds=9,
        )
    )
    gz = {"Accept-Encoding": "gzip"}
    fw_gzip, nginx_gzip = "fwrest gzip, 64 KiB JSON", "nginx gzip, 64 KiB JSON"
    fw_file, nginx_file = "fwrest static, 1 MiB file", "nginx sendfile, 1 MiB file"
    file_path = f"/rest/{common.STATIC_NAME}"
    cases.append(
        Case(
            "11",
            "compression and static files beside nginx",
            f"A 64 KiB JSON answer gzip-compressed (level {GZIP_LEVEL}: fwrest encodes the "
            "handler's dict and compresses it on every request; nginx compresses the same bytes "
            "read from a file, `gzip on` at the same level), and a 1 MiB file (fwrest's "
            "`RootPath`, read in pieces; nginx `sendfile on`). nginx runs one worker process, "
            "pinned like the others. No target: one run, to show where fwrest stands.",
            [
                Target(
                    fw_gzip,
                    "fwrest",
                    fw(sc, features=True),
                    path="/rest/big",
                    headers=gz,
                    expect="gzip",
                    expect_key="items",
                ),
                Target(
                    nginx_gzip,
                    "peer",
                    nginx(sc),
                    path="/rest/big.json",
                    headers=gz,
                    expect="gzip",
                    expect_key="items",
                ),
                Target(fw_file, "fwrest", fw(sc, features=True), path=file_path, expect="static"),
                Target(nginx_file, "peer", nginx(sc), path=file_path, expect="static"),
            ],
            [
                ("fwrest / nginx, gzip of 64 KiB JSON", fw_gzip, nginx_gzip, None),
                ("fwrest / nginx, static 1 MiB file", fw_file, nginx_file, None),
            ],
        )
    )
    hooked, bare = "fwrest, async OnSend", "fwrest, no hook"
    cases.append(
        Case(
            "12",
            "an OnSend hook",
            "Case 1's endpoint with an `async def` `OnSend` (SPEC 11.1) in its thread pool that "
            "sets one header (`rest.setKeyHeaderResponse`, bench/apps/fw_app.py `stamp`), "
            "beside the same server without it. One run; the ratio at once shows what the "
            "hook costs the server's CPU.",
            [Target(bare, "fwrest", fw(sc)), Target(hooked, "fwrest", fw(sc, pool_keys=STAMP))],
            [(f"{hooked} / {bare}, req/s in turns", hooked, bare, None)],
            runs=5,
            duration_s=2.0,
            at_once=[(f"{hooked} / {bare}, requests per CPU second, at once", hooked, bare, None)],
            at_once_rounds=9,
        )
    )
    cases.append(signing_case(sc, grant))
    cases.append(asymmetric_bearer_case(sc))
    text, json_ = "fwrest, level 3, LogFormat=text", "fwrest, level 3, LogFormat=json"
    cases.append(
        Case(
            "14",
            "an access line per request, text or JSON",
            "Case 1's endpoint at `rest_log_level=3` (an access line for every request, to "
            "stderr, which the bench writes to a file), with `[HTTPSERVER] LogFormat=text` "
            "beside `LogFormat=json` (SPEC 13.4). One run.",
            [
                Target(text, "fwrest", fw(sc, log_level=3, httpserver_keys={"LogFormat": "text"})),
                Target(json_, "fwrest", fw(sc, log_level=3, httpserver_keys={"LogFormat": "json"})),
            ],
            [(f"{json_} / {text}, req/s in turns", json_, text, None)],
            runs=5,
            duration_s=2.0,
            at_once=[(f"{json_} / {text}, requests per CPU second, at once", json_, text, None)],
            at_once_rounds=5,
        )
    )
    cases.append(rate_limit_case(sc))
    cases.append(typed_case(sc))
    cases.append(redis_tls_case(sc, grant))
    cases.append(redis_cluster_case(sc, grant))
    return cases


def scaling_case(s: Settings, sc: Scratch) -> Case:
    """Case 8: case 1 on 1 and 2 workers, fwrest and uvicorn, the server on both cores: req/s,
    requests per server CPU second, and how the workers share wrk's connections."""
    both = s.both_cpus
    targets: list[Target] = []
    ratios: list[tuple[str, str, str, float | None, str]] = []
    for name, label, start in (
        ("fwrest", "fwrest", lambda n: fw(sc, workers=n, cpus=both)),
        ("uvicorn", ASGI, lambda n: uvicorn(sc, "asgi_raw:open_app", workers=n, cpus=both)),
    ):
        one, two = f"{label}, 1 worker", f"{label}, 2 workers"
        for row, n in ((one, 1), (two, 2)):
            targets.append(
                Target(
                    row,
                    "fwrest" if name == "fwrest" else "peer",
                    start(n),
                    server_cpus=both,
                    wrk_cpus="",
                    wrk_threads=2,
                    per_worker=True,
                )
            )
        ratios.append((f"{name} 2 workers / 1, req/s", two, one, None, "rps"))
        ratios.append(
            (f"{name} 2 workers / 1, requests per server CPU second", two, one, None, "per_cpu_s")
        )
    return Case(
        "8",
        "scaling with workers",
        "Case 1 with `--workers 1` and `--workers 2`, fwrest and uvicorn (raw ASGI). Here the "
        f"server may use both cores (`taskset -c {both}`) and wrk (2 threads) shares them with "
        "it, so the 2-worker req/s is a lower bound of what two free cores would give; the "
        "requests per server CPU second (the run's requests over the user + system seconds of "
        "the server's processes, supervisor included: the req/s of one busy core) show what a "
        "second worker costs per request, whatever wrk takes. The workers table is the accept "
        "distribution, read from outside the same way for both servers: the wrk connections "
        "each worker holds in the middle of each run (the port's established sockets from "
        "`ss -e` found among each worker's file descriptors; a supervisor that keeps the "
        "listening socket is no worker), busiest first, and each worker's share of the "
        "workers' CPU time over the run.",
        targets,
        ratios,
    )


def typed_case(sc: Scratch) -> Case:
    """Case 16: typed endpoints (SPEC 14.1): a 1 KiB JSON body decoded into a struct beside
    FastAPI with the same pydantic model; case 1 with a typed ``int`` path parameter beside an
    untyped one."""
    body_fw, body_fapi = "fwrest, msgspec struct body", "FastAPI, pydantic model body"
    typed, untyped = "fwrest, typed int path parameter", "fwrest, untyped path parameter"
    orders, summary = "/rest/orders", str(len(common.ORDER_JSON))
    return Case(
        "16",
        "typed endpoints: a JSON body and a typed path parameter",
        f"POST {orders} with a 1 KiB JSON order (common.ORDER_JSON, {summary} bytes: a customer "
        "and lines of sku, quantity, price and note) decoded and validated into the order's "
        "type by an `async def` endpoint that answers the lines' count and total: fwrest with "
        "`msgspec.Struct`s (bench/apps/fw_app.py), FastAPI with the equivalent pydantic models "
        "(bench/apps/fastapi_app.py). Then case 1's endpoint with a path parameter, "
        "`GET /rest/items/12345` with `id: int` beside `GET /rest/items-text/12345` with `id` "
        "unannotated; their ratio at once shows what the conversion costs the server's CPU.",
        [
            Target(body_fw, "fwrest", fw(sc), path=orders, json_body=True),
            Target(
                body_fapi, "peer", uvicorn(sc, "fastapi_app:order_app"), path=orders, json_body=True
            ),
            Target(
                typed,
                "fwrest",
                fw(sc),
                path="/rest/items/12345",
                expect_key="id",
                expect_value="12345",
            ),
            Target(
                untyped,
                "fwrest",
                fw(sc),
                path="/rest/items-text/12345",
                expect_key="id",
                expect_value="12345",
            ),
        ],
        [
            (f"{body_fw} / {body_fapi}", body_fw, body_fapi, 3.0),
            (f"{typed} / {untyped}, req/s in turns", typed, untyped, None),
        ],
        runs=5,
        duration_s=2.0,
        at_once=[(f"{typed} / {untyped}, requests per CPU second, at once", typed, untyped, None)],
        at_once_rounds=9,
    )


def rate_limit_case(sc: Scratch) -> Case:
    """Case 15: case 2's Basic endpoint on a location with a rate limit never reached, beside
    the same without one, on the memory and the Redis store (SPEC 13.7)."""
    limited = {
        "location_keys": {"RateLimit": "RL_BENCH"},
        "sections": {"RL_BENCH": {"Limit": 2**31, "Window": "1h", "Key": "user"}},
    }
    targets: list[Target] = []
    ratios: list[tuple[str, str, str, float | None]] = []
    for store in ("memory", "redis"):
        plain, with_limit = f"{store} store", f"{store} store, rate limit"
        for label, extra in ((plain, {}), (with_limit, limited)):
            start = fw(sc, fw_data=BASIC_FW_ASYNC, store=store, **extra)
            targets.append(Target(label, "fwrest", start, auth="basic"))
        ratios.append((f"{with_limit} / {plain}", with_limit, plain, None))
    return Case(
        "15",
        "a rate limit that is never reached",
        "Case 2's Basic endpoint (an `async def` OnAuth) on a location whose `RateLimit` "
        "(`Key=user`, a limit no run reaches) counts every request in the state store, beside "
        "the same location without one: on the memory store, then on a Redis store (a local "
        "`redis-server`, one round trip per request).",
        targets,
        ratios,
    )


def redis_tls_case(
    sc: Scratch, grant: Callable[[str, str, Callable[[Path], servers.Running]], Target]
) -> Case:
    """Case 17: case 4's password grant on a Redis store reached over plain TCP
    (``redis://``) beside one reached over TLS (``rediss://``, SPEC 15)."""
    plain, tls = "redis:// store", "rediss:// store"
    return Case(
        "17",
        "token issuance on a Redis store, plain TCP and TLS",
        "Case 4's password grant (an `async def` onAuthparams, the port on TLS) with the "
        "state store on a local `redis-server`: over plain TCP (`redis://`), and over TLS "
        "(`rediss://` with `StateStoreCA`, a `redis-server` of its own on `--tls-port`). "
        "Each grant writes its refresh token in Redis (one round trip on the store client's "
        "threads); the connections are kept, so TLS costs its encryption, not a handshake "
        "per request.",
        [
            grant(plain, "fwrest", fw(sc, fw_data=OAUTH_FW_ASYNC, tls=True, store="redis")),
            grant(tls, "fwrest", fw(sc, fw_data=OAUTH_FW_ASYNC, tls=True, store="rediss")),
        ],
        [(f"{tls} / {plain}", tls, plain, None)],
    )


def redis_cluster_case(
    sc: Scratch, grant: Callable[[str, str, Callable[[Path], servers.Running]], Target]
) -> Case:
    """Case 18: case 4's password grant, and a refresh, on a single Redis (``redis://``)
    beside a Redis Cluster (``redis+cluster://``, SPEC 17.1)."""
    rows = {}
    targets = []
    for store, name in (("redis", "redis://"), ("cluster", "redis+cluster://")):
        start = fw(sc, fw_data=OAUTH_FW_ASYNC, tls=True, store=store)
        rows[store] = (f"grant, {name}", f"refresh, {name}")
        targets.append(grant(rows[store][0], "fwrest", start))
        refresh = grant(rows[store][1], "fwrest", start)
        refresh.token_form, refresh.refresh_chain = False, True
        targets.append(refresh)
    return Case(
        "18",
        "token issuance and refresh on a Redis Cluster and on a single Redis",
        "Case 4's password grant (an `async def` onAuthparams, the port on TLS), and a "
        "refresh: wrk POSTs `grant_type=refresh_token` with a token an earlier answer gave "
        "(each token refreshed once; a connection's first request is a grant), with the state "
        "store on a local `redis-server` (`redis://`) beside a local Redis Cluster of three "
        "masters and three replicas (`redis+cluster://`). A grant writes its refresh token "
        "(two keys: on a cluster two transactions, the record's slot and the user's); a "
        "refresh reads the revocations, spends its token (on a cluster with a `WAIT` for the "
        "master's replica, as behind Sentinel) and writes the new one.",
        targets,
        [
            ("grant: redis+cluster:// / redis://", rows["cluster"][0], rows["redis"][0], None),
            ("refresh: redis+cluster:// / redis://", rows["cluster"][1], rows["redis"][1], None),
        ],
    )


SIGNING_ALGS = ("HS256", "EdDSA", "ES256", "RS256")


def signing_case(
    sc: Scratch, grant: Callable[[str, str, Callable[[Path], servers.Running]], Target]
) -> Case:
    """Case 13: case 3's Bearer request and case 4's grant, with tokens of each ``signingAlg``
    (SPEC 12.1), one fwrest server per algorithm and request."""
    targets: list[Target] = []
    ratios: list[tuple[str, str, str, float | None]] = []
    for alg in SIGNING_ALGS:
        fw_data = {"Authorization": {**OAUTH_FW_ASYNC["Authorization"], "signingAlg": alg}}
        start = fw(sc, fw_data=fw_data, tls=True)
        targets.append(Target(f"Bearer, {alg}", "fwrest", start, auth="bearer-fwrest"))
        targets.append(grant(f"grant, {alg}", "fwrest", start))
        if alg != "HS256":
            for kind in ("Bearer", "grant"):
                ratios.append((f"{kind}: {alg} / HS256", f"{kind}, {alg}", f"{kind}, HS256", None))
    return Case(
        "13",
        "token signing algorithms (TLS)",
        "Case 3's Bearer endpoint and case 4's password grant (an `async def` onAuthparams, "
        "the memory store), with the port's tokens signed by each `signingAlg`: HS256 (the "
        "default), EdDSA (Ed25519), ES256 and RS256 (3072-bit). A Bearer request verifies "
        "the token once per worker (verified tokens are remembered), so its figure shows the "
        "remembered path; a grant signs one token each time.",
        targets,
        ratios,
    )


def asymmetric_bearer_case(sc: Scratch) -> Case:
    """Case 19 (issue 38): the bearer check of ES256 and EdDSA tokens beside HS256's (each
    worker remembers the tokens it verified), and FastAPI + PyJWT verifying ES256 and RS256
    tokens on every request, in one run."""
    if common.PEER_KEYS_ENV not in os.environ:
        common.make_peer_keys(sc.root / "peer-keys")
    rows = {alg: f"fwrest, Bearer {alg}" for alg in ("HS256", "ES256", "EdDSA")}
    targets = [
        Target(
            label,
            "fwrest",
            fw(
                sc,
                fw_data={"Authorization": {**OAUTH_FW_ASYNC["Authorization"], "signingAlg": alg}},
                tls=True,
            ),
            auth="bearer-fwrest",
        )
        for alg, label in rows.items()
    ]
    peers = {alg: f"FastAPI, PyJWT {alg}" for alg in ("HS256", *common.PEER_ALGS)}
    targets.append(
        Target(
            peers["HS256"],
            "peer",
            uvicorn(sc, "fastapi_app:bearer_app", tls=True),
            auth="bearer-peer",
        )
    )
    for alg in common.PEER_ALGS:
        factory = f"fastapi_app:bearer_{alg.lower()}_app"
        targets.append(
            Target(peers[alg], "peer", uvicorn(sc, factory, tls=True), auth=f"bearer-peer-{alg}")
        )
    es, hs, ed = rows["ES256"], rows["HS256"], rows["EdDSA"]
    return Case(
        "19",
        "the bearer check of asymmetric tokens (TLS)",
        "Case 3's Bearer endpoint with the port's `signingAlg` HS256, ES256 and EdDSA: each "
        "worker remembers the tokens it verified (keyed by the token's SHA-256, until its "
        "`exp`), so a token seen before costs no signature check, the revocation and expiry "
        "still checked per request (issue 38). Beside them FastAPI with `HTTPBearer` + PyJWT "
        "verifying HS256, ES256 and RS256 (3072-bit) tokens on every request, as its docs do.",
        targets,
        [
            (f"{es} / {hs}", es, hs, 0.9),
            (f"{ed} / {hs}", ed, hs, None),
            (f"{es} / FastAPI, PyJWT ES256", es, peers["ES256"], None),
            (f"{es} / FastAPI, PyJWT RS256", es, peers["RS256"], None),
            (f"{hs} / FastAPI, PyJWT HS256", hs, peers["HS256"], None),
        ],
        at_once=[(f"{es} / {hs}, requests per CPU second, at once", es, hs, 0.9)],
        at_once_rounds=5,
    )


STAMP = {"OnSend": "stamp"}


# -- measuring ----------------------------------------------------------------------------------
def _headers(target: Target, running: servers.Running) -> dict[str, str]:
    return {**_auth_headers(target, running), **target.headers}


def _auth_headers(target: Target, running: servers.Running) -> dict[str, str]:
    if target.auth == "basic":
        return {"Authorization": common.BASIC_HEADER}
    if target.auth == "bearer-peer":
        return {"Authorization": f"Bearer {common.issue_peer_token()}"}
    if target.auth is not None and target.auth.startswith("bearer-peer-"):
        alg = target.auth.removeprefix("bearer-peer-")  # case 19: "bearer-peer-ES256"
        return {"Authorization": f"Bearer {common.issue_peer_token(alg=alg)}"}
    if target.auth == "bearer-fwrest":
        status, body = servers.request(
            running.base_url,
            "/rest/fw/oauth2/token",
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            body=common.TOKEN_FORM,
        )
        if status != 200:
            raise servers.ServerError(f"fwrest's token route answered {status}: {body[:200]!r}")
        return {"Authorization": f"Bearer {json.loads(body)['access_token']}"}
    return {}


def _check(target: Target, running: servers.Running, headers: dict[str, str]) -> None:
    """One request as wrk will send it; the answer must be 200 with the expected JSON."""
    if target.token_form or target.refresh_chain:
        status, body = servers.request(
            running.base_url,
            target.path,
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            body=common.TOKEN_FORM,
        )
    elif target.json_body:
        status, body = servers.request(
            running.base_url,
            target.path,
            method="POST",
            headers={**headers, "Content-Type": "application/json"},
            body=common.ORDER_JSON,
        )
    else:
        status, body = servers.request(running.base_url, target.path, headers=headers)
    if target.expect == "static":
        if status != 200 or body != common.static_bytes():
            raise servers.ServerError(f"check request got {status}, {len(body)} bytes")
        return
    if target.expect == "gzip":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError) as exc:
            raise servers.ServerError(f"check request got {status}, not gzip: {exc}") from exc
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    ok = status == 200 and isinstance(data, dict) and target.expect_key in data
    if ok and target.expect_value is not None:
        ok = str(data[target.expect_key]) == target.expect_value  # type: ignore[index]
    if not ok:
        raise servers.ServerError(f"check request got {status}: {body[:200]!r}")


def _wrk_cmd(
    target: Target, s: Settings, sc: Scratch, url: str, headers: dict[str, str], duration: float
) -> list[str]:
    cpus = s.wrk_cpus if target.wrk_cpus is None else (target.wrk_cpus or None)
    return wrk.wrk_command(
        url,
        duration_s=duration,
        connections=s.connections,
        threads=target.wrk_threads or s.threads,
        headers=tuple(f"{k}: {v}" for k, v in headers.items()),
        script=sc.token_script
        if target.token_form
        else sc.refresh_script
        if target.refresh_chain
        else sc.order_script
        if target.json_body
        else None,
        cpus=cpus,
    )


def _measure(
    running: servers.Running, cmd: list[str], duration: float, per_worker: bool = False
) -> tuple[wrk.WrkResult, dict[str, Any]]:
    """One wrk run and the server's CPU over it (user + system seconds of all its processes,
    supervisor included): ``cpu_pct`` (100 % = one core), ``cpu_s`` and ``per_cpu_s``
    (requests per server CPU second). With ``per_worker``, also ``connections``: the wrk
    connections each worker holds in the middle of the run, busiest first, and
    ``worker_cpu_s``: each of those workers' CPU seconds over the run."""
    before = running.cpu_seconds()
    t0 = time.monotonic()
    held: dict[int, int] = {}
    if per_worker:
        result, (held,) = _wrk_sampled(
            cmd, duration, (duration / 2,), running.connections_per_worker
        )
    else:
        result = wrk.run(cmd, duration)
    wall = time.monotonic() - t0
    after = running.cpu_seconds()
    spent = {pid: sec - before.get(pid, 0.0) for pid, sec in after.items()}
    used = sum(spent.values())
    figures: dict[str, Any] = {
        "cpu_pct": 100.0 * used / wall if wall > 0 else 0.0,
        "cpu_s": round(used, 3),
        "per_cpu_s": report.per_cpu_second(result.requests, used),
    }
    if held:
        busiest = sorted(held, key=lambda pid: held[pid], reverse=True)
        figures["connections"] = [held[pid] for pid in busiest]
        figures["worker_cpu_s"] = [round(spent.get(pid, 0.0), 3) for pid in busiest]
    return result, figures


SETTLE_S = 5.0


def settle(target: Target, s: Settings, sc: Scratch) -> None:
    """Load the machine for ``SETTLE_S`` before the first measured row, and discard it.

    In full runs the first server measured came out 25-30 % below what the same server gave
    minutes later (case 1's fwrest row: 42k req/s first, 54-57k in runs of its own), whatever
    it was; a few seconds of the same traffic first take that out of the table.
    """
    folder = sc.folder(f"settle {target.label}")
    try:
        running = target.start(folder)
    except servers.ServerError:
        return
    try:
        url = running.base_url + target.path
        cmd = _wrk_cmd(target, s, sc, url, _headers(target, running), SETTLE_S)
        wrk.run(cmd, SETTLE_S, require_answers=False)
    except (servers.ServerError, wrk.WrkError, OSError, ValueError, KeyError):
        pass
    finally:
        running.stop()


@dataclass
class _Live:
    """A server of a case that started and answered its check request."""

    target: Target
    running: servers.Running
    headers: dict[str, str]
    url: str
    row: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)


def _fail(row: dict[str, Any], exc: Exception, running: servers.Running | None) -> None:
    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    tail = running.log_tail(600).strip() if running is not None else ""
    if tail:
        row["error"] += f" | server log: {tail[-200:]}"


def measure_throughput(
    targets: list[Target],
    s: Settings,
    sc: Scratch,
    runs: int | None = None,
    duration_s: float | None = None,
    at_once: list[tuple[str, str, str, float | None]] | None = None,
    at_once_rounds: int = 9,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of a throughput case, its servers measured in turns, and the ratios of the
    pairs ``at_once`` names (name, numerator, denominator, target) measured by
    :func:`measure_at_once` once the runs in turns are done.

    Every server of the case is started, checked and warmed up first; then each run goes
    round all of them (A B C, then C B A, ...), so that a drift of the host between minutes
    (this harness's VM shares its host) falls on every server of the case alike and the
    ratios the targets read stay fair. Idle servers wait on their own sockets.
    """
    rows: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    live: list[_Live] = []
    try:
        for target in targets:
            row: dict[str, Any] = {
                "server": target.label,
                "role": target.role,
                "detail": target.detail,
            }
            rows.append(row)
            try:
                running = target.start(sc.folder(target.label))
            except servers.ServerError as exc:
                row["error"] = str(exc)[:300]
                continue
            try:
                headers = _headers(target, running)
                _check(target, running, headers)
                url = running.base_url + target.path
                # the warm-up may answer nothing (a slow start on a busy core); the runs may not
                wrk.run(
                    _wrk_cmd(target, s, sc, url, headers, s.warmup_s),
                    s.warmup_s,
                    require_answers=False,
                )
            except (servers.ServerError, wrk.WrkError, OSError, ValueError, KeyError) as exc:
                _fail(row, exc, running)
                running.stop()
                continue
            live.append(_Live(target, running, headers, url, row))
        turns = s.runs if s.quick or runs is None else max(runs, s.runs)
        length = s.duration_s if s.quick or duration_s is None else duration_s
        for turn in range(turns):
            for one in live if turn % 2 == 0 else live[::-1]:
                if one.row.get("error"):
                    continue
                cmd = _wrk_cmd(one.target, s, sc, one.url, one.headers, length)
                try:
                    result, figures = _measure(one.running, cmd, length, one.target.per_worker)
                except (servers.ServerError, wrk.WrkError, OSError, ValueError) as exc:
                    _fail(one.row, exc, one.running)
                    continue
                one.runs.append({**result.as_dict(), **figures})
                one.cpus.append(figures["cpu_pct"])
        for one in live:
            if not one.row.get("error"):
                one.row["runs"] = one.runs
                one.row.update(report.median_row(one.runs, one.cpus))
        by_label = {one.target.label: one for one in live if not one.row.get("error")}
        for name, numerator, denominator, target in at_once or []:
            pair = (by_label.get(numerator), by_label.get(denominator))
            rounds: list[dict[str, Any]] = []
            error = ""
            if pair[0] is not None and pair[1] is not None:
                try:
                    rounds = measure_at_once(pair[0], pair[1], s, sc, at_once_rounds, length)
                except (wrk.WrkError, OSError, ValueError) as exc:
                    error = f"{type(exc).__name__}: {exc}"[:300]
            else:
                error = "a server of the pair did not start"
            ratios.append(report.at_once_ratio(name, numerator, denominator, target, rounds, error))
    finally:
        for one in live:
            one.running.stop()
    return rows, ratios


def measure_at_once(
    first: _Live, second: _Live, s: Settings, sc: Scratch, rounds: int, length: float
) -> list[dict[str, Any]]:
    """Both servers of a pair under load AT ONCE, ``rounds`` times: they share the server core
    (the scheduler gives each about half) and each has its own wrk on the load core. Whatever
    the host does to the machine during a round falls on both alike, so their cost per
    request (server CPU seconds / requests answered) compares far more tightly than runs
    taken one after the other, which on this shared host drift by 10-40 % from one run to
    the next. The start order alternates. Returns, per round, each server's requests and
    CPU seconds.
    """
    out: list[dict[str, Any]] = []
    for turn in range(rounds):
        pair = (first, second) if turn % 2 == 0 else (second, first)
        cmds = [_wrk_cmd(one.target, s, sc, one.url, one.headers, length) for one in pair]
        before = [one.running.run_seconds() for one in pair]
        results = wrk.run_at_once(cmds, length)
        after = [one.running.run_seconds() for one in pair]
        figures = {}
        for one, result, was, now in zip(pair, results, before, after, strict=True):
            if result.errors:
                raise ValueError(f"{one.target.label}: {result.errors} errors in a round at once")
            cpu = sum(sec - was.get(pid, 0.0) for pid, sec in now.items())
            figures[one.target.label] = {"requests": result.requests, "cpu_s": round(cpu, 6)}
        out.append(figures)
    return out


def _drive(
    running: servers.Running,
    target: Target,
    s: Settings,
    sc: Scratch,
    headers: dict[str, str],
    count: int,
    rate: float,
) -> tuple[int, int, float]:
    """Send at least ``count`` requests with wrk, in as few runs as the rate allows (each run
    opens new connections, and TLS connections cost memory of their own); bounded in rounds
    and time. Returns (requests, errors, last rate)."""
    sent = errors = 0
    url = running.base_url + target.path
    deadline = time.monotonic() + 120
    for _ in range(20):
        if sent >= count or time.monotonic() > deadline:
            break
        remaining = count - sent
        duration = 1 if rate <= 0 else min(max(math.ceil(remaining / rate * 1.05), 1), 60)
        result = wrk.run(_wrk_cmd(target, s, sc, url, headers, duration), duration)
        sent += result.requests
        errors += result.errors
        rate = result.rps
    return sent, errors, rate


def _one_run_sampled(
    running: servers.Running,
    target: Target,
    s: Settings,
    sc: Scratch,
    headers: dict[str, str],
    count: int,
    rate: float,
) -> tuple[int, int, float, float]:
    """Two batches of ``count`` requests in ONE wrk run (the same connections throughout),
    the RSS read between them and again just before the run ends. Returns (requests, errors,
    RSS at the middle, RSS at the end)."""
    duration = min(max(math.ceil(2 * count / max(rate, 1.0) * 1.05), 2), 120)
    url = running.base_url + target.path
    cmd = _wrk_cmd(target, s, sc, url, headers, duration)
    result, (middle, end) = _wrk_sampled(
        cmd, duration, (duration / 2, duration - 0.4), running.rss_bytes
    )
    return result.requests, result.errors, middle, end


T = TypeVar("T")


def _wrk_sampled(
    cmd: list[str], duration: float, offsets: tuple[float, ...], sample: Callable[[], T]
) -> tuple[wrk.WrkResult, list[T]]:
    """One wrk run (on a thread, bounded as :func:`wrk.run`) and ``sample()`` read at each of
    ``offsets`` seconds after its start, while its connections are open."""
    box: dict[str, Any] = {}

    def drive() -> None:
        try:
            box["result"] = wrk.run(cmd, duration)
        except (wrk.WrkError, OSError) as exc:
            box["error"] = exc

    thread = threading.Thread(target=drive, daemon=True)
    started = time.monotonic()
    thread.start()
    samples = []
    try:
        for offset in offsets:
            time.sleep(max(0.0, started + offset - time.monotonic()))
            samples.append(sample())
    finally:  # a sample that failed leaves no wrk running into the next run
        thread.join(duration + 35)
    if "error" in box:
        raise box["error"]
    if "result" not in box:
        raise wrk.WrkError("wrk did not finish")
    return box["result"], samples


def measure_memory(target: Target, s: Settings, sc: Scratch) -> dict[str, Any]:
    """RSS at idle, after a 1st batch (its own wrk run: new connections, the warm-up), then a
    2nd and 3rd batch in one wrk run: the growth from the 2nd to the 3rd is what requests
    cost on connections that stay open, the figure that must not grow. New TLS connections
    cost memory of their own in the TLS layer under every server on uvloop (the ceiling too);
    the 1st-to-2nd figure, which includes 64 new connections, shows it."""
    row: dict[str, Any] = {"server": target.label, "role": target.role, "detail": target.detail}
    try:
        running = target.start(sc.folder(target.label))
    except servers.ServerError as exc:
        row["error"] = str(exc)[:300]
        return row
    try:
        headers = _headers(target, running)
        _check(target, running, headers)
        time.sleep(1.0)
        idle = running.rss_bytes()
        n1, e1, rate = _drive(running, target, s, sc, headers, s.memory_batch, 0.0)
        time.sleep(1.0)
        after1 = running.rss_bytes()
        n23, e23, after2, after3 = _one_run_sampled(
            running, target, s, sc, headers, s.memory_batch, rate
        )
        row.update(
            {
                "rss_idle_mib": idle / MIB,
                "rss_after_1_mib": after1 / MIB,
                "rss_after_2_mib": after2 / MIB,
                "rss_after_3_mib": after3 / MIB,
                "batch_requests": s.memory_batch,
                "requests": [n1, n23],
                "growth_mib": (after3 - after2) / MIB,
                "growth_new_connections_mib": (after2 - after1) / MIB,
                "growth_from_idle_mib": (after1 - idle) / MIB,
                "errors": e1 + e23,
                "processes": len(running.processes()),
            }
        )
    except (servers.ServerError, wrk.WrkError, OSError, ValueError, KeyError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        running.stop()
    return row


def run_case(case: Case, s: Settings, sc: Scratch, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": case.id,
        "title": case.title,
        "measures": case.measures,
        "kind": case.kind,
        "rows": [],
    }
    if case.kind == "memory":
        for target in case.targets:
            row = measure_memory(target, s, sc)
            if row.get("error"):
                log(f"[case {case.id}] {target.label}: FAILED {row['error']}")
            else:
                log(
                    f"[case {case.id}] {target.label}: RSS idle {row['rss_idle_mib']:.1f} MiB, "
                    f"{row['rss_after_1_mib']:.1f} / {row['rss_after_2_mib']:.1f} / "
                    f"{row['rss_after_3_mib']:.1f} MiB after "
                    f"{row['requests'][0]:,} / {row['requests'][1]:,} more requests"
                )
            out["rows"].append(row)
    else:
        at_once_rounds = 1 if s.quick else case.at_once_rounds
        rows, at_once = measure_throughput(
            case.targets, s, sc, case.runs, case.duration_s, case.at_once, at_once_rounds
        )
        for row in rows:
            if row.get("error"):
                log(f"[case {case.id}] {row['server']}: FAILED {row['error']}")
            else:
                held = ", ".join("/".join(map(str, r.get("connections", []))) for r in row["runs"])
                log(
                    f"[case {case.id}] {row['server']}: {row['rps']:,.0f} req/s, p50 "
                    f"{row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms, CPU {row['cpu_pct']:.0f}%"
                    + (f", {row['per_cpu_s']:,.0f} req per CPU s" if row["per_cpu_s"] else "")
                    + (f", connections per worker {held}" if "busiest_share" in row else "")
                    + (f", {row['errors']} errors" if row["errors"] else "")
                )
            out["rows"].append(row)
    if case.kind == "memory":
        out["ratios"] = []
        for row in out["rows"]:
            for key, what, limit in (
                ("growth_from_idle_mib", "idle to 1st batch (warm-up allowance)", 10.0),
                ("growth_mib", "2nd to 3rd batch (same connections)", 1.0),
            ):
                out["ratios"].append(
                    report.ceiling_check(row, f"{row['server']}: RSS growth {what}", key, limit)
                )
    else:
        out["ratios"] = [report.ratio(out["rows"], *spec) for spec in case.ratios]
        out["ratios"] += at_once
        for r in at_once:
            shown = "-" if r["value"] is None else f"{r['value']:.3f}"
            log(f"[case {case.id}] {r['name']}: {shown} {r.get('error', '')}".rstrip())
    return out


# -- facts about the run ------------------------------------------------------------------------
def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _wrk_version() -> str:
    try:
        done = subprocess.run(
            ["wrk", "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "missing"
    first = (done.stdout or done.stderr).splitlines()[:1]
    return first[0].split(" [")[0].removeprefix("wrk ") if first else "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def meta(s: Settings, note: str) -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {
            "Python": platform.python_version(),
            "fwrest": _version("fwrest"),
            "uvicorn": _version("uvicorn"),
            "granian": _version("granian"),
            "starlette": _version("starlette"),
            "fastapi": _version("fastapi"),
            "httptools": _version("httptools"),
            "uvloop": _version("uvloop"),
            "PyJWT": _version("PyJWT"),
            "wrk": _wrk_version(),
        },
        "machine": {
            "cpu_model": _cpu_model(),
            "cores": os.cpu_count() or 0,
            "memory_gib": psutil.virtual_memory().total / 1024**3,
            "platform": platform.platform(terse=True),
        },
        "settings": {
            "warmup_s": s.warmup_s,
            "duration_s": s.duration_s,
            "runs": s.runs,
            "connections": s.connections,
            "threads": s.threads,
            "server_cpus": s.server_cpus,
            "wrk_cpus": s.wrk_cpus,
            "memory_batch": s.memory_batch,
        },
        "quick": s.quick,
        "load_start": _load(),
        "note": note,
    }


# -- main ---------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="1 run of 1 s per server, 1 s warm-up")
    p.add_argument("--cases", default=",".join(ALL_CASES), help="comma-separated case numbers")
    p.add_argument("--out", type=Path, help="folder for results.{md,json,png}")
    p.add_argument("--runs", type=int, help="runs per server (default 3)")
    p.add_argument("--duration", type=int, help="whole seconds per run (default 3)")
    p.add_argument("--warmup", type=int, help="whole seconds of warm-up (default 1)")
    p.add_argument("--connections", type=int, help="wrk connections (default 64)")
    p.add_argument(
        "--note", default="", help="a sentence for the results (e.g. the machine was busy)"
    )
    p.add_argument("--no-chart", action="store_true", help="skip the PNG (no matplotlib)")
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    s = Settings()
    if args.quick:
        s = Settings(warmup_s=1.0, duration_s=1.0, runs=1, memory_batch=10_000, quick=True)
    if args.runs:
        s.runs = max(1, args.runs)
    if args.duration:
        s.duration_s = float(max(1, args.duration))
    if args.warmup:
        s.warmup_s = float(max(1, args.warmup))
    if args.connections:
        s.connections = max(1, args.connections)
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:
        s.server_cpus, s.wrk_cpus = str(cores[0]), str(cores[1])
        s.both_cpus = f"{cores[0]},{cores[1]}"
    else:  # one core: nothing to pin apart
        s.server_cpus = s.wrk_cpus = s.both_cpus = str(cores[0])
    return s


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in ALL_CASES]
    if unknown or not wanted:
        print(
            f"bench: unknown case(s) {unknown}; choose among {','.join(ALL_CASES)}", file=sys.stderr
        )
        return 2
    if shutil.which("wrk") is None or shutil.which("taskset") is None:
        print("bench: wrk and taskset are needed (apt-get install wrk util-linux)", file=sys.stderr)
        return 2
    s = settings_from(args)
    full = not s.quick and set(wanted) == set(ALL_CASES)
    out = args.out or (BENCH if full else Path(tempfile.mkdtemp(prefix="fwrest-bench-out-")))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    note = args.note
    load1 = os.getloadavg()[0]
    if load1 > 0.5 and not note:
        note = (
            f"The machine was not idle (load average {load1:.2f} at the start): other processes "
            "shared the cores, so the figures are noisy; re-run on a quiet machine."
        )
    started = time.monotonic()
    results: dict[str, Any] = {"meta": meta(s, note), "cases": []}
    with tempfile.TemporaryDirectory(prefix="fwrest-bench-") as tmp:
        sc = Scratch(Path(tmp))
        cases = [c for c in build_cases(s, sc) if c.id in wanted]
        n_rows = sum(len(c.targets) for c in cases if c.kind != "memory")
        estimate = 0.0
        for c in cases:
            if c.kind == "memory":
                continue
            turns = s.runs if s.quick or c.runs is None else max(c.runs, s.runs)
            length = s.duration_s if s.quick or c.duration_s is None else c.duration_s
            estimate += len(c.targets) * (s.warmup_s + turns * length + 1.5)
            estimate += len(c.at_once) * (1 if s.quick else c.at_once_rounds) * length
        log(
            f"bench: {len(cases)} case(s), {n_rows} throughput row(s), about "
            f"{estimate / 60:.1f} min plus the memory case; load average {_load()}"
        )
        first = next((c for c in cases if c.kind != "memory" and c.targets), None)
        if first is not None and not s.quick:
            log(f"bench: {SETTLE_S:.0f} s of settling load (not measured)")
            settle(first.targets[0], s, sc)
        try:
            for case in cases:
                results["cases"].append(run_case(case, s, sc, log))
        finally:
            sc.close()
    results["meta"]["load_end"] = _load()
    results["meta"]["elapsed_s"] = round(time.monotonic() - started, 1)
    paths = report.write(results, out, with_chart=not args.no_chart)
    if full and out.resolve() == BENCH:
        report.update_readme(BENCH / "README.md", results)
    print(report.markdown(results))
    log(
        f"bench: done in {results['meta']['elapsed_s']:.0f} s; wrote "
        + ", ".join(str(p) for p in paths.values())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
