"""SPEC 12.3 over real sockets: Authlib's ``revoke_token`` and ``introspect_token`` over TLS, on two
hosts of two workers on one Redis (port ``OAUTH`` over TLS, the key made once in Redis); a
revocation reaching every worker and host: tests/e2e/test_hosts_state.py. No redis-server: a
failure, never a skip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from authlib.integrations.requests_client import OAuth2Session

from tests.auth.oauth2_support import (
    PID_APP,
    PID_CLIENT,
    PID_USERS,
    WorkersHost,
    oauth_section,
)
from tests.conftest import ServerProcess, module_config
from tests.e2e.support import one_or_two_hosts

WORKERS = 2
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
