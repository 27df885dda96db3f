"""SPEC 4.2, 7.1: a known and an unknown user take the same time when plain and hashed passwords
mix, over TLS on ``fwrest serve``: password grants, client secrets, the login page (SPEC 16.1).
Users: argon2, bcrypt, plain. Each check makes one check per kind configured (dummy hashes with the
configured costs), so every wrong password costs one argon2 plus one bcrypt check; before, plain
cost microseconds and an unknown user one argon2 check at the library's default cost.

50 wrong grants of each kind, interleaved on one connection (the load spreads alike); medians
printed, within a factor of 1.5. Measured: 36.4-37.1 ms all four; before, 2.5 (plain), 32.5
(argon2), 13.1 (bcrypt), 167.8 ms (unknown). Costs are cheap but well above the request's own time.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import bcrypt
from argon2 import PasswordHasher

from tests.auth.oauth2_support import OAuthService, expect, oauth_section, served_service
from tests.auth.test_authorization_code import form_fields
from tests.conftest import APP_SOURCE, free_config

TRIES = 50
FACTOR = 1.5
ARGON = ("hana", "Hana-Argon-Pw-51")
BCRYPT = ("bert", "Bert-Bcrypt-Pw-62")
PLAIN = ("ada", "Ada-Plain-Pw-73")
ARGON_HASH = PasswordHasher(time_cost=2, memory_cost=16384, parallelism=1).hash(ARGON[1])
BCRYPT_HASH = bcrypt.hashpw(BCRYPT[1].encode(), bcrypt.gensalt(rounds=7)).decode()
USER_KINDS = {"known, plain text": PLAIN[0], "known, argon2": ARGON[0],
              "known, bcrypt": BCRYPT[0], "unknown": "nobody"}  # fmt: skip

APP = (
    APP_SOURCE
    + f"""

def params():
    return {{"client_id": "web", "users": [{{"username": "hana", "password": {ARGON_HASH!r}}},
                                          {{"username": "bert", "password": {BCRYPT_HASH!r}}},
                                          {{"username": "ada", "password": {PLAIN[1]!r}}}]}}
"""
)


def assert_alike(times: dict[str, list[float]], what: str) -> None:
    """The medians of ``times`` (kind -> seconds) are within ``FACTOR`` of each other."""
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    shown = ", ".join(f"{kind} {m * 1000:.1f} ms" for kind, m in medians.items())
    ratio = max(medians.values()) / min(medians.values())
    print(f"medians of {TRIES} {what} each: {shown}; max/min {ratio:.2f}")
    assert ratio < FACTOR, medians


def test_known_and_unknown_users_take_the_same_time_with_mixed_password_kinds(
    served: OAuthService,
) -> None:
    port = served["OAUTH"]
    for user in (ARGON, BCRYPT, PLAIN):  # the right passwords work (and warm the dummies)
        assert port.grant(*user).status_code == 200
    times: dict[str, list[float]] = {kind: [] for kind in USER_KINDS}
    refused = {"error": "invalid_grant", "error_description": "invalid username or password"}
    for i in range(TRIES):
        for kind, user in USER_KINDS.items():
            started = time.perf_counter()
            response = port.grant(user, f"Wrong-Pw-{i}")
            times[kind].append(time.perf_counter() - started)
            assert response.json() == refused and response.status_code == 400, response.text
    assert_alike(times, "wrong password grants")


# -- client secrets (issue 34: fwrest clients stores them hashed) --------------------------------

HASHED_CLIENT = ("hashed", "Hashed-Client-Secret-84")
PLAIN_CLIENT = ("plain", "Plain-Client-Secret-95")
CLIENT_HASH = PasswordHasher(time_cost=2, memory_cost=16384, parallelism=1).hash(HASHED_CLIENT[1])

APP += f"""

def client_params():
    return {{"client": [{{"client_id": "hashed", "client_secret": {CLIENT_HASH!r}}},
                       {{"client_id": "plain", "client_secret": {PLAIN_CLIENT[1]!r}}}],
             "types": [{{"grant_type": "client_credentials"}}]}}
"""


def test_known_and_unknown_clients_take_the_same_time_with_a_hashed_secret(
    served: OAuthService,
) -> None:
    port = served["CLIENTS"]
    grant = {"grant_type": "client_credentials"}
    for client in (HASHED_CLIENT, PLAIN_CLIENT):  # the right secrets work, hashed or not
        expect(port.post(grant, auth=client))
    kinds = {"known, plain text": "plain", "known, argon2": "hashed", "unknown": "nobody"}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for i in range(TRIES):
        for kind, client in kinds.items():
            started = time.perf_counter()
            response = port.post(grant, auth=(client, f"Wrong-Secret-{i}"))
            times[kind].append(time.perf_counter() - started)
            assert response.status_code == 401, response.text
            assert response.json()["error"] == "invalid_client"
    assert_alike(times, "wrong client secrets")


# -- the login page of the authorization code grant (SPEC 16.1) -----------------------------------

APP += """

def code_params():
    found = params()
    found["client"] = [{"client_id": "spa", "public": True,
                        "redirect_uris": ["https://app.example.com/cb"]}]
    found["types"] = [{"grant_type": "authorization_code"}]
    return found
"""


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    """One port per kind of check; maxFailures: the oauth_section default, far above the failures
    sent here."""
    kinds = {"OAUTH": "params", "CLIENTS": "client_params", "CODE": "code_params"}
    servers = {name: oauth_section(certs, onAuthparams=f"app.{f}") for name, f in kinds.items()}
    return free_config(folder, servers=servers, app=APP)


served = served_service(_write, "password_timing")


def test_the_login_page_takes_the_same_time_for_known_and_unknown_users(
    served: OAuthService,
) -> None:
    """Wrong password or unknown user: the page again, one message, the same time (SPEC 16.1)."""
    code_port = served["CODE"]
    authorize = code_port.base + "/fw/oauth2/authorize"
    challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    ask = {"response_type": "code", "client_id": "spa", "code_challenge": challenge,
           "code_challenge_method": "S256"}  # fmt: skip
    shown = expect(code_port.http.get(authorize, params=ask))
    fields = form_fields(shown)
    times: dict[str, list[float]] = {kind: [] for kind in USER_KINDS}
    for i in range(TRIES):
        for kind, user in USER_KINDS.items():
            data = {**fields, "username": user, "password": f"Wrong-Pw-{i}"}
            started = time.perf_counter()
            response = code_port.http.post(authorize, data=data)
            times[kind].append(time.perf_counter() - started)
            assert response.status_code == 200, response.text
            assert "Invalid username or password." in response.text
    assert_alike(times, "wrong passwords on the login page")
