"""SPEC 16.4: ``Verifier`` and ``AsyncVerifier`` on a running fwrest over TLS (ES256, RS256, HS256;
support.py), across a real rotation and revocation."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import trustme

from fwrest.verify import (
    KID_REFETCH_S,
    AsyncVerifier,
    InsufficientScope,
    InvalidToken,
    IssuerUnavailable,
    NoPublicKey,
    Verifier,
)
from tests.auth.oauth2_support import OAuthService
from tests.conftest import wait_for
from tests.verify.support import (
    ADA,
    CLIENT,
    ORDINARY,
    RESOURCE,
    claims_for,
    issuer,
    kid_of,
    revoke,
    rotate,
    serve_issuer,
    signed_by_fwrest,
    token,
)


@pytest.fixture(scope="module")
def svc(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthService]:
    yield from serve_issuer(ca, tmp_path_factory.mktemp("verify"))


def verifier(svc: OAuthService, port: str = "EC", **kw: object) -> Verifier:
    return Verifier(issuer(svc, port), audience=port, verify=str(svc.certs["ca"]), **kw)  # type: ignore[arg-type]


def async_verifier(svc: OAuthService, port: str = "EC", **kw: object) -> AsyncVerifier:
    return AsyncVerifier(issuer(svc, port), audience=port, verify=str(svc.certs["ca"]), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("port", ["EC", "RSA"])
def test_a_token_of_fwrest_verifies_through_its_metadata(svc: OAuthService, port: str) -> None:
    access = token(svc, port, scope="orders:read")
    with verifier(svc, port) as v:
        claims = v.verify(access, scopes=["orders:read"])
    assert claims["sub"] == "ada" and claims["aud"] == port
    assert claims["iss"] == issuer(svc, port) and claims["scope"] == "orders:read"

    async def twin() -> dict[str, object]:
        async with async_verifier(svc, port) as av:
            return await av.verify(access, scopes=["orders:read"])

    assert asyncio.run(twin()) == claims


def _challenge(exc: InvalidToken) -> str:
    assert exc.status == 401
    assert exc.www_authenticate.startswith('Bearer error="invalid_token"'), exc.www_authenticate
    return exc.www_authenticate


def test_expired_foreign_and_forged_tokens_are_refused_with_the_rfc_6750_challenge(
    svc: OAuthService,
) -> None:
    iss = issuer(svc, "EC")
    cases = {  # the token, what the challenge says
        # signed with fwrest's own key: only the claim is wrong
        "expired": (signed_by_fwrest(svc, "ES256", claims_for(iss, ttl=-120)), "has expired"),
        "another issuer": (signed_by_fwrest(svc, "ES256", claims_for("https://other.example/rest")),
                           "another issuer"),
        "another audience": (signed_by_fwrest(svc, "ES256", claims_for(iss, aud="RSA")),
                             "another audience"),
        # a token of fwrest's RS256 port: another issuer, a key the EC port's set lacks
        "another port": (token(svc, "RSA"), "names no key"),
        "malformed": ("not.a.token", "malformed"),
    }  # fmt: skip
    with verifier(svc) as v:
        for name, (bad, expected) in cases.items():
            with pytest.raises(InvalidToken) as caught:
                v.verify(bad)
            challenge = _challenge(caught.value)
            assert expected in challenge, (name, challenge)
        # within the leeway an expired token still passes; beyond it not
        almost = signed_by_fwrest(svc, "ES256", claims_for(iss, ttl=-10))
        assert v.verify(almost)["sub"] == "ada"
    strict = verifier(svc, leeway=0)
    with pytest.raises(InvalidToken, match="expired"):
        strict.verify(almost)
    strict.close()

    async def twins() -> list[str]:
        out = []
        async with async_verifier(svc) as av:
            for bad, _expected in cases.values():
                try:
                    await av.verify(bad)
                except InvalidToken as exc:
                    out.append(_challenge(exc))
        return out

    assert len(asyncio.run(twins())) == len(cases)


def test_a_missing_scope_is_403_insufficient_scope(svc: OAuthService) -> None:
    access = token(svc, scope="orders:read")
    with verifier(svc) as v:
        # a list, or one space-separated string as a scope claim writes them
        assert v.verify(access, scopes="orders:read")["sub"] == "ada"
        with pytest.raises(InsufficientScope):
            v.verify(access, scopes="orders:read orders:write")
    with verifier(svc) as v, pytest.raises(InsufficientScope) as caught:
        v.verify(access, scopes=["orders:read", "orders:write"])
    exc = caught.value
    assert exc.status == 403
    assert exc.www_authenticate.startswith(
        'Bearer error="insufficient_scope", scope="orders:read orders:write"'
    ), exc.www_authenticate

    async def twin() -> None:
        async with async_verifier(svc) as av:
            await av.verify(access, scopes=["orders:write"])

    with pytest.raises(InsufficientScope):
        asyncio.run(twin())


def test_an_hs256_issuer_has_no_public_key(svc: OAuthService) -> None:
    hs = issuer(svc, "HS")
    with Verifier(hs, verify=str(svc.certs["ca"])) as v, pytest.raises(NoPublicKey) as caught:
        v.verify(token(svc, "HS"))
    assert isinstance(caught.value, ValueError) and hs in str(caught.value)
    # found once: the issuer is not asked again on every request
    asked: list[str] = []
    with Verifier(hs, verify=str(svc.certs["ca"])) as v:
        v._client().event_hooks["request"].append(lambda r: asked.append(r.url.path))
        for _ in range(3):
            with pytest.raises(NoPublicKey):
                v.verify(token(svc, "HS"))
    assert asked == ["/.well-known/oauth-authorization-server/rest"]
    with Verifier(hs, verify=str(svc.certs["ca"])) as v, pytest.raises(NoPublicKey):
        v.discover()  # when asked to at once, as made
    # at the first check whatever the token: a malformed one too (it was InvalidToken)
    with Verifier(hs, verify=str(svc.certs["ca"])) as v, pytest.raises(NoPublicKey):
        v.verify("a.b.c")

    async def twin() -> None:
        async with AsyncVerifier(hs, verify=str(svc.certs["ca"])) as av:
            await av.discover()

    async def malformed() -> None:
        async with AsyncVerifier(hs, verify=str(svc.certs["ca"])) as av:
            await av.verify("a.b.c")

    for check in (twin, malformed):
        with pytest.raises(NoPublicKey):
            asyncio.run(check())


def test_an_issuer_that_cannot_be_reached_is_unavailable_not_a_refusal(svc: OAuthService) -> None:
    with Verifier("https://127.0.0.1:1/rest") as v, pytest.raises(IssuerUnavailable) as caught:
        v.verify(token(svc))
    assert caught.value.status == 503
    # a CA the issuer's certificate is not from: TLS is verified
    with Verifier(issuer(svc, "EC")) as v, pytest.raises(IssuerUnavailable):
        v.verify(token(svc))
    with pytest.raises(ValueError, match="issuer"):
        Verifier("not a url")
    # an issuer is https (RFC 8414 2, SPEC 12.2), on loopback too: fwrest writes no other iss
    for plain in ("http://127.0.0.1:8443/rest", "http://auth.example.com/rest"):
        with pytest.raises(ValueError, match="is not an https URL"):
            Verifier(plain)
        with pytest.raises(ValueError, match="is not an https URL"):
            AsyncVerifier(plain)


def test_a_rotation_is_followed_after_an_unknown_kid_at_most_once_a_minute(
    svc: OAuthService,
) -> None:
    """Cached for max-age=300; a new kid refetches unless fetched within a minute (the interval set
    to 0 where it would have passed, SPEC 9). Sync and async in step on one loop."""

    async def steps() -> None:
        v = verifier(svc, "RSA")
        av = async_verifier(svc, "RSA")
        assert v.kid_refetch_interval == av.kid_refetch_interval == KID_REFETCH_S == 60
        before = token(svc, "RSA")
        v.verify(before)
        await av.verify(before)
        v.kid_refetch_interval = av.kid_refetch_interval = 0  # "a minute later"
        kid = await asyncio.to_thread(rotate, svc, "RSA")
        after = token(svc, "RSA")
        assert kid_of(after) == kid != kid_of(before)
        # the unknown kid fetches the set once: verified, and so is the old token still
        assert v.verify(after)["sub"] == "ada"
        assert v.verify(before)["sub"] == "ada"
        assert (await av.verify(after))["sub"] == "ada"
        assert (await av.verify(before))["sub"] == "ada"
        # another rotation within the minute: the set was fetched less than 60 s ago
        v.kid_refetch_interval = av.kid_refetch_interval = KID_REFETCH_S
        newer = await asyncio.to_thread(rotate, svc, "RSA")
        third = token(svc, "RSA")
        assert kid_of(third) == newer
        with pytest.raises(InvalidToken, match="names no key"):
            v.verify(third)
        with pytest.raises(InvalidToken, match="names no key"):
            await av.verify(third)
        v.kid_refetch_interval = av.kid_refetch_interval = 0  # the minute has passed
        assert v.verify(third)["sub"] == "ada"
        assert (await av.verify(third))["sub"] == "ada"
        v.close()
        await av.aclose()

    asyncio.run(steps())


def test_a_revoked_token_is_refused_with_introspection(svc: OAuthService) -> None:
    async def steps() -> None:
        pair = svc["EC"].tokens(*ADA)
        access = pair["access_token"]
        plain = verifier(svc)
        asking = verifier(svc, introspect=CLIENT)
        av = async_verifier(svc, introspect=CLIENT)
        # 30 s at most; shortened (SPEC 9), room for the revocation when loaded (1 s was outlasted)
        asking.introspect_cache_s = av.introspect_cache_s = 3.0
        asked = time.monotonic()
        assert asking.verify(access)["sub"] == "ada"
        assert (await av.verify(access))["sub"] == "ada"
        filled = time.monotonic()  # both answers remembered by now
        revoke(svc, pair["refresh_token"])
        # the signature alone does not know: a revoked token verifies without introspection
        assert plain.verify(access)["sub"] == "ada"
        # the answer remembered (at most 3 s here), then asked again: refused
        asking.verify(access)
        await av.verify(access)
        print(f"the remembered answers served at most {time.monotonic() - asked:.3f} s old")
        await asyncio.sleep(max(0.0, filled + 3.1 - time.monotonic()))
        with pytest.raises(InvalidToken, match="not active") as caught:
            asking.verify(access)
        assert caught.value.status == 401
        with pytest.raises(InvalidToken, match="not active"):
            await av.verify(access)
        fresh = verifier(svc, introspect=CLIENT)
        with pytest.raises(InvalidToken, match="not active"):
            fresh.verify(access)
        # wrong client credentials: the route refuses them, the token is not judged
        with verifier(svc, introspect=("web", "wrong")) as wrong, pytest.raises(IssuerUnavailable):
            wrong.verify(token(svc))
        for each in (plain, asking, fresh):
            each.close()
        await av.aclose()

    asyncio.run(steps())


def test_a_resource_servers_own_client_introspects_the_tokens_of_another(
    svc: OAuthService,
) -> None:
    """The resource server's own client listing ``introspect`` sees every token of its port; one
    without sees only its own (RFC 7662 2.2)."""
    pair = svc["EC"].tokens(*ADA)
    access = pair["access_token"]
    with (
        verifier(svc, introspect=RESOURCE) as resource,
        verifier(svc, introspect=ORDINARY) as ordinary,
    ):
        resource.introspect_cache_s = ordinary.introspect_cache_s = 0.0  # ask every time
        claims = resource.verify(access)
        assert (claims["sub"], claims["client_id"]) == ("ada", "web")
        with pytest.raises(InvalidToken) as caught:
            ordinary.verify(access)
        # the message does not claim a revocation it cannot know of
        assert "not active (revoked, expired, or not visible to the introspecting client)" in str(
            caught.value
        )
        revoke(svc, pair["refresh_token"])

        def refused() -> bool:
            try:
                resource.verify(access)
            except InvalidToken as exc:
                assert "not active" in str(exc), exc
                return True
            return False

        wait_for(refused, 10, "the revoked token refused through introspection")  # hang guard


def test_the_module_loads_nothing_of_the_server() -> None:
    """It runs in other services: PyJWT and httpx, not fwrest's server."""
    code = (
        "import sys, fwrest.verify\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('fwrest'))\n"
        "print(loaded)\n"
        "assert loaded == ['fwrest', 'fwrest.verify'], loaded\n"
        "assert 'uvloop' not in sys.modules and 'redis' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_key_set_s_cache_control_is_kept(svc: OAuthService) -> None:
    """fwrest's JWK Set says max-age=300: a second verifier's checks fetch it once."""
    fetched: list[str] = []

    def hook(request: httpx.Request) -> None:
        fetched.append(request.url.path)

    v = verifier(svc)
    v._client().event_hooks["request"].append(hook)
    for _ in range(3):
        v.verify(token(svc))
    assert fetched.count("/rest/fw/oauth2/jwks") == 1, fetched
    assert fetched.count("/.well-known/oauth-authorization-server/rest") == 1, fetched
    v.close()
    # keys_max_age bounds it below (a leaked key removed on fwrest: docs/verifying-tokens.md)
    fetched.clear()
    v = verifier(svc)
    assert v.keys_max_age == 86400
    v.keys_max_age = 0
    v.verify(token(svc))
    v._client().event_hooks["request"].append(hook)
    for _ in range(2):
        v.verify(token(svc))
    assert fetched.count("/rest/fw/oauth2/jwks") == 2, fetched
    v.close()


def test_a_closed_verifier_fetches_no_more() -> None:
    """A fetch after close() (a fetch thread outliving it, too) makes no HTTP client that
    nothing would close: IssuerUnavailable, at once."""
    verifier = Verifier("https://127.0.0.1:9/rest")
    verifier.close()
    started = time.monotonic()
    with pytest.raises(IssuerUnavailable, match="closed"):
        verifier.discover()
    assert time.monotonic() - started < 5, "a closed verifier tried the network"
