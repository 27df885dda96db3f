"""SPEC 15's forms of a Redis state store, each against a real ``redis-server`` started here:
TLS (``rediss://`` with ``StateStoreCA``; a Redis that requires a client certificate, given
by ``StateStoreCert``/``StateStoreKey``), a password from ``StateStorePassword=env:NAME``, and
a unix socket (``unix:///path/redis.sock?db=N``).

* over each form an oAuth2 port issues tokens, refreshes them and refuses a replay, its state
  in that Redis (the in-process client, SPEC 14.3: the store is the real one);
* docs/deploy.md's lines (``deploy-redis-acl``, ``deploy-redis-tls``) reach a Redis on TLS
  that requires client certificates, as the ACL user the page creates;
* what only Redis can tell is a start error naming the key, and ``fwrest check`` says the same:
  a ``StateStoreCA`` that did not issue Redis's certificate, a client certificate missing, a
  wrong password (never shown, nor in the check's summary); a Redis that does not answer is a
  warning of ``fwrest check`` only.

The Sentinel form runs the store contract (tests/store/test_contract.py) and its failover test
(tests/faults/test_sentinel_failover.py).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import trustme

from fwrest.testing import Client
from tests.auth.oauth2_support import oauth_section
from tests.conftest import issue_certs, module_config, run_cli, run_forked
from tests.docs.blocks import example, ini_example
from tests.redis_support import RedisServer, RedisTls, redis_tls

PASSWORD = "Redis-Pw/7+q z"  # a canary: a slash, a plus and a space
PASSWORD_ENV = "FWREST_TEST_REDIS_PASSWORD"
APP = """
from fwrest import get


@get("/hello")
def hello():
    return {"hello": "world"}


def params():
    return {
        "client_id": "web",
        "users": [{"username": "ada", "password": "Ada-Pw-7731"}],
        "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"}],
    }
