"""SPEC 16.3: protected resource metadata (RFC 9728) and resource indicators (RFC 8707). In process
(module ``tauth_resource_app``): ``RS`` (ES256, ``/rest`` and ``/api``, scopes), ``ISS`` (configured
``issuer``), ``OFF`` (``oauth2/resource`` disabled); the discovery from a 401 by a client that
knows only a protected URL. Another section's port as ``resource=``: on a real ``fwrest serve``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.auth.oauth2_support import (
    ADA,
    BEARER_REALM,
    KEYS_ADA,
    WEB,
    LocalService,
    OAuthService,
    assert_error,
    assert_invalid_token,
    assert_missing_token,
    error_of,
    expect,
    local_service,
    oauth_section,
    params_source,
    served_service,
)
from tests.conftest import APP_SOURCE, module_config

MODULE = "tauth_resource_app"
WELL_KNOWN = "/.well-known/oauth-protected-resource"
APP = APP_SOURCE + params_source(
    **WEB, users=[{**ADA, "scopes": ["orders:read"]}], access_expires="10m"
)
GATEWAY = "https://api.example.com/gateway"
LOCATIONS = {"API": {"Path": "/api", "ThreadPool": "POOL"}}


def _servers(certs: dict[str, Path], params: str) -> dict[str, Any]:
    off = oauth_section(certs, onAuthparams=params)
    off["FwData"]["NativeRoutes"] = {"disable": ["oauth2/resource"]}
    return {
        "RS": oauth_section(certs, "ROOT,API", onAuthparams=params, signingAlg="ES256"),
        "ISS": oauth_section(certs, "ROOT,API", onAuthparams=params, issuer=GATEWAY),
        "OFF": off,
    }


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}, **LOCATIONS}
    servers = _servers(certs, f"{MODULE}.params")
    return module_config(folder, MODULE, servers=servers, app=APP, extra=extra)


svc = local_service(_write, "resource")
served = served_service(_write, "resource-served")  # real ports: one per section


def _origin(svc: LocalService | OAuthService, port: str) -> str:
    issuer = svc[port].get("/fw/oauth2/metadata").json()["issuer"]
    return str(issuer).removesuffix("/rest")


def test_each_location_publishes_its_document_at_the_root_and_under_the_location(
    svc: LocalService,
) -> None:
    rs = svc["RS"]
    origin = _origin(svc, "RS")
    assert origin.startswith("https://127.0.0.1:")
    for path in ("/rest", "/api"):
        # RFC 9728 3.1: at the port's root, the location's path appended; no credentials
        answer = expect(rs.http.get(WELL_KNOWN + path))
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["cache-control"] == "max-age=300"
        assert answer.json() == {
            "resource": origin + path,
            "authorization_servers": [origin + path],
            "scopes_supported": ["default", "orders:read"],
            "bearer_methods_supported": ["header"],
            # SPEC 16.2: DPoP is accepted on every oAuth2 port
            "dpop_signing_alg_values_supported": ["ES256", "EdDSA", "RS256"],
        }
        # the native route of the location answers the same document
        assert expect(rs.http.get(path + "/fw/oauth2/resource")).json() == answer.json()
        # the authorization server it names publishes its RFC 8414 metadata
        meta = rs.http.get(path + "/fw/oauth2/metadata").json()
        assert meta["issuer"] == answer.json()["authorization_servers"][0]
    assert rs.http.head(WELL_KNOWN + "/rest").status_code == 200
    # no document for a path that is no location's: behind the scheme like any other path
    assert_missing_token(rs.http.get(WELL_KNOWN + "/nowhere"))
    assert_missing_token(rs.http.get(WELL_KNOWN))


def test_the_well_known_paths_answer_every_method_without_the_scheme(svc: LocalService) -> None:
    # SPEC 12.2: outside the port's scheme, any method: answered as the route under the location
    rs = svc["RS"]
    metadata = "/.well-known/oauth-authorization-server/rest"
    pairs = [
        (WELL_KNOWN + "/rest", "/rest/fw/oauth2/resource"),
        (metadata, "/rest/fw/oauth2/metadata"),
    ]
    for well_known, route in pairs:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            answer = rs.http.request(method, well_known)
            twin = rs.http.request(method, route)
            assert answer.status_code == twin.status_code == 405, (method, well_known)
            assert answer.headers["allow"] == twin.headers["allow"] == "GET, HEAD, OPTIONS"
            assert "www-authenticate" not in answer.headers
        options = rs.http.options(well_known)
        assert options.status_code == 200, well_known
        assert options.headers["allow"] == rs.http.options(route).headers["allow"]
        assert options.content == b""


def test_a_configured_issuer_gives_its_origin_and_the_location_s_path(svc: LocalService) -> None:
    iss = svc["ISS"]
    doc = iss.http.get(WELL_KNOWN + "/api").json()
    assert doc["resource"] == "https://api.example.com/api"
    assert doc["authorization_servers"] == ["https://api.example.com/gateway"]
    assert doc["bearer_methods_supported"] == ["header"]
    answer = iss.get("/hello")
    metadata = f'resource_metadata="https://api.example.com{WELL_KNOWN}/rest"'
    assert answer.headers["www-authenticate"] == f"{BEARER_REALM}, {metadata}"


def test_every_401_of_the_bearer_check_names_the_location_s_document(svc: LocalService) -> None:
    rs = svc["RS"]
    origin = _origin(svc, "RS")
    for path in ("/rest", "/api"):
        expected = f'resource_metadata="{origin}{WELL_KNOWN}{path}"'
        missing = rs.http.get(path + "/hello")
        assert_missing_token(missing)
        assert missing.headers["www-authenticate"] == f"{BEARER_REALM}, {expected}"
        invalid = rs.http.get(path + "/hello", headers={"Authorization": "Bearer not.a.token"})
        assert_invalid_token(invalid)
        challenge = invalid.headers["www-authenticate"]
        assert challenge.startswith(f"{BEARER_REALM}, {expected}, "), challenge
        assert 'error="invalid_token"' in challenge, challenge
    # a path outside every location: the port's first location's document
    outside = rs.http.get("/elsewhere")
    assert_missing_token(outside)
    assert f'resource_metadata="{origin}{WELL_KNOWN}/rest"' in outside.headers["www-authenticate"]


def test_a_token_request_may_name_any_location_of_the_section(svc: LocalService) -> None:
    rs = svc["RS"]
    origin = _origin(svc, "RS")
    for resource in (origin + "/rest", origin + "/api", origin + "/api/"):
        answer = rs.grant(*KEYS_ADA, resource=resource)
        assert answer.status_code == 200, (resource, answer.text)
        token = answer.json()["access_token"]
        # docs/decisions.md: the audience stays the server section (every location of it)
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["aud"] == "RS"
        assert rs.http.get("/api/hello", headers={"Authorization": f"Bearer {token}"}).is_success
        assert rs.get("/hello", token).status_code == 200
    # the host is folded, :443 and one trailing slash ignored; a location's sub-path is not one
    host, _, port = origin.removeprefix("https://").partition(":")
    assert port != "443"
    assert rs.grant(*KEYS_ADA, resource=f"HTTPS://{host.upper()}:{port}/rest").is_success
    assert_error(rs.grant(*KEYS_ADA, resource=origin + "/api/hello"), "invalid_target")


def test_another_host_or_port_with_a_location_s_path_is_an_invalid_target(
    served: OAuthService,
) -> None:
    # SPEC 16.3: the URL the document gives (or another location of the same section); the
    # path of a location on another port (another section's, or any host's) is another resource
    rs = served["RS"]
    origin, other = _origin(served, "RS"), _origin(served, "OFF")
    assert origin != other
    # another host of the service on the section's port (SPEC 12.2: one issuer; HostName
    # 0.0.0.0's document names a host no client uses)
    port = origin.rpartition(":")[2]
    for resource in (origin + "/api", origin + "/rest/", f"https://10.0.0.2:{port}/api",
                     f"https://0.0.0.0:{port}/rest", f"https://localhost:{port}/rest"):  # fmt: skip
        assert rs.grant(*KEYS_ADA, resource=resource).status_code == 200, resource
    for resource in ("https://evil.example/api", "https://10.0.0.2:8443/api", other + "/api",
                     other + "/rest", "https://evil.example/rest/"):  # fmt: skip
        answer = assert_error(rs.grant(*KEYS_ADA, resource=resource), "invalid_target")
        assert "access_token" not in answer.json()
    pair = rs.tokens(*KEYS_ADA)
    refused = rs.refresh(pair["refresh_token"], resource="https://evil.example/rest")
    assert refused.status_code == 400 and error_of(refused) == "invalid_target"


@pytest.mark.parametrize(
    "resource",
    ["https://127.0.0.1:1/elsewhere", "https://elsewhere.example/other", "http://127.0.0.1/rest",
     "https://127.0.0.1/rest#frag", "https://127.0.0.1/rest?x=1", "urn:example:rest", "/rest"],
)  # fmt: skip
def test_another_resource_is_an_invalid_target(svc: LocalService, resource: str) -> None:
    answer = assert_error(svc["RS"].grant(*KEYS_ADA, resource=resource), "invalid_target")
    assert answer.headers["cache-control"] == "no-store"


def test_under_a_configured_issuer_the_resource_is_compared_whole(svc: LocalService) -> None:
    iss = svc["ISS"]
    assert iss.grant(*KEYS_ADA, resource="https://api.example.com/api").status_code == 200
    assert iss.grant(*KEYS_ADA, resource="https://API.example.com:443/rest").status_code == 200
    assert_error(iss.grant(*KEYS_ADA, resource="https://127.0.0.1/api"), "invalid_target")


def test_the_refresh_grant_checks_the_resource_too(svc: LocalService) -> None:
    rs = svc["RS"]
    pair = rs.tokens(*KEYS_ADA)
    refused = rs.refresh(pair["refresh_token"], resource="https://elsewhere.example/other")
    assert refused.status_code == 400 and error_of(refused) == "invalid_target"
    # refused before anything was spent: the refresh token still works
    assert rs.refresh(pair["refresh_token"]).status_code == 200


def test_native_routes_disable_takes_the_document_away(svc: LocalService) -> None:
    off = svc["OFF"]
    assert off.http.get("/rest/fw/oauth2/resource").status_code in (401, 404)
    # its path is then checked as any other, and no 401 names a document nobody serves
    # (docs/decisions.md): the bearer's and the DPoP scheme's
    for path in (WELL_KNOWN + "/rest", "/rest/hello"):
        refused = expect(off.http.get(path), 401)
        assert refused.headers.get_list("www-authenticate") == [BEARER_REALM]
    wrong = expect(off.http.get("/rest/hello", headers={"Authorization": "Bearer x.y.z"}), 401)
    assert "resource_metadata" not in wrong.headers["www-authenticate"]
    dpop = expect(off.http.get("/rest/hello", headers={"Authorization": "DPoP x.y.z"}), 401)
    assert dpop.headers["www-authenticate"].startswith("DPoP ")
    assert "resource_metadata" not in dpop.headers["www-authenticate"]
    # the listing of a port that serves it names the route, public
    rs = svc["RS"]
    token = rs.tokens(*KEYS_ADA)["access_token"]
    rows = rs.get("/fw/rest/list/service", token).json()
    public = {row["endpoint"]: row["public"] for row in rows if row["type"] == "fw"}
    assert public["/fw/oauth2/resource"] is True


# -- a client that knows only a protected URL ---------------------------------------------------


def test_a_client_discovers_the_authorization_server_from_the_401(svc: LocalService) -> None:
    http = svc["RS"].http  # follows the absolute URLs the answers give, as any client
    protected = _origin(svc, "RS") + "/api/hello"
    refused = expect(http.get(protected), 401)
    found = re.search(r'resource_metadata="([^"]+)"', refused.headers["www-authenticate"])
    assert found is not None, refused.headers
    resource = expect(http.get(found.group(1))).json()
    assert protected.startswith(resource["resource"] + "/")
    assert resource["bearer_methods_supported"] == ["header"]
    issuer = resource["authorization_servers"][0]
    # RFC 8414 3.1: the well-known path between the issuer's host and its path
    origin, _, path = issuer.partition("://")[2].partition("/")
    meta = expect(http.get(f"https://{origin}/.well-known/oauth-authorization-server/{path}"))
    assert meta.json()["issuer"] == issuer
    grant = {"grant_type": "password", "username": KEYS_ADA[0], "password": KEYS_ADA[1]}
    granted = http.post(
        meta.json()["token_endpoint"], data={**grant, "resource": resource["resource"]}
    )
    assert granted.status_code == 200, granted.text
    token = granted.json()["access_token"]
    answer = expect(http.get(protected, headers={"Authorization": f"Bearer {token}"}))
    assert answer.json()["hello"] == "world"
    elsewhere = {**grant, "resource": resource["resource"] + "/elsewhere"}
    assert_error(http.post(meta.json()["token_endpoint"], data=elsewhere), "invalid_target")
