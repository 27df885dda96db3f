"""SPEC 16.2, certificate-bound tokens (RFC 8705) on a real ``fwrest serve`` with trustme client
certificates: ``MT`` (ES256, ``SslClientCert=1``), ``MUST`` (``"boundTokens": "mtls"``), ``PLAIN``
(no client certificates)."""

from __future__ import annotations

import base64
import hashlib
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from fwrest.verify import InvalidToken, Verifier
from tests.auth.conftest import check
from tests.auth.oauth2_support import (
    ADA,
    KEYS_ADA,
    KEYS_APP,
    WEB,
    OAuthService,
    assert_error,
    assert_invalid_token,
    error_of,
    expect,
    issue_certs,
    oauth_section,
    params_source,
    serve_oauth,
)
from tests.conftest import APP_SOURCE, client_cert, free_config, module_config

CLIENT = ("web", "Web-Secret-9q")
WELL_KNOWN_AS = "/.well-known/oauth-authorization-server/rest"
WELL_KNOWN_RS = "/.well-known/oauth-protected-resource/rest"
BOUND = "tls_client_certificate_bound_access_tokens"
# KEYS_APP's user and client, and grace, who may read every token (the scope introspect)
GRACE = {"username": "grace", "password": "Grace-Pw-5150", "scopes": ["introspect"]}
APP = APP_SOURCE + params_source(**WEB, users=[ADA, GRACE], access_expires="10m")


class Pki:
    """The client CA's bundle and two client certificates (cert, key) it issued."""

    def __init__(self, folder: Path) -> None:
        clients = trustme.CA(organization_name="Clients")
        self.ca = folder / "clients.pem"
        clients.cert_pem.write_to_path(str(self.ca))
        self.ada = client_cert(clients, folder, "ada")
        self.bob = client_cert(clients, folder, "bob")


def x5t(cert: Path) -> str:
    """RFC 8705 3.1, computed here with cryptography: SHA-256 of the DER, base64url."""
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(Encoding.DER)
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("mtls-pki"))


def _servers(certs: dict[str, Path], pki: Pki) -> dict[str, Any]:
    mutual = {"SslClientCert": 1, "SslClientCA": str(pki.ca)}
    return {
        "MT": {**oauth_section(certs, onAuthparams="app.params", signingAlg="ES256"), **mutual},
        "MUST": {**oauth_section(certs, onAuthparams="app.params", boundTokens="mtls"), **mutual},
        "PLAIN": oauth_section(certs, onAuthparams="app.params"),
    }


@pytest.fixture(scope="module")
def svc(
    ca: trustme.CA, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OAuthService]:
    def write(folder: Path, certs: dict[str, Path]) -> Path:
        extra = {"HTTPSERVER": {"StateStore": "sqlite"}}
        return free_config(folder, servers=_servers(certs, pki), app=APP, extra=extra)

    yield from serve_oauth(ca, tmp_path_factory.mktemp("mtls"), write)


Cert = tuple[Path, Path] | None


def http(svc: OAuthService, cert: Cert) -> httpx.Client:
    """A new client (its own connections) presenting ``cert``, or none."""
    ctx = ssl.create_default_context(cafile=str(svc.certs["ca"]))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return httpx.Client(verify=ctx, timeout=15)


def token_route(svc: OAuthService, port: str, cert: Cert, **data: str) -> httpx.Response:
    """A request of the token route with the form ``data`` as the client ``web``."""
    with http(svc, cert) as client:
        return client.post(svc.proc.url(port) + "/fw/oauth2/token", data=data, auth=CLIENT)


def grant(svc: OAuthService, port: str, cert: Cert) -> httpx.Response:
    return token_route(
        svc, port, cert, grant_type="password", username=KEYS_ADA[0], password=KEYS_ADA[1]
    )


def tokens(svc: OAuthService, port: str, cert: Cert) -> dict[str, Any]:
    return dict(expect(grant(svc, port, cert)).json())


