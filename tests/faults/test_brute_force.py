"""Brute force (SPEC 4.2, 7; issue 9) across ``--workers 2`` on sqlite, ``maxFailures`` 10 on an
oAuth2 and a Basic port, clients on several 127.0.0.x addresses to tell the per-user lock from the
per-address one; a right password during a lock gets the same 429 (every header but ``Date``). The
token route reads the shared counts each attempt; a Basic port never waits on the store before
``OnAuth``: the worker counting the 10th failure writes the lock to the host's shared ``LockBoard``
before answering, so no 11th attempt reaches ``OnAuth``. Exact under concurrency (SPEC 7.1): each
attempt is counted before its check (``OnAuth`` calls take 50 ms, the grants' argon2 milliseconds),
so simultaneous wrong attempts check at most ``maxFailures`` passwords."""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from argon2 import PasswordHasher

from fwrest.config.loader import load_config
from fwrest.store import open_store
from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import ServerProcess, free_config, local_port
from tests.e2e.support import hosts_serving
from tests.faults.support import (
    Pinned,
    all_closed,
    app_with,
    oauth_params,
    password_grant,
    pinned_per_worker,
    served_cleanly,
    simultaneous,
)
from tests.redis_support import RedisServer

MAX_FAILURES = 10
VICTIM = ("victim", "Victim-Pw-1")
OTHER = ("other", "Other-Pw-2")
PROBER = ("prober", "Prober-Pw-3")  # asks /pid on the Basic port (its requests all succeed)
BASIC_VICTIM = ("bvictim", "BVictim-Pw-4")
PARAMS = oauth_params([VICTIM, OTHER])
BASIC_USERS = dict([PROBER, BASIC_VICTIM, ("bother", "BOther-Pw-5")])


class Service:
    def __init__(self, proc: ServerProcess, certs: dict[str, Path]) -> None:
        self.proc = proc
        self.ctx = client_context(certs)
        self.oauth = proc.url("OAUTH")
        self.basic = proc.url("BASIC")


@contextlib.contextmanager
def running(
    ca: trustme.CA,
    tmp_path: Path,
    params: dict[str, Any],
    users: dict[str, str],
    *,
    oauth_max: int = MAX_FAILURES,
    basic_max: int = MAX_FAILURES,
    workers: int = 2,
    on_auth: str = "app.basic_check",
    app_extra: str = "",
) -> Iterator[Service]:
    """An oAuth2 and a Basic port, each its own ``maxFailures``, on sqlite; stopped cleanly."""
    certs = issue_certs(ca, tmp_path / "certs")
    oauth = oauth_section(
        certs, onAuthparams="app.params", onAuthNoCheckUri="app.public", maxFailures=oauth_max
    )
    auth = {"scheme": "basic", "OnAuth": on_auth, "maxFailures": basic_max}
    basic = local_port(FwData={"Authorization": auth})
    servers, sqlite = {"OAUTH": oauth, "BASIC": basic}, {"HTTPSERVER": {"StateStore": "sqlite"}}
    config = free_config(
        tmp_path, app=app_with(params, users) + app_extra, servers=servers, extra=sqlite
    )
    with served_cleanly(config, workers=workers) as proc:
        yield Service(proc, certs)


@pytest.fixture
def service(ca: trustme.CA, tmp_path: Path) -> Iterator[Service]:
    with running(ca, tmp_path, PARAMS, BASIC_USERS) as svc:
        yield svc


