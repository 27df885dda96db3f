"""Brute force (SPEC 4.2 "Brute force", 7; issue 9) across workers, on both kinds of port.

``--workers 2``, the sqlite store, ``maxFailures`` 10 on an oAuth2 port (the token route) and
on a Basic port. The test connects from several loopback addresses (127.0.0.x), so that the
per-user lock can be told apart from the per-address one.

* After 10 failures of one user, spread over both workers and two client addresses (5 each,
  so that neither address reaches 10), every further attempt of that user is answered 429 by
  both workers and from any address, while another user is still served.
* A correct password during the lock gets the same 429 answer (status, body, every header but
  ``Date``) as a wrong one: the lock does not tell whether it was right.
* 10 failures from one address (10 different user names) lock that address on both workers,
  and not another address.

The token route reads the shared counts on every attempt. A Basic port never waits on the
store before ``OnAuth``: the worker that counts the 10th failure writes the lock into memory
shared by the workers of the host (``LockBoard``) before it answers, so the other worker
refuses the very next attempt, with the right password too, and no 11th attempt reaches
``OnAuth``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import ServerProcess, free_config
from tests.faults.support import Pinned, app_with, pinned_per_worker

MAX_FAILURES = 10
VICTIM = ("victim", "Victim-Pw-1")
OTHER = ("other", "Other-Pw-2")
PROBER = ("prober", "Prober-Pw-3")  # asks /pid on the Basic port (its requests all succeed)
BASIC_VICTIM = ("bvictim", "BVictim-Pw-4")
PARAMS = {
    "client_id": "web",
    "users": [{"username": u, "password": p} for u, p in (VICTIM, OTHER)],
}
BASIC_USERS = dict([PROBER, BASIC_VICTIM, ("bother", "BOther-Pw-5")])


class Service:
    def __init__(self, proc: ServerProcess, certs: dict[str, Path]) -> None:
        self.proc = proc
        self.ctx = client_context(certs)
        self.oauth = proc.url("OAUTH")
        self.basic = proc.url("BASIC")


@pytest.fixture
def service(ca: trustme.CA, tmp_path: Path) -> Iterator[Service]:
    certs = issue_certs(ca, tmp_path / "certs")
    oauth = oauth_section(
        certs, onAuthparams="app.params", onAuthNoCheckUri="app.public", maxFailures=MAX_FAILURES
    )
    basic = {
        "HostName": "127.0.0.1",
        "Port": 0,
        "Locations": "ROOT",
        "FwData": {
            "Authorization": {
                "scheme": "basic",
                "OnAuth": "app.basic_check",
                "maxFailures": MAX_FAILURES,
            }
        },
    }
    config = free_config(
        tmp_path,
        app=app_with(PARAMS, BASIC_USERS),
        servers={"OAUTH": oauth, "BASIC": basic},
        extra={"HTTPSERVER": {"StateStore": "sqlite"}},
    )
    proc = ServerProcess(config, workers=2).wait_ready()
    try:
        yield Service(proc, certs)
    finally:
        assert proc.stop() == 0


def answer(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Everything a client sees of an answer except its ``Date``."""
    headers = [(k.lower(), v) for k, v in response.headers.multi_items() if k.lower() != "date"]
    return response.status_code, response.content, headers


def same_as_a_wrong_one(attempt: Callable[[str], httpx.Response], right: str) -> list[Any]:
    """(wrong, right, wrong) in a row; the right one's answer must equal one of the wrong ones
    (``Retry-After`` counts down in whole seconds, so it may tick between two answers)."""
    before, correct, after = attempt("Wrong-1"), attempt(right), attempt("Wrong-2")
    assert correct.status_code == 429, correct.text
    assert answer(correct) in (answer(before), answer(after)), (
        answer(before),
        answer(correct),
        answer(after),
    )
    assert int(correct.headers["retry-after"]) >= 1
    return [answer(correct)]


def grant(client: Pinned, user: str, password: str) -> httpx.Response:
    data = {"grant_type": "password", "username": user, "password": password}
    return client.http.post(client.base + TOKEN, data=data)


def test_token_route_locks_a_user_across_workers_and_does_not_leak_the_right_password(
    service: Service,
) -> None:
    a, b = pinned_per_worker(
        service.oauth, addresses=["127.0.0.11", "127.0.0.12"], verify=service.ctx
    )
    c = Pinned(service.oauth, address="127.0.0.13", verify=service.ctx)
    try:
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
    finally:
        for client in (a, b, c):
            client.close()
    assert service.proc.log().count("further attempts get 429") == 1


def test_token_route_locks_an_address_across_workers(service: Service) -> None:
    d1, d2 = pinned_per_worker(service.oauth, address="127.0.0.14", verify=service.ctx)
    e = Pinned(service.oauth, address="127.0.0.15", verify=service.ctx)
    try:
        for i in range(MAX_FAILURES):  # ten user names that do not exist, from one address
            assert grant(d1 if i % 2 else d2, f"nobody{i}", "guess").status_code == 400
        for client in (d1, d2):
            same_as_a_wrong_one(lambda pw, cl=client: grant(cl, OTHER[0], pw), OTHER[1])
        assert grant(e, *OTHER).status_code == 200
        print(
            f"token route: address 127.0.0.14 locked on workers {d1.pid} and {d2.pid}; "
            "127.0.0.15 still served"
        )
    finally:
        for client in (d1, d2, e):
            client.close()


def basic_get(client: Pinned, user: str, password: str) -> httpx.Response:
    return client.http.get(client.base + "/hello", auth=(user, password))


def test_basic_port_locks_a_user_across_workers_and_does_not_leak_the_right_password(
    service: Service,
) -> None:
    a, b = pinned_per_worker(service.basic, addresses=["127.0.0.21", "127.0.0.22"], auth=PROBER)
    c = Pinned(service.basic, address="127.0.0.23", auth=PROBER)
    try:
        assert basic_get(a, *BASIC_VICTIM).status_code == 200  # before: the password works
        statuses = [
            basic_get(a if i % 2 == 0 else b, BASIC_VICTIM[0], f"guess-{i}").status_code
            for i in range(MAX_FAILURES)
        ]
        assert statuses == [403] * MAX_FAILURES  # the 10th failure is still a plain refusal
        tenth = time.monotonic()
        # b's worker counted the 10th failure; a's did not, and its copy of the store's lock
        # list is refreshed only every 0.5 s: the very next attempt there, with the right
        # password, is refused all the same (the lock is in the memory the workers share)
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
    finally:
        for client in (a, b, c):
            client.close()
    assert service.proc.log().count("locked out for") == 1
