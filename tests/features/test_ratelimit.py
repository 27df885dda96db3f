"""Rate limits (SPEC 13.7) in process: headers, 429, ``Key=address``/``user``, windows ending,
sqlite, ``FailOpen``, start errors. Across workers and hosts: tests/e2e/test_hosts_state.py; a
stopped Redis: tests/e2e/test_ratelimit_scale.py."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fwrest import ConfigError
from fwrest.config import load_config
from fwrest.store import StoreError
from fwrest.store.memory import MemoryStore
from fwrest.testing import Client
from tests.conftest import local_port, module_config
from tests.docs.blocks import ini_example

APP = """
from fwrest import get

@get("/hello")
def hello():
    return {"message": "hi"}

def check(user, password):
    return (user, password) in (("ada", "Ada-Pw-1"), ("bob", "Bob-Pw-2"))
"""

ADA = ("ada", "Ada-Pw-1")
BOB = ("bob", "Bob-Pw-2")


def _service(tmp_path: Path, module: str, limit: dict[str, Any], basic: bool = False) -> Path:
    # TrustedProxies: each request's address from its X-Forwarded-For
    server = local_port(Locations="ROOT, PLAIN", TrustedProxies="127.0.0.1")
    if basic:
        auth = {"scheme": "basic", "OnAuth": f"{module}.check", "maxFailures": 100}
        server["FwData"] = {"Authorization": auth}
    extra = {"ROOT": {"RateLimit": "RL_API"}, "PLAIN": {"Path": "/plain", "ThreadPool": "POOL"},
             "RL_API": limit}  # fmt: skip
    return module_config(tmp_path, module, app=APP, servers={"HTTP_REST": server}, extra=extra)


def _from(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def test_headers_then_429_with_retry_after_per_address(tmp_path: Path) -> None:
    config = _service(tmp_path, "rl_address", {"Limit": 3, "Window": "1m", "Key": "address"})
    with Client(config) as client:
        left = []
        for _ in range(3):
            answer = client.get("/rest/hello", headers=_from("192.0.2.1"))
            assert answer.status_code == 200
            assert answer.headers["ratelimit-policy"] == '"RL_API";q=3;w=60'
            left.append(answer.headers["ratelimit"])
        assert [h.split(";t=")[0] for h in left] == [f'"RL_API";r={n}' for n in (2, 1, 0)]
        assert all(0 < int(h.split(";t=")[1]) <= 60 for h in left), left
        refused = client.get("/rest/hello", headers=_from("192.0.2.1"))
        assert refused.status_code == 429
        retry = int(refused.headers["retry-after"])
        assert 0 < retry <= 60
        assert refused.headers["ratelimit"] == f'"RL_API";r=0;t={retry}'
        body = refused.json()
        assert body["code"] == 429 and body["message"] == "Too Many Requests"
        assert "more than 3 requests in 60 s" in body["detailedMessage"]
        # a 404 of the location counts and carries the headers too
        assert client.get("/rest/nowhere", headers=_from("192.0.2.1")).status_code == 429
        # another address counts apart
        other = client.get("/rest/hello", headers=_from("192.0.2.2"))
        assert other.status_code == 200 and other.headers["ratelimit"].startswith('"RL_API";r=2')
        # a location without a limit: no headers, never refused
        plain = client.get("/plain/hello", headers=_from("192.0.2.1"))
        assert plain.status_code == 200
        assert "ratelimit" not in plain.headers and "ratelimit-policy" not in plain.headers
        # native routes of the limited location: not counted, no headers
        for _ in range(5):
            native = client.get("/rest/fw/rest/list/service", headers=_from("192.0.2.2"))
            assert native.status_code == 200
            assert "ratelimit" not in native.headers and "ratelimit-policy" not in native.headers
        after = client.get("/rest/hello", headers=_from("192.0.2.2"))
        assert after.headers["ratelimit"].startswith('"RL_API";r=1')


def test_key_user_counts_the_user_across_addresses(tmp_path: Path) -> None:
    config = _service(tmp_path, "rl_user", {"Limit": 2}, basic=True)
    with Client(config) as client:
        codes = [client.get("/rest/hello", auth=ADA, headers=_from(f"192.0.2.{n}")).status_code
                 for n in (1, 2, 3)]  # fmt: skip
        assert codes == [200, 200, 429]  # one user, three addresses
        # another user on the same address has a count of their own
        assert client.get("/rest/hello", auth=BOB, headers=_from("192.0.2.1")).status_code == 200
        # refused by the guard: not counted, the whole quota (SPEC 13.7: always both headers)
        refused = client.get("/rest/hello", headers=_from("192.0.2.1"))
        assert refused.status_code == 401
        assert refused.headers["ratelimit-policy"] == '"RL_API";q=2;w=60'
        assert refused.headers["ratelimit"] == '"RL_API";r=2;t=60'
        wrong = client.get("/rest/hello", auth=("ada", "wrong"), headers=_from("192.0.2.9"))
        assert wrong.status_code == 403 and wrong.headers["ratelimit"] == '"RL_API";r=2;t=60'
        assert client.get("/rest/hello", auth=BOB, headers=_from("192.0.2.1")).status_code == 200


def test_key_user_without_a_user_counts_the_address(tmp_path: Path) -> None:
    config = _service(tmp_path, "rl_anonymous", {"Limit": 1, "Key": "user"})
    with Client(config) as client:
        assert client.get("/rest/hello", headers=_from("192.0.2.1")).status_code == 200
        assert client.get("/rest/hello", headers=_from("192.0.2.1")).status_code == 429
        assert client.get("/rest/hello", headers=_from("192.0.2.2")).status_code == 200


LOCK = """import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(2.5)
c.execute("COMMIT")
"""


@pytest.mark.parametrize("fail_open", [0, 1])
def test_the_sqlite_store_counts_through_the_store_client(tmp_path: Path, fail_open: int) -> None:
    # sqlite answers off the event loop (not in_process): the call hops to a store thread
    limit = {"Limit": 3, "Key": "address", "FailOpen": fail_open}
    config = _service(tmp_path, f"rl_sqlite{fail_open}", limit)
    text = config.read_text().replace('"StateStore": "memory"', '"StateStore": "sqlite"')
    config.write_text(text)
    with Client(config) as client:
        assert client.get("/rest/hello").status_code == 200
        # another process holds the store's write lock past the request's 1 s: the request
        # answers without its count, which is not taken when the lock frees either
        (db,) = tmp_path.rglob("state.sqlite3")
        lock = [sys.executable, "-c", LOCK, str(db)]
        with subprocess.Popen(lock, stdout=subprocess.PIPE) as holder:
            assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
            refused = client.get("/rest/hello")
            assert refused.status_code == (200 if fail_open else 503)
            assert holder.wait(10) == 0
        time.sleep(0.3)  # the store thread, past the lock
        answers = [client.get("/rest/hello") for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 429]
        assert answers[1].headers["ratelimit"].startswith('"RL_API";r=0;t=')


def test_the_window_ends_and_lets_requests_through_again(tmp_path: Path) -> None:
    config = _service(tmp_path, "rl_window", {"Limit": 2, "Window": "1s", "Key": "address"})
    with Client(config) as client:
        started = time.monotonic()  # the window starts after this
        codes = [client.get("/rest/hello").status_code for _ in range(3)]
        assert codes[0] == 200
        if time.monotonic() - started < 1.0:  # a loaded machine may take the whole window
            assert codes == [200, 200, 429]
        time.sleep(1.1)
        again = client.get("/rest/hello")
        assert again.status_code == 200
        assert again.headers["ratelimit"] == '"RL_API";r=1;t=1'


def _unreachable(self: MemoryStore, key: str, window_s: float, before: float) -> tuple[int, float]:
    raise StoreError("redis store redis://127.0.0.1:1/0: connection refused")


def test_store_out_of_reach_fails_open_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = _service(tmp_path, "rl_open", {"Limit": 1, "Key": "address"})
    with Client(config) as client:
        assert client.get("/rest/hello").status_code == 200
        assert client.get("/rest/hello").status_code == 429
        with monkeypatch.context() as patch:
            patch.setattr(MemoryStore, "hit_rate", _unreachable)
            with caplog.at_level(logging.WARNING, logger="fwrest.server"):
                answers = [client.get("/rest/hello") for _ in range(5)]
        assert [a.status_code for a in answers] == [200] * 5
        assert all(a.headers["ratelimit-policy"] == '"RL_API";q=1;w=60' for a in answers)
        assert all(a.headers["ratelimit"] == '"RL_API";r=1;t=60' for a in answers)
        warnings = [r.getMessage() for r in caplog.records if "rate limit" in r.getMessage()]
        assert len(warnings) == 1, warnings
        assert "state store unavailable" in warnings[0] and "FailOpen=1" in warnings[0]
        # the store answers again: counting goes on where it was, and a line says so
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fwrest.server"):
            assert client.get("/rest/hello").status_code == 429
        assert any("answers again" in r.getMessage() for r in caplog.records)


def test_store_out_of_reach_fails_closed_with_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _service(tmp_path, "rl_closed", {"Limit": 5, "FailOpen": 0, "Key": "address"})
    with Client(config) as client:
        monkeypatch.setattr(MemoryStore, "hit_rate", _unreachable)
        answer = client.get("/rest/hello")
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "1"
        assert answer.json()["detailedMessage"] == "the state store is unavailable"
        assert client.get("/plain/hello").status_code == 200  # no limit there


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"Key": "session"}, "is not what a rate limit counts by (user or address)"),
        ({"Window": "soon"}, "must be a duration in whole seconds"),
        ({"Window": "0s"}, "0 seconds is out of range (1-86400 seconds)"),
        ({"Window": "2d"}, "must be a duration in whole seconds"),
        ({"Limit": 0}, "0 is out of range"),
    ],
)
def test_bad_keys_stop_the_start(tmp_path: Path, section: dict[str, Any], message: str) -> None:
    config = _service(tmp_path, "rl_bad", section)
    with pytest.raises(ConfigError, match="RL_API") as caught:
        load_config(config)
    assert message in str(caught.value)


def test_a_rate_limit_naming_no_section_stops_the_start(tmp_path: Path) -> None:
    config = _service(tmp_path, "rl_missing", {"Limit": 5})
    text = config.read_text().replace('"RateLimit": "RL_API"', '"RateLimit": "RL_APX"')
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert "names [RL_APX], which is not a section" in str(caught.value)
    assert "Did you mean [RL_API]?" in str(caught.value)


def test_the_default_section_and_durations(tmp_path: Path) -> None:
    config = _service(tmp_path, "rl_default", {"Window": "2m"})
    limit = load_config(config).servers[0].locations[0].rate_limit
    assert limit is not None
    assert (limit.limit, limit.window_s, limit.key, limit.fail_open) == (600, 120, "user", True)


def test_the_guides_example(tmp_path: Path) -> None:
    """docs/locations.md's rate limit, on a location of a real configuration."""
    server = local_port(Locations="HTTP_ROOT")
    guide = ini_example("locations-ratelimit")  # HTTP_ROOT (Path, ThreadPool) and RL_API
    config = module_config(tmp_path, "rl_guide", app=APP, servers={"X": server}, extra=guide)
    with Client(config) as client:
        answer = client.get("/rest/hello")
        assert answer.status_code == 200
        assert answer.headers["ratelimit-policy"] == '"RL_API";q=600;w=60'
        assert answer.headers["ratelimit"].startswith('"RL_API";r=599;t=')


