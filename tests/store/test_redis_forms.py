"""SPEC 15's Redis forms on a real ``redis-server``: ``rediss://`` with ``StateStoreCA`` (and
``StateStoreCert``/``StateStoreKey``), ``StateStorePassword=env:NAME``,
``unix:///path/redis.sock?db=N``, in process with the real store; what only Redis can tell, or a URL
that cannot answer as written, is a start error naming the key, never showing a password. Sentinel:
test_contract.py, tests/faults/test_sentinel_failover.py."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
import trustme

from fwrest.config.loader import load_config
from fwrest.store import open_store
from fwrest.store.base import RefreshRecord, UnconfirmedSpend
from fwrest.store.redis import REPLICAS_CHECK_S, RedisStore
from fwrest.testing import Client
from tests.conftest import free_port, run_cli, run_forked, wait_for
from tests.docs.blocks import example, ini_example
from tests.redis_support import (
    RedisServer,
    RedisTls,
    redis_tls,
    sentinel_binary,
    serves_unready,
    started,
    store_config,
)
from tests.store.support import grant_and_refresh, oauth_service, refused_at_start, tokens_work

PASSWORD = "Redis-Pw/7+q z"  # a canary: a slash, a plus and a space
PASSWORD_ENV = "FWREST_TEST_REDIS_PASSWORD"


@dataclass
class Redises:
    tls: RedisTls
    on_tls: RedisServer  # TLS, a password, no client certificate asked for
    on_mtls: RedisServer  # TLS, a client certificate required
    on_socket: RedisServer  # a unix socket, a password


@pytest.fixture(scope="module")
def redises(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redises]:
    root = tmp_path_factory.mktemp("redis-forms")
    tls = redis_tls(trustme.CA(), root / "tls")
    folders = [root / name for name in ("tls", "mtls", "socket")]
    for folder in folders:
        folder.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        yield Redises(
            tls,
            stack.enter_context(started(RedisServer(folders[0], tls=tls, password=PASSWORD))),
            stack.enter_context(started(RedisServer(folders[1], tls=tls, client_certs=True))),
            stack.enter_context(started(RedisServer(folders[2], unix=True, password=PASSWORD))),
        )


def store_keys(redises: Redises, form: str) -> tuple[RedisServer, dict[str, Any]]:
    """The server of one form and the ``[HTTPSERVER]`` keys that reach it."""
    tls = redises.tls
    password = {"StateStorePassword": f"env:{PASSWORD_ENV}"}
    if form == "rediss":
        return redises.on_tls, {
            "StateStore": redises.on_tls.url, "StateStoreCA": str(tls.ca), **password,
        }  # fmt: skip
    if form == "rediss with a client certificate":
        return redises.on_mtls, {"StateStore": redises.on_mtls.url, "StateStoreCA": str(tls.ca),
                                 "StateStoreCert": str(tls.client_cert),
                                 "StateStoreKey": str(tls.client_key)}  # fmt: skip
    return redises.on_socket, {"StateStore": redises.on_socket.url, **password}


@pytest.mark.parametrize("form", ["rediss", "rediss with a client certificate", "unix socket"])
def test_tokens_are_issued_and_refreshed_over_each_form(
    form: str, redises: Redises, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    server, keys = store_keys(redises, form)
    module = "redis_form_" + form.replace(" ", "_")
    with Client(oauth_service(tmp_path, ca, module, keys)) as client:
        tokens_work(client)
    with contextlib.closing(server.client()) as direct:
        # the state is in this Redis: the two refresh tokens, the signing key
        assert len(direct.keys("fwrest:rt:*")) == 2
        assert direct.exists("fwrest:signing_key")


def test_what_only_redis_can_tell_is_a_start_error_naming_the_key(
    redises: Redises, tmp_path: Path
) -> None:
    tls = redises.tls
    rediss, url_pw = store_keys(redises, "rediss")[1], "unix://:Url-Pw-ZZ@"
    cases = {
        # (the keys, the key the error names, a fragment of its message)
        "wrong CA": ({**rediss, "StateStoreCA": str(tls.other_ca)}, "StateStoreCA",
                     "TLS certificate does not verify"),
        "no client certificate": ({"StateStore": redises.on_mtls.url, "StateStoreCA": str(tls.ca)},
                                  "StateStoreCert", "client certificate"),
        "wrong password": ({**rediss, "StateStorePassword": "env:WRONG_REDIS_PW"},
                           "StateStorePassword", "Redis refused the password"),
        "password in the URL": ({**store_keys(redises, "unix socket")[1],
                                 "StateStorePassword": None,
                                 "StateStore": redises.on_socket.url.replace("unix://", url_pw)},
                                "StateStore", "Redis refused the password"),
        # Redis answered (16 databases, the default): no database 99, for good
        "no such database": ({**store_keys(redises, "unix socket")[1],
                              "StateStore": redises.on_socket.url.replace("?db=0", "?db=99")},
                             "StateStore", "Redis has no database 99"),
    }  # fmt: skip
    env = {PASSWORD_ENV: PASSWORD, "WRONG_REDIS_PW": "Wrong-Pw/8+w v"}
    for name, (keys, key, words) in cases.items():
        url = keys.pop("StateStore")
        store = {k: v for k, v in keys.items() if v is not None}
        config = store_config(tmp_path / name.replace(" ", "-"), url, **store)
        # forked: eight fresh interpreters took 10 s (each imports fwrest)
        refused_at_start(config, key, words, (PASSWORD, "Wrong-Pw/8+w v", "Url-Pw-ZZ"), **env)


def test_check_summarises_a_redis_store_without_its_password(
    redises: Redises, tmp_path: Path
) -> None:
    encoded = quote(PASSWORD, safe="")
    url = redises.on_socket.url.replace("unix://", f"unix://:{encoded}@")
    config = store_config(tmp_path / "answers", url)
    answered = run_forked("check", str(config), cwd=config.parent)
    assert answered.returncode == 0, answered.stderr
    assert f"state store: unix://***@{redises.on_socket.socket}?db=0" in answered.stdout
    # Redis answered the check's PING
    assert "warning: [HTTPSERVER] StateStore" not in answered.stdout
    # a Redis that does not answer is no mistake of the configuration: a warning
    config = store_config(tmp_path / "silent", url.replace("redis.sock", "gone.sock"))
    silent = run_forked("check", str(config), cwd=config.parent)
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
    with contextlib.closing(server.client()) as admin:
        admin.flushdb()
        assert admin.execute_command("ACL", "SETUSER", *rule) in (b"OK", "OK")
        keys = ini_example("deploy-redis-tls", replacements={
            "10.0.0.5:6380": f"127.0.0.1:{server.port}", "/etc/fwrest/redis-ca.pem": str(tls.ca),
            "/etc/fwrest/redis-client.crt": str(tls.client_cert),
            "/etc/fwrest/redis-client.key": str(tls.client_key),
        })["HTTPSERVER"]  # fmt: skip
        assert keys.pop("Servers") == "HTTPS_REST"
        monkeypatch.setenv("FWREST_REDIS_PASSWORD", ACL_PASSWORD)
        config = oauth_service(tmp_path, ca, "redis_form_deploy", keys, "HTTPS_REST")
        with Client(config) as client:
            grant_and_refresh(client)
        assert len(admin.keys("fwrest:rt:*")) == 2
        loaded = load_config(str(config))
        store = open_store(loaded.state_store, loaded.data_path, loaded.redis)
        try:  # a rate limit's count: its script asks Redis's clock (TIME: +time in the rule)
            assert store.hit_rate("rl:acl", 10, before=time.time() + 1)[0] == 1
        finally:
            store.close()
        # the commands came from the ACL user: Redis counted no refusal of it
        assert admin.execute_command("ACL", "LOG") == []
        checked = run_cli("check", str(config), cwd=tmp_path)
        assert checked.returncode == 0, checked.stderr
        assert f"state store: rediss://***@127.0.0.1:{server.port}/0" in checked.stdout
        assert "warning: [HTTPSERVER] StateStore" not in checked.stdout
        assert ACL_PASSWORD not in checked.stdout + checked.stderr


def _sentinel_watching(
    folder: Path, name: str, primary: RedisServer
) -> tuple[subprocess.Popen[bytes], int]:
    """One ``redis-sentinel`` watching ``primary`` as ``name``, answering once it returns."""
    port = free_port()
    conf = folder / f"sentinel-{port}.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
                    f"sentinel monitor {name} 127.0.0.1 {primary.port} 1\n")  # fmt: skip
    proc = subprocess.Popen([sentinel_binary(), str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    with contextlib.closing(
        redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
    ) as client:
        deadline = time.monotonic() + 15
        while True:
            try:
                if client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name):
                    break
            except redis.RedisError:
                pass
            assert time.monotonic() < deadline, "the sentinel never answered"
            time.sleep(0.1)
    return proc, port


def test_a_store_url_that_can_never_answer_is_a_start_error(
    redises: Redises, tmp_path: Path
) -> None:
    """Issue 34: a URL that cannot answer as written (TLS to plain text or back, a socket whose
    folder is missing or that is no socket, sentinels without the named primary) is an error naming
    StateStore, exit 2 before binding; a Redis not running now (no socket yet, no sentinel
    answering) is a warning of both."""
    (tmp_path / "plain-redis").mkdir()
    plain = RedisServer(tmp_path / "plain-redis").start()
    not_a_socket = tmp_path / "a-plain-file"
    not_a_socket.write_text("")
    sentinel, sentinel_port = _sentinel_watching(tmp_path, "fwother", plain)
    try:
        tls_port = redises.on_tls.port
        errors = {
            "TLS to a plain port": (f"rediss://127.0.0.1:{plain.port}/0",
                                    f"127.0.0.1:{plain.port} speaks Redis in plain text, not TLS"),
            "plain to a TLS port": (f"redis://127.0.0.1:{tls_port}/0",
                                    f"127.0.0.1:{tls_port} speaks TLS: write rediss://"),
            "a missing folder": (f"unix://{tmp_path}/no-such-folder/redis.sock?db=0",
                                 "the socket's folder"),
            "not a socket": (f"unix://{not_a_socket}?db=0", "is not a socket"),
            "no such database": (f"redis://127.0.0.1:{plain.port}/99",
                                 "Redis has no database 99"),
            "wrong primary": (f"redis+sentinel://127.0.0.1:{sentinel_port}/fwmain/0",
                              "know no primary named 'fwmain'"),
        }  # fmt: skip
        for name, (url, words) in errors.items():
            config = store_config(tmp_path / name.replace(" ", "-"), url)
            refused_at_start(config, "StateStore", words)
        # what may come back is a warning: check passes, saying so
        later_urls = (f"unix://{tmp_path}/redis-not-started.sock?db=0",
                      f"redis+sentinel://127.0.0.1:{free_port()}/fwother/0")  # fmt: skip
        for url in later_urls:
            config = store_config(tmp_path / f"later-{len(url)}", url)
            later = run_forked("check", str(config), cwd=config.parent)
            assert later.returncode == 0, later.stderr
            warning = "warning: [HTTPSERVER] StateStore: the state store did not answer: "
            assert warning in later.stdout and "<redis.client" not in later.stdout
    finally:
        sentinel.terminate()
        sentinel.wait(10)
        plain.stop()


def test_a_start_on_a_store_that_does_not_answer_says_so_and_is_not_ready(tmp_path: Path) -> None:
    """The start goes on (SPEC 7), logging why; ready says DOWN (SPEC 13.3) while it serves."""
    config = store_config(tmp_path / "gone", f"redis://127.0.0.1:{free_port()}/0")
    serves_unready(config)


def test_a_replica_that_attached_since_the_last_look_is_waited_for(tmp_path: Path) -> None:
    """Behind Sentinel and on a cluster a spend sends WAIT only where its master has a replica
    (ROLE, looked at once a second); one that attached within that second is seen by the ROLE
    sent after the spend's script: the spend is unconfirmed (503, undone) rather than left to
    a replica that may not have it (a review had a token spent twice after such a failover).
    Against a real primary and replica, the store's replica logic switched on as Sentinel's
    URL would (``_replicated``)."""

    def record(name: str) -> RefreshRecord:
        return RefreshRecord(name, "fam", "web", "ada", time.time() + 3600)

    (tmp_path / "p").mkdir()
    (tmp_path / "r").mkdir()
    with (
        started(RedisServer(tmp_path / "p")) as primary,
        started(RedisServer(tmp_path / "r", replica_of=primary)) as replica,
    ):
        direct, copy = primary.client(), replica.client()
        direct.config_set("repl-diskless-sync-delay", 0)  # listed as it connects
        for attempt in range(5):  # an attempt slower than the look's second proves nothing
            copy.replicaof("NO", "ONE")
            wait_for(lambda: direct.role()[2] == [], 10, "no replica")
            store = RedisStore(primary.url)
            store._replicated = True  # as for redis+sentinel://
            names = [f"h{attempt}-{n}" for n in range(2)]
            for name in names:
                store.add_refresh(record(name))
            began = time.monotonic()
            assert store.spend_refresh(names[0], "c1")[0] == "ok"  # none: no WAIT
            # the first spend saw none, and looks again only a second later
            copy.replicaof("127.0.0.1", primary.port)
            wait_for(lambda: len(direct.role()[2]) == 1, 10, "the replica attached")
            try:
                outcome = store.spend_refresh(names[1], "c2")[0]
            except UnconfirmedSpend:
                outcome = "unconfirmed"
            if time.monotonic() - began >= REPLICAS_CHECK_S:
                store.close()
                continue
            assert outcome == "unconfirmed"
            store.close()
            break
        else:
            raise AssertionError("every attempt outlasted the look's second")
        direct.close()
        copy.close()


def test_a_spend_on_a_master_that_just_lost_its_replica_is_unconfirmed(tmp_path: Path) -> None:
    """A replica whose link dropped (frozen here, its connection killed) is no longer listed,
    yet a failover could still promote it without the spends made meanwhile: for a while
    (REPLICA_GONE_S) the master that had it is taken to have it, so a spend there is
    unconfirmed (503, undone) rather than left to stand (a review had tokens spent twice so)."""
    (tmp_path / "p").mkdir()
    (tmp_path / "r").mkdir()
    with (
        started(RedisServer(tmp_path / "p")) as primary,
        started(RedisServer(tmp_path / "r", replica_of=primary)) as replica,
    ):
        direct = primary.client()
        wait_for(lambda: direct.info("replication").get("slave0", {}).get("state") == "online",
                 10, "the replica in sync")  # fmt: skip
        store = RedisStore(primary.url)
        store._replicated = True  # as for redis+sentinel://
        for name in ("a", "b"):
            store.add_refresh(RefreshRecord(name, "fam", "web", "ada", time.time() + 3600))
        try:

            def confirmed() -> bool:  # a spend the replica confirms: the master has one
                try:
                    return store.spend_refresh("a", "c1")[0] == "ok"
                except UnconfirmedSpend:  # its ack later than 200 ms under load (CI saw it):
                    return False  # the spend was undone; tried again

            wait_for(confirmed, 10, "a spend the replica confirms")
            replica.freeze()
            direct.client_kill_filter(_type="replica")
            wait_for(lambda: direct.info("replication")["connected_slaves"] == 0, 10, "cut off")
            with pytest.raises(UnconfirmedSpend):
                store.spend_refresh("b", "c2")
        finally:
            replica.thaw()
            store.close()
            direct.close()