def answer(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    """All a client sees but ``Date`` and its own id (SPEC 13.4: new each request)."""
    headers = [
        (k.lower(), v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("date", "x-request-id")
    ]
    return response.status_code, response.content, headers


def same_as_a_wrong_one(attempt: Callable[[str], httpx.Response], right: str) -> list[Any]:
    """(wrong, right, wrong): right answers as a wrong one (``Retry-After`` may tick between)."""
    before, correct, after = attempt("Wrong-1"), attempt(right), attempt("Wrong-2")
    assert correct.status_code == 429, correct.text
    seen = (answer(before), answer(correct), answer(after))
    assert answer(correct) in (answer(before), answer(after)), seen
    assert int(correct.headers["retry-after"]) >= 1
    return [answer(correct)]


def grant(client: Pinned, user: str, password: str) -> httpx.Response:
    return client.http.post(client.base + TOKEN, data=password_grant(user, password))


def test_token_route_locks_a_user_across_workers_and_does_not_leak_the_right_password(
    service: Service,
) -> None:
    a, b = pinned_per_worker(
        service.oauth, addresses=["127.0.0.11", "127.0.0.12"], verify=service.ctx
    )
    c = Pinned(service.oauth, address="127.0.0.13", verify=service.ctx)
    with all_closed((a, b, c)):
        statuses = []
        for i in range(MAX_FAILURES):  # 5 on each worker, from two addresses
            response = grant(a if i % 2 == 0 else b, VICTIM[0], f"guess-{i}")
            statuses.append(response.status_code)
            assert response.json()["error"] == "invalid_grant"
        assert statuses == [400] * MAX_FAILURES
        for client in (a, b, c):  # both workers, and an address that never failed
            same_as_a_wrong_one(lambda pw, cl=client: grant(cl, VICTIM[0], pw), VICTIM[1])
        locked = grant(c, VICTIM[0], VICTIM[1])
        print(
            f"token route: after {MAX_FAILURES} failures (workers {a.pid}, {b.pid}; 5 from each "
            f"of two addresses) the right password gets {locked.status_code} "
            f"{locked.json()} Retry-After {locked.headers['retry-after']} s on every worker "
            "and address, the same answer as a wrong one"
        )
        assert grant(c, *OTHER).status_code == 200  # the user is locked, not the address
        assert grant(a, *OTHER).status_code == 200
        assert a.still_pinned() and b.still_pinned()
    assert service.proc.log().count("further attempts get 429") == 1


def test_token_route_locks_an_address_across_workers(service: Service) -> None:
    d1, d2 = pinned_per_worker(service.oauth, address="127.0.0.14", verify=service.ctx)
    e = Pinned(service.oauth, address="127.0.0.15", verify=service.ctx)
    with all_closed((d1, d2, e)):
        for i in range(MAX_FAILURES):  # ten user names that do not exist, from one address
            assert grant(d1 if i % 2 else d2, f"nobody{i}", "guess").status_code == 400
        for client in (d1, d2):
            same_as_a_wrong_one(lambda pw, cl=client: grant(cl, OTHER[0], pw), OTHER[1])
        assert grant(e, *OTHER).status_code == 200
        print(
            f"token route: address 127.0.0.14 locked on workers {d1.pid} and {d2.pid}; "
            "127.0.0.15 still served"
        )


def basic_get(client: Pinned, user: str, password: str) -> httpx.Response:
    return client.http.get(client.base + "/hello", auth=(user, password))


def test_basic_port_locks_a_user_across_workers_and_does_not_leak_the_right_password(
    service: Service,
) -> None:
    a, b = pinned_per_worker(service.basic, addresses=["127.0.0.21", "127.0.0.22"], auth=PROBER)
    c = Pinned(service.basic, address="127.0.0.23", auth=PROBER)
    with all_closed((a, b, c)):
        assert basic_get(a, *BASIC_VICTIM).status_code == 200  # before: the password works
        statuses = [
            basic_get(a if i % 2 == 0 else b, BASIC_VICTIM[0], f"guess-{i}").status_code
            for i in range(MAX_FAILURES)
        ]
        assert statuses == [403] * MAX_FAILURES  # the 10th failure is still a plain refusal
        tenth = time.monotonic()
        # b's worker counted the 10th failure; a's store copy refreshes only every 0.5 s, yet the
        # next attempt there, right password, is refused (the lock is in shared memory)
        right = basic_get(a, *BASIC_VICTIM)
        after = time.monotonic() - tenth
        print(
            f"Basic port: the right password on the other worker {after * 1000:.1f} ms after "
            f"the 10th failure: {right.status_code} (200 would be an 11th attempt let in)"
        )
        assert right.status_code == 429, right.text
        assert basic_get(b, BASIC_VICTIM[0], "guess-10").status_code == 429
        for client in (a, b, c):
            same_as_a_wrong_one(
                lambda pw, cl=client: basic_get(cl, BASIC_VICTIM[0], pw), BASIC_VICTIM[1]
            )
        locked = basic_get(c, *BASIC_VICTIM)
        print(
            f"Basic port: after {MAX_FAILURES} failures (workers {a.pid}, {b.pid}) the right "
            f"password gets {locked.status_code} {locked.json()} Retry-After "
            f"{locked.headers['retry-after']} s everywhere, the same answer as a wrong one"
        )
        assert basic_get(c, "bother", "BOther-Pw-5").status_code == 200
        assert a.still_pinned() and b.still_pinned()
    assert service.proc.log().count("locked out for") == 1


# -- two ports of one service, each with its own maxFailures ---------------------------------

BASIC_MAX, OAUTH_MAX = 5, 3  # the oAuth2 port is the stricter: shared counts would show at once
SHARED_USERS = {"ada": "Ada-Pw-1", "bob": "Bob-Pw-2", "carol": "Carol-Pw-3", "dave": "Dave-Pw-4"}


@pytest.fixture
def two_ports(ca: trustme.CA, tmp_path: Path) -> Iterator[Service]:
    params = oauth_params(SHARED_USERS.items())
    with running(
        ca, tmp_path, params, SHARED_USERS, oauth_max=OAUTH_MAX, basic_max=BASIC_MAX, workers=1
    ) as svc:
        yield svc


def from_address(address: str, verify: Any = True) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address, verify=verify)
    return httpx.Client(transport=transport, timeout=15)


Status = Callable[[str, str], int]


@contextlib.contextmanager
def asking(svc: Service, basic_address: str, oauth_address: str) -> Iterator[tuple[Status, Status]]:
    """(basic, grant) statuses of a user and password, each port from its own address."""
    with from_address(basic_address) as basic, from_address(oauth_address, svc.ctx) as oauth:
        yield (
            lambda user, pw: basic.get(svc.basic + "/hello", auth=(user, pw)).status_code,
            lambda user, pw: (
                oauth.post(svc.oauth + TOKEN, data=password_grant(user, pw)).status_code
            ),
        )


def locks_logged(svc: Service, *needles: str) -> list[int]:
    """For each needle, the warnings of the log that name it."""
    lines = [line for line in svc.proc.log().splitlines() if "WARNING" in line]
    return [sum(needle in line for line in lines) for needle in needles]


def test_failures_on_one_port_do_not_lock_the_user_out_on_the_other(two_ports: Service) -> None:
    svc = two_ports
    with asking(svc, "127.0.0.31", "127.0.0.31") as (basic_get, grant):
        # Basic's own 5 failures lock it; the stricter oAuth2 port (3) is untouched
        assert [basic_get("ada", f"guess-{i}") for i in range(BASIC_MAX)] == [403] * BASIC_MAX
        assert basic_get("ada", SHARED_USERS["ada"]) == 429
        assert grant("ada", SHARED_USERS["ada"]) == 200
        assert grant("bob", SHARED_USERS["bob"]) == 200
        # oAuth2's own 3 lock user and address there; Basic still counts bob from zero
        assert [grant("bob", f"guess-{i}") for i in range(OAUTH_MAX)] == [400] * OAUTH_MAX
        assert grant("bob", SHARED_USERS["bob"]) == 429
    with asking(svc, "127.0.0.32", "127.0.0.32") as (basic_get, _):
        passwords = [*(f"guess-{i}" for i in range(BASIC_MAX - 1)), SHARED_USERS["bob"]]
        statuses = [basic_get("bob", pw) for pw in passwords]
    print(f"Basic port after bob's {OAUTH_MAX} oAuth2 failures: {statuses}")
    assert statuses == [403] * (BASIC_MAX - 1) + [200]
    # one warning for each lock; none for bob on the Basic port (4 failures: no lock)
    needles = ("user:ada", "ip:127.0.0.31", "'bob'", "user:bob")
    assert locks_logged(svc, *needles) == [1, 1, 1, 0], svc.proc.log()


def test_a_lock_out_reached_by_concurrent_failures_is_logged_once(two_ports: Service) -> None:
    """Concurrent failures pass the check before the lock and overshoot; logged exactly once."""
    svc = two_ports
    attempts = 4 * BASIC_MAX
    with asking(svc, "127.0.0.33", "127.0.0.34") as (basic_get, grant):
        with ThreadPoolExecutor(attempts) as pool:
            basic_statuses = list(pool.map(lambda i: basic_get("carol", f"g-{i}"), range(attempts)))
            oauth_statuses = list(pool.map(lambda i: grant("dave", f"g-{i}"), range(attempts)))
        print(
            f"concurrent failures: Basic {sorted(basic_statuses)}, oAuth2 {sorted(oauth_statuses)}"
        )
        assert set(basic_statuses) <= {403, 429} and basic_statuses.count(403) >= BASIC_MAX
        assert set(oauth_statuses) <= {400, 429} and oauth_statuses.count(400) >= OAUTH_MAX
        assert basic_get("carol", SHARED_USERS["carol"]) == 429
        assert grant("dave", SHARED_USERS["dave"]) == 429
    needles = ("user:carol", "ip:127.0.0.33", "'dave'")
    assert locks_logged(svc, *needles) == [1, 1, 1], svc.proc.log()


# -- exact under concurrency (SPEC 7.1) -------------------------------------------------------

SIMULTANEOUS = 200
ADDRESSES = [f"127.0.0.{100 + i}" for i in range(20)]  # 10 attempts from each: only the user
HASHED = ("hashed", "Hashed-Pw-7")  # counts reach maxFailures
HASHER = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1)
HASHED_PARAMS = oauth_params([(HASHED[0], HASHER.hash(HASHED[1])), OTHER])
COUNTED_APP = """


from pathlib import Path as _Path

_CALLS = _Path(__file__).resolve().parent / "onauth_calls.log"


async def counted_check(user, password):
    \"\"\"OnAuth that records every call (one line, appended: the workers share the file)
    and takes as long as a password hash check.\"\"\"
    with _CALLS.open("a") as fh:
        fh.write(f"{user} {os.getpid()}\\n")
    await asyncio.sleep(0.05)
    return user in _BASIC and _BASIC[user] == password
"""


