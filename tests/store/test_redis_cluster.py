"""SPEC 17.1's Redis Cluster form of the state store, against real clusters started here
(``tests/redis_support.py``'s :class:`RedisCluster`): three masters and three replicas with a
password, and three masters on TLS that require a client certificate. An oAuth2 port keeps its
state there (every key under the URL's database as a prefix, ``fwrest:5:``: a cluster has no
``SELECT``); what only the cluster can tell is a start error naming the key (and the same from
``fwrest check``), a cluster that does not answer now a warning; a refresh whose spend no replica
confirms answers 503 and stays valid (a cluster without replicas refreshes: the TLS one). The
store contract runs over a
cluster too (tests/store/test_contract.py); its failover: tests/faults/test_cluster_failover.py.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import trustme

from fwrest.store import RedisOptions, StateStore, UnconfirmedWrite, open_store
from fwrest.store.redis import KeyLayout
from fwrest.testing import Client
from tests.conftest import free_port, run_forked, wait_for
from tests.redis_support import (
    RedisCluster,
    RedisServer,
    RedisTls,
    redis_tls,
    serves_unready,
    started,
    store_config,
)
from tests.store.support import (
    TOKEN,
    oauth_service,
    refused_at_start,
    tokens_work,
    unconfirmed_spend_is_undone,
)

PASSWORD = "Cluster-Pw/5+k q"  # a canary: a slash, a plus and a space
PASSWORD_ENV = "FWREST_TEST_CLUSTER_PASSWORD"
DB = 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with started(
        RedisCluster(tmp_path_factory.mktemp("cluster"), password=PASSWORD, db=DB)
    ) as found:
        yield found


@pytest.fixture(scope="module")
def tls_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RedisCluster, RedisTls]]:
    root = tmp_path_factory.mktemp("tls-cluster")
    tls = redis_tls(trustme.CA(), root / "tls")
    with started(RedisCluster(root / "nodes", db=DB, replicas=0, tls=tls)) as found:
        yield found, tls


@pytest.mark.parametrize("form", ["redis+cluster", "rediss+cluster"])
def test_tokens_are_issued_and_refreshed_on_a_cluster(
    form: str,
    request: pytest.FixtureRequest,
    ca: trustme.CA,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if form == "redis+cluster":
        nodes: RedisCluster = request.getfixturevalue("cluster")
        tls = None
        monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
        keys = {"StateStore": nodes.url, "StateStorePassword": f"env:{PASSWORD_ENV}"}
    else:
        nodes, tls = request.getfixturevalue("tls_cluster")
        keys = {"StateStore": nodes.url, "StateStoreCA": str(tls.ca),
                "StateStoreCert": str(tls.client_cert), "StateStoreKey": str(tls.client_key)}  # fmt: skip
    nodes.flush()
    for node in nodes.nodes:
        with contextlib.closing(node.client()) as one:
            one.config_resetstat()
    module = "cluster_form_" + form.replace("+", "_")
    with Client(oauth_service(tmp_path, ca, module, keys)) as client:
        wrong = {"grant_type": "password", "username": "ada", "password": "not-it"}
        assert client.post(TOKEN, data=wrong).status_code == 400
        tokens_work(client)
        for made_up in ("0123456789ab.not-issued", "{bf}.x", "Q" * 43):  # no record: no 500
            refused = client.post(TOKEN, data={"grant_type": "refresh_token",
                                               "refresh_token": made_up})  # fmt: skip
            assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
        grant = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-7731"}
        held = client.post(TOKEN, data=grant).json()["refresh_token"]
        assert re.fullmatch(r"[0-9a-f]{12}\.[A-Za-z0-9_-]{43}", held), held  # tag . 256 bits
        known = client.post(TOKEN.replace("token", "introspect"),
                            data={"token": held, "client_id": "web"}).json()  # fmt: skip
        assert known["active"] and re.fullmatch(r"[0-9a-f]{32}", known["jti"]), known
    with contextlib.closing(nodes.client()) as direct:
        found = {k.decode() for k in direct.scan_iter("*")}
        prefix = f"fwrest:{DB}:"
        # the database is a prefix: every key under it, none elsewhere
        assert found and all(k.startswith(prefix) for k in found), found
        assert f"{prefix}signing_key" in found and f"{prefix}revoked" in found
        # a family's tokens on one slot (SPEC 17.1), their aliases (the section is spelled
        # OAUTH, its tokens' name oauth) too: the family's tag, which its tokens carry
        records = {k for k in found if k.startswith((f"{prefix}rt:", f"{prefix}rta:"))}
        assert len(records) == 6, found
        tags = {k.partition("{")[2].partition("}")[0] for k in records}
        assert held[:12] in tags and len(tags) == 2, records  # tokens_work's family, held's
        for tag in tags:
            assert len({direct.keyslot(k) for k in records if f"{{{tag}}}" in k}) == 1
        # a spend waits for its master's replica, where it has one (the TLS cluster has
        # none: a WAIT there would take its whole 200 ms for nothing)
        waits = 0
        for node in nodes.nodes:
            with contextlib.closing(node.client()) as one:
                waits += int(one.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
        assert (waits > 0) if tls is None else (waits == 0), waits
        counts = {k for k in found if ":fail:" in k}
        assert {k.rpartition(":fail:")[2].partition("|")[2].partition(":")[0] for k in counts} == {
            "user", "ip"}  # fmt: skip
        # a user's and an address's counts on one slot, the lock list's
        assert {direct.keyslot(k) for k in counts} == {direct.keyslot(f"{prefix}{{bf}}:locks")}


def test_a_refresh_no_replica_confirms_answers_503_and_the_token_stays_valid(
    cluster: RedisCluster, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC 17.1: a spend its master did but no replica confirmed within the ``WAIT`` could
    be lost to a failover (the promoted replica holding the token unspent, a second pair):
    the refresh answers 503 and its spend is undone; the retry gets the one new pair."""
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    keys = {"StateStore": cluster.url, "StateStorePassword": f"env:{PASSWORD_ENV}"}
    cluster.flush()
    replicas = [node for node in cluster.nodes if cluster.role(node) == "slave"]
    assert len(replicas) == 3, replicas
    with Client(oauth_service(tmp_path, ca, "cluster_unconfirmed", keys)) as client:
        unconfirmed_spend_is_undone(client, replicas)


