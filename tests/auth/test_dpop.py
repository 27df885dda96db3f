"""SPEC 16.2, DPoP (RFC 9449) in process (module ``tauth_dpop_app``): proofs at the token route and
the bearer check, and the refusals. Ports ``DP`` (HS256, DPoP accepted), ``REQ`` (``"boundTokens":
"dpop"``), ``PX`` (behind ``TrustedProxies``); clients ``web`` (confidential), ``spa`` (public).
Over TLS across workers and hosts: tests/e2e/test_dpop_hosts.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from tests.auth.dpop_support import ALGS_PARAM, DpopKey, dpop_headers, unsigned_proof
from tests.auth.oauth2_support import (
    ADA,
    LocalOAuth,
    LocalService,
    assert_error,
    error_of,
    expect,
    local_service,
    oauth_section,
    params_source,
)
from tests.auth.oauth2_support import WEB as WEB_CLIENT
from tests.auth.test_authorization_code import login_code
from tests.conftest import APP_SOURCE, module_config

MODULE = "tauth_dpop_app"
SPA = {"client_id": "spa", "public": True, "redirect_uris": ["https://spa.example/cb"]}
GRANTS = ("password", "refresh_token", "authorization_code")
TYPES = [{"grant_type": grant} for grant in GRANTS]
USERS = [{**ADA, "scopes": ["introspect"]}]
APP = (
    APP_SOURCE
    + params_source(client=[WEB_CLIENT, SPA], users=USERS, access_expires="10m", types=TYPES)
    + '\n@get("/reports", scopes=["reports"])\ndef reports():\n    return {"reports": []}\n'
)
WEB = ("web", "Web-Secret-9q")
ORIGIN_HOST = "api.example.com"


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    params = f"{MODULE}.params"
    servers = {
        "DP": oauth_section(certs, onAuthparams=params),
        "REQ": oauth_section(certs, onAuthparams=params, boundTokens="dpop"),
        "PX": {**oauth_section(certs, onAuthparams=params), "TrustedProxies": "127.0.0.1"},
    }
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}}
    general = {"rest_log_level": 5}
    return module_config(folder, MODULE, servers=servers, app=APP, extra=extra, general=general)


svc = local_service(_write, "dpop")


@pytest.fixture
def dp(svc: LocalService) -> LocalOAuth:
    return svc["DP"]


@pytest.fixture(scope="module")
def key() -> DpopKey:
    return DpopKey("ES256")


def url(port: LocalOAuth, path: str) -> str:
    return f"{port.http.base_url}{port.base}{path}".rstrip("/")


def token_request(port: LocalOAuth, key: DpopKey | None, data: dict[str, str] | None = None,
                  proof: str | None = None, **kw: Any) -> httpx.Response:  # fmt: skip
    headers = dict(kw.pop("headers", {}))
    if proof is None and key is not None:
        proof = key.proof("POST", url(port, "/fw/oauth2/token"))
    if proof is not None:
        headers["DPoP"] = proof
    form = {"grant_type": "password", **ADA} if data is None else data
    return port.post(form, headers=headers, **kw)


def bound_pair(port: LocalOAuth, key: DpopKey, **kw: Any) -> dict[str, Any]:
    return dict(expect(token_request(port, key, **kw)).json())


def call(
    port: LocalOAuth, key: DpopKey, token: str, path: str = "/hello", **proof: Any
) -> httpx.Response:
    headers = dpop_headers(token, key.proof("GET", url(port, path), token, **proof))
    return port.http.get(port.base + path, headers=headers)


def assert_dpop_refusal(answer: httpx.Response, error: str = "invalid_dpop_proof") -> None:
    assert answer.status_code == 401, answer.text
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith("DPoP "), challenge
    assert ALGS_PARAM in challenge, challenge
    assert f'error="{error}"' in challenge, challenge
    assert 'resource_metadata="https://' in challenge, challenge  # SPEC 16.3 kept
    assert answer.json()["code"] == 401


# -- issuance and use ---------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["ES256", "EdDSA", "RS256"])
def test_a_proof_binds_the_access_token_to_its_key(svc: LocalService, alg: str) -> None:
    dp, key = svc["DP"], DpopKey(alg)
    pair = bound_pair(dp, key)
    assert pair["token_type"] == "DPoP"
    claims = jwt.decode(pair["access_token"], options={"verify_signature": False})
    assert claims["cnf"] == {"jkt": key.jkt}
    expect(call(dp, key, pair["access_token"]))
    # a confidential client too (its refresh token is bound by its authentication)
    web = bound_pair(dp, key, auth=WEB)
    assert web["token_type"] == "DPoP"
    assert call(dp, key, web["access_token"]).status_code == 200


def test_a_missing_scope_challenges_in_the_scheme_the_token_came_with(
    dp: LocalOAuth, key: DpopKey
) -> None:
    """RFC 9449 7.1: a DPoP-bound token without a route's scope is 403 insufficient_scope
    with the ``DPoP`` challenge (its algorithms; no resource metadata, as Bearer's 403:
    docs/decisions.md); a bearer token's stays ``Bearer``."""
    refused = call(dp, key, bound_pair(dp, key)["access_token"], "/reports")
    assert refused.status_code == 403, refused.text
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith("DPoP ") and ALGS_PARAM in challenge, challenge
    assert 'error="insufficient_scope", scope="reports"' in challenge, challenge
    bearer = dp.get("/reports", dp.tokens(*ADA.values())["access_token"])
    assert bearer.status_code == 403
    assert bearer.headers["www-authenticate"].startswith('Bearer error="insufficient_scope"')


