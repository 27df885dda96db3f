"""SPEC 12.3 over real sockets: Authlib's ``revoke_token`` and ``introspect_token`` over TLS, and a
revocation (the route's and ``fwrest tokens revoke --user``'s) reaching every worker of two hosts on
one Redis within a second. Hosts of two workers, port ``OAUTH`` over TLS, the key made once in
Redis; the kernel picks a connection's worker, so one is kept per worker, found by the pid
``/hello`` answers. No redis-server: a failure, never a skip."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme
from authlib.integrations.requests_client import OAuth2Session

from tests.auth.oauth2_support import (
    PID_APP,
    PID_CLIENT,
    PID_USERS,
    WorkersHost,
    bearer,
    oauth_section,
)
from tests.conftest import ServerProcess, module_config, run_cli
from tests.e2e.support import close_all, each_worker, one_or_two_hosts, refresh_refused

WORKERS = 2
SPEC_BOUND_S = 1.0  # SPEC 12.3: every worker and host within 1 s
USERS, WEB, APP = PID_USERS, PID_CLIENT, PID_APP


class Host(WorkersHost):
    def __init__(self, proc: ServerProcess, ca_file: Path) -> None:
        super().__init__(proc, ca_file, WORKERS)


def host_config(folder: Path, certs: dict[str, Path], redis_url: str | None) -> Path:
    oauth = oauth_section(
        certs,
        onAuthparams="revoke_e2e_app.params",
        # one issuer for both hosts, as behind a balancer (SPEC 12.2)
        issuer="https://orders.example/rest",
    )
    extra = {"HTTPSERVER": {"StateStore": redis_url}}
    return module_config(folder, "revoke_e2e_app", servers={"OAUTH": oauth}, extra=extra, app=APP)


@pytest.fixture(scope="module")
def hosts(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Host]]:
    root = tmp_path_factory.mktemp("revocation-e2e")
    with one_or_two_hosts(ca, root, True, host_config, WORKERS) as started:
        yield [Host(proc, proc.config.parent / "certs" / "ca.pem") for proc in started]


def assert_refused_everywhere(
    hosts: list[Host], token: str, workers: list[dict[int, httpx.Client]], since: float
) -> None:
    """``token`` refused by every worker of every host, within SPEC_BOUND_S of ``since``."""
    time.sleep(max(since + SPEC_BOUND_S - time.monotonic(), 0))
    for host, pid, http in each_worker(hosts, workers):
        answer = http.get(host.base + "/hello", headers=bearer(token))
        assert answer.status_code == 401, (host.base, pid, answer.text)
        assert "revoked" in answer.headers["www-authenticate"]


def test_authlib_revokes_and_introspects_over_tls(hosts: list[Host]) -> None:
    a, b = hosts
    session = OAuth2Session(
        client_id=WEB[0], client_secret=WEB[1], token_endpoint_auth_method="client_secret_basic"
    )
    ca = str(a.ca_file)
    token = session.fetch_token(
        a.base + "/fw/oauth2/token", username="cy", password=USERS["cy"], verify=ca
    )
    seen = session.introspect_token(
        b.base + "/fw/oauth2/introspect", token=token["access_token"], verify=ca
    )
    assert seen.status_code == 200 and seen.headers["cache-control"] == "no-store"
    assert seen.json()["active"] is True and seen.json()["username"] == "cy"
    refresh = session.introspect_token(
        a.base + "/fw/oauth2/introspect",
        token=token["refresh_token"],
        token_type_hint="refresh_token",
        verify=ca,
    )
    assert refresh.json()["token_type"] == "refresh_token", refresh.text
    revoked = session.revoke_token(
        a.base + "/fw/oauth2/revoke",
        token=token["refresh_token"],
        token_type_hint="refresh_token",
        verify=ca,
    )
    assert revoked.status_code == 200 and revoked.content == b""
    for host in (a, b):  # the refresh token is read from the store: at once
        gone = session.introspect_token(
            host.base + "/fw/oauth2/introspect", token=token["refresh_token"], verify=ca
        )
        assert gone.json() == {"active": False}
    # without client authentication: 401, nothing said about the token
    anonymous = OAuth2Session(client_id="nobody", token_endpoint_auth_method="none")
    refused = anonymous.introspect_token(a.base + "/fw/oauth2/introspect", token="x", verify=ca)
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"


def test_a_revocation_reaches_every_worker_and_host_within_a_second(hosts: list[Host]) -> None:
    a, b = hosts
    probe, victim = a.tokens("ada"), b.tokens("bob")
    workers = [host.oauth_workers(probe["access_token"]) for host in hosts]
    try:
        for host, _pid, http in each_worker(hosts, workers):
            assert http.get(host.base + "/hello", headers=bearer(victim["access_token"]))
        with a.client() as http:
            answer = http.post(
                a.base + "/fw/oauth2/revoke", data={"token": victim["access_token"]}, auth=WEB
            )
        since = time.monotonic()
        assert answer.status_code == 200, answer.text
        assert_refused_everywhere(hosts, victim["access_token"], workers, since)
        with b.client() as http:
            refresh_refused(http, b.base + "/fw/oauth2/token", victim["refresh_token"], auth=WEB)
        # the command: every family of a user, from another process, through Redis
        family_one, family_two = a.tokens("dee"), b.tokens("dee")
        done = run_cli("tokens", "revoke", str(a.proc.config), "--user", "dee")
        since = time.monotonic()
        assert done.returncode == 0, done.stderr
        assert "revoked 2 token families of user 'dee'" in done.stdout
        for family in (family_one, family_two):
            assert_refused_everywhere(hosts, family["access_token"], workers, since)
        # the probe's family is another user's: untouched
        for host, _pid, http in each_worker(hosts, workers):
            answer = http.get(host.base + "/hello", headers=bearer(probe["access_token"]))
            assert answer.status_code == 200
    finally:
        close_all(*workers)