def test_a_revocation_or_a_proof_no_replica_confirms_is_unconfirmed(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    """SPEC 12.3 and 16.2 across a failover: with the replica of the master holding the
    revocation list or a proof's id cut off (frozen, its link killed) the master alone would
    keep the write, and its failover lose it (a review saw revoked tokens and a used proof
    accepted again): UnconfirmedWrite (the routes answer 503, the command exits 1:
    tests/faults/test_sentinel_failover.py), the proof's use taken back. A store opened since
    (the command's) knows of the replica from the cluster's bus."""
    layout = KeyLayout.cluster(DB)
    writes: dict[str, Callable[[StateStore], object]] = {
        layout.revoked: lambda store: store.revoke_family("fam-cut", time.time() + 60),
        layout.proof("p-cut"): lambda store: store.note_proof("p-cut", 60.0),
    }
    for key, write in writes.items():
        master = cluster.master_of(key)
        replica = cluster.replica_of(master)
        with contextlib.closing(master.client()) as direct:

            def replicas(state: str | None, info: Any = direct.info) -> bool:
                return info("replication").get("slave0", {}).get("state") == state

            replica.freeze()
            try:
                direct.client_kill_filter(_type="replica")
                wait_for(lambda: replicas(None), 10, "the replica cut off")
                store = open_store(cluster.url, tmp_path, RedisOptions(password=PASSWORD))
                with pytest.raises(UnconfirmedWrite), contextlib.closing(store):
                    write(store)
                assert ("proof" not in key) or direct.get(key) is None  # taken back
            finally:
                replica.thaw()
            wait_for(lambda: replicas("online"), 15, "the replica in sync for the next test")


def test_what_only_the_cluster_can_tell_is_a_start_error(
    cluster: RedisCluster, tls_cluster: tuple[RedisCluster, RedisTls], tmp_path: Path
) -> None:
    """A URL whose nodes can never answer as written is a configuration error naming the key
    at fault, exit 2 before binding, from ``fwrest check`` and the start alike."""
    (tmp_path / "single").mkdir()
    tls_nodes, tls = tls_cluster
    plain_port, tls_port = cluster.nodes[0].port, tls_nodes.nodes[0].port
    encoded = quote(PASSWORD, safe="")
    with started(RedisServer(tmp_path / "single")) as single:
        errors = {
            "a single Redis": (
                f"redis+cluster://127.0.0.1:{single.port}/0", {}, "StateStore",
                "not as a cluster node (cluster-enabled no): write redis://",
            ),
            "TLS to a plain node": (
                f"rediss+cluster://:{encoded}@127.0.0.1:{plain_port}/0", {}, "StateStore",
                f"127.0.0.1:{plain_port} speaks Redis in plain text, not TLS: write "
                "redis+cluster://",
            ),
            "plain to a TLS node": (
                f"redis+cluster://127.0.0.1:{tls_port}/0", {}, "StateStore",
                f"127.0.0.1:{tls_port} speaks TLS: write rediss+cluster://",
            ),
            "a wrong password": (
                f"redis+cluster://127.0.0.1:{plain_port}/0",
                {"StateStorePassword": "Wrong-Pw-1"}, "StateStorePassword",
                "Redis refused the password",
            ),
            "no password": (
                f"redis+cluster://127.0.0.1:{plain_port}/0", {}, "StateStorePassword",
                "Redis refused the password",
            ),
            "the wrong CA": (
                f"rediss+cluster://127.0.0.1:{tls_port}/0",
                {"StateStoreCA": str(tls.other_ca), "StateStoreCert": str(tls.client_cert),
                 "StateStoreKey": str(tls.client_key)}, "StateStoreCA", "does not verify",
            ),
        }  # fmt: skip
        for name, (url, keys, key, words) in errors.items():
            config = store_config(tmp_path / name.replace(" ", "-"), url, **keys)
            refused_at_start(config, key, words, (PASSWORD, encoded, "Wrong-Pw-1"))
        # the right password: check passes, the summary without it
        url = f"redis+cluster://:{encoded}@127.0.0.1:{plain_port},127.0.0.1:{free_port()}/{DB}"
        config = store_config(tmp_path / "right", url)
        answered = run_forked("check", str(config), cwd=config.parent)
        assert answered.returncode == 0, answered.stderr
        assert f"state store: redis+cluster://***@127.0.0.1:{plain_port}," in answered.stdout
        assert "warning: [HTTPSERVER] StateStore" not in answered.stdout
        assert PASSWORD not in answered.stdout + answered.stderr
        assert encoded not in answered.stdout + answered.stderr


def test_a_start_on_a_cluster_that_does_not_answer_says_so_and_is_not_ready(tmp_path: Path) -> None:
    """The store opens without its cluster (redis-py's cluster client connects as it is
    made: fwrest makes it at the first use): the check warns, the service starts and serves
    what does not need the store, the ready probe says DOWN."""
    url = f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/0"
    config = store_config(tmp_path / "gone", url)
    checked = run_forked("check", str(config), cwd=config.parent)
    assert checked.returncode == 0, checked.stderr
    assert "warning: [HTTPSERVER] StateStore: the state store did not answer: " in checked.stdout
    serves_unready(config)
