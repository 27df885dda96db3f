"""SPEC 16.2, DPoP over real TLS across workers and hosts: one host of two workers on sqlite, or two
of two on one ``redis-server`` (as test_hosts_state.py). httpx with PyJWT proofs (Authlib has no
DPoP client); each check is asked of every worker through a kept-alive connection. A public client's
grant with a proof, the token used on every worker with fresh proofs, refreshed on the other host
with its key's proof (refused without). A replayed proof (hosts behind one balancer,
``X-Forwarded-Host``, so one proof names one URL) is refused by every other worker, at the bearer
check and the token route (the store keeps its id for its window). A proof with an empty or blank
``jti`` is refused everywhere; an ``htu`` with dot segments names the route it resolves to. No
redis-server: a failure, never a skip."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.auth.dpop_support import DpopKey, dpop_headers
from tests.auth.oauth2_support import PID_APP, PID_USERS, TOKEN, WorkersHost, bearer
from tests.conftest import free_config, tls_server
from tests.e2e.support import each_worker, one_or_two_hosts, with_store

WORKERS = 2
BALANCER = "api.example.com"
FORWARDED = {"X-Forwarded-Host": BALANCER, "X-Forwarded-Proto": "https"}
# PID_APP's params() redefined below it: its clients web and spa (public, for the proof grant)
APP = (
    PID_APP
    + """

def params():
    return {
        "client": [
            {"client_id": "web", "client_secret": "Web-Secret-9q"},
            {"client_id": "spa", "public": True, "redirect_uris": ["https://spa.example/cb"]},
        ],
        "users": [{"username": u, "password": p} for u, p in USERS.items()],
        "access_expires": "1h",
    }
