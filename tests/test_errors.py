"""fwrest.errors: a class per HTTP error and OAuth code, each building its headers, rendered by
``wire.error_reply`` with quoted challenge parameters (RFC 9110 5.6.4); a port's answers in process
are those renderings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import trustme

from fwrest.auth.oauth2.errors import (
    CLIENT_CHALLENGE,
    InvalidClient,
    InvalidGrant,
    InvalidRequest,
    render,
)
from fwrest.auth.oauth2.scopes import insufficient
from fwrest.errors import (
    BASIC,
    BEARER,
    NO_STORE,
    OAUTH_NO_STORE,
    Challenge,
    Forbidden,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    error_body,
    quoted,
    store_unavailable,
)
from fwrest.testing import Client
from fwrest.wire import JSON, Reply, error_reply
from tests.auth.oauth2_support import oauth_section
from tests.conftest import issue_certs, local_port, module_config

JSON_TYPE = ("content-type", JSON)


def test_each_http_error_builds_its_status_headers_and_body() -> None:
    cases: list[tuple[Reply, int, list[tuple[str, str]], str]] = [
        (error_reply(Unauthorized(BASIC)), 401,
         [("www-authenticate", 'Basic realm="Access to REST", charset="ISO-8859-1"')], ""),
        (error_reply(Unauthorized(BEARER, "an access token is required")), 401,
         [("www-authenticate", 'Bearer realm="Access to REST"')], "an access token is required"),
        (error_reply(Forbidden()), 403, [], ""),
        (error_reply(Forbidden("no", Challenge("Bearer").refused("insufficient_scope"))), 403,
         [("www-authenticate", 'Bearer error="insufficient_scope"')], "no"),
        (error_reply(TooManyRequests(299.2, "too many failed attempts")), 429,
         [("retry-after", "300")], "too many failed attempts"),
        (error_reply(TooManyRequests(0.0)), 429, [("retry-after", "1")], ""),
        (error_reply(ServiceUnavailable(message="Server Busy")), 503, [], ""),
        (error_reply(store_unavailable()), 503, [("retry-after", "1")],
         "the state store is unavailable"),
    ]  # fmt: skip
    for reply, status, headers, detailed in cases:
        assert reply.status == status
        assert reply.headers == [JSON_TYPE, *headers]
        assert orjson.loads(reply.body)["detailedMessage"] == detailed
        assert not reply.close
    busy = error_reply(ServiceUnavailable(message="Server Busy"))
    assert busy.body == error_body(503, "Server Busy")
    assert orjson.loads(error_reply(Unauthorized(BASIC)).body)["message"] == "Unauthorized"


def test_each_oauth_error_builds_its_status_headers_and_body() -> None:
    refused = render(InvalidClient("client authentication failed"))
    assert refused.status == 401
    assert refused.headers == [JSON_TYPE, ("www-authenticate", 'Basic realm="Access to REST"'),
                               ("cache-control", "no-store"), ("pragma", "no-cache")]  # fmt: skip
    body = {"error": "invalid_client", "error_description": "client authentication failed"}
    assert orjson.loads(refused.body) == body
    grant = render(InvalidGrant("the refresh token has expired"))
    assert (grant.status, grant.headers) == (400, [JSON_TYPE, *OAUTH_NO_STORE])
    assert orjson.loads(grant.body)["error"] == "invalid_grant"
    big = render(InvalidRequest("the body is too large", 413))
    assert (big.status, orjson.loads(big.body)["error"]) == (413, "invalid_request")
    # the one rendering: an OAuth error goes through the function HTTP errors go through
    assert error_reply(InvalidGrant("x")).headers == render(InvalidGrant("x")).headers
    assert NO_STORE == (("cache-control", "no-store"),)
    assert (*NO_STORE, ("pragma", "no-cache")) == OAUTH_NO_STORE


def test_challenges_quote_their_parameters() -> None:
    assert quoted("plain") == '"plain"'
    assert quoted('a "b" \\c') == '"a \\"b\\" \\\\c"'
    tricky = BEARER.refused("invalid_token", 'the "kid" \\ is unknown')
    assert tricky == (
        'Bearer realm="Access to REST", error="invalid_token", '
        'error_description="the \\"kid\\" \\\\ is unknown"'
    )
    # no description without an error (RFC 6750 3.1), parameters after the challenge's own
    assert BEARER.refused("", "ignored") == 'Bearer realm="Access to REST"'
    located = BEARER.extended(resource_metadata="https://h/.well-known/x")
    metadata = 'Bearer realm="Access to REST", resource_metadata="https://h/.well-known/x"'
    assert located.value == metadata
    assert located.header == (("www-authenticate", located.value),)
    assert BEARER.value == 'Bearer realm="Access to REST"'  # extended made a new one
    scheme_only = Challenge("Bearer")
    assert str(scheme_only) == "Bearer"
    insufficient = 'Bearer error="insufficient_scope", scope="a b"'
    assert scheme_only.refused("insufficient_scope", scope="a b") == insufficient
    dpop = Challenge("DPoP", algs="ES256 EdDSA RS256")
    assert dpop.refused("invalid_dpop_proof", "the DPoP proof is malformed") == (
        'DPoP algs="ES256 EdDSA RS256", error="invalid_dpop_proof", '
        'error_description="the DPoP proof is malformed"'
    )
    assert str(CLIENT_CHALLENGE) == 'Basic realm="Access to REST"'


APP = """
from fwrest import get

