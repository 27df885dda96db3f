"""SPEC 12.1-12.2 through other people's code over real TLS: PyJWT's ``PyJWKClient`` on each port's
JWK Set, a Starlette resource server under uvicorn trusting fwrest's EdDSA tokens through the JWKS
alone, and a rotation by the real command while clients use a two-worker ``fwrest serve``. Ports
``ED``, ``EC``, ``RSA``; sqlite store; key set in ``.fwrest/keyset.json``."""

from __future__ import annotations

import contextlib
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import trustme

from tests.auth.oauth2_support import KEYS_ADA as ADA
from tests.auth.oauth2_support import KEYS_ALGS as ALGS
from tests.auth.oauth2_support import KEYS_APP as APP
from tests.auth.oauth2_support import (
    OAuth,
    OAuthService,
    client_context,
    issue_certs,
    issuer_of,
    oauth_section,
    served_service,
    uvicorn_app,
)
from tests.conftest import ServerProcess, free_config, run_cli, wait_for
from tests.docs.blocks import example
from tests.redis_support import RedisServer, started

RESOURCE_SERVER = textwrap.dedent(
    """
    import os
    import ssl

    import jwt
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    context = ssl.create_default_context(cafile=os.environ["RS_CA"])
    # the JWKS URL and the issuer are all this service knows of fwrest
    keys = jwt.PyJWKClient(os.environ["RS_JWKS"], ssl_context=context, cooldown_duration=0)


    async def orders(request):
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return JSONResponse({"error": "no token"}, 401)
        try:
            key = keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key, algorithms=["EdDSA"], audience="ED",
                                issuer=os.environ["RS_ISSUER"])
        except jwt.PyJWTError as exc:
            return JSONResponse({"error": type(exc).__name__}, 401)
        return JSONResponse({"user": claims["sub"], "kid": key.key_id})


    app = Starlette(routes=[Route("/orders", orders)])
    """
)


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    servers = {
        n: oauth_section(certs, onAuthparams="app.params", signingAlg=a) for n, a in ALGS.items()
    }
    return free_config(
        folder, servers=servers, app=APP, extra={"HTTPSERVER": {"StateStore": "sqlite"}}
    )


svc = served_service(_write, "jwks", "svc", workers=2)


def kid_of(token: str) -> str:
    return str(jwt.get_unverified_header(token)["kid"])


@pytest.mark.parametrize("port", sorted(ALGS))
def test_pyjwkclient_fetches_the_jwks_over_tls_and_verifies_each_algorithm(
    svc: OAuthService, port: str
) -> None:
    oauth = svc[port]
    token = oauth.tokens(*ADA)["access_token"]
    issuer = issuer_of(oauth)
    assert issuer == oauth.base  # https://127.0.0.1:{the bound port}/rest
    client = jwt.PyJWKClient(issuer + "/fw/oauth2/jwks", ssl_context=client_context(svc.certs))
    key = client.get_signing_key_from_jwt(token)
    assert key.key_id == kid_of(token)
    claims = jwt.decode(token, key, algorithms=[ALGS[port]], audience=port, issuer=issuer)
    assert claims["sub"] == "ada"
    # the metadata names the same JWKS (RFC 8414), at the well-known path of the port's root
    root = issuer.rsplit("/rest", 1)[0]
    meta = oauth.http.get(root + "/.well-known/oauth-authorization-server/rest").json()
    assert meta["jwks_uri"] == issuer + "/fw/oauth2/jwks"