"""
)


def host_config(folder: Path, certs: dict[str, Path], redis_url: str | None) -> Path:
    oauth = {"scheme": "oAuth2", "onAuth": "", "onAuthparams": "app.params"}
    server = tls_server(certs, TrustedProxies="127.0.0.1", FwData={"Authorization": oauth})
    # the default store (sqlite), or the shared Redis
    return with_store(free_config(folder, app=APP, servers={"OAUTH": server}), redis_url)


@pytest.fixture(scope="module", params=["one-host-two-workers", "two-hosts-one-redis"])
def hosts(
    ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[list[WorkersHost]]:
    root = tmp_path_factory.mktemp("dpop-hosts")
    two = request.param == "two-hosts-one-redis"
    with one_or_two_hosts(ca, root, two, host_config, WORKERS) as started:
        yield [WorkersHost(p, p.config.parent / "certs" / "ca.pem", WORKERS) for p in started]


def grant(
    host: WorkersHost,
    key: DpopKey,
    form: dict[str, str],
    proof: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    proof = proof or key.proof("POST", host.base + TOKEN)
    with host.client() as http:
        return http.post(host.base + TOKEN, data=form, headers={"DPoP": proof, **(headers or {})})


def every_worker(hosts: list[WorkersHost]) -> list[tuple[WorkersHost, int, httpx.Client]]:
    """(host, pid, a client kept alive to that worker) for each worker of each host."""
    probe = hosts[0].tokens("bob")["access_token"]
    return each_worker(hosts, [host.oauth_workers(probe) for host in hosts])


def close(workers: list[tuple[WorkersHost, int, httpx.Client]]) -> None:
    for _, _, http in workers:
        http.close()


def test_a_public_client_s_whole_flow_on_every_worker_and_host(hosts: list[WorkersHost]) -> None:
    a, b = hosts[0], hosts[-1]
    key = DpopKey("ES256")
    form = {"grant_type": "password", "client_id": "spa", "username": "ada"}
    answer = grant(a, key, {**form, "password": PID_USERS["ada"]})
    assert answer.status_code == 200, answer.text
    pair: dict[str, Any] = answer.json()
    assert pair["token_type"] == "DPoP"
    token = pair["access_token"]
    workers = every_worker(hosts)
    try:
        assert len(workers) == WORKERS * len(hosts)
        for host, pid, http in workers:
            target = host.base + "/hello"
            used = http.get(target, headers=dpop_headers(token, key.proof("GET", target, token)))
            assert used.status_code == 200, (host.base, pid, used.text)
            assert used.json()["pid"] == pid
            as_bearer = http.get(target, headers=bearer(token))
            assert as_bearer.status_code == 401, (host.base, pid, as_bearer.text)
            assert as_bearer.headers["www-authenticate"].startswith("DPoP ")
    finally:
        close(workers)
    # bound to the key: on host B refused without a proof (not spent), then renewed with one
    refresh = {"grant_type": "refresh_token", "client_id": "spa"}
    refresh["refresh_token"] = pair["refresh_token"]
    with b.client() as http:
        refused = http.post(b.base + TOKEN, data=refresh)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == "invalid_dpop_proof"
    renewed = grant(b, key, refresh)
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["token_type"] == "DPoP"


def test_a_replayed_proof_is_refused_by_every_other_worker_and_host(
    hosts: list[WorkersHost],
) -> None:
    key = DpopKey("EdDSA")
    # one balancer: the same htu on every host (X-Forwarded-Host from a TrustedProxies address)
    url = f"https://{BALANCER}/rest"
    form = {"grant_type": "password", "username": "cy", "password": "Cy-Pw-1188"}
    proof = key.proof("POST", url + TOKEN)
    answer = grant(hosts[0], key, form, proof, FORWARDED)
    assert answer.status_code == 200, answer.text
    token = answer.json()["access_token"]
    # the token route: the same proof again on any host is a replay
    for host in hosts:
        again = grant(host, key, form, proof, FORWARDED)
        assert again.status_code == 400, (host.base, again.text)
        assert again.json() == dict(
            error="invalid_dpop_proof", error_description="the DPoP proof was used before"
        )
    workers = every_worker(hosts)
    try:
        proof = key.proof("GET", url + "/hello", token)
        headers = {**dpop_headers(token, proof), **FORWARDED}
        (first_host, _pid, first), *others = workers
        used = first.get(first_host.base + "/hello", headers=headers)
        assert used.status_code == 200, used.text
        for host, pid, http in others:
            again = http.get(host.base + "/hello", headers=headers)
            assert again.status_code == 401, (host.base, pid, again.text)
            assert "the DPoP proof was used before" in again.headers["www-authenticate"]
        # a fresh proof goes through on each of them
        for host, pid, http in workers:
            fresh = {**dpop_headers(token, key.proof("GET", url + "/hello", token)), **FORWARDED}
            answer = http.get(host.base + "/hello", headers=fresh)
            assert answer.status_code == 200, (host.base, pid, answer.text)
    finally:
        close(workers)


def _refresh(host: WorkersHost, token: str, key: DpopKey | None) -> httpx.Response:
    form = {"grant_type": "refresh_token", "client_id": "spa", "refresh_token": token}
    with host.client() as http:
        headers = {} if key is None else {"DPoP": key.proof("POST", host.base + TOKEN)}
        return http.post(host.base + TOKEN, data=form, headers=headers)


def _refused(answer: httpx.Response, error: str) -> None:
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == error, answer.text


def _called(host: WorkersHost, token: str, key: DpopKey) -> httpx.Response:
    target = host.base + "/hello"
    with host.client() as http:
        return http.get(target, headers=dpop_headers(token, key.proof("GET", target, token)))


def _together(hosts: list[WorkersHost], token: str, key: DpopKey) -> list[httpx.Response]:
    """Refreshes of ``token`` with ``key``'s proofs, one to each of ``hosts`` at once (each
    connection made, each proof signed, before a barrier lets them all go)."""
    gate = threading.Barrier(len(hosts))
    outcomes: list[httpx.Response] = []

    def refresh(host: WorkersHost) -> None:
        proof = key.proof("POST", host.base + TOKEN)
        data = {"grant_type": "refresh_token", "client_id": "spa", "refresh_token": token}
        with host.client() as http:
            http.get(host.base + "/fw/healthcheck/live")  # the connection made first
            gate.wait(timeout=30)
            outcomes.append(http.post(host.base + TOKEN, data=data, headers={"DPoP": proof}))

    threads = [threading.Thread(target=refresh, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def test_a_refresh_with_a_proof_binds_a_public_client_s_unbound_family(
    hosts: list[WorkersHost],
) -> None:
    """RFC 9449 5: the refresh token issued to a public client presenting a valid proof is bound
    to its key, also when the family's first grant carried none (a review saw it stay unbound)."""
    a, b = hosts[0], hosts[-1]
    k1, thief = DpopKey("ES256"), DpopKey("EdDSA")
    form = {"grant_type": "password", "client_id": "spa", "username": "dee"}
    with a.client() as http:
        first = http.post(a.base + TOKEN, data={**form, "password": PID_USERS["dee"]})
    assert first.status_code == 200, first.text
    assert first.json()["token_type"] == "Bearer"
    bound = _refresh(a, first.json()["refresh_token"], k1)
    assert bound.status_code == 200, bound.text
    assert bound.json()["token_type"] == "DPoP"
    pair: dict[str, Any] = bound.json()
    # on host B: another key's proof, or none, is refused unspent; the key's holder refreshes
    _refused(_refresh(b, pair["refresh_token"], thief), "invalid_dpop_proof")
    _refused(_refresh(b, pair["refresh_token"], None), "invalid_dpop_proof")
    renewed = _refresh(b, pair["refresh_token"], k1)
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["token_type"] == "DPoP"
    _refused(_refresh(a, renewed.json()["refresh_token"], thief), "invalid_dpop_proof")
    # the family is one: the unbound token spent at the binding, presented again, revokes the
    # bound tokens too (the access token, the latest refresh token) on both hosts
    _refused(_refresh(a, first.json()["refresh_token"], None), "invalid_grant")
    _refused(_refresh(b, renewed.json()["refresh_token"], k1), "invalid_grant")
    # every worker reads the store's revocations each 0.5 s (SPEC 7: refused within 1 s)
    until = time.monotonic() + 3
    while (revoked := _called(b, renewed.json()["access_token"], k1)).status_code == 200:
        assert time.monotonic() < until, "the bound family's access token was not revoked"
        time.sleep(0.1)
    assert revoked.status_code == 401 and "revoked" in revoked.headers["www-authenticate"]