# SPEC 5's native route names (and those of 12.2, 12.3, 16.1, 16.3): each one's routes must be
# served on the oAuth2 port below, and none of them counted
SPEC_NATIVE_NAMES = {
    "rest/config", "rest/list/service", "rest/openapi.json", "rest/usage/time", "environment",
    "server/environment", "vendor/environment", "healthcheck", "healthcheck/ok",
    "healthcheck/datetime", "oauth2/token", "oauth2/jwks", "oauth2/metadata", "oauth2/revoke",
    "oauth2/introspect", "oauth2/revoke-user", "oauth2/resource",
}  # fmt: skip


@pytest.mark.parametrize("prefix", ["/rest", "/"])
def test_no_native_route_is_counted_whatever_its_path(
    tmp_path: Path, certs: dict[str, Path], prefix: str
) -> None:
    """SPEC 13.7 on every native route, ``/server/environment`` and ``/vendor/environment``
    (no ``/fw/``) and the well-known documents included; a path under ``/fw/`` that no native
    route serves is counted as any 404 of the location."""
    from fwrest.native.catalog import route_name
    from tests.auth.oauth2_support import WEB, oauth_section, params_source

    app = APP + params_source(**WEB, users=[{"username": "ada", "password": "Ada-Pw-1"}])
    server = oauth_section(certs, onAuthparams="rl_native.params")
    extra = {
        "ROOT": {"Path": prefix, "RateLimit": "RL_API"},
        "RL_API": {"Limit": 1, "Key": "address"},
    }
    config = module_config(tmp_path, "rl_native", app=app, servers={"OAUTH": server}, extra=extra)
    base = "" if prefix == "/" else prefix
    with Client(config) as client:
        grant = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-1", **WEB}
        token = client.post(f"{base}/fw/oauth2/token", data=grant).json()["access_token"]
        bearer = {"Authorization": f"Bearer {token}"}
        listing = client.get(f"{base}/fw/rest/list/service", headers=bearer).json()
        native = [e for e in listing if e["type"] == "fw"]
        names = {route_name(e["endpoint"]) for e in native} - {None}
        assert names >= SPEC_NATIVE_NAMES, SPEC_NATIVE_NAMES - names
        endpoints = {e["endpoint"] for e in native}
        assert {"/server/environment", "/vendor/environment"} <= endpoints
        asked = []
        for entry in native:
            for path in entry["paths"]:
                for method in (m["method"] for m in entry["methods"]):
                    for _ in range(2):  # twice: a counted route would be refused
                        answer = client.request(method, path, headers=bearer, json={})
                        asked.append((method, path, answer.status_code))
                        assert answer.status_code != 429, (method, path)
                        assert "ratelimit" not in answer.headers, (method, path)
                        assert "ratelimit-policy" not in answer.headers, (method, path)
        assert len(asked) > 60, asked
        # the quota is whole: the application's route takes it, then it is used up
        first = client.get(f"{base}/hello", headers=bearer)
        assert first.status_code == 200 and first.headers["ratelimit"].startswith('"RL_API";r=0')
        # a path under /fw/ that no native route serves is counted: refused
        assert client.get(f"{base}/fw/nowhere", headers=bearer).status_code == 429
        assert client.get(f"{base}/server/environment", headers=bearer).status_code == 200
