"""The engine's own answers (SPEC 7: 413, 415, 417, 431, 400, 408) and the pipeline's refusal of an
unresolvable target: no content for ``HEAD`` (RFC 9110 9.3.2), the location's CORS and rate-limit
headers, not counted (SPEC 10.1, 13.7). Run once per engine (the Makefile)."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trustme

from tests.auth.oauth2_support import TOKEN, client_context, oauth_section
from tests.conftest import ServerProcess, free_config, issue_certs, local_port, serving
from tests.server.rawhttp import HANG_GUARD, RawConnection, RawResponse

APP = """
from fwrest import get, post, rest

@get("/hello")
def hello():
    return {"hello": "world"}

@post("/echo")
def echo():
    return {"body": rest.getBodyRequest()}

def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")

def params():
    return {"client_id": "web", "client_secret": "Web-Secret-9q",
            "users": [{"username": "ada", "password": "Ada-Pw-1"}],
            "types": [{"grant_type": "password"}]}
"""

WEB = "https://app.example.com"
LIMIT = 50
POLICY = f'"RL";q={LIMIT};w=60'
NOT_COUNTED = f'"RL";r={LIMIT};t=60'


@pytest.fixture(scope="module")
def certs(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return issue_certs(ca, tmp_path_factory.mktemp("early-certs"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[ServerProcess]:
    basic = {"scheme": "basic", "OnAuth": "app.check", "maxFailures": 100}
    servers = {
        # small limits reached in one write; a header deadline a loaded machine cannot reach first
        "HTTP_REST": local_port(
            Locations="ROOT, PLAIN", MaxBodySize=100, MaxHeaderSize=2048, HeaderTimeout=1500
        ),
        "HTTP_BASIC": local_port(MaxBodySize=100, FwData={"Authorization": basic}),
        "HTTPS_OAUTH": oauth_section(certs, onAuthparams="app.params"),
    }
    extra = {
        "ROOT": {"CORS": "CW", "RateLimit": "RL"},
        "PLAIN": {"Path": "/plain", "ThreadPool": "POOL"},
        "CW": {"AllowOrigins": WEB, "AllowCredentials": 1},
        "RL": {"Limit": LIMIT, "Window": "60s"},
    }
    config = free_config(tmp_path_factory.mktemp("early"), app=APP, servers=servers, extra=extra)
    with serving(config) as proc:
        yield proc


class Answer:
    """Status, headers (lower-case) and every byte after the head, read to the connection's end."""

    def __init__(self, head: RawResponse, rest: bytes) -> None:
        self.status, self.rest = head.status, rest
        self.headers = {name.strip().lower(): value for name, value in head.headers}

    def cors(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.startswith("access-control-")}


def exchange(
    port: int, request: bytes, tls: ssl.SSLContext | None = None, guard: float = HANG_GUARD
) -> Answer:
    """``request`` on its own connection, read until the server closes (``guard``: hang guard)."""
    with RawConnection(port, timeout=guard, tls=tls) as conn:
        conn.send(request)
        return Answer(conn.read_response(head_only=True), conn.read_all())


def refusal(method: str, case: str, origin: str = WEB, where: str = "/rest") -> bytes:
    """The request of ``case`` (a refusal of the engine's) with ``method``, to ``where``."""
    head = f"{method} {where}/echo HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\n".encode()
    if case == "413 length":
        return head + b"Content-Length: 101\r\n\r\n" + b"x" * 101
    if case == "413 chunked":
        return head + b"Transfer-Encoding: chunked\r\n\r\n70\r\n" + b"x" * 112 + b"\r\n0\r\n\r\n"
    if case == "415":
        return head + b"Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\nzz"
    if case == "417":
        return head + b"Expect: nothing\r\n\r\n"
    if case == "400 length and chunked":
        return head + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    if case == "400 repeated Authorization":
        return head + b"Authorization: Basic eDp5\r\nAuthorization: Basic eDp5\r\n\r\n"
    if case == "400 no Host":
        return head.replace(b"Host: x\r\n", b"") + b"\r\n"
    if case == "431":
        return head + b"X-Pad: " + b"p" * 2100 + b"\r\n\r\n"
    raise AssertionError(case)


CASES = [
    ("413 length", 413),
    ("413 chunked", 413),
    ("415", 415),
    ("417", 417),
    ("400 length and chunked", 400),
    ("400 repeated Authorization", 400),
    ("400 no Host", 400),
    ("431", 431),
]


@pytest.mark.parametrize(("case", "status"), CASES)
def test_a_refusal_of_head_has_no_content(server: ServerProcess, case: str, status: int) -> None:
    port = server.ports["HTTP_REST"]
    posted = exchange(port, refusal("POST", case))
    assert posted.status == status, posted.rest
    assert int(posted.headers["content-length"]) == len(posted.rest) > 0
    answer = exchange(port, refusal("HEAD", case))
    assert answer.status == status
    assert answer.rest == b""  # RFC 9110 9.3.2: status and headers only
    # the length the same request with another method is answered with
    assert answer.headers["content-length"] == posted.headers["content-length"]
    assert answer.headers["connection"] == "close"


def test_a_head_that_times_out_has_no_content(server: ServerProcess) -> None:
    """408 once HeaderTimeout (1.5 s here) passes on a head that never ends."""
    port = server.ports["HTTP_REST"]
    head = f"HEAD /rest/hello HTTP/1.1\r\nHost: x\r\nOrigin: {WEB}\r\nX-More: ".encode()
    started = time.monotonic()
    answer = exchange(port, head, guard=30)  # the deadline is the server's; this only a guard
    print(f"408 after {time.monotonic() - started:.2f} s (HeaderTimeout=1500 ms)")
    assert answer.status == 408
    assert answer.rest == b""
    assert int(answer.headers["content-length"]) > 0
    assert answer.cors()["access-control-allow-origin"] == WEB
    assert answer.headers["ratelimit"] == NOT_COUNTED