def test_a_refresh_with_another_key_never_spends_a_bound_refresh_token(
    hosts: list[WorkersHost],
) -> None:
    """SPEC 16.2: refused before the spend, so concurrent refusals on both hosts are no replay
    (a review saw them revoke the family), and a spent token with another key revokes nothing."""
    a, b = hosts[0], hosts[-1]
    owner, thief = DpopKey("ES256"), DpopKey("ES256")
    form = {"grant_type": "password", "client_id": "spa", "username": "dee"}
    for _round in range(4):
        answer = grant(a, owner, {**form, "password": PID_USERS["dee"]})
        assert answer.status_code == 200, answer.text
        token = answer.json()["refresh_token"]
        outcomes = _together([a, b, a, b], token, thief)
        assert len(outcomes) == 4
        for outcome in outcomes:
            _refused(outcome, "invalid_dpop_proof")
        renewed = _refresh(b, token, owner)
        assert renewed.status_code == 200, renewed.text
    # the spent token with another key's proof: refused for the key, the family not revoked
    _refused(_refresh(a, token, thief), "invalid_dpop_proof")
    _refused(_refresh(b, token, None), "invalid_dpop_proof")
    assert _called(a, renewed.json()["access_token"], owner).status_code == 200
    assert _refresh(a, renewed.json()["refresh_token"], owner).status_code == 200


@pytest.mark.parametrize("jti", ["", " ", "\t"])
def test_a_proof_with_an_empty_or_blank_jti_is_refused_on_every_host(
    hosts: list[WorkersHost], jti: str
) -> None:
    # SPEC 16.2: "a jti never seen"; an empty or blank one identifies no proof
    key = DpopKey("ES256")
    form = {"grant_type": "password", "username": "dee", "password": PID_USERS["dee"]}
    for host in hosts:
        proof = key.proof("POST", host.base + TOKEN, claims={"jti": jti})
        refused = grant(host, key, form, proof)
        assert refused.status_code == 400, (host.base, refused.text)
        assert refused.json() == dict(
            error="invalid_dpop_proof",
            error_description="the DPoP proof's jti is missing or malformed",
        )
    answer = grant(hosts[0], key, form)
    assert answer.status_code == 200, answer.text
    token = answer.json()["access_token"]
    for host in hosts:
        target = host.base + "/hello"
        with host.client() as http:
            for _ in range(2):  # never once accepted, so never "used before" either
                proof = key.proof("GET", target, token, claims={"jti": jti})
                used = http.get(target, headers=dpop_headers(token, proof))
                assert used.status_code == 401, (host.base, used.text)
                assert "jti is missing or malformed" in used.headers["www-authenticate"]
            fresh = http.get(target, headers=dpop_headers(token, key.proof("GET", target, token)))
            assert fresh.status_code == 200, (host.base, fresh.text)


def test_htu_is_compared_after_normalising_its_path_as_the_router_does(
    hosts: list[WorkersHost],
) -> None:
    # RFC 9449 4.3 with RFC 3986 6.2.2 (percent-decoding, dot segments) and 6.2.3 (the default
    # port): the proof names the route the request reaches (docs/decisions.md)
    key = DpopKey("ES256")
    form = {"grant_type": "password", "username": "bob", "password": PID_USERS["bob"]}
    for host in hosts:
        origin, _, _ = host.base.partition("/rest")
        dotted = key.proof("POST", origin + "/rest/fw/./x/../oauth2/token")
        answer = grant(host, key, form, dotted)
        assert answer.status_code == 200, (host.base, answer.text)
        token = answer.json()["access_token"]
        accepted = ["/rest/x/../hello", "/rest/./hello", "/rest/%68ello", "/rest/hello/",
                    "/rest//hello", "/rest/hello/."]  # fmt: skip
        refused = ["/rest/x/../other", "/rest/../../hello", "/rest%2Fhello", "/rest/hello/..",
                   "/rest/%2E%2E/rest/hellO"]  # fmt: skip
        with host.client() as http:
            for sent in ("/rest/hello", "/rest/hello/"):
                for htu in accepted:
                    proof = key.proof("GET", origin + htu, token)
                    used = http.get(origin + sent, headers=dpop_headers(token, proof))
                    assert used.status_code == 200, (host.base, sent, htu, used.text)
                for htu in refused:
                    proof = key.proof("GET", origin + htu, token)
                    used = http.get(origin + sent, headers=dpop_headers(token, proof))
                    assert used.status_code == 401, (host.base, sent, htu, used.text)
                    assert "another URL (htu)" in used.headers["www-authenticate"]
