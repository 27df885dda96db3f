"""State shared by the workers and hosts of one service with the default configuration (SPEC 8: no
extra keys to work across hosts sharing a store). Two set-ups: one host of two workers on sqlite;
two hosts of two workers (own configs, sections ``OAUTH`` and ``BASIC``) on one ``redis-server``,
with no ``issuer``, no ``SigningKeyFile``, the default ``maxFailures``. Each check is asked of every
worker (:meth:`Host.per_worker`); A is the first host, B the last (one host: A is B). Other
cross-host cases: tests/auth/test_oauth2_store.py, test_jwks_clients.py,
tests/e2e/test_audit_hosts.py, test_scale_out.py. No redis-server: a failure, never a skip."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.auth.oauth2_support import PID_CLIENT, PID_USERS, WorkersHost, bearer
from tests.conftest import ServerProcess, run_cli
from tests.e2e.support import (
    close_all,
    each_worker,
    oauth_basic_host,
    one_or_two_hosts,
    refresh_refused,
    settings_of,
)

WORKERS = 2
SPEC_BOUND_S = 1.0  # SPEC 5 and 12.3: every worker and host within 1 s
MAX_FAILURES = 10  # the default
LIMIT = 6
STRINGSIZE = "rest_log_stringsize"  # the setting the tests change
USERS, WEB = PID_USERS, PID_CLIENT


class Host(WorkersHost):
    def __init__(self, proc: ServerProcess, ca_file: Path) -> None:
        super().__init__(proc, ca_file, WORKERS)
        self.limited = self.base.removesuffix("/rest") + "/limited"
        self.basic = proc.url("BASIC")

    def basic_workers(self) -> dict[int, httpx.Client]:
        return self.per_worker(
            lambda http: int(
                http.get(self.basic + "/hello", auth=("dee", USERS["dee"])).json()["pid"]
            )
        )

    def trail(self, token: str, query: str) -> list[dict[str, Any]]:
        with self.client() as http:
            answer = http.get(self.base + "/fw/rest/audit" + query, headers=bearer(token))
        assert answer.status_code == 200, answer.text
        events: list[dict[str, Any]] = answer.json()
        return events


def bound_after(since: float) -> None:
    """SPEC's bound (1 s) waited out from ``since``."""
    time.sleep(max(since + SPEC_BOUND_S - time.monotonic(), 0))


