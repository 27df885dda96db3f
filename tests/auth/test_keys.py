"""SPEC 12.1-12.2 in process (module ``tauth_keys_app``): algorithms, key set, JWK Set, metadata,
issuer, rotation, hostile tokens. Ports ``ED`` (EdDSA), ``EC`` (ES256), ``RSA`` (RS256), ``HS``
(HS256). Tokens are checked by joserfc (not fwrest's PyJWT); rotation is the real command, picked up
by the ports' pollers as workers do."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import stat
import time
import warnings
from pathlib import Path
from typing import Any

import jwt
import pytest
import trustme
from joserfc import jwt as jose_jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import KeySet

from fwrest.auth.oauth2 import keyset
from fwrest.auth.oauth2.keyset import MARGIN_S, SWITCH_S
from fwrest.auth.oauth2.portkeys import POLL_S
from tests.auth.conftest import in_process
from tests.auth.oauth2_support import ADA as KEYS_USER
from tests.auth.oauth2_support import KEYS_ADA as ADA
from tests.auth.oauth2_support import KEYS_ALGS as ALGS
from tests.auth.oauth2_support import KEYS_APP as APP
from tests.auth.oauth2_support import (
    WEB,
    LocalOAuth,
    LocalService,
    assert_invalid_token,
    b64url,
    expect,
    expire_retired_key,
    fresh_claims,
    issuer_of,
    jwks_kids,
    local_oauth,
    local_service,
    oauth_section,
    params_source,
    unsigned_jwt,
    wait_for,
)
from tests.conftest import APP_SOURCE, module_config, run_cli, run_forked
from tests.docs.blocks import example

MODULE = "tauth_keys_app"


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    servers = {
        name: oauth_section(certs, onAuthparams=f"{MODULE}.params", signingAlg=alg)
        for name, alg in ALGS.items()
    }
    # docs/verifying-tokens.md's Authorization object, on a port of its own
    guide = json.loads(example("verifying-fwdata").text)["Authorization"]
    guide["onAuthparams"] = f"{MODULE}.params"
    servers["GUIDE"] = oauth_section(certs, **guide)
    servers["HS"] = oauth_section(certs, onAuthparams=f"{MODULE}.params")
    off = oauth_section(certs, onAuthparams=f"{MODULE}.params", signingAlg="EdDSA")
    off["FwData"]["NativeRoutes"] = {
        "disable": ["oauth2/jwks", "oauth2/revoke", "oauth2/introspect"]
    }
    servers["OFF"] = off
    no_token = oauth_section(certs, onAuthparams=f"{MODULE}.params")
    no_token["FwData"]["NativeRoutes"] = {"disable": ["oauth2/token"]}
    servers["NOTOKEN"] = no_token
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}}
    return module_config(folder, MODULE, servers=servers, app=APP, extra=extra)


svc = local_service(_write, "keys")


def keyset_file(svc: LocalService) -> Path:
    return svc.folder / ".fwrest" / "keyset.json"


def header_of(token: str) -> dict[str, Any]:
    return dict(jwt.get_unverified_header(token))


def rotate(svc: LocalService, *, real: bool = False) -> tuple[int, str, str]:
    """``fwrest keys rotate`` in a process of its own (here its key generation would hold the
    workers' GIL): ``real`` as an operator runs it, else forked (``run_forked``)."""
    run = run_cli if real else run_forked
    done = run("keys", "rotate", str(svc.config), cwd=svc.folder)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("port", sorted(ALGS))
def test_tokens_are_signed_with_the_configured_algorithm_and_verify_through_the_jwks(
    svc: LocalService, port: str
) -> None:
    oauth = svc[port]
    token = oauth.tokens(*ADA)["access_token"]
    header = header_of(token)
    assert header["alg"] == ALGS[port] and header["typ"] == "at+jwt"
    answer = oauth.http.get(oauth.base + "/fw/oauth2/jwks")  # no credentials: never guarded
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "max-age=300"
    jwks = answer.json()
    kids = [k["kid"] for k in jwks["keys"]]
    assert header["kid"] in kids
    for key in jwks["keys"]:
        assert key["use"] == "sig" and key["alg"] == ALGS[port]
        assert not {"d", "p", "q", "dp", "dq", "qi"} & set(key), "a private member is published"
    # joserfc, not PyJWT: the published key verifies the token, and the kid is its thumbprint
    keys = KeySet.import_key_set(jwks)
    with warnings.catch_warnings():
        # joserfc warns that RFC 9864 deprecates "EdDSA" for "Ed25519"; SPEC 12.1 names EdDSA
        warnings.simplefilter("ignore", SecurityWarning)
        decoded = jose_jwt.decode(token, keys, algorithms=[ALGS[port]])
    assert decoded.claims["sub"] == "ada" and decoded.claims["aud"] == port
    assert decoded.claims["iss"] == issuer_of(oauth)
    assert keys.get_by_kid(header["kid"]).thumbprint() == header["kid"]
    assert oauth.get("/hello", token).status_code == 200


def test_the_key_set_file_is_private_and_holds_a_current_and_a_next_key_per_algorithm(
    svc: LocalService,
) -> None:
    svc["ED"]  # the service has started
    path = keyset_file(svc)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    keys = json.loads(path.read_text())["keys"]
    current = sorted(k["alg"] for k in keys if k["current"])
    assert current == sorted(ALGS.values())
    # and one next key per algorithm, published ahead of its use (as 0.1.0 reads it: not
    # current, not retired)
    upcoming = sorted(k["alg"] for k in keys if not k["current"] and k["retired"] is None)
    assert upcoming == sorted(ALGS.values())


def test_an_hs256_port_publishes_no_key_and_its_metadata_no_jwks_uri(svc: LocalService) -> None:
    hs = svc["HS"]
    assert hs.http.get(hs.base + "/fw/oauth2/jwks").status_code == 404
    meta = hs.http.get(hs.base + "/fw/oauth2/metadata").json()
    assert "jwks_uri" not in meta
    assert "kid" not in header_of(hs.tokens(*ADA)["access_token"])


def test_the_guide_s_authorization_object_signs_with_eddsa_as_its_issuer(svc: LocalService) -> None:
    guide = svc["GUIDE"]
    token = guide.tokens(*ADA)["access_token"]
    assert header_of(token)["alg"] == "EdDSA"
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["iss"] == "https://api.example.com/rest" == issuer_of(guide)
    assert guide.get("/hello", token).status_code == 200
    # its metadata derives every URL from the issuer; the well-known path from its path
    meta = guide.http.get("/.well-known/oauth-authorization-server/rest").json()
    assert meta["jwks_uri"] == "https://api.example.com/rest/fw/oauth2/jwks"
    # the ED port signs with the same key set: its token is refused for its audience
    assert_invalid_token(guide.get("/hello", svc["ED"].tokens(*ADA)["access_token"]))


def test_the_metadata_names_no_endpoint_native_routes_disable(svc: LocalService) -> None:
    """RFC 8414 2: an endpoint NativeRoutes disables is left out (a verifier fetched a 404)."""
    off = svc["OFF"]
    meta = expect(off.http.get(off.base + "/fw/oauth2/metadata")).json()
    assert not {"jwks_uri", "revocation_endpoint", "introspection_endpoint"} & set(meta), meta
    assert meta["token_endpoint"] == meta["issuer"] + "/fw/oauth2/token"
    assert off.http.get(off.base + "/fw/oauth2/jwks").status_code == 404
    # without the token route no grant works: none is listed, nor the endpoint
    meta = expect(svc["NOTOKEN"].http.get("/.well-known/oauth-authorization-server/rest")).json()
    assert "token_endpoint" not in meta and meta["grant_types_supported"] == [], meta
    assert meta["revocation_endpoint"] == meta["issuer"] + "/fw/oauth2/revoke"


def test_the_metadata_under_the_location_and_at_the_well_known_path(svc: LocalService) -> None:
    ed = svc["ED"]
    meta = expect(ed.http.get(ed.base + "/fw/oauth2/metadata")).json()
    issuer = meta["issuer"]
    assert issuer.startswith("https://127.0.0.1:") and issuer.endswith("/rest")
    assert meta == {
        "issuer": issuer,
        "token_endpoint": issuer + "/fw/oauth2/token",
        "jwks_uri": issuer + "/fw/oauth2/jwks",
        "revocation_endpoint": issuer + "/fw/oauth2/revoke",
        "introspection_endpoint": issuer + "/fw/oauth2/introspect",
        "grant_types_supported": ["password", "refresh_token"],
        "scopes_supported": ["default"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "response_types_supported": [],
        "dpop_signing_alg_values_supported": ["ES256", "EdDSA", "RS256"],  # SPEC 16.2
    }
    # RFC 8414 3: at the port's root, the issuer's path appended; no credentials needed
    assert expect(ed.http.get("/.well-known/oauth-authorization-server/rest")).json() == meta
    # any other path at the root is still behind the scheme
    assert ed.http.get("/.well-known/oauth-authorization-server").status_code == 401
    # the token's iss is the issuer
    token = ed.tokens(*ADA)["access_token"]
    assert jwt.decode(token, options={"verify_signature": False})["iss"] == issuer
    # the route listing shows both routes as public (no token needed)
    listing = ed.get("/fw/rest/list/service", token).json()
    rows = listing if isinstance(listing, list) else next(iter(listing.values()))
    public = {row["endpoint"]: row["public"] for row in rows if row["type"] == "fw"}
    assert public["/fw/oauth2/jwks"] is True and public["/fw/oauth2/metadata"] is True
    assert public["/fw/rest/config"] is False


def _public_pem(svc: LocalService, port: str) -> bytes:
    from joserfc.jwk import OKPKey

    jwks = svc[port].http.get(svc[port].base + "/fw/oauth2/jwks").json()
    return bytes(OKPKey.import_key(jwks["keys"][-1]).as_pem(private=False))


def _private_key(svc: LocalService, alg: str) -> tuple[str, str]:
    """(kid, PEM) of the current key of ``alg``, read from the key set file."""
    for key in json.loads(keyset_file(svc).read_text())["keys"]:
        if key["alg"] == alg and key["current"]:
            return key["kid"], key["pem"]
    raise AssertionError(f"no current {alg} key")


def _hs256_by_hand(header: dict[str, Any], claims: dict[str, Any], key: bytes) -> str:
    """An HS256 JWT keyed with ``key`` (PyJWT refuses a PEM as HMAC key; an attacker does not)."""
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    mac = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


def test_hostile_tokens_are_refused(svc: LocalService) -> None:
    ed = svc["ED"]
    real = ed.tokens(*ADA)["access_token"]
    kid = header_of(real)["kid"]
    claims = fresh_claims(aud="ED", iss=issuer_of(ed))
    _, pem = _private_key(svc, "EdDSA")
    # the contrast: signed with the real private key, the real kid: accepted
    good = jwt.encode(claims, pem, algorithm="EdDSA", headers={"typ": "at+jwt", "kid": kid})
    assert ed.get("/hello", good).status_code == 200
    public = _public_pem(svc, "ED")
    ec_kid, ec_pem = _private_key(svc, "ES256")
    at = {"typ": "at+jwt"}
    object_kid = b64url(json.dumps({"alg": "EdDSA", "typ": "at+jwt", "kid": {"a": 1}}).encode())
    hostile = {
        # HS256 keyed with the published public key's bytes (the classic confusion)
        "hs256-with-public-key": _hs256_by_hand({"alg": "HS256", **at, "kid": kid}, claims, public),
        "alg-none": unsigned_jwt({"alg": "none", **at, "kid": kid}, claims),
        "unknown-kid": jwt.encode(claims, pem, algorithm="EdDSA", headers={**at, "kid": "x" * 43}),
        "no-kid": jwt.encode(claims, pem, algorithm="EdDSA", headers=at),
        # the kid of another port's key (ES256): not a key of this port's algorithm
        "foreign-kid": jwt.encode(claims, ec_pem, algorithm="ES256", headers={**at, "kid": ec_kid}),
        "wrong-issuer": jwt.encode({**claims, "iss": "https://evil.example"}, pem,
                                   algorithm="EdDSA", headers={**at, "kid": kid}),
        "kid-as-object": f"{object_kid}.{real.split('.', 1)[1]}",
    }  # fmt: skip
    for name, token in hostile.items():
        response = ed.get("/hello", token)
        assert response.status_code == 401, (name, response.text)
        assert_invalid_token(response)


def test_keys_list_and_rotate_while_serving(svc: LocalService) -> None:
    ed, ec = svc["ED"], svc["EC"]
    before = ed.tokens(*ADA)["access_token"]
    old_kid = header_of(before)["kid"]
    old_ec_kid = header_of(ec.tokens(*ADA)["access_token"])["kid"]
    code, out, err = in_process("keys", "list", str(svc.config))
    assert code == 0, err
    assert old_kid in out and "EdDSA" in out
    assert "note: [HS] signs with HS256" in out
    # the next key, listed and published before the rotation makes it current
    upcoming = [x.split()[0] for x in out.splitlines() if "EdDSA" in x and x.split()[3] == "next"]
    assert upcoming and upcoming[0] in jwks_kids(ed), out
    code, rotated, err = rotate(svc, real=True)
    assert code == 0, err
    assert "new current EdDSA key" in rotated and "audit" not in err, err
    assert f"new current EdDSA key {upcoming[0]}" in rotated, rotated

    def signs_anew(port: LocalOAuth, old: str) -> bool:
        answer = port.grant(*ADA)
        if answer.status_code == 503:  # the store slow under the suite's load: not this test's
            return False
        assert answer.status_code == 200, answer.text
        return header_of(answer.json()["access_token"])["kid"] != old

    def new_kid() -> bool:
        return signs_anew(ed, old_kid)

    # SPEC 12.1's 1 s is timed in test_jwks_clients.py (here workers share the suite's load)
    wait_for(new_kid, 15, "tokens signed with the new key")
    wait_for(lambda: signs_anew(ec, old_ec_kid), 15, "ES256 tokens signed with the new key")
    assert header_of(ed.tokens(*ADA)["access_token"])["kid"] == upcoming[0]
    # the old key still verifies its tokens, and is still published, with a new next key
    assert ed.get("/hello", before).status_code == 200
    kids = jwks_kids(ed)
    assert old_kid in kids and upcoming[0] in kids and len(kids) == 3
    code, out, _ = in_process("keys", "list", str(svc.config))
    listed = [line for line in out.splitlines() if line.startswith(old_kid)]
    assert listed and "verifies until" in listed[0], out
    [renewed] = [x.split()[0] for x in out.splitlines() if "EdDSA" in x and x.split()[3] == "next"]
    assert renewed in kids and renewed not in (old_kid, upcoming[0]), out
    # SPEC 13.5: the rotation is audited (the command wrote to the store the service reads), keys
    # named by id only. Printed: "fwrest keys: new current EdDSA key KID (where)"
    printed = [line.split() for line in rotated.splitlines() if "new current" in line]
    new_ids = {words[6]: words[4] for words in printed}
    for _ in range(20):  # a grant may meet the store slow under the suite's load: 503
        granted = ed.grant(*ADA)
        if granted.status_code != 503:
            break
        time.sleep(0.25)
    assert granted.status_code == 200, granted.text
    trail = ed.get("/fw/rest/audit?event=keys.rotate", granted.json()["access_token"])
    if trail.status_code == 503:  # the trail read under the same load: once more
        time.sleep(0.5)
        trail = ed.get("/fw/rest/audit?event=keys.rotate", granted.json()["access_token"])
    assert trail.status_code == 200, trail.text
    event = trail.json()[0]
    assert event["event"] == "keys.rotate", event
    assert (event["actor"], event["client"], event["port"]) == ("cli", None, None), event
    assert {k["kid"]: k["alg"] for k in event["details"]["keys"]} == new_ids
    assert event["details"]["via"] == "fwrest keys rotate" and event["details"]["os_user"]
    assert "PRIVATE KEY" not in trail.text and "pem" not in trail.text


def test_a_dropped_key_no_longer_verifies_nor_is_published(svc: LocalService) -> None:
    ed = svc["ED"]
    rotate(svc)
    # time passes: its tokens' lifetime is over (written as `fwrest keys rotate` would see it)
    victim = expire_retired_key(svc.folder, alg="EdDSA")
    forged = jwt.encode(fresh_claims(aud="ED", iss=issuer_of(ed)), victim["pem"],
                        algorithm="EdDSA", headers={"typ": "at+jwt", "kid": victim["kid"]})  # fmt: skip
    wait_for(lambda: victim["kid"] not in jwks_kids(ed), 10, "the dropped key gone from the JWKS")
    response = ed.get("/hello", forged)
    assert_invalid_token(response)
    assert "key set" in response.json()["detailedMessage"]
    # the next rotation removes it from the file
    rotate(svc)
    assert victim["kid"] not in keyset_file(svc).read_text()


def _one_eddsa_port(module: str, port: str = "ED", **params: Any) -> Any:
    """A service of one EdDSA port ``port`` in module ``module`` (``params``: more of its
    ``onAuthparams``), for :func:`local_oauth`."""

    def write(folder: Path, certs: dict[str, Path]) -> Path:
        app = APP_SOURCE + params_source(**WEB, users=[KEYS_USER], **params)
        servers = {port: oauth_section(certs, onAuthparams=f"{module}.params", signingAlg="EdDSA")}
        extra = {"HTTPSERVER": {"StateStore": "sqlite"}}
        return module_config(folder, module, servers=servers, app=app, extra=extra)

    return write


SHORT_TTL_S = 4.0  # SHORT's access lifetime: a former key is dropped 3 s after it (keyset.py)
_write_short = _one_eddsa_port("tauth_keys_short_app", "SHORT", access_expires="4s")


def test_a_former_key_is_dropped_by_time_alone(ca: trustme.CA, tmp_path: Path) -> None:
    """SPEC 12.1: with nothing rewriting the key set, a former key goes once its tokens expired
    (lifetime shortened, SPEC 9): not published, not accepted, never promised longer by max-age."""
    with contextlib.contextmanager(local_oauth)(ca, tmp_path, _write_short) as svc:
        port = svc["SHORT"]
        old_kid = header_of(port.tokens(*ADA)["access_token"])["kid"]

        def noted() -> bool:  # the worker writes down the lifetime it signed with (its poller)
            keys = json.loads(keyset_file(svc).read_text())["keys"]
            return any(k["kid"] == old_kid and k["ttl"] >= SHORT_TTL_S for k in keys)

        wait_for(noted, 10, "the token lifetime noted in the key set")
        code, _, err = rotate(svc)
        assert code == 0, err
        doc = keyset_file(svc).read_text()
        entry = next(k for k in json.loads(doc)["keys"] if k["kid"] == old_kid)
        drop_at = entry["retired"] + SWITCH_S + MARGIN_S + entry["ttl"]  # as KeyEntry.drop_at

        def jwks() -> tuple[list[str], str]:
            answer = expect(port.http.get(port.base + "/fw/oauth2/jwks"))
            return [k["kid"] for k in answer.json()["keys"]], answer.headers["cache-control"]

        # the worker sees the rotation at its next look at the set (every 0.5 s)
        wait_for(lambda: len(jwks()[0]) == 3 or time.time() >= drop_at, 5, "the rotation seen")
        asked = time.time()
        kids, cache = jwks()
        print(f"{drop_at - asked:.3f} s before the drop: {len(kids)} keys, {cache}")
        if time.time() < drop_at:  # else descheduled past the drop: nothing to see before it
            assert old_kid in kids and len(kids) == 3  # the former, current and next keys
            assert cache.startswith("max-age=") and int(cache[8:]) <= drop_at - asked, cache
        while time.time() <= drop_at:  # bounded: the drop is SHORT_TTL_S + 3 s after rotation
            time.sleep(0.05)
        kids, cache = jwks()
        assert old_kid not in kids and len(kids) == 2, kids
        assert cache == "max-age=300"
        forged = jwt.encode(fresh_claims(aud="SHORT", iss=issuer_of(port)), entry["pem"],
                            algorithm="EdDSA", headers={"typ": "at+jwt", "kid": old_kid})  # fmt: skip
        response = port.get("/hello", forged)
        assert_invalid_token(response)
        assert "key set" in response.json()["detailedMessage"]
        assert keyset_file(svc).read_text() == doc  # nothing rewrote the set since the rotation


def test_check_names_the_algorithm_and_warns_of_a_wildcard_issuer(
    svc: LocalService, tmp_path: Path
) -> None:
    code, out, err = in_process("check", str(svc.config))
    assert code == 0, err
    assert "authorization: oAuth2, tokens EdDSA)" in out
    assert "[HS] 127.0.0.1:0 (TLS, authorization: oAuth2)" in out
    assert "issuer" not in out  # 127.0.0.1 everywhere, GUIDE names its issuer
    data = json.loads(svc.config.read_text())
    data["ED"]["HostName"] = data["GUIDE"]["HostName"] = "0.0.0.0"
    wild = svc.config.with_name("wildcard.json")
    wild.write_text(json.dumps(data))
    code, out, err = in_process("check", str(wild))
    assert code == 0, err
    assert "warning: [ED] HostName=0.0.0.0: the tokens' issuer is https://0.0.0.0:0/..." in out
    assert "[GUIDE] HostName" not in out  # its issuer is set


def test_keys_on_a_config_without_a_key_set_says_why(tmp_path: Path, ca: trustme.CA) -> None:
    from tests.conftest import issue_certs

    certs = issue_certs(ca, tmp_path / "certs")
    servers = {"HSONLY": oauth_section(certs, onAuthparams="tauth_keys_hs_app.params")}
    config = module_config(tmp_path, "tauth_keys_hs_app", servers=servers, app=APP)
    code, out, err = in_process("keys", "rotate", str(config))
    assert code == 2, out
    assert "sign with HS256" in err and "signingAlg" in err
    assert not (tmp_path / ".fwrest" / "keyset.json").exists()


def test_keys_on_a_store_that_does_not_answer_or_that_a_newer_release_wrote(
    tmp_path: Path, ca: trustme.CA
) -> None:
    """A Redis that does not answer is a failure while running (exit 1, as for ``tokens
    revoke`` and ``lockouts``), not a configuration error; a store a newer release wrote is
    refused as ``fwrest check`` refuses it (SPEC 17.2: exit 2 naming both versions), the key
    set left as it was."""
    import sqlite3

    from tests.conftest import free_port, issue_certs

    certs = issue_certs(ca, tmp_path / "certs")
    servers = {"ED": oauth_section(certs, onAuthparams="tauth_keys_st_app.params",
                                   signingAlg="EdDSA")}  # fmt: skip
    down = {"HTTPSERVER": {"StateStore": f"redis://127.0.0.1:{free_port()}/0"}}
    (tmp_path / "down").mkdir()
    config = module_config(tmp_path / "down", "tauth_keys_st_app", servers=servers, app=APP,
                           extra=down)  # fmt: skip
    for action in ("list", "rotate"):
        code, out, err = in_process("keys", action, str(config))
        assert code == 1 and not out, (code, out, err)
        assert err.startswith("fwrest: error: ") and "configuration error" not in err, err
    newer = {"HTTPSERVER": {"StateStore": "sqlite"}}
    (tmp_path / "newer").mkdir()
    config = module_config(tmp_path / "newer", "tauth_keys_st_app", servers=servers, app=APP,
                           extra=newer)  # fmt: skip
    data = tmp_path / "newer" / ".fwrest"
    data.mkdir(exist_ok=True)
    marker = b'{"schema": 9, "compatible": 9, "release": "9.1.0"}'
    with contextlib.closing(sqlite3.connect(data / "state.sqlite3")) as db, db:
        db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema', ?)", (marker,))
    for action in ("rotate", "list"):
        code, out, err = in_process("keys", action, str(config))
        assert code == 2 and "fwrest 9.1.0" in err and "schema 9" in err, (code, out, err)
    assert not (data / "keyset.json").exists()


def test_a_removed_key_set_file_is_put_back(ca: trustme.CA, tmp_path: Path) -> None:
    """A key set file removed while the service runs: its workers write back the keys they
    hold (a warning says so), so the tokens signed before still verify and a worker or a
    restart reads the same keys rather than making new ones."""
    write = _one_eddsa_port("tauth_keys_putback")
    with contextlib.contextmanager(local_oauth)(ca, tmp_path, write) as svc:
        port = svc["ED"]
        token = port.tokens(*ADA)["access_token"]
        kept = json.loads(keyset_file(svc).read_text())["keys"]
        keyset_file(svc).unlink()
        wait_for(keyset_file(svc).exists, 10, "the key set written back")
        back = json.loads(keyset_file(svc).read_text())["keys"]
        assert [(k["kid"], k["pem"]) for k in back] == [(k["kid"], k["pem"]) for k in kept]
        assert keyset_file(svc).stat().st_mode & 0o777 == 0o600
        assert port.get("/hello", token).status_code == 200
        [current] = [k["kid"] for k in kept if k["current"]]
        assert header_of(port.tokens(*ADA)["access_token"])["kid"] == current


@pytest.mark.parametrize("writer", ["0.2.0", "0.1.0"])  # 0.1.0 writes the set without its id
def test_a_key_removed_as_its_rotation_lands_stays_removed(
    ca: trustme.CA, tmp_path: Path, writer: str
) -> None:
    """docs/verifying-tokens.md: after a leak, rotate and remove the old key's entry, so its
    tokens fail at once. A worker that reads both changes in one look (the same set, changed)
    takes the set as it is: a set made anew is what it puts its keys back in (a review saw the
    removed key written back, verifying for its whole lifetime)."""
    write = _one_eddsa_port(f"tauth_keys_removed_{writer.replace('.', '_')}")
    with contextlib.contextmanager(local_oauth)(ca, tmp_path, write) as svc:
        port = svc["ED"]
        token = port.tokens(*ADA)["access_token"]
        old = header_of(token)["kid"]
        # the rotation and the removal made on a copy, then in place whole: one change seen
        work = tmp_path / "work"
        work.mkdir()
        copy = work / "keyset.json"
        copy.write_bytes(keyset_file(svc).read_bytes())
        keyset.rotate(keyset.FileKeySet(copy), {"EdDSA"})
        doc = json.loads(copy.read_text())
        doc["keys"] = [k for k in doc["keys"] if k["kid"] != old]
        if writer == "0.1.0":  # its documents have no id: 0.2.0's writes keep none either
            del doc["set"]
        copy.write_text(json.dumps(doc))
        copy.chmod(0o600)
        copy.replace(keyset_file(svc))
        wait_for(lambda: header_of(port.tokens(*ADA)["access_token"])["kid"] != old, 10,
                 "signing with the new key")  # fmt: skip
        time.sleep(2 * POLL_S)  # a put-back would have come by now (the new key's ttl noted)
        assert old not in keyset_file(svc).read_text()
        assert ('"set"' in keyset_file(svc).read_text()) is (writer == "0.2.0")
        assert_invalid_token(port.get("/hello", token))
