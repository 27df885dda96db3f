"""Shared by the Redis failover tests: two hosts on one store (an oAuth2 port, one issuer, and a
Basic port each), a bounded load alternating between them, SPEC 7 and 17.1's checks on what it met,
and the replay of every refresh token answered 200."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.auth.oauth2_support import TOKEN, client_context, oauth_section
from tests.conftest import ServerProcess, free_config, local_port
from tests.faults.support import Outcome, Recorder, app_with, figures, oauth_params, password_grant

BASIC_USER = ("basil", "Basil-Pw-4410")
ISSUER = "https://api.example.test/rest"  # both hosts: a token of one is good on the other
FAIL_CLOSED_S = 1.5  # SPEC 7: 503 within 1.5 s
HANG_S = 5.0  # no answer takes longer
RESUMED_S = 3.0  # after the new primary is known, tokens again within this
PAUSE_S = 0.02  # each load thread's pause between requests: a bounded load
HOSTS = ("A", "B")
REPLAYERS = 8  # clients presenting the spent refresh tokens again, at once
STORE_KINDS = ("grant", "refresh")


def params(users: list[tuple[str, str]]) -> dict[str, Any]:
    return oauth_params(users, long_lived=True)


def host_configs(
    root: Path,
    certs: dict[str, Path],
    example: dict[str, dict[str, str]],
    users: list[tuple[str, str]],
) -> tuple[dict[str, Path], str]:
    """Each host's config in its folder: docs/deploy.md's ``example`` lines (named by the caller for
    the guide's block check), an oAuth2 and a Basic port; and their ``StateStore``."""
    store = example["HTTPSERVER"]
    assert store.pop("Servers") == "HTTPS_REST"
    basic = local_port(FwData={"Authorization": {"scheme": "basic", "OnAuth": "app.basic_check"}})
    oauth = oauth_section(certs, onAuthparams="app.params", issuer=ISSUER)
    app = app_with(params(users), dict([BASIC_USER]))
    servers = {"OAUTH": oauth, "BASIC": basic}
    extra = {"HTTPSERVER": store, "POOL": {"MaxThreads": 8}}
    configs = {}
    for name in HOSTS:
        (root / f"host-{name}").mkdir()
        configs[name] = free_config(root / f"host-{name}", app=app, servers=servers, extra=extra)
    return configs, store["StateStore"]


class TwoHosts:
    """The two hosts (started), their clients and the load's shared state."""

    def __init__(
        self,
        configs: dict[str, Path],
        certs: dict[str, Path],
        password: str,
        users: list[tuple[str, str]],
    ) -> None:
        self.users = users
        self.procs = {
            name: ServerProcess(configs[name], env={"FWREST_REDIS_PASSWORD": password})
            for name in HOSTS
        }
        for proc in self.procs.values():
            proc.wait_ready()
        self.pids = {name: proc.proc.pid for name, proc in self.procs.items()}
        self.ctx = client_context(certs)
        self.clients: list[httpx.Client] = []
        self.lock = threading.Lock()
        self.turn = Counter[str]()
        self.answered: Counter[str] = Counter()  # refresh token -> its 200 answers
        self.token_urls = [self.procs[h].url("OAUTH") + TOKEN for h in HOSTS]
        self.load = Recorder()
        self.valid = ""
        self._held: list[str | None] = [None, None]

    def new_client(self, **kw: Any) -> httpx.Client:
        client = httpx.Client(timeout=15, **kw)
        with self.lock:
            self.clients.append(client)
        return client

    def token(self, host: int, user: int) -> dict[str, Any]:
        """A password grant of ``users[user]`` on ``host``: its answer's body."""
        got = self.new_client(verify=self.ctx).post(
            self.token_urls[host], data=password_grant(*self.users[user])
        )
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        return body

    def post(self, kind: str, client: httpx.Client, data: dict[str, str]) -> Outcome:
        """A token request, to each host in turn (per kind): its :class:`Outcome`."""
        with self.lock:
            self.turn[kind] += 1
            host = self.turn[kind] % 2
        started = time.monotonic()
        try:
            response = client.post(self.token_urls[host], data=data)
        except httpx.HTTPError as exc:
            return Outcome(kind, started, time.monotonic(), None, repr(exc), pid=host)
        ended = time.monotonic()
        body: Any = response.json()
        if response.status_code == 503:
            body = {**body, "retry-after": response.headers.get("retry-after")}
        return Outcome(kind, started, ended, response.status_code, body=body, pid=host)

    def start_load(self) -> None:
        """Grants, refresh chains, bearer (a token issued now) and Basic calls: two threads each."""
        self.valid = self.token(0, 0)["access_token"]
        grant_clients = [self.new_client(verify=self.ctx) for _ in range(2)]
        refresh_clients = [self.new_client(verify=self.ctx) for _ in range(2)]
        bearer_client = self.new_client(verify=self.ctx)
        basic_client = self.new_client()

        def grant(i: int) -> Outcome:
            user, password = self.users[i % 2]
            time.sleep(PAUSE_S)
            return self.post("grant", grant_clients[i], password_grant(user, password))

        def refresh(i: int) -> Outcome:
            time.sleep(PAUSE_S)
            held = self._held
            if held[i] is None:  # a first token, or one refused: a new grant
                got = self.post("grant", refresh_clients[i], password_grant(*self.users[i]))
                if got.status == 200:
                    held[i] = got.body["refresh_token"]
                return got
            token = held[i]
            assert token is not None
            got = self.post("refresh", refresh_clients[i], {"grant_type": "refresh_token",
                            "refresh_token": token})  # fmt: skip
            if got.status == 200:
                self.spent(token)
                held[i] = got.body["refresh_token"]
            elif got.status == 400:
                held[i] = None  # refused: the client signs in again
            return got  # a 503: the same token again

        def guard(i: int) -> Outcome:
            time.sleep(PAUSE_S)
            with self.lock:
                self.turn["guard"] += 1
                host = self.procs[HOSTS[self.turn["guard"] % 2]]
            if i == 0:
                client, url, kw = bearer_client, host.url("OAUTH") + "/hello", {
                    "headers": {"Authorization": f"Bearer {self.valid}"}}  # fmt: skip
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

        self.load.run("grant", 2, grant)
        self.load.run("refresh", 2, refresh)
        self.load.run("guard", 2, guard)

    def spent(self, token: str) -> None:
        """``token`` was answered 200 (once more)."""
        with self.lock:
            self.answered[token] += 1

    def check_load(self, outcomes: list[Outcome], fault: float, switched: float, what: str) -> None:
        """SPEC 7 across the failover (fault at ``fault``, new primary at ``switched``): 503 with
        ``Retry-After`` within 1.5 s, no hang, 500 or transport error; bearer and Basic 200; both
        hosts recover."""
        needs_store = [o for o in outcomes if o.kind in STORE_KINDS]
        guards = [o for o in outcomes if o.kind in ("bearer", "basic")]
        print(
            f"{what} {switched - fault:.2f} s later. {len(needs_store)} token requests "
            f"{dict(Counter((o.kind, o.status) for o in needs_store))}, {len(guards)} guard "
            f"checks {dict(Counter((o.kind, o.status) for o in guards))}"
        )
        assert not self.load.crashed, self.load.crashed
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
            early = fault - o.ended
            assert early <= 0, (
                f"a {o.kind} answered 503 {early * 1000:.1f} ms before the fault: {o.body}"
            )
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
        assert {name: proc.proc.pid for name, proc in self.procs.items()} == self.pids
        assert all(proc.proc.poll() is None for proc in self.procs.values())

    def check_no_double_spend(self) -> None:
        """No refresh token 200 twice, in the load or again now (the old primary's lost spends)."""
        answered = self.answered
        double = {t: n for t, n in answered.items() if n > 1}
        # each replay's revocation waits ~0.25 s for the replica: eight clients replay at once
        spent = list(answered)
        replayers = [self.new_client(verify=self.ctx) for _ in range(REPLAYERS)]

        def replay(k: int) -> list[int]:
            return [
                replayers[k].post(self.token_urls[i % 2], data={"grant_type": "refresh_token",
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

    def stop(self) -> dict[str, int]:
        """Closes the clients and stops the hosts: their exit codes."""
        for client in self.clients:
            client.close()
        return {name: proc.stop() for name, proc in self.procs.items()}