def test_a_request_without_proof_keeps_bearer_tokens(dp: LocalOAuth) -> None:
    pair = dp.tokens(*ADA.values())
    assert pair["token_type"] == "Bearer"
    assert "cnf" not in jwt.decode(pair["access_token"], options={"verify_signature": False})
    assert dp.get("/hello", pair["access_token"]).status_code == 200


def test_a_dpop_token_sent_as_bearer_is_refused(dp: LocalOAuth, key: DpopKey) -> None:
    token = bound_pair(dp, key)["access_token"]
    assert_dpop_refusal(dp.get("/hello", token), "invalid_token")
    # with a valid proof beside it, still refused: the scheme says DPoP (RFC 9449 7.1)
    proof = key.proof("GET", url(dp, "/hello"), token)
    answer = dp.http.get(
        dp.base + "/hello", headers={"Authorization": f"Bearer {token}", "DPoP": proof}
    )
    assert_dpop_refusal(answer, "invalid_token")
    # an unbound token under the DPoP scheme is refused too
    plain = dp.tokens(*ADA.values())["access_token"]
    proof = key.proof("GET", url(dp, "/hello"), plain)
    answer = dp.http.get(dp.base + "/hello", headers=dpop_headers(plain, proof))
    assert_dpop_refusal(answer, "invalid_token")
    # the DPoP scheme without a token (or not one token): its challenge, as no token's
    for value in ("DPoP", "DPoP ", "DPoP,", "dpop a b"):
        answer = dp.http.get(dp.base + "/hello", headers={"Authorization": value})
        assert answer.status_code == 401, (value, answer.text)
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith("DPoP ") and ALGS_PARAM in challenge, (value, challenge)
        assert "error=" not in challenge, (value, challenge)


def _refusals(key: DpopKey, other: DpopKey, port: LocalOAuth, token: str) -> dict[str, Any]:
    target = url(port, "/hello")
    hs256 = {"htm": "GET", "htu": target, "iat": int(time.time()), "jti": "j1"}
    oct_key = {"typ": "dpop+jwt", "jwk": {"kty": "oct", "k": "a2tr"}}
    private = {"jwk": {**key.jwk, "d": "AAAA"}}
    return {
        "stale": key.proof("GET", target, token, iat=time.time() - 120),
        "future": key.proof("GET", target, token, iat=time.time() + 120),
        "another method": key.proof("POST", target, token),
        "another url": key.proof("GET", url(port, "/other"), token),
        "another host": key.proof("GET", target.replace("127.0.0.1", "evil.example"), token),
        "http": key.proof("GET", target.replace("https://", "http://"), token),
        "another token": key.proof("GET", target, token + "x"),
        "no ath": key.proof("GET", target, None),
        "wrong key": other.proof("GET", target, token),
        "alg none": unsigned_proof("GET", target, key.jwk),
        "HS256": jwt.encode(hs256, "k" * 32, algorithm="HS256", headers=oct_key),
        "private key in jwk": key.proof("GET", target, token, header=private),
        "another typ": key.proof("GET", target, token, header={"typ": "JWT"}),
        "no jwk": key.proof("GET", target, token, header={"jwk": None}),
        "no jti": key.proof("GET", target, token, claims={"jti": None}),
        "empty jti": key.proof("GET", target, token, claims={"jti": ""}),
        "blank jti": key.proof("GET", target, token, claims={"jti": " "}),
        "jti not a string": key.proof("GET", target, token, claims={"jti": 7}),
        "jwk of another key": key.proof("GET", target, token, header={"jwk": other.jwk}),
        "garbage": "not-a-jwt",
    }