def hello(svc: OAuthService, port: str, token: str, cert: Cert) -> httpx.Response:
    with http(svc, cert) as client:
        return client.get(
            svc.proc.url(port) + "/hello", headers={"Authorization": f"Bearer {token}"}
        )


def cnf(access_token: str) -> Any:
    return jwt.decode(access_token, options={"verify_signature": False}).get("cnf")


def assert_refused(response: httpx.Response, why: str) -> None:
    assert_invalid_token(response)
    challenge = response.headers["www-authenticate"]
    # the 401 keeps the protected resource metadata's URL (SPEC 16.3)
    assert "resource_metadata=" in challenge, challenge
    assert why in response.json()["detailedMessage"], response.text


def test_a_token_requested_with_a_certificate_is_bound_to_it(svc: OAuthService, pki: Pki) -> None:
    access = tokens(svc, "MT", pki.ada)["access_token"]
    assert cnf(access) == {"x5t#S256": x5t(pki.ada[0])}
    # the same certificate on another connection: let through
    assert hello(svc, "MT", access, pki.ada).status_code == 200


def test_a_bound_token_without_a_certificate_is_refused(svc: OAuthService, pki: Pki) -> None:
    access = tokens(svc, "MT", pki.ada)["access_token"]
    assert_refused(hello(svc, "MT", access, None), "none was presented")


def test_a_bound_token_with_another_certificate_is_refused(svc: OAuthService, pki: Pki) -> None:
    access = tokens(svc, "MT", pki.ada)["access_token"]
    assert_refused(hello(svc, "MT", access, pki.bob), "another client certificate")


def test_a_token_requested_without_a_certificate_stays_a_bearer_token(
    svc: OAuthService, pki: Pki
) -> None:
    access = tokens(svc, "MT", None)["access_token"]
    assert cnf(access) is None
    assert hello(svc, "MT", access, None).status_code == 200
    assert hello(svc, "MT", access, pki.bob).status_code == 200


def test_a_refresh_on_the_same_certificate_gives_a_token_bound_to_it(
    svc: OAuthService, pki: Pki
) -> None:
    first = tokens(svc, "MT", pki.ada)
    answer = token_route(
        svc, "MT", pki.ada, grant_type="refresh_token", refresh_token=first["refresh_token"]
    )
    assert answer.status_code == 200, answer.text
    access = answer.json()["access_token"]
    assert cnf(access) == {"x5t#S256": x5t(pki.ada[0])}
    assert hello(svc, "MT", access, pki.ada).status_code == 200
    assert_refused(hello(svc, "MT", access, pki.bob), "another client certificate")


def test_bound_tokens_mtls_refuses_a_token_request_without_a_certificate(
    svc: OAuthService, pki: Pki
) -> None:
    answer = assert_error(grant(svc, "MUST", None), "invalid_request")
    assert "client certificate" in answer.json()["error_description"]
    access = tokens(svc, "MUST", pki.bob)["access_token"]
    assert cnf(access) == {"x5t#S256": x5t(pki.bob[0])}
    assert hello(svc, "MUST", access, pki.bob).status_code == 200
    assert_refused(hello(svc, "MUST", access, pki.ada), "another client certificate")


def test_the_metadata_says_tokens_are_bound_where_certificates_are_asked(svc: OAuthService) -> None:
    for port, bound in (("MT", True), ("MUST", True), ("PLAIN", False)):
        origin = svc.proc.url(port).removesuffix("/rest")
        with http(svc, None) as client:
            documents = [
                client.get(origin + WELL_KNOWN_AS).json(),
                client.get(svc.proc.url(port) + "/fw/oauth2/metadata").json(),
                client.get(origin + WELL_KNOWN_RS).json(),
                client.get(svc.proc.url(port) + "/fw/oauth2/resource").json(),
            ]
        for document in documents:
            assert document.get(BOUND) is (True if bound else None), (port, document)


