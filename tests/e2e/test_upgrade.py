"""A rolling upgrade (SPEC 17.2): a host of the previous release (P, ``v0.1.0`` or commit
``edbc291``, pure Python in its own environment, tests/upgrade_support.py; a clone without that
history fails, never skips) and one of this release (C) on one store, Redis or one sqlite file (one
``DataPath``), requests alternating between them. The default configuration but ``issuer``: both run
on one machine on two ports and v0.1.0 derives its issuer from ``HostName:Port``. Set up as
docs/deploy.md says (``deploy-upgrade``): P writes the store; ``fwrest store migrate --check`` (1 on
P's sqlite, 0 on Redis), ``migrate``, ``check``; then C starts beside P."""

from __future__ import annotations

import json
import shlex
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.auth.oauth2_support import PID_CLIENT, PID_USERS, bearer
from tests.conftest import ServerProcess, issue_certs, run_cli, tls_server, wait_for
from tests.docs.blocks import example
from tests.e2e.support import oauth_basic_host, redis_or_none, settings_of
from tests.upgrade_support import PREVIOUS_VERSION, previous_release
from tests.verify.support import kid_of

USERS, WEB = PID_USERS, PID_CLIENT
ISSUER = "https://api.example.test/rest"
LIMIT = 6
MAX_FAILURES = 10  # the default
HANG_GUARD_S = 10.0


def host_config(folder: Path, certs: dict[str, Path], store: str, data: Path | None) -> Path:
    """One host: :func:`oauth_basic_host`'s sections (its ``issuer`` the service's) and ``KEYS``
    signing with EdDSA; ``store`` shared (``data``: the sqlite ``DataPath``)."""
    config = oauth_basic_host(folder, certs, store, LIMIT, data, issuer=ISSUER)
    sections = json.loads(config.read_text())
    keys = {**sections["OAUTH"]["FwData"]["Authorization"], "signingAlg": "EdDSA"}
    sections["KEYS"] = tls_server(certs, FwData={"Authorization": keys})
    sections["HTTPSERVER"]["Servers"] += ",KEYS"
    config.write_text(json.dumps(sections))
    return config


class Host:
    """One ``fwrest serve`` of the pair: ``release`` is its version."""

    def __init__(self, proc: ServerProcess, release: str, certs: dict[str, Path]) -> None:
        self.proc, self.release = proc, release
        self.http = httpx.Client(verify=ssl.create_default_context(cafile=certs["ca"]), timeout=15)
        self.base = proc.url("OAUTH")  # https://127.0.0.1:{port}/rest
        self.keys = proc.url("KEYS")
        self.limited = self.base.removesuffix("/rest") + "/limited"
        self.basic = proc.url("BASIC")

    def __repr__(self) -> str:
        return f"<host {self.release}>"

    def grant(self, user: str, base: str | None = None) -> dict[str, Any]:
        form = {"grant_type": "password", "username": user, "password": USERS[user]}
        answer = self.http.post((base or self.base) + "/fw/oauth2/token", data=form, auth=WEB)
        assert answer.status_code == 200, (self, answer.text)
        return dict(answer.json())

    def refresh(self, token: str) -> httpx.Response:
        form = {"grant_type": "refresh_token", "refresh_token": token}
        return self.http.post(self.base + "/fw/oauth2/token", data=form, auth=WEB)

    def hello(self, token: str, base: str | None = None) -> int:
        return self.http.get((base or self.base) + "/hello", headers=bearer(token)).status_code

    def revoke(self, token: str) -> None:
        answer = self.http.post(self.base + "/fw/oauth2/revoke", data={"token": token}, auth=WEB)
        assert answer.status_code == 200, (self, answer.text)

    def trail(self, token: str, event: str) -> list[dict[str, Any]]:
        answer = self.http.get(self.base + f"/fw/rest/audit?event={event}", headers=bearer(token))
        assert answer.status_code == 200, (self, answer.text)
        events: list[dict[str, Any]] = answer.json()
        return events

    def setting(self, token: str) -> Any:
        return settings_of(self.http, self.base, token)["rest_log_stringsize"]["runtime"]

    def change_setting(self, token: str, value: int | None) -> None:
        answer = self.http.post(
            self.base + "/fw/rest/config", json={"rest_log_stringsize": value},
            headers=bearer(token),
        )  # fmt: skip
        assert answer.status_code == 200, (self, answer.text)