BAD_PROOFS = ["stale", "future", "another method", "another url", "another host", "http",
              "another token", "no ath", "wrong key", "alg none", "HS256", "private key in jwk",
              "another typ", "no jwk", "no jti", "empty jti", "blank jti", "jti not a string",
              "jwk of another key", "garbage"]  # fmt: skip


@pytest.mark.parametrize("case", BAD_PROOFS)
def test_the_bearer_check_refuses_a_bad_proof(dp: LocalOAuth, key: DpopKey, case: str) -> None:
    token = bound_pair(dp, key)["access_token"]
    proof = _refusals(key, DpopKey("ES256"), dp, token)[case]
    assert_dpop_refusal(dp.http.get(dp.base + "/hello", headers=dpop_headers(token, proof)))
    # the token itself is fine: with a good proof it goes through
    assert call(dp, key, token).status_code == 200


def test_a_missing_proof_and_a_replayed_one_are_refused(dp: LocalOAuth, key: DpopKey) -> None:
    token = bound_pair(dp, key)["access_token"]
    assert_dpop_refusal(dp.http.get(dp.base + "/hello", headers={"Authorization": f"DPoP {token}"}))
    proof = key.proof("GET", url(dp, "/hello"), token)
    expect(dp.http.get(dp.base + "/hello", headers=dpop_headers(token, proof)))
    again = dp.http.get(dp.base + "/hello", headers=dpop_headers(token, proof))
    assert_dpop_refusal(again)
    assert "used before" in again.headers["www-authenticate"]
    # two proofs in one request
    two = {"Authorization": f"DPoP {token}", "DPoP": f"{proof}, {proof}"}
    assert_dpop_refusal(dp.http.get(dp.base + "/hello", headers=two))


def test_the_query_is_not_part_of_htu(dp: LocalOAuth, key: DpopKey) -> None:
    token = bound_pair(dp, key)["access_token"]
    proof = key.proof("GET", url(dp, "/hello"), token)
    expect(dp.http.get(dp.base + "/hello?x=1", headers=dpop_headers(token, proof)))


def test_behind_a_trusted_proxy_htu_is_the_forwarded_host(svc: LocalService, key: DpopKey) -> None:
    px = svc["PX"]
    forwarded = {"X-Forwarded-Host": ORIGIN_HOST, "X-Forwarded-Proto": "https"}
    origin = key.proof("POST", f"https://{ORIGIN_HOST}/rest/fw/oauth2/token")
    token = bound_pair(px, key, proof=origin, headers=forwarded)["access_token"]
    proof = key.proof("GET", f"https://{ORIGIN_HOST}/rest/hello", token)
    expect(px.http.get("/rest/hello", headers={**dpop_headers(token, proof), **forwarded}))
    # the same URL without the balancer's header names another host than the request's
    proof = key.proof("GET", f"https://{ORIGIN_HOST}/rest/hello", token)
    assert_dpop_refusal(px.http.get("/rest/hello", headers=dpop_headers(token, proof)))
    # a client that reached the balancer over http: no https htu matches
    proof = key.proof("GET", f"https://{ORIGIN_HOST}/rest/hello", token)
    plain = {**forwarded, "X-Forwarded-Proto": "http"}
    assert_dpop_refusal(px.http.get("/rest/hello", headers={**dpop_headers(token, proof), **plain}))


