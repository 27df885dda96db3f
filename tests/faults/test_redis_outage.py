"""Redis stopped, then frozen, in the middle of a run under load (SPEC 7 "Store faults").

``fwrest serve --workers 2`` with ``StateStore=redis://…`` on a real ``redis-server`` that keeps
its data across a restart (AOF, fsync on every write, as a production Redis would). Three
threads ask the token route for tokens without a pause, two threads use an access token issued
before the faults. Mid-run Redis is stopped (SIGTERM) and restarted on the same port 3 s later, then
frozen (SIGSTOP) for 4 s and thawed (SIGCONT).

* while Redis is unreachable the token route answers 503 with ``Retry-After``, each answer
  within 1.5 s (the maximum is printed); it never answers anything but 200 or 503;
* nothing is issued without its state written: after the run, the refresh token of every
  200 answer is refreshed successfully;
* the token route serves again within 5 s of Redis returning (printed);
* bearer checks of the valid token are answered 200 throughout, outages included.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import trustme

from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import ServerProcess, free_config, local_port, serving
from tests.faults.support import (
    Outcome,
    Recorder,
    app_with,
    figures,
    oauth_params,
    store_config,
)
from tests.redis_support import RedisServer

USERS = [("ada", "Ada-Pw-7731"), ("bob", "Bob-Pw-2207"), ("eve", "Eve-Pw-3141")]
PARAMS = oauth_params(USERS, client_secret="Web-Secret-9q", long_lived=True)
FAIL_CLOSED_S = 1.5  # SPEC 7: 503 within 1.5 s
RECOVERY_S = 5.0  # issue 9: recovery within 5 s of Redis returning
STOPPED_S = 3.0  # a 503 comes at once: the connection is refused
FROZEN_S = 4.0  # each 503 takes the store deadline (1.0 s): room for whole requests inside
GRANT_THREADS = 3
BEARER_THREADS = 2


def test_redis_stopped_and_frozen_under_load(
    ca: trustme.CA, tmp_path: Path, redis_store: RedisServer
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    oauth = oauth_section(certs, onAuthparams="app.params", onAuthNoCheckUri="app.public")
    config = store_config(tmp_path, {"OAUTH": oauth}, redis_store.url, PARAMS, 8)
    proc = ServerProcess(config, workers=2).wait_ready()
    ctx = client_context(certs)
    clients: list[httpx.Client] = []
    try:
        base = proc.url("OAUTH")
        token_url = base + TOKEN

        def new_client() -> httpx.Client:
            client = httpx.Client(verify=ctx, timeout=15)
            clients.append(client)
            return client

        setup = new_client()
        valid = setup.post(
            token_url,
            data={"grant_type": "password", "username": "ada", "password": USERS[0][1]},
        ).json()["access_token"]
        grant_clients = [new_client() for _ in range(GRANT_THREADS)]
        bearer_clients = [new_client() for _ in range(BEARER_THREADS)]
        sequence = [0] * GRANT_THREADS

        def grant(i: int) -> Outcome:
            user, password = USERS[sequence[i] % len(USERS)]
            sequence[i] += 1
            data = {"grant_type": "password", "username": user, "password": password}
            started = time.monotonic()
            try:
                response = grant_clients[i].post(token_url, data=data)
            except httpx.HTTPError as exc:
                return Outcome("grant", started, time.monotonic(), None, repr(exc))
            ended = time.monotonic()
            body: Any = response.json()
            if response.status_code == 503:
                body = {**body, "retry-after": response.headers.get("retry-after")}
            return Outcome("grant", started, ended, response.status_code, body=body)

        def bearer(i: int) -> Outcome:
            path = "/hello" if i % 2 == 0 else "/users/1/orders/2"
            started = time.monotonic()
            try:
                response = bearer_clients[i].get(
                    base + path, headers={"Authorization": f"Bearer {valid}"}
                )
            except httpx.HTTPError as exc:
                return Outcome("bearer", started, time.monotonic(), None, repr(exc))
            time.sleep(0.005)
            return Outcome("bearer", started, time.monotonic(), response.status_code)

        load = Recorder()
        load.run("grant", GRANT_THREADS, grant)
        load.run("bearer", BEARER_THREADS, bearer)
        # (name, Redis gone, Redis about to come back, Redis answering again)
        windows: list[tuple[str, float, float, float]] = []
        try:
            time.sleep(1.5)
            redis_store.stop()  # SIGTERM: Redis answers until its graceful shutdown ends
            fault = time.monotonic()  # gone now: the process has exited
            time.sleep(STOPPED_S)
            relaunch = time.monotonic()
            redis_store.start()  # same port, same folder: the data comes back
            windows.append(("stopped", fault, relaunch, time.monotonic()))
            time.sleep(2.5)
            redis_store.freeze()
            fault = time.monotonic()
            time.sleep(FROZEN_S)
            thaw = time.monotonic()
            redis_store.thaw()
            windows.append(("frozen", fault, thaw, time.monotonic()))
            time.sleep(3.0)
        finally:
            outcomes = load.stop()

        grants = [o for o in outcomes if o.kind == "grant"]
        bearers = [o for o in outcomes if o.kind == "bearer"]
        print(
            f"{len(grants)} token requests {dict(Counter(o.status for o in grants))}, "
            f"{len(bearers)} bearer checks {dict(Counter(o.status for o in bearers))}"
        )
        assert {o.status for o in grants} <= {200, 503}, Counter(
            (o.status, o.error) for o in grants
        )
        unavailable = [o for o in grants if o.status == 503]
        for o in unavailable:
            assert o.body["code"] == 503 and int(o.body["retry-after"]) >= 1, o.body
        for name, fault, returning, back in windows:
            # inside: started after Redis was gone, answered before it could answer again
            inside = [o for o in grants if o.started >= fault + 0.05 and o.ended <= returning]
            straddling = [
                o for o in grants if o.ended > fault and o.started < back and o not in inside
            ]
            refused = [o for o in unavailable if o.ended > fault and o.started < back]
            recovered = [o for o in grants if o.started >= back and o.status == 200]
            first = min(o.ended for o in recovered) - back if recovered else None
            bearer_during = [o for o in bearers if o.ended > fault and o.started < back]
            print(
                f"Redis {name} for {back - fault:.2f} s: {len(inside)} token requests inside "
                f"the outage, statuses {dict(Counter(o.status for o in inside))}; "
                f"{len(straddling)} straddling it {dict(Counter(o.status for o in straddling))}; "
                f"503 answered in {figures(o.took for o in refused)}; token route served again "
                f"{first if first is None else round(first, 3)} s after Redis returned; bearer "
                f"checks meanwhile {dict(Counter(o.status for o in bearer_during))} in "
                f"{figures(o.took for o in bearer_during)}"
            )
            assert len(inside) >= 2, f"the load never met the {name} Redis"
            assert {o.status for o in inside} == {503}, Counter(o.status for o in inside)
            assert first is not None and first <= RECOVERY_S, (name, first)
            assert bearer_during, f"no bearer check ran while Redis was {name}"
        slowest = max(o.took for o in unavailable)
        print(f"slowest 503 of the token route: {slowest:.3f} s (SPEC: within {FAIL_CLOSED_S} s)")
        assert slowest <= FAIL_CLOSED_S
        assert {o.status for o in bearers} == {200}, Counter((o.status, o.error) for o in bearers)

        # nothing was issued without its state: every refresh token of a 200 can be refreshed
        issued = [o.body["refresh_token"] for o in grants if o.status == 200]
        refreshers = [new_client() for _ in range(6)]

        def refresh(job: tuple[int, str]) -> int:
            i, token = job
            data = {"grant_type": "refresh_token", "refresh_token": token}
            return refreshers[i % len(refreshers)].post(token_url, data=data).status_code

        started = time.monotonic()
        with ThreadPoolExecutor(len(refreshers)) as pool:
            results = Counter(pool.map(refresh, enumerate(issued)))
        print(
            f"refreshed the {len(issued)} refresh tokens issued during the run after recovery "
            f"in {time.monotonic() - started:.1f} s: {dict(results)}"
        )
        assert results == Counter({200: len(issued)})
        assert proc.proc.poll() is None  # never restarted
    finally:
        for client in clients:
            client.close()
        code = proc.stop()
    assert code == 0
    assert "state store unavailable" in proc.log()


def test_a_settings_change_on_a_basic_port_fails_closed_within_the_bound(
    tmp_path: Path, redis_store: RedisServer
) -> None:
    """SPEC 7: a settings change answers 503 with Retry-After within 1.5 s of a store that
    hangs, counted from the request's start: on a Basic port the attempt's count in the store
    waits first (a header the worker has not seen yet), and the change gets what is left
    (it took both waits in full: about 2 s)."""
    users = {f"op{i}": f"Op-Pw-{i}4821" for i in range(3)}
    basic = local_port(FwData={"Authorization": {"scheme": "basic", "OnAuth": "app.basic_check"}})
    config = free_config(
        tmp_path,
        app=app_with(None, users),
        servers={"BASIC": basic},
        extra={"HTTPSERVER": {"StateStore": redis_store.url}},
    )
    with serving(config) as proc:
        url = proc.url("BASIC") + "/fw/rest/config"
        assert httpx.get(url, auth=("op0", users["op0"]), timeout=15).status_code == 200
        redis_store.freeze()
        try:
            took = []
            for user in ("op1", "op2"):  # each header unseen by the worker
                began = time.monotonic()
                answer = httpx.post(url, json={"rest_trace_time": 1}, auth=(user, users[user]),
                                    timeout=15)  # fmt: skip
                took.append(time.monotonic() - began)
                assert answer.status_code == 503, answer.text
                assert answer.headers["retry-after"] == "1"
        finally:
            redis_store.thaw()
    print(f"settings change on a Basic port, store frozen: 503 after {figures(took)}")
    assert max(took) <= FAIL_CLOSED_S


PAUSE_MS = 20_000  # longer than the test's attempts: thawed by CLIENT UNPAUSE at the end
BOARD_S = 0.5  # an attempt counted on the host's board: no store wait (a store wait is 1 s+)


def test_wrong_basic_passwords_do_not_wait_on_a_store_the_worker_knows_is_away(
    tmp_path: Path, redis_store: RedisServer
) -> None:
    """SPEC 7: Basic ports do not depend on the store. Redis hung for writes (``CLIENT PAUSE
    WRITE``): the first attempt of a worker waits for the store once (the worker learns it is
    away), then the host's lock board counts, and each wrong password after it is a 403 without
    any store wait (each waited the whole deadline again, about 2 s); so is a right one."""
    users = {"ann": "Ann-Pw-5521", "cy": "Cy-Pw-8812"}
    auth = {"scheme": "basic", "OnAuth": "app.basic_check", "maxFailures": 10}
    config = free_config(
        tmp_path,
        app=app_with(None, users),
        servers={"BASIC": local_port(FwData={"Authorization": auth})},
        extra={"HTTPSERVER": {"StateStore": redis_store.url}},
    )
    redis = redis_store.client()
    with serving(config, workers=1) as proc, httpx.Client(timeout=15) as http:
        url = proc.url("BASIC") + "/hello"
        assert http.get(url, auth=("ann", users["ann"])).status_code == 200
        redis.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
        try:
            began = time.monotonic()
            assert http.get(url, auth=("ann", "wrong-0")).status_code == 403
            first = time.monotonic() - began
            took = []
            for i in range(1, 5):
                began = time.monotonic()
                assert http.get(url, auth=("ann", f"wrong-{i}")).status_code == 403
                took.append(time.monotonic() - began)
            began = time.monotonic()
            assert http.get(url, auth=("bob", "Bob-Pw-1")).status_code == 403  # another user
            took.append(time.monotonic() - began)
            began = time.monotonic()  # a right password, its header unseen: counted too
            assert http.get(url, auth=("cy", users["cy"])).status_code == 200
            took.append(time.monotonic() - began)
        finally:
            redis.execute_command("CLIENT", "UNPAUSE")
            redis.close()
        log_text = proc.log()
    print(f"Basic port, store paused: first wrong password {first:.2f} s, then {figures(took)}")
    assert max(took) <= BOARD_S, took
    assert "Traceback" not in log_text, log_text