@pytest.fixture(scope="module", params=["one-host-two-workers", "two-hosts-one-redis"])
def hosts(
    ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[list[Host]]:
    """``one-host-two-workers`` (sqlite) or ``two-hosts-one-redis``: each host its own folder and
    config, no keys beyond one host's but the shared store (:func:`oauth_basic_host`)."""
    root = tmp_path_factory.mktemp("hosts-state")
    two = request.param == "two-hosts-one-redis"
    config_of = functools.partial(oauth_basic_host, limit=LIMIT)
    with one_or_two_hosts(ca, root, two, config_of, WORKERS) as started:
        if not two:
            assert (root / "a" / ".fwrest" / "state.sqlite3").is_file()
        yield [Host(proc, proc.config.parent / "certs" / "ca.pem") for proc in started]


def _posted(host: Host, path: str, **request: Any) -> None:
    """A POST to ``path`` through ``host`` (a revocation, a settings change), answered 200; the
    SPEC's bound waited out."""
    with host.client() as http:
        answer = http.post(host.base + path, **request)
    since = time.monotonic()
    assert answer.status_code == 200, answer.text
    bound_after(since)


def test_a_token_of_a_revoked_on_b_is_refused_everywhere_within_1_s(hosts: list[Host]) -> None:
    a, b = hosts[0], hosts[-1]
    probe, victim = a.tokens("ada"), a.tokens("bob")
    workers = [host.oauth_workers(probe["access_token"]) for host in hosts]
    try:
        for host, _pid, http in each_worker(hosts, workers):  # A's token, on every worker
            used = http.get(host.base + "/hello", headers=bearer(victim["access_token"]))
            assert used.status_code == 200, used.text
        # revoked on B (RFC 7009), as the client that holds it
        _posted(b, "/fw/oauth2/revoke", data={"token": victim["access_token"]}, auth=WEB)
        for host, pid, http in each_worker(hosts, workers):
            used = http.get(host.base + "/hello", headers=bearer(victim["access_token"]))
            assert used.status_code == 401, (host.base, pid, used.text)
            assert "revoked" in used.headers["www-authenticate"]
            seen = http.post(
                host.base + "/fw/oauth2/introspect",
                data={"token": victim["access_token"]},
                auth=WEB,
            )
            assert seen.status_code == 200 and seen.json() == {"active": False}, seen.text
        with a.client() as http:  # its refresh token is spent too, on the host that issued it
            refresh_refused(http, a.base + "/fw/oauth2/token", victim["refresh_token"], auth=WEB)
        # the revocation of B, listed by A
        events = a.trail(probe["access_token"], "?event=revocation")
        mine = [e for e in events if e["details"]["user"] == "bob"]
        assert len(mine) == 1, events
        assert (mine[0]["actor"], mine[0]["port"]) == ("client:web", "OAUTH"), mine[0]
        assert mine[0]["details"]["via"] == "oauth2/revoke", mine[0]
        # a refresh token of A revoked on B: its family's access token refused everywhere
        family = a.tokens("cy")
        hint = {"token_type_hint": "refresh_token"}
        _posted(b, "/fw/oauth2/revoke", data={"token": family["refresh_token"], **hint}, auth=WEB)
        for host, pid, http in each_worker(hosts, workers):
            used = http.get(host.base + "/hello", headers=bearer(family["access_token"]))
            assert used.status_code == 401, (host.base, pid, used.text)
        # the command on A: every family of a user (one from each host), from another process
        dee = [a.tokens("dee"), b.tokens("dee")]
        done = run_cli("tokens", "revoke", str(a.proc.config), "--user", "dee")
        bound_after(time.monotonic())
        assert done.returncode == 0, done.stderr
        assert "revoked 2 token families of user 'dee'" in done.stdout, done.stdout
        # SPEC 13.5: its audit line in A's LogFile (the service's), naming no token
        text = a.proc.file_log()
        assert '[cli] revocation actor=\'cli\' client=- port=- {"user":"dee"' in text
        assert not [f[k] for f in dee for k in ("access_token", "refresh_token") if f[k] in text]
        for host, pid, http in each_worker(hosts, workers):
            for family in dee:
                used = http.get(host.base + "/hello", headers=bearer(family["access_token"]))
                assert used.status_code == 401, (host.base, pid, used.text)
                assert "revoked" in used.headers["www-authenticate"]
        # the probe's family is another user's: untouched everywhere
        for host, _pid, http in each_worker(hosts, workers):
            used = http.get(host.base + "/hello", headers=bearer(probe["access_token"]))
            assert used.status_code == 200, used.text
    finally:
        close_all(*workers)


def test_a_setting_changed_on_a_is_in_force_on_every_worker_of_b_within_1_s(
    hosts: list[Host],
) -> None:
    a, b = hosts[0], hosts[-1]
    token = a.tokens("cy")["access_token"]
    workers = [host.oauth_workers(token) for host in hosts]
    try:
        before = settings_of(next(iter(workers[-1].values())), b.base, token)[STRINGSIZE]
        value = int(before["effective"]) + 41
        _posted(a, "/fw/rest/config", json={STRINGSIZE: value}, headers=bearer(token))
        for host, pid, http in each_worker(hosts, workers):
            now = settings_of(http, host.base, token)[STRINGSIZE]
            assert (now["runtime"], now["effective"]) == (value, value), (host.base, pid, now)
        # listed by B, naming the user, the port and the values
        events = b.trail(token, "?event=settings.change")
        change = next(e for e in events if e["details"]["key"] == "rest_log_stringsize")
        assert (change["actor"], change["port"]) == ("cy", "OAUTH"), change
        assert (change["details"]["old"], change["details"]["new"]) == (before["effective"], value)
        # cleared on B, in force on every worker of A
        _posted(b, "/fw/rest/config", json={STRINGSIZE: None}, headers=bearer(token))
        for host, pid, http in each_worker(hosts, workers):
            now = settings_of(http, host.base, token)[STRINGSIZE]
            assert now["runtime"] is None, (host.base, pid, now)
            assert now["effective"] == before["effective"], (host.base, pid, now)
        # A's page (Basic port), its form sent to B: the anti-forgery token is the service's
        cy = ("cy", USERS["cy"])
        with httpx.Client(timeout=15) as http:
            page = http.get(a.basic + "/fw/rest/config", auth=cy, headers={"Accept": "text/html"})
            assert page.status_code == 200, page.text
            found = re.search(r'name="fw_csrf" value="([^"]+)"', page.text)
            assert found, page.text
            for wanted in (value + 1, None):  # set, then cleared (an empty field)
                form = {"rest_log_stringsize": "" if wanted is None else str(wanted)}
                sent = http.post(
                    b.basic + "/fw/rest/config", data={**form, "fw_csrf": found[1]}, auth=cy
                )
                since = time.monotonic()
                assert sent.status_code == 200 and "Saved" in sent.text, sent.text
                bound_after(since)
                for host, pid, worker in each_worker(hosts, workers):
                    now = settings_of(worker, host.base, token)[STRINGSIZE]
                    assert now["runtime"] == wanted, (host.base, pid, now)
    finally:
        close_all(*workers)


def test_a_rate_limit_window_is_counted_across_workers_and_hosts(hosts: list[Host]) -> None:
    """``Key=user``, ``Limit=6``: dee's requests over four workers share a window; ada has hers."""
    dee = hosts[0].tokens("dee")["access_token"]
    ada = hosts[-1].tokens("ada")["access_token"]
    workers = [host.oauth_workers(dee) for host in hosts]  # /rest: not rate limited
    try:
        rounds = [(host, http) for host, _pid, http in each_worker(hosts, workers)]
        codes, remaining = [], []
        for i in range(LIMIT + 4):
            host, http = rounds[i % len(rounds)]
            answer = http.get(host.limited + "/hello", headers=bearer(dee))
            assert "ratelimit" in answer.headers, (answer.status_code, answer.text)
            codes.append(answer.status_code)
            remaining.append(answer.headers["ratelimit"])
        print(f"dee's answers across the four workers: {codes}")
        assert codes == [200] * LIMIT + [429] * 4, (codes, remaining)
        assert [r.split(";")[1] for r in remaining[:LIMIT]] == [
            f"r={LIMIT - 1 - i}" for i in range(LIMIT)
        ], remaining
        assert remaining[LIMIT].startswith('"RL_USER";r=0;t='), remaining
        for host, http in rounds:  # refused on every worker; ada is counted apart
            refused = http.get(host.limited + "/hello", headers=bearer(dee))
            assert refused.status_code == 429 and 0 < int(refused.headers["retry-after"]) <= 60
            assert http.get(host.limited + "/hello", headers=bearer(ada)).status_code == 200
    finally:
        close_all(*workers)


def test_basic_failures_on_both_hosts_lock_out_on_both_until_lockouts_clear(
    hosts: list[Host],
) -> None:
    """bob's 10th wrong password over four workers locks bob and the address on both hosts (one
    ``lockout`` event, listed by both); ``fwrest lockouts clear`` on A lifts both everywhere."""
    a = hosts[0]
    token = a.tokens("cy")["access_token"]  # the audit route is on OAUTH: not locked out
    workers = [host.basic_workers() for host in hosts]
    rounds = [(host, http) for host, _pid, http in each_worker(hosts, workers)]
    try:
        for i in range(MAX_FAILURES):
            host, http = rounds[i % len(rounds)]
            wrong = http.get(host.basic + "/hello", auth=("bob", f"guess-{i}"))
            assert wrong.status_code == 403, (i, wrong.status_code, wrong.text)
        locked_at = time.monotonic()
        bound_after(locked_at)
        for host, http in rounds:
            right = http.get(host.basic + "/hello", auth=("bob", USERS["bob"]))
            assert right.status_code == 429, (host.basic, right.status_code, right.text)
            assert int(right.headers["retry-after"]) >= 1
        for host in hosts:
            events = [
                e for e in host.trail(token, "?event=lockout") if e["details"]["user"] == "bob"
            ]
            assert len(events) == 1, (host.base, events)
            assert events[0]["port"] == "BASIC", events[0]
            assert sorted(events[0]["details"]["locked"]) == ["address", "user"], events[0]
        # bob's lift takes the address his failures locked at the same moment (SPEC 13.6)
        _clear_bob(a, "BASIC")
        for host, http in rounds:
            right = http.get(host.basic + "/hello", auth=("bob", USERS["bob"]))
            assert right.status_code == 200, (host.basic, right.status_code, right.text)
        for host in hosts:  # the command's events, listed by both hosts
            cleared = host.trail(token, "?event=lockout.clear")
            subjects = {(e["port"], e["details"]["subject"]) for e in cleared}
            assert subjects == {("BASIC", "bob"), ("BASIC", "127.0.0.1")}, cleared
    finally:
        close_all(*workers)


def _clear_bob(host: Host, port: str) -> None:
    """``fwrest lockouts clear bob`` on ``host``'s config for ``port``; the SPEC's bound waited."""
    config = host.proc.config
    done = run_cli("lockouts", str(config), "clear", "bob", cwd=config.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"fwrest lockouts: lifted [{port}] ip 127.0.0.1",
        f"fwrest lockouts: lifted [{port}] user bob",
    ], done.stdout
    lifted_at = time.monotonic()
    bound_after(lifted_at)
    text = host.proc.file_log()  # SPEC 13.5: the audit lines in the service's LogFile
    for kind, subject in (("ip", "127.0.0.1"), ("user", "bob")):
        assert f'port={port} {{"kind":"{kind}","subject":"{subject}","via":"fwrest' in text


def test_failed_grants_on_both_hosts_lock_out_on_both_until_lockouts_clear(
    hosts: list[Host],
) -> None:
    """Counted in the store before the check: bob's failures over four workers lock bob and the
    address on both hosts; clearing on B lifts both; one event, listed by both."""
    a, b = hosts[0], hosts[-1]
    token = a.tokens("cy")["access_token"]  # a bearer token: no password, never locked out
    workers = [host.oauth_workers(token) for host in hosts]
    rounds = [(host, http) for host, _pid, http in each_worker(hosts, workers)]

    def grant(host: Host, http: httpx.Client, password: str) -> httpx.Response:
        form = {"grant_type": "password", "username": "bob", "password": password}
        return http.post(host.base + "/fw/oauth2/token", data=form, auth=WEB)

    try:
        for i in range(MAX_FAILURES):
            host, http = rounds[i % len(rounds)]
            wrong = grant(host, http, f"guess-{i}")
            assert wrong.status_code == 400, (i, wrong.status_code, wrong.text)
        for host, http in rounds:  # counted in the store: refused at once, on every worker
            right = grant(host, http, USERS["bob"])
            assert right.status_code == 429, (host.base, right.status_code, right.text)
            assert int(right.headers["retry-after"]) >= 1
        for host in hosts:
            events = [
                e
                for e in host.trail(token, "?event=lockout")
                if e["port"] == "OAUTH" and e["details"]["user"] == "bob"
            ]
            assert len(events) == 1, (host.base, events)
            assert sorted(events[0]["details"]["locked"]) == ["address", "user"], events[0]
        _clear_bob(b, "OAUTH")
        for host, http in rounds:
            right = grant(host, http, USERS["bob"])
            assert right.status_code == 200, (host.base, right.status_code, right.text)
    finally:
        close_all(*workers)