@pytest.fixture(scope="module")
def resource_server(svc: OAuthService, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Starlette app under uvicorn, a process of its own; its base URL (plain HTTP)."""
    issuer = issuer_of(svc["ED"])
    env = {
        "RS_CA": str(svc.certs["ca"]),
        "RS_JWKS": issuer + "/fw/oauth2/jwks",
        "RS_ISSUER": issuer,
    }
    yield from uvicorn_app(tmp_path_factory.mktemp("resource"), "rs_app", RESOURCE_SERVER, env)


def test_a_separate_resource_server_accepts_eddsa_tokens_through_the_jwks_alone(
    svc: OAuthService, resource_server: str
) -> None:
    token = svc["ED"].tokens(*ADA)["access_token"]
    answer = httpx.get(resource_server + "/orders", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"user": "ada", "kid": kid_of(token)}
    # an ES256 token of another port of the same service: not what it trusts
    other = svc["EC"].tokens(*ADA)["access_token"]
    refused = httpx.get(resource_server + "/orders", headers={"Authorization": f"Bearer {other}"})
    assert refused.status_code == 401
    head, body, sig = token.split(".")
    # another first character (the one the signature had would leave it valid, 1 run in 64)
    tampered = f"{head}.{body}.{'A' if sig[0] != 'A' else 'B'}{sig[1:]}"
    refused = httpx.get(
        resource_server + "/orders", headers={"Authorization": f"Bearer {tampered}"}
    )
    assert refused.status_code == 401


def test_the_guide_s_pyjwt_example_verifies_tokens(svc: OAuthService) -> None:
    """docs/verifying-tokens.md's example as written (this service's URL, CA file and section)."""
    token = svc["ED"].tokens(*ADA)["access_token"]
    code = (
        example("verifying-pyjwt")
        .text.replace("https://api.example.com/rest", issuer_of(svc["ED"]))
        .replace('"ca.pem"', repr(str(svc.certs["ca"])))
        .replace('"HTTPS_REST"', '"ED"')
    )
    scope: dict[str, Any] = {"token": token}
    exec(compile(code, "verifying-tokens.md", "exec"), scope)
    assert scope["claims"]["sub"] == "ada"
    other = svc["EC"].tokens(*ADA)["access_token"]  # ES256, another section
    with pytest.raises(jwt.PyJWTError):
        scope["verify"](other)


def test_rotation_under_load_refuses_no_valid_token(
    svc: OAuthService, resource_server: str
) -> None:
    """During `fwrest keys rotate` on both workers no valid token is refused (fwrest or the resource
    server); tokens issued 1 s after it carry the new kid (SPEC 12.1)."""
    ed = svc["ED"]
    old_kid = kid_of(ed.tokens(*ADA)["access_token"])
    stop = threading.Event()
    issued: list[tuple[float, str]] = []  # (when its request started, kid)
    failures: list[str] = []
    seen_tokens: list[str] = []
    unavailable: list[str] = []  # the Retry-After of each 503 of the token route

    def client() -> None:
        # a connection of its own per client: the kernel spreads them over the two workers
        http = httpx.Client(verify=client_context(svc.certs), timeout=30)
        try:
            while not stop.is_set():
                started = time.monotonic()
                form = {"grant_type": "password", "username": ADA[0], "password": ADA[1]}
                r = http.post(ed.token_url, data=form)
                if r.status_code == 503 and r.headers.get("retry-after"):
                    # SPEC 7: sqlite held past the deadline when loaded; wait Retry-After
                    unavailable.append(r.headers["retry-after"])
                    time.sleep(float(r.headers["retry-after"]))
                    continue
                if r.status_code != 200:
                    failures.append(f"token {r.status_code} {r.text}")
                    continue
                token = r.json()["access_token"]
                issued.append((started, kid_of(token)))
                seen_tokens.append(token)
                auth = {"Authorization": f"Bearer {token}"}
                used = http.get(ed.base + "/hello", headers=auth)
                if used.status_code != 200:
                    failures.append(f"fwrest refused {kid_of(token)}: {used.text}")
                elsewhere = httpx.get(resource_server + "/orders", headers=auth, timeout=30)
                if elsewhere.status_code != 200:
                    failures.append(f"resource server refused {kid_of(token)}: {elsewhere.text}")
        except httpx.HTTPError as exc:  # shown, not a thread that ends unseen
            failures.append(f"client: {exc!r}")
        finally:
            http.close()

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        # the load runs before the rotation (on a loaded machine the first tokens come late)
        wait_for(lambda: len(issued) >= 3, 30, "tokens issued before the rotation")
        done = run_cli("keys", "rotate", str(svc.proc.config), cwd=svc.proc.config.parent)
        rotated = time.monotonic()
        assert done.returncode == 0, done.stderr
        after_rotation = lambda: sum(t > rotated + 1.0 for t, _ in issued) >= 3  # noqa: E731
        wait_for(after_rotation, 30, "tokens issued after rotation")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    print(f"token route answers 503 (then asked again): {len(unavailable)}")
    assert not failures, failures[:5]
    last_old = max(t for t, kid in issued if kid == old_kid)
    print(f"the last old kid's token was asked for {last_old - rotated:.3f} s after `keys rotate`"
          f" returned; {len(issued)} tokens issued")  # fmt: skip
    after = [kid for t, kid in issued if t > rotated + 1.0]
    assert after and all(kid != old_kid for kid in after), set(after)
    assert len(set(after)) == 1
    assert old_kid in {kid for _, kid in issued}  # the load did span the rotation
    # every token issued before still works on both workers (several connections)
    for token in seen_tokens[:3]:
        for _ in range(4):
            assert ed.get("/hello", token).status_code == 200
    # `fwrest keys list` shows the old key as verifying, the new as current
    listed = run_cli("keys", "list", str(svc.proc.config), cwd=svc.proc.config.parent)
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith(old_kid))
    assert "verifies until" in line
    assert any(after[0] in x and x.rstrip().endswith("yes") for x in listed.stdout.splitlines())


def test_two_hosts_sharing_redis_share_the_key_set_across_a_rotation(
    ca: trustme.CA, tmp_path: Path
) -> None:
    """Two hosts on Redis, each deriving its issuer (SPEC 12.2): the key set lives in Redis, tokens
    verify across hosts around a rotation on A, and B signs with the new key within 1 s."""
    with contextlib.ExitStack() as stack:
        redis_server = stack.enter_context(started(RedisServer(tmp_path)))
        hosts: list[ServerProcess] = []
        certs = issue_certs(ca, tmp_path / "certs")
        for label in ("a", "b"):
            folder = tmp_path / label
            folder.mkdir()
            servers = {"ED": oauth_section(certs, onAuthparams="app.params", signingAlg="EdDSA")}
            extra = {"HTTPSERVER": {"StateStore": redis_server.url}}
            hosts.append(ServerProcess(free_config(folder, servers=servers, app=APP, extra=extra)))
            stack.callback(hosts[-1].stop)
        for proc in hosts:
            proc.wait_ready()
        a, b = (stack.enter_context(OAuth(proc, "ED", certs)) for proc in hosts)
        assert not list(tmp_path.rglob("keyset.json")), "the key set belongs in Redis"
        old_kid = kid_of(a.tokens(*ADA)["access_token"])
        assert kid_of(b.tokens(*ADA)["access_token"]) == old_kid
        failures: list[str] = []
        issued: list[tuple[float, str, str]] = []  # (asked, host, kid)
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                for name, issuer_host, other in (("a", a, b), ("b", b, a)):
                    asked = time.monotonic()
                    token = issuer_host.tokens(*ADA)["access_token"]
                    issued.append((asked, name, kid_of(token)))
                    for host in (issuer_host, other):
                        used = host.get("/hello", token)
                        if used.status_code != 200:
                            failures.append(f"{name} -> {used.status_code} {used.text}")

        thread = threading.Thread(target=load)
        thread.start()
        try:
            time.sleep(0.5)
            done = run_cli("keys", "rotate", str(hosts[0].config), cwd=hosts[0].config.parent)
            rotated = time.monotonic()
            assert done.returncode == 0, done.stderr
            assert "the redis state store" in done.stdout
            late_ones = lambda: sum(t > rotated + 1.0 for t, _, _ in issued) >= 4  # noqa: E731
            wait_for(late_ones, 15, "tokens of both hosts after the rotation")
        finally:
            stop.set()
            thread.join(30)
        assert not failures, failures[:5]
        late = [(name, kid) for t, name, kid in issued if t > rotated + 1.0]
        assert {name for name, _ in late} == {"a", "b"}
        assert all(kid != old_kid for _, kid in late), late
        assert len({kid for _, kid in late}) == 1


class _CountingClient(jwt.PyJWKClient):
    """PyJWT's JWK Set client, counting its fetches of the set."""

    fetches = 0

    def fetch_data(self) -> Any:
        self.fetches += 1
        return super().fetch_data()


