"""A lock-out made while Redis is away (SPEC 4.2: failures are counted in the state store, "so
all workers and hosts share the count"; 13.6: ``fwrest lockouts`` lists and lifts them).

Two hosts, each ``fwrest serve --workers 2``, on one ``redis-server`` that keeps its data
across a restart (AOF), a Basic port and an oAuth2 port with ``maxFailures`` 5 each. Redis is
killed; six wrong Basic passwords for bob from 127.0.0.13 to host A get 403 five times, then
429 (counted on host A's lock board: Basic does not depend on the store), and wrong password
grants to host A's token route get 503 (it fails closed: nothing counted). The outage lasts
longer than any store call made for the lock-out (twice the background deadline): so long
that the host's first write of it gave up. Once Redis is back on the same port and folder:

* host A writes the lock-outs (bob, and the address 127.0.0.13) to the store:
  ``fwrest lockouts list`` shows them, with the failures that made them (counted on host A's
  board: none reached the store), and host B honours them (bob's right password from another
  address, dee's from 127.0.0.13: 429);
* ``fwrest lockouts clear bob`` lifts both, on both hosts;
* the token route's failures during the outage locked nothing: ada's grant works on both.

Then an outage that ends at the lock-out, as a review's did (``fwrest serve`` with its one
worker, host B; Redis killed, started again as the failure that locks is answered): the
earlier failures' writes gave up, the locking one's and the lock's reach Redis. The list shows
the failures that made the lock-out, not only those Redis took (it showed 6 of 10, or 1).
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import trustme

from fwrest.store.calls import BACKGROUND_DEADLINE_S
from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import ServerProcess, free_config, local_port, run_cli, wait_for
from tests.e2e.support import hosts_serving
from tests.faults.support import app_with, oauth_params
from tests.redis_support import RedisServer

MAX_FAILURES = 5
USERS = {"bob": "Bob-Pw-2207", "dee": "Dee-Pw-4620"}
ADA = ("ada", "Ada-Pw-7731")
GUESSER = "127.0.0.13"  # the failing client's address (the others use 127.0.0.1)
LATE = "127.0.0.14"  # the guesser of the outage that ends at the lock-out
# longer than any store call of the outage's attempts (a call ends by twice its deadline)
OUTAGE_S = 2 * BACKGROUND_DEADLINE_S + 1.0
WRITTEN_S = 10.0  # hang guard: the lock is written at the host's next refresh (0.5 s)
SPEC_BOUND_S = 1.0  # SPEC 5 and 12.3: every worker and host within 1 s
KEYS = {("ip", GUESSER), ("user", "bob")}
LATE_KEYS = {("ip", LATE), ("user", "cy")}
TRIES = 6  # fresh connections per check: the kernel spreads them over a host's workers


def host_config(folder: Path, certs: dict[str, Path], url: str) -> Path:
    folder.mkdir()
    basic = {"scheme": "basic", "OnAuth": "app.basic_check", "maxFailures": MAX_FAILURES}
    servers = {
        "OAUTH": oauth_section(certs, onAuthparams="app.params", maxFailures=MAX_FAILURES),
        "BASIC": local_port(FwData={"Authorization": basic}),
    }
    app = app_with(oauth_params([ADA]), USERS)
    return free_config(folder, app=app, servers=servers, extra={"HTTPSERVER": {"StateStore": url}})


def basic(proc: ServerProcess, user: str, password: str, address: str = "127.0.0.1") -> int:
    """The status of one Basic request to ``proc`` from ``address``, on a connection of its
    own."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, timeout=15) as http:
        return http.get(proc.url("BASIC") + "/hello", auth=(user, password)).status_code


def statuses(procs: list[ServerProcess], user: str, address: str = "127.0.0.1") -> set[int]:
    """The statuses of ``user``'s right password, :data:`TRIES` times on each host."""
    return {basic(p, user, USERS[user], address) for p in procs for _ in range(TRIES)}


def grant(http: httpx.Client, proc: ServerProcess, password: str) -> httpx.Response:
    form = {"grant_type": "password", "username": ADA[0], "password": password}
    return http.post(proc.url("OAUTH") + TOKEN, data=form)


