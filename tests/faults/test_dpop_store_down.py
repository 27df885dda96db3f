"""SPEC 16.2 with SPEC 7's store faults: while Redis is frozen (SIGSTOP) a DPoP-bound request
answers 503 with ``Retry-After`` within 1.5 s (fail closed: a proof whose use cannot be recorded is
refused; figure printed), a bearer token still passes (SPEC 7); thawed, a fresh proof passes."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import trustme

from tests.auth.dpop_support import DpopKey, dpop_headers
from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import serving
from tests.faults.support import oauth_params, store_config
from tests.redis_support import RedisServer

PARAMS = oauth_params([("ada", "Ada-Pw-7731")], client_secret="Web-Secret-9q", access_expires="1h")
FAIL_CLOSED_S = 1.5
HANG_GUARD_S = 10.0


def test_a_dpop_request_fails_closed_while_the_store_is_frozen(
    tmp_path: Path, ca: trustme.CA, frozen_store: RedisServer
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    oauth = oauth_section(certs, onAuthparams="app.params")
    config = store_config(tmp_path, {"OAUTH": oauth}, frozen_store.url, PARAMS)
    with serving(config) as proc:
        base = proc.url("OAUTH")
        key = DpopKey("ES256")
        form = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-7731"}
        with httpx.Client(verify=client_context(certs), timeout=HANG_GUARD_S) as http:
            bound = http.post(
                base + TOKEN, data=form, headers={"DPoP": key.proof("POST", base + TOKEN)}
            )
            assert bound.status_code == 200, bound.text
            token = bound.json()["access_token"]
            plain = http.post(base + TOKEN, data=form).json()["access_token"]

            def dpop_call() -> httpx.Response:
                proof = key.proof("GET", base + "/pid", token)
                return http.get(base + "/pid", headers=dpop_headers(token, proof))

            assert dpop_call().status_code == 200
            frozen_store.freeze()
            try:
                started = time.monotonic()
                refused = dpop_call()
                took = time.monotonic() - started
                print(f"DPoP request with the store frozen: {refused.status_code} in {took:.2f} s")
                assert refused.status_code == 503, refused.text
                assert "retry-after" in refused.headers
                assert took < FAIL_CLOSED_S
                bearer = http.get(base + "/pid", headers={"Authorization": f"Bearer {plain}"})
                assert bearer.status_code == 200, bearer.text
            finally:
                frozen_store.thaw()
            deadline = time.monotonic() + HANG_GUARD_S
            answer = dpop_call()
            while answer.status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.2)
                answer = dpop_call()
            assert answer.status_code == 200, answer.text