@pytest.mark.parametrize("keys_in", ["file", "redis"])
def test_clients_that_fetched_before_a_rotation_verify_the_new_key_at_once(
    ca: trustme.CA, tmp_path: Path, keys_in: str
) -> None:
    """The key set publishes each algorithm's next key ahead of its use: a `fwrest.verify`
    verifier and PyJWT's client that fetched the JWK Set before `fwrest keys rotate` verify a
    token signed with the new key without fetching again. Before, the new key was made by the
    rotation: both refused every new token until their refetch was allowed (a review saw
    `fwrest.verify` refuse them for ~56 s)."""
    from fwrest.verify import Verifier

    with contextlib.ExitStack() as stack:
        if keys_in == "redis":
            store = stack.enter_context(started(RedisServer(tmp_path))).url
        else:
            store = "sqlite"
        certs = issue_certs(ca, tmp_path / "certs")
        servers = {"ED": oauth_section(certs, onAuthparams="app.params", signingAlg="EdDSA")}
        extra = {"HTTPSERVER": {"StateStore": store}}
        (tmp_path / "host").mkdir()
        proc = ServerProcess(free_config(tmp_path / "host", servers=servers, app=APP, extra=extra))
        stack.callback(proc.stop)
        proc.wait_ready()
        ed = stack.enter_context(OAuth(proc, "ED", certs))
        assert (tmp_path / "host" / ".fwrest" / "keyset.json").exists() is (keys_in == "file")
        issuer = issuer_of(ed)
        verifier = Verifier(issuer, audience="ED", verify=str(certs["ca"]))
        stack.callback(verifier.close)
        # no refetch for an unknown kid while the test runs, however slow the machine
        verifier.kid_refetch_interval = 3600
        fetched: list[str] = []  # the paths the verifier asked for
        verifier._client().event_hooks["request"].append(lambda r: fetched.append(r.url.path))
        client = _CountingClient(
            issuer + "/fw/oauth2/jwks", ssl_context=client_context(certs), cooldown_duration=3600
        )
        before = ed.tokens(*ADA)["access_token"]
        assert verifier.verify(before)["sub"] == "ada"  # fetches the metadata and the JWK Set
        assert client.get_signing_key_from_jwt(before).key_id == kid_of(before)
        assert client.fetches == 1
        published = [k["kid"] for k in ed.http.get(issuer + "/fw/oauth2/jwks").json()["keys"]]
        assert len(published) == 2 and kid_of(before) in published  # current and next

        done = run_cli("keys", "rotate", str(proc.config), cwd=proc.config.parent)
        assert done.returncode == 0, done.stderr
        [new_kid] = [line.split()[6] for line in done.stdout.splitlines() if "new current" in line]
        assert new_kid in published, "the key rotated in was published before the rotation"
        # SPEC 13.5: its audit line in the service's LogFile, beside the service's own lines
        logged = [x for x in proc.file_log().splitlines() if " fwrest.audit [cli] keys.rotate" in x]
        assert len(logged) == 1 and f'"kid":"{new_kid}"' in logged[0], logged
        assert "fwrest.audit" not in done.stderr, done.stderr
        after: list[str] = []

        def signs_anew() -> bool:
            after[:] = [ed.tokens(*ADA)["access_token"]]
            return kid_of(after[0]) != kid_of(before)

        wait_for(signs_anew, 15, "tokens signed with the new key")
        assert kid_of(after[0]) == new_kid
        assert verifier.verify(after[0])["sub"] == "ada"
        key = client.get_signing_key_from_jwt(after[0])
        claims = jwt.decode(after[0], key, algorithms=["EdDSA"], audience="ED", issuer=issuer)
        assert claims["sub"] == "ada"
        assert client.fetches == 1, "PyJWT's client fetched the JWK Set again"
        assert fetched.count("/rest/fw/oauth2/jwks") == 1, fetched
        assert verifier.verify(before)["sub"] == "ada"  # the former key verifies its tokens
        # the JWK Set: the former key (until dropped), the current one and a new next one
        now = [k["kid"] for k in ed.http.get(issuer + "/fw/oauth2/jwks").json()["keys"]]
        assert set(published) < set(now) and len(now) == 3, (published, now)
        [upcoming] = set(now) - set(published)
        listed = run_cli("keys", "list", str(proc.config), cwd=proc.config.parent)
        assert listed.returncode == 0, listed.stderr
        states = {line.split()[0]: line.split()[3] for line in listed.stdout.splitlines()[1:]}
        assert states == {kid_of(before): "no", new_kid: "yes", upcoming: "next"}, listed.stdout