# -- the token route ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["stale", "future", "another url", "alg none", "private key in jwk", "wrong typ", "empty jti", "blank jti", "garbage"])  # fmt: skip
def test_the_token_route_refuses_a_bad_proof_with_400(
    dp: LocalOAuth, key: DpopKey, case: str
) -> None:
    target = url(dp, "/fw/oauth2/token")
    proof = {
        "stale": key.proof("POST", target, iat=time.time() - 120),
        "future": key.proof("POST", target, iat=time.time() + 120),
        "another url": key.proof("POST", url(dp, "/hello")),
        "alg none": unsigned_proof("POST", target, key.jwk),
        "private key in jwk": key.proof("POST", target, header={"jwk": {**key.jwk, "d": "AA"}}),
        "wrong typ": key.proof("POST", target, header={"typ": "jwt"}),
        "empty jti": key.proof("POST", target, claims={"jti": ""}),
        "blank jti": key.proof("POST", target, claims={"jti": " \t"}),
        "garbage": "x.y.z",
    }[case]
    answer = assert_error(token_request(dp, None, proof=proof), "invalid_dpop_proof")
    assert answer.headers["cache-control"] == "no-store"


def test_the_token_route_refuses_a_replayed_proof(dp: LocalOAuth, key: DpopKey) -> None:
    proof = key.proof("POST", url(dp, "/fw/oauth2/token"))
    assert token_request(dp, None, proof=proof).status_code == 200
    assert_error(token_request(dp, None, proof=proof), "invalid_dpop_proof")


def test_boundtokens_dpop_makes_the_proof_mandatory(svc: LocalService, key: DpopKey) -> None:
    req = svc["REQ"]
    assert_error(req.grant(*ADA.values()), "invalid_dpop_proof")
    token = bound_pair(req, key)["access_token"]
    assert call(req, key, token).status_code == 200
    # without a token the challenge is DPoP's
    missing = expect(req.http.get(req.base + "/hello"), 401)
    assert missing.headers["www-authenticate"].startswith("DPoP " + ALGS_PARAM)
    assert "error" not in missing.headers["www-authenticate"]  # RFC 6750 3.1
    # an unbound token (issued before boundTokens was set) is refused: forged with the port's key
    from tests.auth.oauth2_support import signing_key

    claims = jwt.decode(token, options={"verify_signature": False})
    del claims["cnf"]
    unbound = jwt.encode(
        claims, signing_key(svc.folder), algorithm="HS256", headers={"typ": "at+jwt"}
    )
    assert_dpop_refusal(req.get("/hello", unbound), "invalid_token")
    # a malformed token too, whichever scheme carries it (it got a Bearer challenge)
    for scheme in ("Bearer", "DPoP"):
        bad = req.http.get(req.base + "/hello", headers={"Authorization": f"{scheme} abc"})
        assert_dpop_refusal(bad, "invalid_token")


def test_a_malformed_token_sent_with_the_dpop_scheme_gets_the_dpop_challenge(
    dp: LocalOAuth,
) -> None:
    """DPoP optional: the DPoP scheme gets DPoP's challenge (RFC 9449 7.1), Bearer Bearer's."""
    bad = dp.http.get(dp.base + "/hello", headers={"Authorization": "DPoP abc"})
    assert_dpop_refusal(bad, "invalid_token")
    bearer = dp.http.get(dp.base + "/hello", headers={"Authorization": "Bearer abc"})
    assert bearer.headers["www-authenticate"].startswith("Bearer ")


# -- refresh tokens -----------------------------------------------------------------------------


def test_a_public_client_s_refresh_token_is_bound_to_its_key(dp: LocalOAuth, key: DpopKey) -> None:
    pair = bound_pair(dp, key, data={"grant_type": "password", "client_id": "spa", **ADA})
    refresh = {"grant_type": "refresh_token", "refresh_token": pair["refresh_token"]}
    refresh["client_id"] = "spa"
    assert_error(token_request(dp, None, data=refresh), "invalid_dpop_proof")
    assert_error(token_request(dp, DpopKey("EdDSA"), data=refresh), "invalid_dpop_proof")
    # refused unspent: the holder of the key refreshes, and the new pair is bound again
    renewed = expect(token_request(dp, key, data=refresh))
    assert renewed.json()["token_type"] == "DPoP"
    refresh["refresh_token"] = renewed.json()["refresh_token"]
    assert token_request(dp, None, data=refresh).status_code == 400
    assert token_request(dp, key, data=refresh).status_code == 200


