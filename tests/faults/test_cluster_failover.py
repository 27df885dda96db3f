"""A Redis Cluster failover under load (SPEC 17.1, and SPEC 7's rules for a store out of reach).

A real cluster of three masters and three replicas (``redis-server``, ``cluster-node-timeout``
1000 ms, a password); two fwrest hosts (``fwrest serve``, one worker each, two configs in two
folders) on ``StateStore=redis+cluster://...``, each with an oAuth2 port (one issuer for both)
and a Basic port; their ``[HTTPSERVER]`` lines are docs/deploy.md's (``deploy-redis-cluster``),
the password given by ``StateStorePassword=env:NAME``. A bounded load: password grants and
refresh chains alternating between the hosts, bearer calls with a token issued before the
fault, Basic calls, and bursts of clients refreshing one token at once. Mid-run the master
holding a refresh token's slot is killed (SIGKILL, a crashed host), and at once eight clients
refresh that token together; the cluster promotes the master's replica.

* while the master changes, what needs the store (grants, refreshes) answers 503 with
  ``Retry-After`` within 1.5 s, never a hang or a 500; bearer and Basic calls answer 200
  throughout;
* once the replica has taken over, grants and refreshes work again on both hosts, without a
  restart (the same processes);
* no refresh token is spent twice: the eight clients refreshing the killed master's token
  (each retrying it after a 503, as ``Retry-After`` says) get exactly one new pair; so does each burst of the load
  whose clients met no 503 (one that met the failover gets at most one: when a spend's new
  pair cannot be written, the request answers 503 and undoes its spend, but a client of the
  burst that presents the token in between is taken for a replay, which revokes the family:
  SPEC 7 has no grace period for concurrent refreshes; the clients sign in again); a refresh chain's token answered 200 more than once is a double spend
  (counted: 0); after the run each token answered 200 is presented again: none is answered
  200 (a spend the old master confirmed but did not pass on would be).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import ServerProcess, free_config, local_port
from tests.docs.blocks import ini_example
from tests.faults.support import Outcome, Recorder, app_with, figures
from tests.redis_support import RedisCluster

USERS = [("ada", "Ada-Pw-7731"), ("bob", "Bob-Pw-2207"), ("cat", "Cat-Pw-9090")]
BASIC_USER = ("basil", "Basil-Pw-4410")
PARAMS = {
    "client_id": "web",
    "users": [{"username": u, "password": p} for u, p in USERS],
    "access_expires": "1h",
    "refresh_expires": "Date()+1",
}
ISSUER = "https://api.example.test/rest"  # both hosts: a token of one is good on the other
FAIL_CLOSED_S = 1.5  # SPEC 7: 503 within 1.5 s
HANG_S = 5.0  # no answer takes longer
RESUMED_S = 3.0  # after the replica took over, tokens again within this
PAUSE_S = 0.02  # each load thread's pause between requests: a bounded load
HOSTS = ("A", "B")
AT_ONCE = 8  # clients refreshing one token together
GIVE_UP_S = 20.0  # a client retrying a token after 503s stops after this
REPLAYERS = 8
REDIS_PASSWORD = "Cluster-Pw-2718"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    group = RedisCluster(tmp_path / "redis", node_timeout_ms=1000, password=REDIS_PASSWORD)
    try:
        yield group.start()
    finally:
        group.stop()


def host_config(folder: Path, certs: dict[str, Path], cluster: RedisCluster) -> Path:
    """A host's config: docs/deploy.md's ``[HTTPSERVER]`` lines, with the cluster's nodes."""
    folder.mkdir()
    hosts = ",".join(f"127.0.0.1:{node.port}" for node in cluster.nodes)
    nodes = {"10.0.0.31:6379,10.0.0.32:6379,10.0.0.33:6379": hosts}
    store = ini_example("deploy-redis-cluster", replacements=nodes)["HTTPSERVER"]
    assert store.pop("Servers") == "HTTPS_REST"
    assert store["StateStore"] == cluster.url
    basic = local_port(FwData={"Authorization": {"scheme": "basic", "OnAuth": "app.basic_check"}})
    oauth = oauth_section(certs, onAuthparams="app.params", issuer=ISSUER)
    return free_config(
        folder,
        app=app_with(PARAMS, dict([BASIC_USER])),
        servers={"OAUTH": oauth, "BASIC": basic},
        extra={"HTTPSERVER": store, "POOL": {"MaxThreads": 8}},
    )