"""


@dataclass
class Redises:
    tls: RedisTls
    on_tls: RedisServer  # TLS, a password, no client certificate asked for
    on_mtls: RedisServer  # TLS, a client certificate required
    on_socket: RedisServer  # a unix socket, a password

    def stop(self) -> None:
        for server in (self.on_tls, self.on_mtls, self.on_socket):
            server.stop()


@pytest.fixture(scope="module")
def redises(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redises]:
    root = tmp_path_factory.mktemp("redis-forms")
    tls = redis_tls(trustme.CA(), root / "tls")
    folders = [root / name for name in ("tls", "mtls", "socket")]
    for folder in folders:
        folder.mkdir(exist_ok=True)
    found = Redises(
        tls,
        RedisServer(folders[0], tls=tls, password=PASSWORD),
        RedisServer(folders[1], tls=tls, client_certs=True),
        RedisServer(folders[2], unix=True, password=PASSWORD),
    )
    try:
        for server in (found.on_tls, found.on_mtls, found.on_socket):
            server.start()
        yield found
    finally:
        found.stop()


def store_keys(redises: Redises, form: str) -> tuple[RedisServer, dict[str, Any]]:
    """The server of one form and the ``[HTTPSERVER]`` keys that reach it."""
    tls = redises.tls
    if form == "rediss":
        return redises.on_tls, {
            "StateStore": redises.on_tls.url,
            "StateStoreCA": str(tls.ca),
            "StateStorePassword": f"env:{PASSWORD_ENV}",
        }
    if form == "rediss with a client certificate":
        return redises.on_mtls, {
            "StateStore": redises.on_mtls.url,
            "StateStoreCA": str(tls.ca),
            "StateStoreCert": str(tls.client_cert),
            "StateStoreKey": str(tls.client_key),
        }
    return redises.on_socket, {
        "StateStore": redises.on_socket.url,
        "StateStorePassword": f"env:{PASSWORD_ENV}",
    }


def oauth_service(
    tmp_path: Path, ca: trustme.CA, module: str, section: str, keys: dict[str, Any]
) -> Path:
    """An oAuth2 port ``section`` of ``APP`` (in the module ``module``) on the store ``keys``."""
    certs = issue_certs(ca, tmp_path / "certs")
    return module_config(
        tmp_path,
        module,
        app=APP.replace("params", f"{module}_params"),
        servers={section: oauth_section(certs, onAuthparams=f"{module}_params")},
        extra={"HTTPSERVER": keys},
    )


def grant_and_refresh(client: Client) -> tuple[dict[str, str], str]:
    """A password grant, then a refresh of its token: (the refresh's form, the new access
    token)."""
    grant = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-7731"}
    issued = client.post("/rest/fw/oauth2/token", data=grant)
    assert issued.status_code == 200, issued.text
    refresh = {"grant_type": "refresh_token", "refresh_token": issued.json()["refresh_token"]}
    renewed = client.post("/rest/fw/oauth2/token", data=refresh)
    assert renewed.status_code == 200, renewed.text
    return refresh, str(renewed.json()["access_token"])


@pytest.mark.parametrize("form", ["rediss", "rediss with a client certificate", "unix socket"])
def test_tokens_are_issued_and_refreshed_over_each_form(
    form: str,
    redises: Redises,
    ca: trustme.CA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    server, keys = store_keys(redises, form)
    module = "redis_form_" + form.replace(" ", "_")
    with Client(oauth_service(tmp_path, ca, module, "OAUTH", keys)) as client:
        refresh, access = grant_and_refresh(client)
        bearer = {"Authorization": f"Bearer {access}"}
        assert client.get("/rest/hello", headers=bearer).status_code == 200
        replay = client.post("/rest/fw/oauth2/token", data=refresh)
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    direct = server.client()
    try:
        # the state is in this Redis: the two refresh tokens, the signing key
        assert len(direct.keys("fwrest:rt:*")) == 2
        assert direct.exists("fwrest:signing_key")
    finally:
        direct.close()


def test_what_only_redis_can_tell_is_a_start_error_naming_the_key(
    redises: Redises, tmp_path: Path
) -> None:
    tls = redises.tls
    cases = {
        # (the keys, the key the error names, a fragment of its message)
        "wrong CA": (
            {**store_keys(redises, "rediss")[1], "StateStoreCA": str(tls.other_ca)},
            "StateStoreCA",
            "TLS certificate does not verify",
        ),
        "no client certificate": (
            {"StateStore": redises.on_mtls.url, "StateStoreCA": str(tls.ca)},
            "StateStoreCert",
            "client certificate",
        ),
        "wrong password": (
            {**store_keys(redises, "rediss")[1], "StateStorePassword": "env:WRONG_REDIS_PW"},
            "StateStorePassword",
            "Redis refused the password",
        ),
        "password in the URL": (
            {
                **store_keys(redises, "unix socket")[1],
                "StateStore": redises.on_socket.url.replace("unix://", "unix://:Url-Pw-ZZ@"),
                "StateStorePassword": None,
            },
            "StateStore",
            "Redis refused the password",
        ),
    }
    env = {PASSWORD_ENV: PASSWORD, "WRONG_REDIS_PW": "Wrong-Pw/8+w v"}
    jobs = []
    for name, (keys, _key, _words) in cases.items():
        folder = tmp_path / name.replace(" ", "-")
        folder.mkdir()
        store = {k: v for k, v in keys.items() if v is not None}
        (folder / "app.py").write_text(APP)
        config = folder / "service.ini"
        lines = ["[HTTPSERVER]", "Servers=HTTP_REST", *(f"{k}={v}" for k, v in store.items()),
                 "[HTTP_REST]", "HostName=127.0.0.1", "Port=0", "Locations=ROOT",
                 "[ROOT]", "Path=/rest", "ThreadPool=POOL", "[POOL]", "Environment=ENV",
                 "[ENV]", "Repository=app"]  # fmt: skip
        config.write_text("\n".join(lines) + "\n")
        jobs += [(name, "check", config), (name, "serve", config)]
    # forked: eight fresh interpreters took 10 s (each imports fwrest)
    results = [run_forked(command, str(config), cwd=config.parent, env=env)
               for _name, command, config in jobs]  # fmt: skip
    for (name, command, _config), result in zip(jobs, results, strict=True):
        _keys, key, words = cases[name]
        out = result.stdout + result.stderr
        assert result.returncode == 2, (name, command, out)
        assert f"[HTTPSERVER] {key}: " in result.stderr and words in result.stderr, (name, out)
        assert "Traceback" not in out
        for secret in (PASSWORD, "Wrong-Pw/8+w v", "Url-Pw-ZZ"):
            assert secret not in out, (name, command)


def test_check_summarises_a_redis_store_without_its_password(
    redises: Redises, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(APP)
    encoded = quote(PASSWORD, safe="")
    url = redises.on_socket.url.replace("unix://", f"unix://:{encoded}@")
    config = tmp_path / "service.json"
    sections = {
        "HTTPSERVER": {"Servers": "S", "StateStore": url},
        "S": {"HostName": "127.0.0.1", "Port": 0, "Locations": "R"},
        "R": {"Path": "/rest", "ThreadPool": "P"},
        "P": {"Environment": "E"},
        "E": {"Repository": "app"},
    }
    config.write_text(json.dumps(sections))
    answered = run_forked("check", str(config), cwd=tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert f"state store: unix://***@{redises.on_socket.socket}?db=0" in answered.stdout
    assert "warning" not in answered.stdout  # Redis answered the check's PING
    # a Redis that does not answer is no mistake of the configuration: a warning
    sections["HTTPSERVER"]["StateStore"] = url.replace("redis.sock", "gone.sock")
    config.write_text(json.dumps(sections))
    silent = run_forked("check", str(config), cwd=tmp_path)
    assert silent.returncode == 0, silent.stderr
    assert "warning: [HTTPSERVER] StateStore: the state store did not answer: " in silent.stdout
    for result in (answered, silent):
        for secret in (PASSWORD, encoded, "7+q"):
            assert secret not in result.stdout + result.stderr


ACL_PASSWORD = "Acl-Pw/9+x y"


def test_the_deployment_pages_lines_reach_redis_as_its_acl_user(
    redises: Redises, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, tls = redises.on_mtls, redises.tls
    acl = example("deploy-redis-acl").text
    rule = shlex.split(acl.partition("ACL SETUSER ")[2].replace("PASSWORD", ACL_PASSWORD))
    admin = server.client()
    try:
        admin.flushdb()
        assert admin.execute_command("ACL", "SETUSER", *rule) in (b"OK", "OK")
        keys = ini_example(
            "deploy-redis-tls",
            replacements={
                "10.0.0.5:6380": f"127.0.0.1:{server.port}",
                "/etc/fwrest/redis-ca.pem": str(tls.ca),
                "/etc/fwrest/redis-client.crt": str(tls.client_cert),
                "/etc/fwrest/redis-client.key": str(tls.client_key),
            },
        )["HTTPSERVER"]
        assert keys.pop("Servers") == "HTTPS_REST"
        monkeypatch.setenv("FWREST_REDIS_PASSWORD", ACL_PASSWORD)
        config = oauth_service(tmp_path, ca, "redis_form_deploy", "HTTPS_REST", keys)
        with Client(config) as client:
            grant_and_refresh(client)
        assert len(admin.keys("fwrest:rt:*")) == 2
        # the commands came from the ACL user: Redis counted no refusal of it
        assert admin.execute_command("ACL", "LOG") == []
        checked = run_cli("check", str(config), cwd=tmp_path)
        assert checked.returncode == 0, checked.stderr
        assert f"state store: rediss://***@127.0.0.1:{server.port}/0" in checked.stdout
        assert "warning: [HTTPSERVER] StateStore" not in checked.stdout
        assert ACL_PASSWORD not in checked.stdout + checked.stderr
    finally:
        admin.close()