@pytest.fixture
def counted(ca: trustme.CA, tmp_path: Path) -> Iterator[Service]:
    with running(
        ca, tmp_path, HASHED_PARAMS, BASIC_USERS, on_auth="app.counted_check", app_extra=COUNTED_APP
    ) as svc:
        yield svc


def on_auth_calls(svc: Service, user: str) -> list[str]:
    return on_auth_calls_in(svc.proc.config.parent, user)


def on_auth_calls_in(folder: Path, user: str) -> list[str]:
    path = folder / "onauth_calls.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line for line in lines if line.split(" ")[0] == user]


def test_simultaneous_wrong_basic_attempts_check_at_most_max_failures(counted: Service) -> None:
    url = counted.basic + "/hello"
    answers, took = simultaneous(
        SIMULTANEOUS,
        lambda client: client.get(url),  # 401: connected, nothing counted
        lambda client, i: client.get(url, auth=(BASIC_VICTIM[0], f"guess-{i}")),
        addresses=ADDRESSES,
    )
    statuses = Counter(a.status_code for a in answers)
    calls = on_auth_calls(counted, BASIC_VICTIM[0])
    workers = Counter(line.split(" ")[1] for line in calls)
    print(
        f"Basic port: {SIMULTANEOUS} simultaneous wrong attempts ({len(ADDRESSES)} addresses, "
        f"2 workers): {len(calls)} OnAuth calls (maxFailures {MAX_FAILURES}; per worker "
        f"{dict(workers)}); answers {dict(statuses)} in {took:.2f} s"
    )
    assert len(calls) <= MAX_FAILURES
    assert statuses[403] == len(calls) and statuses[429] == SIMULTANEOUS - len(calls)
    with httpx.Client(timeout=15) as client:  # the right password: 429 until the window ends
        right = client.get(url, auth=BASIC_VICTIM)
    assert right.status_code == 429, right.text
    assert len(on_auth_calls(counted, BASIC_VICTIM[0])) == len(calls)
    assert counted.proc.log().count("locked out for") == 1