def procedure_steps() -> list[tuple[list[str], set[int]]]:
    """``deploy-upgrade``'s ``fwrest`` commands and the exit codes their comments allow (else 0)."""
    out = []
    for line in example("deploy-upgrade").text.splitlines():
        code, _, comment = line.partition("#")
        words = shlex.split(code)
        if not words or words[0] != "fwrest":
            continue
        said = {int(w.rstrip(":,;")) for w in comment.split() if w.rstrip(":,;").isdigit()}
        out.append((words, said or {0}))
    return out


def follow_procedure(config: Path, sqlite: bool) -> None:
    """The procedure on ``config`` with this release: P's sqlite is due a migration, Redis not."""
    steps = procedure_steps()
    names = [words[1:3] for words, _ in steps]
    assert ["store", "migrate"] in names and ["check", "service.ini"] in names, steps
    checked = False
    for words, allowed in steps:
        args = [str(config) if w == "service.ini" else w for w in words[1:]]
        done = run_cli(*args, cwd=config.parent)
        print(f"$ {shlex.join(words)} -> {done.returncode}\n{done.stdout}{done.stderr}")
        assert done.returncode in allowed, (words, done.returncode, done.stderr)
        if "--check" in words and not checked:
            checked = True  # the first look, before the migration
            assert done.returncode == (1 if sqlite else 0), done.stdout
    assert checked


@pytest.fixture(scope="module", params=["redis", "sqlite"])
def pair(
    ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Host, Host]]:
    """P (the previous release) and C (this one), on one Redis or one sqlite file."""
    previous = previous_release()
    root = tmp_path_factory.mktemp(f"upgrade-{request.param}")
    with redis_or_none(root, request.param == "redis") as redis:
        store, data = (redis.url, None) if redis is not None else ("sqlite", root / "shared-data")
        configs, certs = [], []
        for name in ("previous", "current"):
            certs.append(issue_certs(ca, root / name / "certs"))
            configs.append(host_config(root / name, certs[-1], store, data))
        started: list[ServerProcess] = []
        try:
            started.append(ServerProcess(configs[0], command=[str(previous / "fwrest")]))
            started[0].wait_ready()
            p = Host(started[0], PREVIOUS_VERSION, certs[0])
            p.grant("ada")  # P writes the store first (its signing key, a refresh record)
            follow_procedure(configs[1], sqlite=redis is None)
            started.append(ServerProcess(configs[1]).wait_ready())
            c = Host(started[1], "current", certs[1])
            yield p, c
            p.http.close()
            c.http.close()
        finally:
            for proc in started:
                proc.stop()


def jwks_kids(host: Host) -> set[str]:
    """The key ids the host's ``KEYS`` port publishes in its JWK Set."""
    answer = host.http.get(host.keys + "/fw/oauth2/jwks")
    assert answer.status_code == 200, (host, answer.text)
    return {key["kid"] for key in answer.json()["keys"]}


def both(pair: tuple[Host, Host]) -> list[tuple[Host, Host]]:
    """(one host, the other) both ways."""
    p, c = pair
    return [(p, c), (c, p)]


def test_the_hosts_run_the_previous_release_and_this_one(pair: tuple[Host, Host]) -> None:
    p, c = pair
    previous = previous_release() / "fwrest"
    assert p.proc.proc.args[0] == str(previous), p.proc.proc.args  # type: ignore[index]
    shown = subprocess.run([str(previous), "--version"], capture_output=True, text=True,
                           timeout=60, check=False)  # fmt: skip
    assert shown.stdout.strip() == f"fwrest {PREVIOUS_VERSION}", shown
    assert run_cli("--version").stdout.strip() == "fwrest 0.2.0"
    assert p.proc.proc.poll() is None and c.proc.proc.poll() is None


