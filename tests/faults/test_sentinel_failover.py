"""A Redis Sentinel failover under load (SPEC 15, and SPEC 7's rules for a store out of reach).

A real primary, a replica and three sentinels (``redis-sentinel``, quorum 2, the primary taken
for down after 500 ms); two fwrest hosts (``fwrest serve``, one worker each, two configs in two
folders) on ``StateStore=redis+sentinel://...``, each with an oAuth2 port (one issuer for both)
and a Basic port; their ``[HTTPSERVER]`` lines are docs/deploy.md's (``deploy-redis-sentinel``),
the primary's password given by ``StateStorePassword=env:NAME``. A bounded load: password grants and refreshes alternating between the
hosts, bearer calls with a token issued before the fault, Basic calls. Mid-run the primary is
killed (SIGKILL, a crashed host); the sentinels promote the replica.

* while the primary changes, what needs the store (grants, refreshes) answers 503 with
  ``Retry-After`` within 1.5 s, never a hang or a 500; bearer and Basic calls answer 200
  throughout;
* once the sentinels name the new primary, grants and refreshes work again on both hosts,
  without a restart (the same processes);
* no refresh token is spent twice: a refresh client retries its token after a 503 and takes
  the new one after a 200; every refresh token answered 200 more than once is a double spend
  (counted: 0), and after the run each token that was answered 200 is presented again: none is
  answered 200 (a spend the old primary confirmed but did not pass on would be).
"""

from __future__ import annotations

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
from tests.redis_support import SentinelGroup

USERS = [("ada", "Ada-Pw-7731"), ("bob", "Bob-Pw-2207")]
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
RESUMED_S = 3.0  # after the sentinels name the new primary, tokens again within this
PAUSE_S = 0.02  # each load thread's pause between requests: a bounded load
HOSTS = ("A", "B")
REPLAYERS = 8  # clients presenting the spent refresh tokens again, at once


REDIS_PASSWORD = "Sentinel-Pw-3141"


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    group = SentinelGroup(tmp_path / "redis", down_ms=500, password=REDIS_PASSWORD)
    try:
        yield group.start()
    finally:
        group.stop()


def host_config(folder: Path, certs: dict[str, Path], group: SentinelGroup) -> Path:
    """A host's config: docs/deploy.md's ``[HTTPSERVER]`` lines, with the group's sentinels."""
    folder.mkdir()
    hosts = ",".join(f"127.0.0.1:{port}" for port in group.ports)
    sentinels = {"10.0.0.21:26379,10.0.0.22:26379,10.0.0.23:26379": hosts}
    store = ini_example("deploy-redis-sentinel", replacements=sentinels)["HTTPSERVER"]
    assert store.pop("Servers") == "HTTPS_REST"
    assert store["StateStore"].endswith(f"/{group.name}/0")
    basic = local_port(FwData={"Authorization": {"scheme": "basic", "OnAuth": "app.basic_check"}})
    oauth = oauth_section(certs, onAuthparams="app.params", issuer=ISSUER)
    return free_config(
        folder,
        app=app_with(PARAMS, dict([BASIC_USER])),
        servers={"OAUTH": oauth, "BASIC": basic},
        extra={"HTTPSERVER": store, "POOL": {"MaxThreads": 8}},
    )


def test_a_failover_under_load(ca: trustme.CA, tmp_path: Path, sentinels: SentinelGroup) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    procs = {
        name: ServerProcess(
            host_config(tmp_path / f"host-{name}", certs, sentinels),
            env={"FWREST_REDIS_PASSWORD": REDIS_PASSWORD},
        )
        for name in HOSTS
    }
    for proc in procs.values():
        proc.wait_ready()
    pids = {name: proc.proc.pid for name, proc in procs.items()}
    ctx = client_context(certs)
    clients: list[httpx.Client] = []

    def new_client(**kw: Any) -> httpx.Client:
        client = httpx.Client(timeout=15, **kw)
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
        turn = Counter[str]()

        def post(kind: str, client: httpx.Client, data: dict[str, str]) -> Outcome:
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

        grant_clients = [new_client(verify=ctx) for _ in range(2)]

        def grant(i: int) -> Outcome:
            user, password = USERS[i % len(USERS)]
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
            got.error = token
            if got.status == 200:
                answered[token] += 1
                held[i] = got.body["refresh_token"]
            elif got.status == 400:
                held[i] = None  # refused: the client signs in again
            return got  # a 503: the same token again

        bearer_client = new_client(verify=ctx)
        basic_client = new_client()

        def bearer(i: int) -> Outcome:
            time.sleep(PAUSE_S)
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

        load = Recorder()
        load.run("grant", 2, grant)
        load.run("refresh", 2, refresh)
        load.run("guard", 2, bearer)
        old_port = sentinels.primary.port
        try:
            time.sleep(1.5)
            sentinels.primary.kill()
            fault = time.monotonic()
            deadline = fault + 30
            while sentinels.primary_port() == old_port:
                assert time.monotonic() < deadline, "the sentinels never promoted the replica"
                time.sleep(0.05)
            switched = time.monotonic()
            time.sleep(RESUMED_S)
        finally:
            outcomes = load.stop()

        store_kinds = ("grant", "refresh")
        needs_store = [o for o in outcomes if o.kind in store_kinds]
        guards = [o for o in outcomes if o.kind in ("bearer", "basic")]
        print(
            f"primary killed; the sentinels named the new one {switched - fault:.2f} s later. "
            f"{len(needs_store)} token requests "
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
            first = min(o.ended for o in ok) - switched if ok else None
            print(f"host {HOSTS[host]}: first token answer {first} s after the switch")
            assert first is not None and first <= RESUMED_S, (HOSTS[host], first)
            kinds = {o.kind for o in ok}
            assert kinds == {"grant", "refresh"}, (HOSTS[host], kinds)
        assert {name: proc.proc.pid for name, proc in procs.items()} == pids
        assert all(proc.proc.poll() is None for proc in procs.values())

        # no refresh token spent twice: across the load, and presented again afterwards
        double = {t: n for t, n in answered.items() if n > 1}
        # each replay revokes its family, which waits for the replica (about 0.25 s): eight
        # clients replay at once, each its share of the tokens, one after the other
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