def test_simultaneous_wrong_password_grants_check_at_most_max_failures(counted: Service) -> None:
    url = counted.oauth + TOKEN
    answers, took = simultaneous(
        SIMULTANEOUS,
        lambda client: client.get(counted.oauth + "/pid"),  # public: the TLS handshake
        lambda client, i: client.post(url, data=password_grant(HASHED[0], f"g-{i}")),
        verify=counted.ctx,
        addresses=ADDRESSES,
    )
    statuses = Counter(a.status_code for a in answers)
    log_text = counted.proc.log()
    checked = log_text.count(f"password grant refused for user {HASHED[0]!r}")
    print(
        f"token route: {SIMULTANEOUS} simultaneous wrong password grants ({len(ADDRESSES)} "
        f"addresses, 2 workers, argon2): {statuses[400]} passwords checked (maxFailures "
        f"{MAX_FAILURES}); answers {dict(statuses)} in {took:.2f} s"
    )
    assert statuses[400] <= MAX_FAILURES and checked == statuses[400]
    assert statuses[429] == SIMULTANEOUS - statuses[400]
    assert all(a.json()["error"] == "invalid_grant" for a in answers if a.status_code == 400)
    with httpx.Client(verify=counted.ctx, timeout=15) as client:
        assert client.post(url, data=password_grant(*HASHED)).status_code == 429
    assert log_text.count("further attempts get 429") == 1