def test_tokens_rotate_across_releases_and_a_replay_revokes_the_family_on_both(
    pair: tuple[Host, Host],
) -> None:
    for one, other in both(pair):
        first = one.grant("ada")
        assert other.hello(first["access_token"]) == 200, (one, other)
        rotated = other.refresh(first["refresh_token"])  # one's refresh token, on the other
        assert rotated.status_code == 200, (one, other, rotated.text)
        second = rotated.json()
        assert one.hello(second["access_token"]) == 200
        again = one.refresh(second["refresh_token"])  # the other's refresh token, on one
        assert again.status_code == 200, (one, other, again.text)
        third = again.json()
        # a replay on one of the token the other spent: invalid_grant, the family revoked
        replay = one.refresh(first["refresh_token"])
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant", replay.text
        for host in (other, one):
            wait_for(lambda h=host, t=third: h.hello(t["access_token"]) == 401, HANG_GUARD_S,
                     f"{host} refuses the family {one} revoked")  # fmt: skip
        assert other.refresh(third["refresh_token"]).status_code == 400


def test_a_token_revoked_on_one_release_is_refused_by_the_other(pair: tuple[Host, Host]) -> None:
    for one, other in both(pair):
        access, family = one.grant("bob"), one.grant("cy")
        assert other.hello(access["access_token"]) == 200
        other.revoke(access["access_token"])  # RFC 7009, on the host that did not issue it
        other.revoke(family["refresh_token"])
        since = time.monotonic()
        for token in (access["access_token"], family["access_token"]):
            wait_for(lambda h=one, t=token: h.hello(t) == 401, HANG_GUARD_S,
                     f"{one} refuses what {other} revoked")  # fmt: skip
        print(f"{other}'s revocations in force on {one} after {time.monotonic() - since:.2f} s")
        spent = one.refresh(family["refresh_token"])
        assert spent.status_code == 400 and spent.json()["error"] == "invalid_grant", spent.text


