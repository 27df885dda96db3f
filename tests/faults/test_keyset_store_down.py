"""SPEC 7 and 12.1 on an asymmetric port whose key set is in a Redis that does not answer
(frozen, SIGSTOP): a token naming a key this host does not know (one made since its last look,
or none) cannot be judged without the store, so it is answered 503 with ``Retry-After``, within
1.5 s, and after a failed look at once; a token of a known key passes meanwhile. A damaged set
in a store that answers is no outage: 401. A review saw a
valid token of a key rotated in on another host refused (401) after a wait on the store."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import httpx
import jwt
import trustme
from cryptography.hazmat.primitives.asymmetric import ec

from fwrest.auth.oauth2.portkeys import POLL_S
from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import serving, wait_for
from tests.faults.support import oauth_params, store_config
from tests.redis_support import RedisServer

PARAMS = oauth_params([("ada", "Ada-Pw-7731")], client_secret="Web-Secret-9q", access_expires="1h")
FAIL_CLOSED_S = 1.5
HANG_GUARD_S = 10.0


def test_a_token_of_a_key_not_known_here_is_503_while_the_store_is_frozen(
    tmp_path: Path, ca: trustme.CA, frozen_store: RedisServer
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    oauth = oauth_section(certs, onAuthparams="app.params", signingAlg="ES256")
    config = store_config(tmp_path, {"OAUTH": oauth}, frozen_store.url, PARAMS)
    with serving(config) as proc:
        base = proc.url("OAUTH")
        form = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-7731"}
        with httpx.Client(verify=client_context(certs), timeout=HANG_GUARD_S) as http:
            token = http.post(base + TOKEN, data=form).json()["access_token"]
            claims = jwt.decode(token, options={"verify_signature": False})
            other = jwt.encode(claims, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256",
                               headers={"typ": "at+jwt", "kid": "k-made-elsewhere"})  # fmt: skip

            def call(value: str) -> tuple[httpx.Response, float]:
                began = time.monotonic()
                answer = http.get(base + "/pid", headers={"Authorization": f"Bearer {value}"})
                return answer, time.monotonic() - began

            assert call(token)[0].status_code == 200
            assert call(other)[0].status_code == 401  # the store answers: no such key
            frozen_store.freeze()
            try:
                for attempt in (1, 2):  # the second after a failed look: at once
                    refused, took = call(other)
                    print(
                        f"unknown key, store frozen, #{attempt}: {refused.status_code} {took:.2f} s"
                    )
                    assert refused.status_code == 503, refused.text
                    assert refused.headers.get("retry-after") == "1"
                    assert took < FAIL_CLOSED_S
                known, took = call(token)
                print(f"known key, store frozen: {known.status_code} in {took:.2f} s")
                assert known.status_code == 200, known.text
            finally:
                frozen_store.thaw()
            # the store back: a verdict again
            wait_for(lambda: call(other)[0].status_code == 401, HANG_GUARD_S, "a 401 again", 0.2)
            # a damaged set in a store that answers is no outage: the keys held decide
            with contextlib.closing(frozen_store.client()) as direct:
                direct.hset("fwrest:blobs", "fwrest-keyset", b'{"garbage": 1')
            for _ in range(3):
                assert call(other)[0].status_code == 401
                time.sleep(POLL_S)
            assert call(token)[0].status_code == 200