def test_a_head_whose_target_is_too_long_has_none_a_method_not_read_as_head_has(
    server: ServerProcess,
) -> None:
    """A HEAD refused for its target (431) has no content; an unknown method gets the error body."""
    port = server.ports["HTTP_REST"]
    answer = exchange(port, b"HEAD /rest/" + b"a" * 2100 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.status == 431
    assert answer.rest == b""
    answer = exchange(port, b"HEADX /rest/hello HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.status == 501  # a method llhttp does not know
    assert int(answer.headers["content-length"]) == len(answer.rest) > 0
    assert answer.cors() == {}


def _assert_cors(answer: Answer) -> None:
    assert answer.cors() == {
        "access-control-allow-origin": WEB,
        "access-control-allow-credentials": "true",
    }, answer.headers
    assert answer.headers["vary"] == "Origin"


BAD_PATH = (
    f"POST /rest/a%2fb HTTP/1.1\r\nHost: x\r\nOrigin: {WEB}\r\nConnection: close\r\n\r\n".encode()
)


@pytest.mark.parametrize(("case", "status"), CASES)
def test_a_refusal_to_an_allowed_origin_carries_the_cors_headers(
    server: ServerProcess, case: str, status: int
) -> None:
    port = server.ports["HTTP_REST"]
    for method in ("POST", "HEAD"):
        answer = exchange(port, refusal(method, case))
        assert answer.status == status
        _assert_cors(answer)
    other = exchange(port, refusal("POST", case, origin="https://evil.example.net"))
    assert other.status == status
    assert other.cors() == {}
    assert other.headers["vary"] == "Origin"  # the answer depends on Origin all the same
    outside = exchange(port, refusal("POST", case, where="/plain"))
    assert outside.status == status
    assert outside.cors() == {}
    assert "vary" not in outside.headers


def test_a_target_the_router_refuses_carries_them_too(server: ServerProcess) -> None:
    for request in (BAD_PATH, BAD_PATH.replace(b"POST", b"HEAD", 1)):
        answer = exchange(server.ports["HTTP_REST"], request)
        assert answer.status == 400
        _assert_cors(answer)
        assert answer.headers["ratelimit-policy"] == POLICY
        assert answer.headers["ratelimit"] == NOT_COUNTED


def test_a_refusal_before_100_continue_carries_them(server: ServerProcess) -> None:
    """The guard's 401, answered before the body is read (SPEC 7.1)."""
    request = (
        f"POST /rest/echo HTTP/1.1\r\nHost: x\r\nOrigin: {WEB}\r\nExpect: 100-continue\r\n"
        "Content-Length: 5\r\n\r\n"
    ).encode()
    answer = exchange(server.ports["HTTP_BASIC"], request)
    assert answer.status == 401
    _assert_cors(answer)
    assert answer.headers["ratelimit"] == NOT_COUNTED


def test_a_token_route_body_over_its_limit_carries_them(
    server: ServerProcess, certs: dict[str, Path]
) -> None:
    """413 on the token route (16 KiB, SPEC 7): a browser logs in through it (SPEC 10.1)."""
    request = (
        f"POST /rest{TOKEN} HTTP/1.1\r\nHost: x\r\nOrigin: {WEB}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 20000\r\n\r\n"
    ).encode()
    answer = exchange(server.ports["HTTPS_OAUTH"], request, client_context(certs))
    assert answer.status == 413, answer.rest
    _assert_cors(answer)
    assert "ratelimit" not in answer.headers  # a native route is not counted, nor says so


def test_refusals_carry_the_rate_limit_headers_not_counted(server: ServerProcess) -> None:
    """The headers of an uncounted answer (the whole quota), and no store call for them."""
    port = server.ports["HTTP_REST"]
    hello = b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    first = exchange(port, hello).headers["ratelimit"]
    for case, status in CASES:
        answer = exchange(port, refusal("POST", case))
        assert answer.status == status
        assert answer.headers["ratelimit-policy"] == POLICY, case
        assert answer.headers["ratelimit"] == NOT_COUNTED, case
        outside = exchange(port, refusal("POST", case, where="/plain"))
        assert "ratelimit" not in outside.headers, case
    then = exchange(port, hello).headers["ratelimit"]
    left = int(first.split(";r=")[1].split(";")[0])
    assert then.startswith(f'"RL";r={left - 1};'), (first, then)


def test_refusals_stay_themselves_after_static_files_are_served_at_once(tmp_path: Path) -> None:
    """Compiled, a coroutine awaiting in an ``except`` (a static file after a refused match) left
    its 404 the loop's exception: 431, 400, 417 became 404 for good (mypyc_lint's
    ``except-awaits``)."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "index.html").write_text("<p>hello</p>")
    servers = {
        "HTTP_REST": local_port(Locations="ROOT, FILES", MaxBodySize=100, MaxHeaderSize=2048)
    }
    extra = {"FILES": {"Path": "/app", "ThreadPool": "POOL", "RootPath": str(root)}}
    config = free_config(tmp_path, app=APP, servers=servers, extra=extra)
    with serving(config) as proc:
        port = proc.ports["HTTP_REST"]

        def get(name: str) -> int:
            request = f"GET /app/{name} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            return exchange(port, request.encode()).status

        for _ in range(3):
            with ThreadPoolExecutor(20) as pool:
                statuses = list(pool.map(get, ["index.html", "missing.html"] * 10))
            assert sorted(set(statuses)) == [200, 404], statuses
            for case in ("431", "400 no Host", "417", "413 length"):
                status = int(case.split()[0])
                assert exchange(port, refusal("POST", case)).status == status, case