def test_the_key_set_is_shared_and_followed_across_a_rotation(pair: tuple[Host, Host]) -> None:
    p, c = pair
    for one, other in both(pair):
        token = one.grant("ada", one.keys)["access_token"]
        assert other.hello(token, other.keys) == 200, (one, other)
    before = kid_of(p.grant("ada", p.keys)["access_token"])
    assert kid_of(c.grant("ada", c.keys)["access_token"]) == before  # one key set
    # a rotation by each release's own command, the other release's host following
    for who, command in (("current", None), ("previous", previous_release() / "fwrest")):
        published = [jwks_kids(host) for host in (p, c)]
        config = (c if who == "current" else p).proc.config
        if command is None:
            done = run_cli("keys", "rotate", str(config), cwd=config.parent)
            code, out = done.returncode, done.stdout + done.stderr
        else:
            ran = subprocess.run([str(command), "keys", "rotate", str(config)], cwd=config.parent,
                                 capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
            code, out = ran.returncode, ran.stdout + ran.stderr
        assert code == 0, out
        rotated = time.monotonic()
        for host in (p, c):
            wait_for(lambda h=host, b=before: kid_of(h.grant("ada", h.keys)["access_token"]) != b,
                     HANG_GUARD_S, f"{host} signs with the key {who} rotated in")  # fmt: skip
        print(f"{who}'s rotation followed by both after {time.monotonic() - rotated:.2f} s")
        newest = kid_of(p.grant("ada", p.keys)["access_token"])
        assert kid_of(c.grant("ada", c.keys)["access_token"]) == newest
        for one, other in both(pair):
            token = one.grant("ada", one.keys)["access_token"]
            assert other.hello(token, other.keys) == 200, (who, one, other)
        # this release rotates in the next key, which both releases' hosts published before
        # (a verifier that fetched either's JWK Set verifies its tokens at once); the previous
        # release makes a new key and leaves the next key next
        assert all(newest in kids for kids in published) is (who == "current"), published
        before = newest
    listed = run_cli("keys", "list", str(c.proc.config), cwd=c.proc.config.parent)
    assert listed.returncode == 0, listed.stderr
    upcoming = [x.split()[0] for x in listed.stdout.splitlines() if "next" in x.split()[3:4]]
    assert len(upcoming) == 1 and upcoming[0] != before, listed.stdout
    assert all(upcoming[0] in jwks_kids(host) for host in (p, c))


def test_basic_failures_on_both_releases_lock_out_on_both(pair: tuple[Host, Host]) -> None:
    """Recorded by the host of the last failure (bob's by this release, dee's by the previous one),
    each listed once by either's audit route (SPEC 17.2)."""
    p, c = pair
    token = c.grant("cy")["access_token"]
    with httpx.Client(timeout=15) as http:

        def right_password_gets(status: int, user: str, hosts: list[Host], what: str) -> None:
            for host in hosts:
                wait_for(
                    lambda h=host: (
                        http.get(h.basic + "/hello", auth=(user, USERS[user])).status_code == status
                    ),
                    HANG_GUARD_S,
                    f"{host} {what}",
                )

        for user, hosts in (("bob", [p, c]), ("dee", [c, p])):
            for i in range(MAX_FAILURES):
                host = hosts[i % 2]  # the last failure, the one that locks out: hosts[1]'s
                wrong = http.get(host.basic + "/hello", auth=(user, f"guess-{i}"))
                assert wrong.status_code == 403, (host, i, wrong.status_code, wrong.text)
            right_password_gets(429, user, hosts, "honours the lock-out")
            for reader in (p, c):
                events = [e for e in reader.trail(token, "lockout") if e["details"]["user"] == user]
                assert len(events) == 1 and events[0]["port"] == "BASIC", (reader, user, events)
            done = run_cli("lockouts", str(c.proc.config), "clear", user, cwd=c.proc.config.parent)
            assert done.returncode == 0, done.stderr
            right_password_gets(200, user, hosts, "lifts the lock-out")


def test_settings_changed_on_one_release_are_in_force_on_the_other(pair: tuple[Host, Host]) -> None:
    p, c = pair
    token = c.grant("cy")["access_token"]
    for n, (one, other) in enumerate(both(pair)):
        value = 500 + n
        one.change_setting(token, value)
        wait_for(lambda o=other, v=value: o.setting(token) == v, HANG_GUARD_S,
                 f"{other} applies {one}'s setting")  # fmt: skip
    c.change_setting(token, None)
    wait_for(lambda: p.setting(token) is None, HANG_GUARD_S, "the previous release clears it")
    # the audit events of both releases, read on this release's host
    changes = [e for e in c.trail(token, "settings.change")
               if e["details"]["key"] == "rest_log_stringsize"]  # fmt: skip
    olds_news = [(e["details"]["old"], e["details"]["new"]) for e in reversed(changes)]
    # P's change to 500, C's from 500 to 501, C's clear of 501 (new: the value in force)
    assert [n for _, n in olds_news[-3:-1]] == [500, 501], changes
    assert (olds_news[-2][0], olds_news[-1][0]) == (500, 501), changes
    assert c.trail(token, "refresh.replay"), "the replays of both hosts"
    assert c.trail(token, "revocation"), "the revocations of both hosts"


def test_a_rate_limit_window_is_counted_over_both_releases(pair: tuple[Host, Host]) -> None:
    p, c = pair
    dee = p.grant("dee")["access_token"]
    codes = []
    for i in range(LIMIT + 2):
        host = (p, c)[i % 2]
        answer = host.http.get(host.limited + "/hello", headers=bearer(dee))
        codes.append(answer.status_code)
    print(f"dee's answers, P and C in turn: {codes}")
    assert codes == [200] * LIMIT + [429] * 2, codes
