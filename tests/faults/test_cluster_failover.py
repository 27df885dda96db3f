"""A Redis Cluster failover under load (SPEC 17.1, 7). Three masters and replicas
(``cluster-node-timeout`` 1000 ms, a password); two hosts on ``redis+cluster://`` with
docs/deploy.md's lines (``deploy-redis-cluster``), ``StateStorePassword=env:NAME``. Load: grants and
refresh chains alternating hosts, bearer calls with a pre-fault token, Basic calls, bursts
refreshing one token at once. Mid-run the master of a refresh token's slot gets SIGKILL and eight
clients refresh that token together; its replica is promoted.

Meanwhile grants and refreshes answer 503 with ``Retry-After`` within 1.5 s, never a hang or 500;
bearer and Basic 200 throughout; afterwards both hosts work again, same processes. No double spend:
the eight clients (retrying after 503) get exactly one new pair, and so does each burst that met no
503 (one that did gets at most one: a spend whose pair cannot be written is undone with a 503, but a
burst client presenting the token between is a replay, revoking the family; SPEC 7 has no grace
period). No chain token is answered 200 twice, nor when presented again after the run (a spend the
old master confirmed but never passed on)."""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trustme

from tests.auth.oauth2_support import issue_certs
from tests.docs.blocks import ini_example
from tests.faults.failover import PAUSE_S, RESUMED_S, TwoHosts, host_configs
from tests.faults.support import Outcome, password_grant
from tests.redis_support import RedisCluster, started

USERS = [("ada", "Ada-Pw-7731"), ("bob", "Bob-Pw-2207"), ("cat", "Cat-Pw-9090")]
AT_ONCE = 8  # clients refreshing one token together
GIVE_UP_S = 20.0  # a client retrying a token after 503s stops after this
REDIS_PASSWORD = "Cluster-Pw-2718"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    with started(
        RedisCluster(tmp_path / "redis", node_timeout_ms=1000, password=REDIS_PASSWORD)
    ) as c:
        yield c


def test_a_master_fails_over_under_load(
    ca: trustme.CA, tmp_path: Path, cluster: RedisCluster
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    addresses = ",".join(f"127.0.0.1:{node.port}" for node in cluster.nodes)
    nodes = {"10.0.0.31:6379,10.0.0.32:6379,10.0.0.33:6379": addresses}
    configs, url = host_configs(
        tmp_path, certs, ini_example("deploy-redis-cluster", replacements=nodes), USERS
    )
    assert url == cluster.url
    hosts = TwoHosts(configs, certs, REDIS_PASSWORD, USERS)
    load, lock = hosts.load, hosts.lock
    try:
        # the token the eight clients refresh at the fault, and the master holding its slot
        target_token = hosts.token(1, 2)["refresh_token"]
        with contextlib.closing(cluster.client()) as direct:
            stored = {k.decode() for k in direct.scan_iter("fwrest:0:rt:*")}
        hashes = {hashlib.sha256(f"{n}\n{target_token}".encode()).hexdigest() for n in ("OAUTH", "oauth")}  # fmt: skip
        tagged = f"fwrest:0:rt:{{{target_token.partition('.')[0]}}}"  # the family's tag
        (target_key,) = {k for k in stored if k.removeprefix(tagged) in hashes}
        master = cluster.master_of(target_key)
        replica = cluster.replica_of(master)
        burst_clients = [hosts.new_client(verify=hosts.ctx) for _ in range(AT_ONCE)]

        def together(token: str) -> tuple[list[int | None], int]:
            """``AT_ONCE`` clients refresh ``token`` at once, retrying after a 503 (a transport
            error: 1 s) as ``Retry-After`` says: their last answers and the 503s."""
            barrier = threading.Barrier(AT_ONCE, timeout=10)
            met = Counter[str]()

            def one(k: int) -> int | None:
                barrier.wait()
                give_up = time.monotonic() + GIVE_UP_S
                while True:
                    got = hosts.post("refresh", burst_clients[k], {"grant_type": "refresh_token",
                                     "refresh_token": token})  # fmt: skip
                    load.add(got)
                    if got.status not in (503, None) or time.monotonic() > give_up:
                        if got.status == 200:
                            hosts.spent(token)
                        return got.status
                    with lock:
                        met["503"] += 1
                    # as Retry-After says (an unwritten spend is undone; a retry before is a replay)
                    wait = got.body.get("retry-after") if got.status == 503 else None
                    time.sleep(float(wait or 1))

            with ThreadPoolExecutor(AT_ONCE) as pool:
                return list(pool.map(one, range(AT_ONCE))), met["503"]

        bursts: list[tuple[list[int | None], int]] = []
        burst_client = hosts.new_client(verify=hosts.ctx)

        def burst(_i: int) -> Outcome | None:
            time.sleep(PAUSE_S)
            got = hosts.post("grant", burst_client, password_grant(*USERS[1]))
            if got.status == 200:
                bursts.append(together(got.body["refresh_token"]))
            return got

        hosts.start_load()
        load.run("burst", 1, burst)
        try:
            time.sleep(1.5)
            fault = time.monotonic()  # before the signal: a 503 may precede kill()'s return
            master.kill()
            with ThreadPoolExecutor(1) as pool:
                at_fault = pool.submit(together, target_token)
                deadline = fault + 30
                while cluster.role(replica) != "master":
                    assert time.monotonic() < deadline, "the cluster never promoted the replica"
                    time.sleep(0.05)
                switched = time.monotonic()
                target_answers, target_met = at_fault.result(timeout=GIVE_UP_S + 15)
            time.sleep(RESUMED_S)
        finally:
            outcomes = load.stop()

        what = f"master {master.port} killed; its replica {replica.port} took over"
        hosts.check_load(outcomes, fault, switched, what)

        # the killed master's token, refreshed by eight clients across the failover: one pair
        print(
            f"{AT_ONCE} clients refreshing the killed master's token: {dict(Counter(target_answers))}"
            f" after {target_met} answers 503"
        )
        assert target_met, "the clients never met the failover"
        assert Counter(target_answers) == {200: 1, 400: AT_ONCE - 1}, target_answers
        # each burst of the load: at most one pair; exactly one where no client met a 503
        calm = [answers for answers, met in bursts if not met]
        stormy = [answers for answers, met in bursts if met]
        print(
            f"{len(bursts)} bursts of {AT_ONCE}: {len(calm)} met no 503, {len(stormy)} met the "
            f"failover, their pairs: {[a.count(200) for a in stormy]}"
        )
        assert calm and all(a.count(200) == 1 for a in calm), calm
        assert all(a.count(200) <= 1 for a in stormy), stormy
        assert all(status in (200, 400) for a in bursts for status in a[0]), bursts

        # no refresh token spent twice: across the load, and presented again afterwards
        hosts.check_no_double_spend()
    finally:
        codes = hosts.stop()
    assert codes == {"A": 0, "B": 0}