def test_introspection_shows_the_binding(svc: OAuthService, pki: Pki) -> None:
    bound = tokens(svc, "MT", pki.ada)["access_token"]
    plain = tokens(svc, "MT", None)["access_token"]
    with http(svc, None) as client:
        url = svc.proc.url("MT") + "/fw/oauth2/introspect"
        shown = client.post(url, data={"token": bound}, auth=CLIENT).json()
        unbound = client.post(url, data={"token": plain}, auth=CLIENT).json()
    assert shown["active"] is True and shown["cnf"] == {"x5t#S256": x5t(pki.ada[0])}, shown
    assert unbound["active"] is True and "cnf" not in unbound, unbound


def test_a_bound_token_asking_introspection_needs_its_certificate(
    svc: OAuthService, pki: Pki
) -> None:
    grace = {"username": "grace", "password": "Grace-Pw-5150", "scope": "introspect"}
    granted = expect(token_route(svc, "MT", pki.ada, grant_type="password", **grace))
    reader = granted.json()["access_token"]
    assert cnf(reader) == {"x5t#S256": x5t(pki.ada[0])}
    asked = tokens(svc, "MT", None)["access_token"]
    url = svc.proc.url("MT") + "/fw/oauth2/introspect"
    for cert, status in ((pki.ada, 200), (pki.bob, 401), (None, 401)):
        with http(svc, cert) as client:
            answer = client.post(
                url, data={"token": asked}, headers={"Authorization": f"Bearer {reader}"}
            )
        assert answer.status_code == status, (cert, answer.text)
        if status == 401:
            assert error_of(answer) == "invalid_client"
            assert 'error="invalid_token"' in answer.headers["www-authenticate"]
        else:
            assert answer.json()["active"] is True


def test_fwrest_verify_accepts_a_bound_token_with_its_certificate(
    svc: OAuthService, pki: Pki
) -> None:
    access = tokens(svc, "MT", pki.ada)["access_token"]
    ctx = ssl.create_default_context(cafile=str(svc.certs["ca"]))
    with Verifier(svc.proc.url("MT"), verify=ctx) as verifier:
        claims = verifier.verify(access, client_cert=pki.ada[0].read_bytes())
        assert claims["cnf"] == {"x5t#S256": x5t(pki.ada[0])}
        with pytest.raises(InvalidToken):
            verifier.verify(access, client_cert=pki.bob[0].read_bytes())
        with pytest.raises(InvalidToken):
            verifier.verify(access)


def test_no_token_reaches_the_log(svc: OAuthService, pki: Pki) -> None:
    issued = tokens(svc, "MT", pki.ada)
    hello(svc, "MT", issued["access_token"], pki.bob)  # a refusal, logged
    expect(grant(svc, "MUST", None), 400)
    logged = (svc.folder / "server.log").read_text(errors="replace")
    logged += svc.proc.stderr_path.read_text(errors="replace")
    assert "/hello" in logged  # the access line is there
    for secret in (issued["access_token"], issued["refresh_token"], *CLIENT[1:], KEYS_ADA[1]):
        assert secret not in logged


@pytest.mark.parametrize(
    ("keys", "needle"),
    [({}, "asks clients for none"),
     ({"SslClientCert": 1, "boundTokens": "MTLS"}, "is not a binding fwrest knows"),
     ({"SslClientCert": 1, "boundTokens": True}, "is not a binding fwrest knows")],
)  # fmt: skip
def test_bound_tokens_is_checked_at_start(
    ca: trustme.CA, pki: Pki, tmp_path: Path, keys: dict[str, Any], needle: str
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    auth = {"boundTokens": keys.get("boundTokens", "mtls")}
    section = oauth_section(certs, onAuthparams="tauth_mtls_app.params", **auth)
    if "SslClientCert" in keys:
        section.update(SslClientCert=keys["SslClientCert"], SslClientCA=str(pki.ca))
    config = module_config(tmp_path, "tauth_mtls_app", servers={"B": section}, app=KEYS_APP)
    done = check(config, real=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert needle in done.stdout + done.stderr