def test_a_master_fails_over_under_load(
    ca: trustme.CA, tmp_path: Path, cluster: RedisCluster
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    procs = {
        name: ServerProcess(
            host_config(tmp_path / f"host-{name}", certs, cluster),
            env={"FWREST_REDIS_PASSWORD": REDIS_PASSWORD},
        )
        for name in HOSTS
    }
    for proc in procs.values():
        proc.wait_ready()
    pids = {name: proc.proc.pid for name, proc in procs.items()}
    ctx = client_context(certs)
    clients: list[httpx.Client] = []
    lock = threading.Lock()

    def new_client(**kw: Any) -> httpx.Client:
        client = httpx.Client(timeout=15, **kw)
        with lock:
            clients.append(client)
        return client

    try:
        token_urls = [procs[h].url("OAUTH") + TOKEN for h in HOSTS]
        setup = new_client(verify=ctx)
        first = setup.post(
            token_urls[0],
            data={"grant_type": "password", "username": "ada", "password": USERS[0][1]},
        )
        assert first.status_code == 200, first.text
        valid = first.json()["access_token"]
        # the token the eight clients refresh at the fault, and the master holding its slot
        target = setup.post(
            token_urls[1],
            data={"grant_type": "password", "username": "cat", "password": USERS[2][1]},
        )
        assert target.status_code == 200, target.text
        target_token = target.json()["refresh_token"]
        direct = cluster.client()
        try:
            stored = {k.decode() for k in direct.scan_iter("fwrest:0:rt:*")}
        finally:
            direct.close()
        hashes = {hashlib.sha256(f"{n}\n{target_token}".encode()).hexdigest() for n in ("OAUTH", "oauth")}  # fmt: skip
        (target_key,) = {k for k in stored if k.removeprefix("fwrest:0:rt:").strip("{}") in hashes}
        master = cluster.master_of(target_key)
        replica = cluster.replica_of(master)
        turn = Counter[str]()

        def post(kind: str, client: httpx.Client, data: dict[str, str]) -> Outcome:
            with lock:
                turn[kind] += 1
                host = turn[kind] % 2
            started = time.monotonic()
            try:
                response = client.post(token_urls[host], data=data)
            except httpx.HTTPError as exc:
                return Outcome(kind, started, time.monotonic(), None, repr(exc), pid=host)
            ended = time.monotonic()
            body: Any = response.json()
            if response.status_code == 503:
                body = {**body, "retry-after": response.headers.get("retry-after")}
            return Outcome(kind, started, ended, response.status_code, body=body, pid=host)

        load = Recorder()
        grant_clients = [new_client(verify=ctx) for _ in range(2)]

        def grant(i: int) -> Outcome:
            user, password = USERS[i % 2]
            time.sleep(PAUSE_S)
            return post("grant", grant_clients[i], {"grant_type": "password", "username": user,
                                                    "password": password})  # fmt: skip

        refresh_clients = [new_client(verify=ctx) for _ in range(2)]
        held: list[str | None] = [None, None]
        answered: Counter[str] = Counter()  # refresh token -> its 200 answers

        def refresh(i: int) -> Outcome:
            time.sleep(PAUSE_S)
            if held[i] is None:  # a first token, or one refused: a new grant
                got = post("grant", refresh_clients[i], {"grant_type": "password",
                           "username": USERS[i][0], "password": USERS[i][1]})  # fmt: skip
                if got.status == 200:
                    held[i] = got.body["refresh_token"]
                return got
            token = held[i]
            assert token is not None
            got = post("refresh", refresh_clients[i], {"grant_type": "refresh_token",
                                                       "refresh_token": token})  # fmt: skip
            if got.status == 200:
                with lock:
                    answered[token] += 1
                held[i] = got.body["refresh_token"]
            elif got.status == 400:
                held[i] = None  # refused: the client signs in again
            return got  # a 503: the same token again

        burst_clients = [new_client(verify=ctx) for _ in range(AT_ONCE)]

        def together(token: str) -> tuple[list[int | None], int]:
            """``AT_ONCE`` clients refresh ``token`` at once, each retrying it after a 503
            (or a transport error, after 1 s) as ``Retry-After`` says until another answer:
            their last answers, and the 503s."""
            barrier = threading.Barrier(AT_ONCE, timeout=10)
            met = Counter[str]()

            def one(k: int) -> int | None:
                barrier.wait()
                give_up = time.monotonic() + GIVE_UP_S
                while True:
                    got = post("refresh", burst_clients[k], {"grant_type": "refresh_token",
                                                             "refresh_token": token})  # fmt: skip
                    load.add(got)
                    if got.status not in (503, None) or time.monotonic() > give_up:
                        if got.status == 200:
                            with lock:
                                answered[token] += 1
                        return got.status
                    with lock:
                        met["503"] += 1
                    # as Retry-After says (meanwhile a spend whose new pair could not be
                    # written is undone: a retry before that is taken for a replay)
                    wait = got.body.get("retry-after") if got.status == 503 else None
                    time.sleep(float(wait or 1))

            with ThreadPoolExecutor(AT_ONCE) as pool:
                return list(pool.map(one, range(AT_ONCE))), met["503"]

        bursts: list[tuple[list[int | None], int]] = []
        burst_client = new_client(verify=ctx)

        def burst(_i: int) -> Outcome | None:
            time.sleep(PAUSE_S)
            got = post("grant", burst_client, {"grant_type": "password", "username": "bob",
                                               "password": USERS[1][1]})  # fmt: skip
            if got.status == 200:
                bursts.append(together(got.body["refresh_token"]))
            return got

        bearer_client = new_client(verify=ctx)
        basic_client = new_client()

        def guard(i: int) -> Outcome:
            time.sleep(PAUSE_S)
            with lock:
                turn["guard"] += 1
                host = procs[HOSTS[turn["guard"] % 2]]
            if i == 0:
                client, url, kw = bearer_client, host.url("OAUTH") + "/hello", {
                    "headers": {"Authorization": f"Bearer {valid}"}}  # fmt: skip
                kind = "bearer"
            else:
                client, url, kw = basic_client, host.url("BASIC") + "/hello", {"auth": BASIC_USER}
                kind = "basic"
            started = time.monotonic()
            try:
                status = client.get(url, **kw).status_code  # type: ignore[arg-type]
            except httpx.HTTPError as exc:
                return Outcome(kind, started, time.monotonic(), None, repr(exc))
            return Outcome(kind, started, time.monotonic(), status)

        load.run("grant", 2, grant)
        load.run("refresh", 2, refresh)
        load.run("burst", 1, burst)
        load.run("guard", 2, guard)
        try:
            time.sleep(1.5)
            master.kill()
            fault = time.monotonic()
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

        store_kinds = ("grant", "refresh")
        needs_store = [o for o in outcomes if o.kind in store_kinds]
        guards = [o for o in outcomes if o.kind in ("bearer", "basic")]
        print(
            f"master {master.port} killed; its replica {replica.port} took over "
            f"{switched - fault:.2f} s later. {len(needs_store)} token requests "
            f"{dict(Counter((o.kind, o.status) for o in needs_store))}, {len(guards)} guard "
            f"checks {dict(Counter((o.kind, o.status) for o in guards))}"
        )
        assert not load.crashed, load.crashed
        # never a hang, never a 500, never a transport error
        assert {o.status for o in needs_store} <= {200, 400, 503}, Counter(
            (o.status, o.error) for o in needs_store
        )
        slowest = max(o.took for o in needs_store)
        assert slowest <= HANG_S, slowest
        unavailable = [o for o in needs_store if o.status == 503]
        print(f"503 answered in {figures(o.took for o in unavailable)}")
        assert unavailable, "the load never met the failover"
        for o in unavailable:
            assert o.took <= FAIL_CLOSED_S, o.took
            assert int(o.body["retry-after"]) >= 1, o.body
            assert fault <= o.ended, "a 503 before the fault"
        # bearer and Basic checks do not depend on the store
        during = [o for o in guards if o.ended > fault and o.started < switched]
        assert during, "no guard check ran during the failover"
        assert {o.status for o in guards} == {200}, Counter((o.kind, o.status) for o in guards)
        # service resumed on both hosts without a restart
        for host in (0, 1):
            back = [o for o in needs_store if o.pid == host and o.started >= switched]
            ok = [o for o in back if o.status == 200]
            first_ok = min(o.ended for o in ok) - switched if ok else None
            print(f"host {HOSTS[host]}: first token answer {first_ok} s after the switch")
            assert first_ok is not None and first_ok <= RESUMED_S, (HOSTS[host], first_ok)
            kinds = {o.kind for o in ok}
            assert kinds == {"grant", "refresh"}, (HOSTS[host], kinds)
        assert {name: proc.proc.pid for name, proc in procs.items()} == pids
        assert all(proc.proc.poll() is None for proc in procs.values())

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
        double = {t: n for t, n in answered.items() if n > 1}
        spent = list(answered)
        replayers = [new_client(verify=ctx) for _ in range(REPLAYERS)]

        def replay(k: int) -> list[int]:
            return [
                replayers[k].post(token_urls[i % 2], data={"grant_type": "refresh_token",
                                                           "refresh_token": spent[i]}).status_code
                for i in range(k, len(spent), REPLAYERS)
            ]  # fmt: skip

        with ThreadPoolExecutor(REPLAYERS) as pool:
            replayed = Counter(
                code for codes in pool.map(replay, range(REPLAYERS)) for code in codes
            )
        print(
            f"{len(answered)} refresh tokens answered 200; double spends: {len(double)}; "
            f"each presented again afterwards: {dict(replayed)}"
        )
        assert len(answered) >= 10, "too few refreshes to count"
        assert double == {}
        assert replayed[200] == 0, replayed
    finally:
        for client in clients:
            client.close()
        codes = {name: proc.stop() for name, proc in procs.items()}
    assert codes == {"A": 0, "B": 0}