def lockouts(config: Path, *args: str) -> str:
    done = run_cli("lockouts", str(config), *args, cwd=config.parent)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def test_a_lock_out_made_while_redis_is_away_reaches_it_when_it_returns(
    ca: trustme.CA, tmp_path: Path, redis_store: RedisServer
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    configs = [host_config(tmp_path / n, certs, redis_store.url) for n in ("a", "b")]
    http = httpx.Client(verify=client_context(certs), timeout=15)
    # host B as `fwrest serve` starts it: one worker
    with hosts_serving([(configs[0], 2), (configs[1], 1)]) as procs:
        a = procs[0]
        try:
            assert statuses(procs, "bob") == {200}
            redis_store.kill()
            wrong = [basic(a, "bob", f"guess-{i}", GUESSER) for i in range(MAX_FAILURES + 1)]
            assert wrong == [403] * MAX_FAILURES + [429], wrong
            locked_at = time.monotonic()
            # the token route fails closed: nothing checked, nothing counted (enough to lock)
            for i in range(MAX_FAILURES):
                refused = grant(http, a, f"guess-{i}")
                assert refused.status_code == 503, (i, refused.status_code, refused.text)
            time.sleep(max(locked_at + OUTAGE_S - time.monotonic(), 0))
            redis_store.start()  # the same port and folder

            def listed() -> bool:
                shown = lockouts(configs[0], "list")
                return "127.0.0.13" in shown and " bob " in shown

            wait_for(listed, WRITTEN_S, "host A's lock-outs listed by fwrest lockouts", 0.5)
            # the failures counted on host A's board, not a store's 0 (none reached it)
            shown = lockouts(configs[1], "list")
            rows = {tuple(row.split()[:4]) for row in shown.splitlines()[1:]}
            assert rows == {("BASIC", kind, who, str(MAX_FAILURES)) for kind, who in KEYS}, shown
            time.sleep(SPEC_BOUND_S)
            # every host honours them: the user from another address, the address for another
            # user
            assert statuses(procs, "bob") == {429}
            assert statuses(procs, "dee", GUESSER) == {429}
            assert lockouts(configs[1], "clear", "bob").splitlines() == [
                f"fwrest lockouts: lifted [BASIC] ip {GUESSER}",
                "fwrest lockouts: lifted [BASIC] user bob",
            ]
            time.sleep(SPEC_BOUND_S)
            assert statuses(procs, "bob") == {200}
            assert statuses(procs, "dee", GUESSER) == {200}
            assert statuses(procs, "bob", GUESSER) == {200}
            for proc in procs:  # the outage's failed grants counted nothing
                granted = grant(http, proc, ADA[1])
                assert granted.status_code == 200, granted.text
            # an outage that ends at the lock-out: the earlier failures' writes give up
            # (a refused connection is tried 3 times, 50 ms apart), the last one's do not
            redis_store.kill()
            late = []
            for i in range(MAX_FAILURES):
                time.sleep(0.3 if i else 0)
                late.append(basic(procs[1], "cy", f"guess-{i}", LATE))
            redis_store.start()
            late.append(basic(procs[1], "cy", "guess", LATE))
            assert late == [403] * MAX_FAILURES + [429], late
            wanted = {("BASIC", kind, who, str(MAX_FAILURES)) for kind, who in LATE_KEYS}

            def counted() -> set[tuple[str, ...]]:
                rows = lockouts(configs[0], "list").splitlines()[1:]
                return {tuple(row.split()[:4]) for row in rows if " cy " in row or LATE in row}

            time.sleep(1.0)  # the writes behind the answers and the lock's have ended
            wait_for(lambda: len(counted()) == 2, WRITTEN_S, "the late lock-outs listed", 0.5)
            assert counted() == wanted  # the failures that made them (Redis took 1 of 5)
            time.sleep(SPEC_BOUND_S)
            assert counted() == wanted  # and stay so
            for proc in procs:
                assert "Traceback" not in proc.log(), proc.log()
        finally:
            http.close()


def test_an_attempt_made_while_redis_is_frozen_is_counted_once(
    ca: trustme.CA, tmp_path: Path, frozen_store: RedisServer
) -> None:
    """SPEC 4.2, 7.1: a Basic attempt and a password grant made while Redis is stopped
    (SIGSTOP) and thawed as they are answered. The Basic attempt is counted on the host's
    board, and the INCR Redis runs as it thaws must not count it again (a review saw a user
    locked out after maxFailures-1 failures); the grant answered 503 is not counted at all."""
    certs = issue_certs(ca, tmp_path / "certs")
    config = host_config(tmp_path / "a", certs, frozen_store.url)
    http = httpx.Client(verify=client_context(certs), timeout=15)
    proc = ServerProcess(config).wait_ready()
    try:
        assert basic(proc, "dee", "wrong-1") == 403
        assert grant(http, proc, "wrong-1").status_code == 400
        frozen_store.freeze()
        try:
            assert grant(http, proc, "wrong-2").status_code == 503
        finally:
            frozen_store.thaw()
        time.sleep(1.0)  # the host asks Redis again
        frozen_store.freeze()
        try:
            assert basic(proc, "dee", "wrong-2") == 403  # counted on the host's board
        finally:
            frozen_store.thaw()  # as the failure's own write reaches it
        time.sleep(1.0)  # Redis ran what it held
        # two failures each: three more are checked before the lock-out (maxFailures 5)
        for n in (3, 4, 5):
            assert basic(proc, "dee", f"wrong-{n}") == 403, n
        assert basic(proc, "dee", USERS["dee"]) == 429
        for n in (2, 3, 4, 5):
            assert grant(http, proc, f"wrong-{n}").status_code == 400, n
        assert grant(http, proc, ADA[1]).status_code == 429
    finally:
        http.close()
        proc.stop()
