"""SPEC 16.2, ``"boundTokens": "mtls"`` at the bearer check, over real TLS on two hosts of one
server section sharing one ``redis-server``: host A asks for client certificates without the
mandatory binding (its tokens may be unbound, as before ``boundTokens`` was turned on), host B
has ``"boundTokens": "mtls"`` and refuses every token without ``cnf.x5t#S256``, with or without a
certificate, as DPoP mode refuses an unbound token. A token sent with the ``DPoP`` scheme is
refused with the ``DPoP`` challenge (RFC 9449 7.1), also when its certificate is what is
missing. No redis-server: a failure, never a skip."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.auth.dpop_support import DpopKey, dpop_headers
from tests.auth.oauth2_support import PID_APP, PID_CLIENT, PID_USERS, TOKEN, bearer
from tests.auth.test_mtls_tokens import Pki
from tests.conftest import free_config, issue_certs, tls_server
from tests.e2e.support import hosts_serving, redis_or_none, with_store

REQUIRED = "a certificate-bound access token is required here"
# PID_APP's params() redefined below it: ada may introspect with her token (the scope introspect)
APP = (
    PID_APP
    + """

def params():
    return {
        "client_id": "web",
        "client_secret": "Web-Secret-9q",
        "users": [{"username": u, "password": p, "scopes": ["default", "introspect"]}
                  for u, p in USERS.items()],
        "access_expires": "1h",
    }
"""
)
Cert = tuple[Path, Path] | None


class Host:
    """One host's URL and CA bundle; a new client per call, presenting ``cert`` or none."""

    def __init__(self, base: str, ca_file: Path) -> None:
        self.base, self.ca_file = base, ca_file

    def client(self, cert: Cert = None) -> httpx.Client:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if cert is not None:
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        return httpx.Client(verify=ctx, timeout=15)

    def grant(self, cert: Cert, proof: str | None = None) -> dict[str, Any]:
        form = {"grant_type": "password", "username": "ada", "password": PID_USERS["ada"],
                "scope": "default introspect"}  # fmt: skip
        headers = {} if proof is None else {"DPoP": proof}
        with self.client(cert) as http:
            answer = http.post(self.base + TOKEN, data=form, auth=PID_CLIENT, headers=headers)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def introspect(self, token: str, cert: Cert) -> httpx.Response:
        """``token`` introspecting itself: the caller authenticated by its own bearer token."""
        with self.client(cert) as http:
            url = self.base + "/fw/oauth2/introspect"
            return http.post(url, data={"token": token}, headers=bearer(token))

    def hello(self, headers: dict[str, str], cert: Cert = None) -> httpx.Response:
        with self.client(cert) as http:
            return http.get(self.base + "/hello", headers=headers)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("mtls-hosts-pki"))


def _host(folder: Path, ca: trustme.CA, pki: Pki, redis_url: str, bound: bool) -> Path:
    certs = issue_certs(ca, folder / "certs")
    oauth: dict[str, Any] = {"scheme": "oAuth2", "onAuth": "", "onAuthparams": "app.params"}
    if bound:
        oauth["boundTokens"] = "mtls"
    server = tls_server(
        certs, SslClientCert=1, SslClientCA=str(pki.ca), FwData={"Authorization": oauth}
    )
    return with_store(free_config(folder, app=APP, servers={"OAUTH": server}), redis_url)


@pytest.fixture(scope="module")
def hosts(
    ca: trustme.CA, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Host, Host]]:
    root = tmp_path_factory.mktemp("mtls-hosts")
    with redis_or_none(root) as redis:
        assert redis is not None
        configs = [(_host(root / n, ca, pki, redis.url, n == "b"), 1) for n in ("a", "b")]
        with hosts_serving(configs) as (a, b):
            yield (
                Host(a.url("OAUTH"), a.config.parent / "certs" / "ca.pem"),
                Host(b.url("OAUTH"), b.config.parent / "certs" / "ca.pem"),
            )


def assert_refused(answer: httpx.Response, scheme: str, why: str) -> None:
    assert answer.status_code == 401, answer.text
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith(scheme + " "), challenge
    assert 'error="invalid_token"' in challenge, challenge
    assert "resource_metadata=" in challenge, challenge
    assert why in challenge, challenge


def test_an_unbound_token_is_refused_where_the_binding_is_mandatory(
    hosts: tuple[Host, Host], pki: Pki
) -> None:
    a, b = hosts
    unbound = a.grant(None)["access_token"]  # host A: no certificate, no binding
    assert a.hello(bearer(unbound)).status_code == 200
    for cert in (None, pki.ada):
        assert_refused(b.hello(bearer(unbound), cert), "Bearer", REQUIRED)
    # a token bound on host A is accepted on host B with its certificate, and only so
    bound = a.grant(pki.ada)["access_token"]
    assert b.hello(bearer(bound), pki.ada).status_code == 200
    assert_refused(b.hello(bearer(bound), pki.bob), "Bearer", "another client certificate")
    assert b.hello(bearer(b.grant(pki.bob)["access_token"]), pki.bob).status_code == 200
    # nor does an unbound token authenticate a caller of host B's introspection route
    assert a.introspect(unbound, None).json()["active"] is True
    refused = b.introspect(unbound, pki.ada)
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"] == "invalid_client", refused.text
    assert REQUIRED in refused.json()["error_description"], refused.text
    assert b.introspect(bound, pki.ada).json()["active"] is True


def test_a_dpop_token_is_refused_with_the_dpop_challenge(
    hosts: tuple[Host, Host], pki: Pki
) -> None:
    a, b = hosts
    key = DpopKey("ES256")

    def call(host: Host, token: str, cert: Cert) -> httpx.Response:
        proof = key.proof("GET", host.base + "/hello", token)
        return host.hello(dpop_headers(token, proof), cert)

    # bound to the key only (no certificate on host A): host B wants the certificate binding
    dpop_only = a.grant(None, key.proof("POST", a.base + TOKEN))["access_token"]
    assert call(a, dpop_only, None).status_code == 200
    assert_refused(call(b, dpop_only, pki.ada), "DPoP", REQUIRED)
    # bound to the key and the certificate: without the certificate, the DPoP challenge still
    both = a.grant(pki.ada, key.proof("POST", a.base + TOKEN))["access_token"]
    assert call(b, both, pki.ada).status_code == 200
    assert_refused(call(a, both, None), "DPoP", "none was presented")
    assert_refused(call(b, both, pki.bob), "DPoP", "another client certificate")