def test_the_code_grant_binds_a_public_client_s_family_to_its_key(
    dp: LocalOAuth, key: DpopKey
) -> None:
    # ada logs in at the authorize route (her password is test_authorization_code.py's too)
    value, verifier, _params = login_code(dp, redirect_uri="https://spa.example/cb")
    redeem = {"grant_type": "authorization_code", "code": value, "client_id": "spa",
              "redirect_uri": "https://spa.example/cb", "code_verifier": verifier}  # fmt: skip
    pair = bound_pair(dp, key, data=redeem)
    assert pair["token_type"] == "DPoP"
    assert call(dp, key, pair["access_token"]).status_code == 200
    refresh = {"grant_type": "refresh_token", "refresh_token": pair["refresh_token"]}
    refresh["client_id"] = "spa"
    assert_error(token_request(dp, DpopKey("ES256"), data=refresh), "invalid_dpop_proof")
    # the code redeemed again revokes the bound family its first redemption issued
    assert_error(token_request(dp, key, data=redeem), "invalid_grant")
    revoked = call(dp, key, pair["access_token"])
    assert revoked.status_code == 401 and "revoked" in revoked.headers["www-authenticate"]
    assert token_request(dp, key, data=refresh).status_code == 400


def test_a_confidential_client_s_refresh_token_is_not_bound(dp: LocalOAuth, key: DpopKey) -> None:
    pair = bound_pair(dp, key, auth=WEB)
    refreshed = expect(dp.refresh(pair["refresh_token"], client_id=WEB[0], client_secret=WEB[1]))
    assert refreshed.json()["token_type"] == "Bearer"


# -- metadata, introspection, logs -------------------------------------------------------------


def test_the_metadata_documents_name_dpop(svc: LocalService) -> None:
    for name, required in (("DP", False), ("REQ", True)):
        port = svc[name]
        meta = port.http.get("/rest/fw/oauth2/metadata").json()
        assert meta["dpop_signing_alg_values_supported"] == ["ES256", "EdDSA", "RS256"]
        resource = port.http.get("/rest/fw/oauth2/resource").json()
        assert resource["dpop_signing_alg_values_supported"] == ["ES256", "EdDSA", "RS256"]
        assert resource.get("dpop_bound_access_tokens_required", False) is required


def test_introspection_shows_cnf(dp: LocalOAuth, key: DpopKey) -> None:
    pair = bound_pair(dp, key, data={"grant_type": "password", "client_id": "spa", **ADA})
    # a token with the scope introspect may describe any client's tokens (SPEC 12.3)
    asking = dp.tokens(*ADA.values(), scope="introspect")["access_token"]
    for token in (pair["access_token"], pair["refresh_token"]):
        answer = dp.http.post("/rest/fw/oauth2/introspect", data={"token": token},
                              headers={"Authorization": f"Bearer {asking}"})  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert answer.json()["active"] is True, answer.text
        assert answer.json()["cnf"] == {"jkt": key.jkt}
    # an unbound token has none
    answer = dp.http.post("/rest/fw/oauth2/introspect", data={"token": asking}, auth=WEB)
    assert answer.json()["active"] is True and "cnf" not in answer.json()


def test_a_dpop_token_is_no_bearer_at_introspection(dp: LocalOAuth, key: DpopKey) -> None:
    bound = bound_pair(dp, key, data={"grant_type": "password", "scope": "introspect", **ADA})
    answer = dp.http.post("/rest/fw/oauth2/introspect", data={"token": bound["access_token"]},
                          headers={"Authorization": f"Bearer {bound['access_token']}"})  # fmt: skip
    assert answer.status_code == 401, answer.text
    assert error_of(answer) == "invalid_client"
    assert "DPoP-bound" in answer.headers["www-authenticate"]


def test_no_proof_or_token_reaches_the_log(svc: LocalService, key: DpopKey) -> None:
    dp = svc["DP"]
    token_proof = key.proof("POST", url(dp, "/fw/oauth2/token"))
    pair = bound_pair(dp, key, proof=token_proof)
    token = pair["access_token"]
    proof = key.proof("GET", url(dp, "/hello"), token)
    assert dp.http.get(dp.base + "/hello", headers=dpop_headers(token, proof)).is_success
    refused = key.proof("GET", url(dp, "/other"), token)
    dp.http.get(dp.base + "/hello", headers=dpop_headers(token, refused))
    log = svc.log()
    assert "dpop: ***" in log  # rest_log_level 5 writes the headers: masked
    for secret in (token_proof, proof, refused, token, pair["refresh_token"]):
        assert secret not in log
        if "." in secret:  # a JWT: nor its signature alone
            assert secret.rpartition(".")[2] not in log