def test_a_right_password_is_not_locked_out_by_its_own_count(counted: Service) -> None:
    """``maxFailures - 1`` failures, then the right password (counted, then taken back) passes, as
    do 30 Basic and 5 grant requests at once with it (no 429); then the last failure locks."""
    basic_url, token_url = counted.basic + "/hello", counted.oauth + TOKEN
    form = {"grant_type": "password", "username": HASHED[0]}
    with httpx.Client(timeout=15) as basic, httpx.Client(verify=counted.ctx, timeout=15) as tls:
        for i in range(MAX_FAILURES - 1):
            assert basic.get(basic_url, auth=(BASIC_VICTIM[0], f"guess-{i}")).status_code == 403
            assert tls.post(token_url, data={**form, "password": f"g-{i}"}).status_code == 400
        assert basic.get(basic_url, auth=BASIC_VICTIM).status_code == 200
        assert tls.post(token_url, data={**form, "password": HASHED[1]}).status_code == 200
    answers, took = simultaneous(
        30,
        lambda client: client.get(basic_url),
        lambda client, _i: client.get(basic_url, auth=BASIC_VICTIM),
        addresses=ADDRESSES,
    )
    basic_statuses = Counter(a.status_code for a in answers)
    grants, grant_took = simultaneous(
        5,
        lambda client: client.get(counted.oauth + "/pid"),
        lambda client, _i: client.post(token_url, data={**form, "password": HASHED[1]}),
        verify=counted.ctx,
        addresses=ADDRESSES,
    )
    grant_statuses = Counter(a.status_code for a in grants)
    print(
        f"after {MAX_FAILURES - 1} failures the right password: 200; then 30 simultaneous "
        f"Basic requests with it {dict(basic_statuses)} in {took:.2f} s, 5 simultaneous "
        f"password grants {dict(grant_statuses)} in {grant_took:.2f} s"
    )
    assert basic_statuses == {200: 30} and grant_statuses == {200: 5}
    with httpx.Client(timeout=15) as basic, httpx.Client(verify=counted.ctx, timeout=15) as tls:
        assert basic.get(basic_url, auth=(BASIC_VICTIM[0], "last")).status_code == 403
        assert basic.get(basic_url, auth=BASIC_VICTIM).status_code == 429
        assert tls.post(token_url, data={**form, "password": "last"}).status_code == 400
        assert tls.post(token_url, data={**form, "password": HASHED[1]}).status_code == 429


# -- two hosts on one redis-server: one lock-out, announced once (SPEC 4.2, 13.5) --------------

HOSTS_AT_ONCE = 80  # wrong Basic attempts at once, host A and host B in turn
GRANTS_AT_ONCE = 60  # wrong password grants at once, the same
ROUNDS = 3


def host_config(folder: Path, certs: dict[str, Path], url: str) -> Path:
    folder.mkdir()
    oauth = oauth_section(
        certs, onAuthparams="app.params", onAuthNoCheckUri="app.public", maxFailures=MAX_FAILURES
    )
    auth = {"scheme": "basic", "OnAuth": "app.counted_check", "maxFailures": MAX_FAILURES}
    servers = {"OAUTH": oauth, "BASIC": local_port(FwData={"Authorization": auth})}
    app = app_with(HASHED_PARAMS, BASIC_USERS) + COUNTED_APP
    return free_config(folder, app=app, servers=servers, extra={"HTTPSERVER": {"StateStore": url}})