@get("/hello")
def hello():
    return {"hello": "world"}

@get("/orders", scopes=["orders:read"])
def orders():
    return {"orders": []}

def check(user, password):
    return user == "ada" and password == "Ada-Pw-5530"

def params():
    return {"client_id": "web", "client_secret": "Web-Secret-5530",
            "users": [{"username": "ada", "password": "Ada-Pw-5530"}],
            "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"}]}
"""
MODULE = "errors_app"
CLIENT = {"client_id": "web", "client_secret": "Web-Secret-5530"}
# the lines the engine writes on every answer, not the reply's own
_VOLATILE = {"date", "x-content-type-options", "x-request-id", "content-length"}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA) -> Path:
    folder = tmp_path_factory.mktemp("errors")
    certs = issue_certs(ca, folder / "certs")
    app = APP.replace("check", f"{MODULE}_check").replace("params", f"{MODULE}_params")
    basic = {"scheme": "basic", "OnAuth": f"{MODULE}_check", "maxFailures": 2}
    servers = {
        "BASIC": local_port(FwData={"Authorization": basic}),
        "OPEN": local_port(Locations="LIMITED"),
        "SHOP": oauth_section(certs, onAuthparams=f"{MODULE}_params"),
    }
    limited = {"Path": "/limited", "ThreadPool": "POOL", "RateLimit": "RL"}
    extra = {"LIMITED": limited, "RL": {"Limit": 1, "Window": "1m"}}
    return module_config(folder, MODULE, app=app, servers=servers, extra=extra)


@pytest.fixture(scope="module")
def basic(config: Path) -> Iterator[Client]:
    with Client(config, server="BASIC") as client:
        yield client


@pytest.fixture(scope="module")
def shop(config: Path) -> Iterator[Client]:
    with Client(config, server="SHOP") as client:
        yield client


def assert_sent(answer: httpx.Response, reply: Reply) -> None:
    """The answer is ``reply`` as the port writes it: status, headers in order, body."""
    sent = [
        (name.decode().lower(), value.decode())
        for name, value in answer.headers.raw
        if name.decode().lower() not in _VOLATILE
    ]
    assert (answer.status_code, sent, answer.content) == (reply.status, reply.headers, reply.body)


def test_a_basic_ports_refusals_are_the_classes(basic: Client) -> None:
    assert_sent(basic.get("/rest/hello"), error_reply(Unauthorized(BASIC)))
    assert_sent(basic.get("/rest/hello", auth=("ada", "wrong")), error_reply(Forbidden()))
    basic.get("/rest/hello", auth=("ada", "wrong"))
    locked = basic.get("/rest/hello", auth=("ada", "wrong"))  # past maxFailures: 2
    retry = float(locked.headers["retry-after"])
    assert_sent(locked, error_reply(TooManyRequests(retry, "too many failed attempts")))


def test_a_rate_limit_refuses_with_too_many_requests(config: Path) -> None:
    with Client(config, server="OPEN") as client:
        assert client.get("/limited/hello").status_code == 200
        refused = client.get("/limited/hello")
    retry = int(refused.headers["retry-after"])
    detailed = f"more than 1 requests in 60 s; retry after {retry} s"
    expected = error_reply(TooManyRequests(retry, detailed))
    expected.headers += [
        ("ratelimit-policy", '"RL";q=1;w=60'),
        ("ratelimit", f'"RL";r=0;t={retry}'),
    ]
    assert_sent(refused, expected)


TOKEN = "/rest/fw/oauth2/token"


def test_an_oauth2_ports_refusals_are_the_classes(shop: Client) -> None:
    issuer = shop.get("/rest/fw/oauth2/metadata").json()["issuer"]  # https://host:port/rest
    metadata = issuer.removesuffix("/rest") + "/.well-known/oauth-protected-resource/rest"
    located = BEARER.extended(resource_metadata=metadata)
    why = "an access token is required"
    assert_sent(shop.get("/rest/hello"), error_reply(Unauthorized(located, why)))
    bad = shop.get("/rest/hello", headers={"Authorization": "Bearer a.b.c"})
    why = "the access token is malformed"
    assert_sent(bad, error_reply(Unauthorized(located.refused("invalid_token", why), why)))
    # the token route: its errors and its tokens, with RFC 6749 5.1's no-store
    wrong = {**CLIENT, "client_secret": "wrong"}
    refused = shop.post(TOKEN, data={"grant_type": "password", **wrong})
    assert_sent(refused, render(InvalidClient("client authentication failed")))
    guess = {"grant_type": "password", "username": "ada", "password": "wrong", **CLIENT}
    assert_sent(shop.post(TOKEN, data=guess), render(InvalidGrant("invalid username or password")))
    issued = shop.post(TOKEN, data={**guess, "password": "Ada-Pw-5530"})
    assert issued.status_code == 200
    assert_sent(issued, Reply(200, [JSON_TYPE, *OAUTH_NO_STORE], issued.content))
    bearer = {"Authorization": "Bearer " + issued.json()["access_token"]}
    orders = shop.get("/rest/orders", headers=bearer)
    assert_sent(orders, error_reply(insufficient(["orders:read"])))
    # introspection by a bearer without the scope: both challenges in one field
    asked = shop.post("/rest/fw/oauth2/introspect", data={"token": "x"}, headers=bearer)
    why = "introspection needs an access token with the scope 'introspect'"
    challenge = BEARER.refused("insufficient_scope", why, scope="introspect")
    assert_sent(asked, render(InvalidClient(why, f"{CLIENT_CHALLENGE}, {challenge}")))
    inactive = shop.post("/rest/fw/oauth2/introspect", data={"token": "x", **CLIENT})
    assert_sent(inactive, Reply(200, [JSON_TYPE, *OAUTH_NO_STORE], b'{"active":false}'))
    revoked = shop.post("/rest/fw/oauth2/revoke", data={"token": "x", **CLIENT})
    octets = ("content-type", "application/octet-stream")
    assert_sent(revoked, Reply(200, [octets, *OAUTH_NO_STORE], b""))


def test_native_pages_are_not_stored(config: Path) -> None:
    with Client(config, server="OPEN") as client:
        page = client.get("/limited/fw/rest/config")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == dict(NO_STORE)["cache-control"]
    assert "pragma" not in page.headers  # not an OAuth answer