def lockout_events(config: Path) -> list[dict[str, Any]]:
    """The ``lockout`` events of the audit trail the hosts share (their Redis store)."""
    loaded = load_config(config)
    with contextlib.closing(open_store(loaded.state_store, loaded.data_path)) as store:
        rows = [json.loads(row) for row in store.audit_events(0.0, None, 1000)]
    return [e for e in rows if e["event"] == "lockout"]


def announced(procs: list[ServerProcess], needle: str) -> int:
    """The lock-out warnings of every host's log that name ``needle``."""
    lines = [line for p in procs for line in p.log().splitlines() if "locked out for" in line]
    return sum(needle in line for line in lines)


def test_a_lock_out_reached_on_two_hosts_at_once_is_announced_once(
    ca: trustme.CA, tmp_path: Path, redis_store: RedisServer
) -> None:
    """80 wrong Basic attempts at once for one user from one address, host A and host B in turn
    (two workers each, one Redis): 10 ``OnAuth`` calls, 10 403 and 70 429, and the lock-outs of
    the user and of the address each announced once between the hosts (one warning, one
    ``lockout`` event); the same for 60 wrong password grants at once on the token route. Three
    rounds of each (a new user and address each): the announcements raced in most rounds."""
    certs = issue_certs(ca, tmp_path / "certs")
    configs = [host_config(tmp_path / n, certs, redis_store.url) for n in ("a", "b")]
    with hosts_serving([(config, 2) for config in configs]) as procs:
        basic_urls = [p.url("BASIC") + "/hello" for p in procs]
        token_urls = [p.url("OAUTH") + TOKEN for p in procs]

        def connect(client: httpx.Client) -> None:
            for url in basic_urls:  # 401: connected to both hosts, nothing counted
                assert client.get(url).status_code == 401

        def connect_tls(client: httpx.Client) -> None:
            for proc in procs:  # public: the TLS handshakes
                assert client.get(proc.url("OAUTH") + "/pid").status_code == 200

        seen = []
        for r in range(ROUNDS):
            user, address = f"basic-{r}", f"127.0.0.{65 + r}"
            answers, _ = simultaneous(
                HOSTS_AT_ONCE,
                connect,
                lambda client, i, u=user: client.get(basic_urls[i % 2], auth=(u, f"g-{i}")),
                addresses=[address],
            )
            statuses = Counter(a.status_code for a in answers)
            assert statuses == {403: MAX_FAILURES, 429: HOSTS_AT_ONCE - MAX_FAILURES}, statuses
            calls = sum(len(on_auth_calls_in(c.parent, user)) for c in configs)
            assert calls == MAX_FAILURES
            seen.append(("BASIC", f"user:{user}", f"ip:{address}", user))
        for r in range(ROUNDS):
            user, address = f"grant-{r}", f"127.0.0.{75 + r}"
            answers, _ = simultaneous(
                GRANTS_AT_ONCE,
                connect_tls,
                lambda client, i, u=user: client.post(
                    token_urls[i % 2], data=password_grant(u, f"g-{i}")
                ),
                verify=client_context(certs),
                addresses=[address],
            )
            statuses = Counter(a.status_code for a in answers)
            assert statuses == {400: MAX_FAILURES, 429: GRANTS_AT_ONCE - MAX_FAILURES}, statuses
            seen.append(("OAUTH", f"user {user!r}", f"client {address}", user))
        time.sleep(1.0)  # the last lock-outs' store writes (behind their answers)
        events = lockout_events(configs[0])
        found = []
        for port, user_line, address_line, user in seen:
            locked = sorted(
                key
                for e in events
                if e["port"] == port and e["actor"] == user
                for key in e["details"]["locked"]
            )
            found.append((announced(procs, user_line), announced(procs, address_line), locked))
        print(f"lock-outs (user warnings, address warnings, events' locked): {found}")
        assert found == [(1, 1, ["address", "user"])] * len(seen), [p.log() for p in procs]
        for proc in procs:
            assert "Traceback" not in proc.log(), proc.log()
