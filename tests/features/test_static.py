"""Static files (SPEC 10.3) in process: paths no route takes, default page, ETag/Last-Modified/304,
ranges (206/416; their status lines: tests/server/test_conformance.py), types, listing, the port's
scheme, start errors; on ``fwrest serve``: a 1 GiB file with bounded worker memory, hostile paths
(raw sockets) never reaching outside ``RootPath``."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trustme

from fwrest import ConfigError
from fwrest.testing import Client
from tests.auth.oauth2_support import oauth_section
from tests.builders import config_of
from tests.conftest import ServerProcess, exchange, issue_certs, local_port, module_config, serving
from tests.docs.blocks import example, ini_example

CANARY = "CANARY-outside-the-root-7f3a"
INDEX = "<!doctype html><title>home</title>"

APP = """
from fwrest import get

@get("/api/hello")
def hello():
    return {"from": "the route"}

def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")

def public():
    return ["/sub/*"]

def params():
    return {"client_id": "web", "client_secret": "Web-Secret-9q",
            "users": [{"username": "ada", "password": "Ada-Pw-1"}],
            "types": [{"grant_type": "password"}]}
"""


def make_tree(folder: Path) -> Path:
    """``folder/www``: files, a hidden file, links inside and out, a FIFO; a secret beside it."""
    (folder / "secret.txt").write_text(CANARY)
    www = folder / "www"
    (www / "sub").mkdir(parents=True)
    (www / "docs").mkdir()
    (www / "api").mkdir()
    (www / "index.html").write_text(INDEX)
    (www / "app.js").write_text("console.log('hi');\n" * 10)
    (www / "data.xlsx").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    (www / "digits.txt").write_text("0123456789" * 100)
    (www / "notes.md").write_text("# notes\n")
    (www / "empty.txt").write_bytes(b"")
    (www / "sub" / "page.html").write_text("<p>sub</p>")
    (www / "api" / "hello").write_text("the file, not the route")
    (www / ".env").write_text(CANARY)
    (www / "sub" / ".hidden").write_text(CANARY)
    (www / ".git").mkdir()
    (www / ".git" / "config").write_text(CANARY)
    os.symlink(folder / "secret.txt", www / "link-out")
    os.symlink("../secret.txt", www / "relative-link-out")
    os.symlink(folder, www / "dir-link-out")
    os.symlink("/etc/passwd", www / "absolute-link")
    os.symlink(www / ".env", www / "link-to-hidden")
    os.symlink(www / "index.html", www / "link-inside.html")
    os.mkfifo(www / "fifo")
    return www


def static_config(folder: Path, module: str | None = None, **keys: Any) -> Path:
    """``/rest`` routes, ``/www`` :func:`make_tree`'s tree, a content type of its own; module
    ``module`` (in process) or ``app``; ``keys`` more server keys."""
    make_tree(folder)
    server = local_port(Locations="ROOT, WWW", ContentTypes="TYPES", **keys)
    www = {"Path": "/www", "ThreadPool": "POOL", "RootPath": "www", "DefaultPage": "index.html"}
    types = {
        ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        ".md": "TEXT/Markdown",  # a media type's name is case-insensitive (RFC 9110 8.3.1)
    }
    extra = {"WWW": www, "TYPES": types}
    return config_of(folder, module, app=APP, servers={"HTTP_REST": server}, extra=extra)


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``fwrest serve``, for what a socket shows: the 1 GiB file's memory, raw targets."""
    tmp = tmp_path_factory.mktemp("static")
    config = static_config(tmp)
    with (tmp / "www" / "big.bin").open("wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB, sparse
    with serving(config) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with Client(static_config(tmp_path_factory.mktemp("static_inproc"), "static_app")) as c:
        yield c


def test_files_and_the_default_page(client: Client) -> None:
    index = client.get("/www/index.html")
    assert index.status_code == 200
    assert index.text == INDEX
    assert index.headers["content-type"] == "text/html; charset=utf-8"
    assert index.headers["accept-ranges"] == "bytes"
    assert index.headers["etag"].startswith('"')
    assert index.headers["last-modified"].endswith("GMT")
    assert index.headers["content-length"] == str(len(INDEX))
    assert client.get("/www").text == INDEX  # the location's own folder
    assert client.get("/www/").text == INDEX
    assert client.get("/www/link-inside.html").text == INDEX
    assert client.get("/www/sub/page.html").text == "<p>sub</p>"
    assert client.get("/www/sub").status_code == 404  # no index, no listing
    js = client.get("/www/app.js")
    assert js.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    xlsx = client.get("/www/data.xlsx")
    assert xlsx.headers["content-type"] == (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    )
    assert client.get("/www/notes.md").headers["content-type"] == "TEXT/Markdown; charset=utf-8"
    # routes win over files
    assert client.get("/www/api/hello").json() == {"from": "the route"}
    # not for other methods: a known path, 405 (test_other_methods_on_a_file_get_405)
    assert client.post("/www/index.html").status_code == 405
    head = client.head("/www/index.html")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len(INDEX))


def test_conditional_requests(client: Client) -> None:
    url = "/www/index.html"
    first = client.get(url)
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    same = client.get(url, headers={"If-None-Match": etag})
    assert same.status_code == 304
    assert same.content == b""
    assert same.headers["etag"] == etag
    assert client.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
    assert client.get(url, headers={"If-None-Match": "*"}).status_code == 304
    assert client.get(url, headers={"If-Modified-Since": modified}).status_code == 304
    old = "Mon, 01 Jan 2001 00:00:00 GMT"
    assert client.get(url, headers={"If-Modified-Since": old}).status_code == 200
    bad = client.get(url, headers={"If-Modified-Since": "yesterday"})
    assert bad.status_code == 200


@pytest.mark.parametrize(
    ("wanted", "status", "content_range", "body"),
    [
        ("bytes=0-9", 206, "bytes 0-9/1000", "0123456789"),
        ("bytes=995-", 206, "bytes 995-999/1000", "56789"),
        ("bytes=-3", 206, "bytes 997-999/1000", "789"),
        ("bytes=990-5000", 206, "bytes 990-999/1000", "0123456789"),
        ("bytes=1000-", 416, "bytes */1000", None),
        ("bytes=0-1,5-6", 200, None, "0123456789" * 100),
        ("items=0-1", 200, None, "0123456789" * 100),
        ("bytes=9-2", 200, None, "0123456789" * 100),
        # RFC 9110 5.6.1.2: empty list elements count for nothing, so one range
        ("bytes=0-4,", 206, "bytes 0-4/1000", "01234"),
        ("bytes=0-4, ", 206, "bytes 0-4/1000", "01234"),
        ("bytes=,0-4", 206, "bytes 0-4/1000", "01234"),
        ("bytes=0-4,,", 206, "bytes 0-4/1000", "01234"),
        ("bytes= , -3 ,", 206, "bytes 997-999/1000", "789"),
    ],
)
def test_ranges(
    client: Client, wanted: str, status: int, content_range: str | None, body: str | None
) -> None:
    answer = client.get("/www/digits.txt", headers={"Range": wanted})
    assert answer.status_code == status
    assert answer.headers.get("content-range") == content_range
    if body is not None:
        assert answer.text == body


def test_a_range_on_two_lines_is_two_ranges(client: Client) -> None:
    """The ``Range`` lines of a request are one list (RFC 9110 5.3): two lines are two
    ranges, so the whole file (SPEC 10.3), not the first line's range."""
    url = "/www/digits.txt"
    for lines in (
        [("Range", "bytes=0-1"), ("Range", "bytes=3-4")],
        [("Range", "bytes=0-1"), ("Range", "bytes=0-1")],
    ):
        answer = client.get(url, headers=lines)
        assert (answer.status_code, answer.text) == (200, "0123456789" * 100), lines
        assert "content-range" not in answer.headers, lines
    # an empty second line adds no range
    one = client.get(url, headers=[("Range", "bytes=3-4"), ("Range", "")])
    assert (one.status_code, one.headers.get("content-range"), one.text) == (
        206,
        "bytes 3-4/1000",
        "34",
    )


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "PROPFIND"])
def test_other_methods_on_a_file_get_405(client: Client, method: str) -> None:
    """SPEC 3: a file (or a folder its DefaultPage answers) is a known path, so another method
    is 405 with the ``Allow`` that ``OPTIONS`` gives, in the error shape of a route's 405; a
    missing or refused file stays 404."""
    route = client.request(method, "/www/api/hello")  # a route's path, GET only
    assert route.status_code == 405
    for path in ("/www/index.html", "/www", "/www/", "/www/sub/page.html", "/www/empty.txt"):
        answer = client.request(method, path, content=b"{}")
        assert answer.status_code == 405, path
        assert answer.headers["allow"] == "GET, HEAD, OPTIONS", path
        assert answer.headers["allow"] == client.options(path).headers["allow"], path
        assert (
            answer.json()
            == route.json()
            == {
                "code": 405,
                "detailedMessage": "",
                "message": "Method Not Allowed",
            }
        ), path
    for path in ("/www/nothing.txt", "/www/.env", "/www/link-out", "/www/sub", "/www/fifo"):
        answer = client.request(method, path)
        assert answer.status_code == 404, path
        assert "allow" not in answer.headers, path


def test_options_on_a_file_answers_its_methods(client: Client) -> None:
    # RFC 9110 9.3.7: a file answers GET and HEAD; nothing is a 404 as for GET
    for path in ("/www/index.html", "/www", "/www/sub/page.html"):
        answer = client.options(path)
        assert answer.status_code == 200, path
        assert answer.headers["allow"] == "GET, HEAD, OPTIONS", path
        assert answer.content == b""
    for path in ("/www/nothing.txt", "/www/.env", "/www/link-out", "/www/sub"):
        assert client.options(path).status_code == 404, path
    # a route wins over a file, as for GET
    assert client.options("/www/api/hello").headers["allow"] == ("GET, HEAD, OPTIONS")


def test_if_range_with_another_version_sends_the_whole_file(client: Client) -> None:
    url = "/www/digits.txt"
    etag = client.get(url).headers["etag"]
    same = client.get(url, headers={"Range": "bytes=0-1", "If-Range": etag})
    assert same.status_code == 206
    other = client.get(url, headers={"Range": "bytes=0-1", "If-Range": '"x"'})
    assert other.status_code == 200


@pytest.mark.parametrize("wanted", ["bytes=2-5", "bytes=9000-"])
def test_a_head_ignores_a_range(client: Client, wanted: str) -> None:
    # RFC 9110 14.2: range handling is defined for GET only; a HEAD is the plain 200's head
    url = "/www/digits.txt"
    etag = client.get(url).headers["etag"]
    for extra in ({}, {"If-Range": etag}, {"If-Range": '"x"'}):
        answer = client.head(url, headers={"Range": wanted, **extra})
        assert answer.status_code == 200, extra
        assert answer.headers["content-length"] == "1000", extra
        assert "content-range" not in answer.headers, extra
        assert answer.content == b""


@pytest.mark.parametrize("wanted", ["bytes=-5", "bytes=0-", "bytes=0-0", "bytes=-0"])
def test_an_empty_file_ignores_a_range(client: Client, wanted: str) -> None:
    # no byte to send in a 206 (its Content-Range cannot say none) nor to miss: 200, empty
    answer = client.get("/www/empty.txt", headers={"Range": wanted})
    assert answer.status_code == 200
    assert answer.content == b""
    assert "content-range" not in answer.headers


def test_if_match_and_if_unmodified_since(client: Client) -> None:
    url = "/www/digits.txt"
    first = client.get(url)
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    old = "Mon, 01 Jan 2001 00:00:00 GMT"
    holds = [
        {"If-Match": etag},
        {"If-Match": "*"},
        {"If-Match": f'"other", {etag}'},
        {"If-Unmodified-Since": modified},
        {"If-Unmodified-Since": "yesterday"},  # not a date: ignored
        {"If-Match": etag, "If-Unmodified-Since": old},  # only without If-Match
    ]
    for headers in holds:
        answer = client.get(url, headers=headers)
        assert (answer.status_code, answer.text) == (200, "0123456789" * 100), headers
    fails = [
        {"If-Match": '"other"'},
        {"If-Match": "W/" + etag},  # the strong comparison: a weak tag never matches
        {"If-Unmodified-Since": old},
        {"If-Match": '"other"', "If-None-Match": etag},  # If-Match first: 412, not 304
        {"If-Unmodified-Since": old, "Range": "bytes=0-1"},
    ]
    for headers in fails:
        answer = client.get(url, headers=headers)
        assert answer.status_code == 412, headers
        assert answer.json()["code"] == 412
        assert answer.json()["message"] == "Precondition Failed"
        assert client.head(url, headers=headers).status_code == 412, headers
    both = client.get(url, headers={"If-Match": etag, "If-None-Match": etag})
    assert both.status_code == 304
    ranged = client.get(url, headers={"If-Match": etag, "Range": "bytes=0-1"})
    assert (ranged.status_code, ranged.text) == (206, "01")


def test_conditions_on_two_lines_and_dates_that_are_not_one(client: Client) -> None:
    """A list field's lines are one list (RFC 9110 5.3); a two-line, listed or non-GMT date is
    ignored (13.1.3, 13.1.4); a two-line If-Range names no version: the whole file (13.1.5)."""
    url = "/www/digits.txt"
    etag = client.get(url).headers["etag"]
    whole = (200, "0123456789" * 100)
    old, future = "Mon, 01 Jan 2001 00:00:00 GMT", "Fri, 01 Jan 2100 00:00:00 GMT"
    for lines in (
        [("If-Match", '"x"'), ("If-Match", etag)],
        [("If-Unmodified-Since", f"{old}, x")],
        [("If-Unmodified-Since", old), ("If-Unmodified-Since", future)],
        [("If-Unmodified-Since", old.replace("GMT", "PST"))],
        [("If-Modified-Since", f"{future}, {old}")],
        [("If-Modified-Since", future), ("If-Modified-Since", old)],
        [("Range", "bytes=0-1"), ("If-Range", etag), ("If-Range", etag)],
    ):
        answer = client.get(url, headers=lines)
        assert (answer.status_code, answer.text) == whole, lines
    assert (
        client.get(url, headers=[("If-None-Match", '"x"'), ("If-None-Match", etag)]).status_code
        == 304
    )
    asctime = client.get(url, headers={"If-Modified-Since": "Fri Jan  1 00:00:00 2100"})
    assert asctime.status_code == 304  # the third HTTP-date form, GMT without saying so


@pytest.fixture(scope="module")
def gz_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """The tree through a compressing port (``digits.txt`` over the minimum, ``index.html`` not)."""
    folder = tmp_path_factory.mktemp("static_gz")
    keys = {"Compression": "gzip, br", "CompressionMinSize": 500}
    with Client(static_config(folder, "static_gz_app", **keys)) as c:
        yield c


def test_a_304_carries_the_vary_of_its_200(gz_client: Client) -> None:
    url = "/www/digits.txt"
    for accept in ("gzip", "identity"):
        whole = gz_client.get(url, headers={"Accept-Encoding": accept})
        assert whole.headers["vary"] == "Accept-Encoding"
        for condition in (
            {"If-None-Match": whole.headers["etag"]},
            {"If-Modified-Since": whole.headers["last-modified"]},
        ):
            same = gz_client.get(url, headers={"Accept-Encoding": accept, **condition})
            assert same.status_code == 304, (accept, condition)
            assert same.headers.get("vary") == "Accept-Encoding", (accept, condition)
            assert same.headers["etag"] == whole.headers["etag"], (accept, condition)
    # under the minimum size the answer is the same for every client: no Vary either way
    small = gz_client.get("/www/index.html", headers={"Accept-Encoding": "gzip"})
    assert "vary" not in small.headers
    same = gz_client.get(
        "/www/index.html",
        headers={"Accept-Encoding": "gzip", "If-None-Match": small.headers["etag"]},
    )
    assert same.status_code == 304
    assert "vary" not in same.headers
    assert same.headers["etag"] == small.headers["etag"]


def test_a_compressed_file_has_a_weak_etag(gz_client: Client) -> None:
    url = "/www/digits.txt"
    plain = gz_client.get(url, headers={"Accept-Encoding": "identity"})
    strong = plain.headers["etag"]
    assert strong.startswith('"')
    assert "content-encoding" not in plain.headers
    for coding in ("gzip", "br"):
        packed = gz_client.get(url, headers={"Accept-Encoding": coding})
        assert packed.headers["content-encoding"] == coding
        assert packed.headers["etag"] == "W/" + strong
        assert packed.text == "0123456789" * 100
    gz = {"Accept-Encoding": "gzip"}
    # If-None-Match, the weak comparison: either form matches
    for tag in ("W/" + strong, strong):
        same = gz_client.get(url, headers={**gz, "If-None-Match": tag})
        assert same.status_code == 304, tag
    # If-Range, the strong comparison: the weak tag never does, the whole answer comes
    resumed = gz_client.get(url, headers={**gz, "Range": "bytes=0-4", "If-Range": "W/" + strong})
    assert resumed.status_code == 200
    assert resumed.headers["content-encoding"] == "gzip"
    assert resumed.text == "0123456789" * 100
    # the identity file's own strong tag still resumes the identity bytes
    ident = {"Accept-Encoding": "identity", "Range": "bytes=0-4", "If-Range": strong}
    part = gz_client.get(url, headers=ident)
    assert (part.status_code, part.text) == (206, "01234")
    assert "content-encoding" not in part.headers
    assert part.headers["etag"] == strong
    # RFC 9110 15.3.7: a 206 carries the Vary its 200 would
    assert part.headers["vary"] == "Accept-Encoding"


def test_a_1_gib_file_is_streamed_in_bounded_memory(proc: ServerProcess) -> None:
    children = psutil.Process(proc.pid).children()
    assert len(children) == 1, children
    worker = children[0]
    before = worker.memory_info().rss
    peak = before
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.05):
            peak = max(peak, worker.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    got = 0
    try:
        with socket.create_connection(("127.0.0.1", proc.ports["HTTP_REST"]), timeout=30) as s:
            s.sendall(b"GET /www/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while True:
                data = s.recv(1 << 20)
                if not data:
                    break
                got += len(data)
    finally:
        stop.set()
        sampler.join()
    growth = (peak - before) / (1 << 20)
    print(f"1 GiB file: {got} bytes received, worker RSS grew by {growth:.1f} MiB at most")
    assert got > 1 << 30  # the head and the whole file
    assert growth < 32


HOSTILE = [
    "/www/../secret.txt", "/www/%2e%2e/secret.txt", "/www/%2E%2E/%2E%2E/etc/passwd",
    "/www/..%2fsecret.txt", "/www/%2e%2e%2fsecret.txt", "/www/sub%2f..%2f..%2fsecret.txt",
    "/www/..\\secret.txt", "/www/%5c..%5csecret.txt", "/www/sub/..%5c..%5csecret.txt",
    "/www/%252e%252e/secret.txt", "/www/%c0%ae%c0%ae/secret.txt", "/www/....//secret.txt",
    "/www/link-out", "/www/relative-link-out", "/www/dir-link-out/secret.txt", "/www/absolute-link",
    "/www/link-to-hidden", "/www/.env", "/www/%2eenv", "/www/sub/.hidden", "/www/.git/config",
    "/www/.git/", "/www/fifo", "/www/%00", "/www/index.html%00.txt", "/www/sub/", "/www/docs",
    "/www/nonexistent.html", "/www//etc/passwd", "/www/%2fetc%2fpasswd", "/www/~",
    "/www/sub/../../secret.txt", "/www/./../secret.txt",
    "/www/\u2025/secret.txt".encode().decode("latin-1"),
]  # fmt: skip


def _raw_get(port: int, target: str) -> tuple[int, bytes]:
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    data = exchange(port, request.encode("latin-1"))
    return int(data.split(b" ", 2)[1]), data


@pytest.mark.parametrize("target", HOSTILE)
def test_a_hostile_path_never_leaves_the_root(proc: ServerProcess, target: str) -> None:
    status, data = _raw_get(proc.ports["HTTP_REST"], target)
    # `..`, an encoded separator, a link out, a dot-file: 404 (SPEC 10.3); refused by the normaliser
    # otherwise (NUL, bad UTF-8, non-ASCII): 400
    refused = "%00" in target or "%c0" in target or not target.isascii()
    assert status == (400 if refused else 404), (target, data[:200])
    assert CANARY.encode() not in data
    assert b"root:" not in data  # /etc/passwd


def test_the_listing_has_one_static_entry(client: Client) -> None:
    listing = client.get("/rest/fw/rest/list/service").json()
    static = [e for e in listing if e["source"] == "static"]
    assert len(static) == 1
    assert static[0]["endpoint"] == "/*"
    assert static[0]["paths"] == ["/www/*"]
    assert [m["method"] for m in static[0]["methods"]] == ["GET", "HEAD"]


def _schemed(tmp_path: Path, ca: trustme.CA, module: str) -> Path:
    """The tree behind a Basic port ``HTTP_BASIC`` and an oAuth2 port ``HTTPS_OAUTH`` (its
    ``onAuthNoCheckUri`` makes ``/www/sub/*`` public), the app as module ``module``."""
    make_tree(tmp_path)
    www = {"Path": "/www", "ThreadPool": "POOL", "RootPath": "www", "DefaultPage": "index.html"}
    basic = {"scheme": "basic", "OnAuth": f"{module}.check"}
    certs = issue_certs(ca, tmp_path / "certs")
    oauth = oauth_section(
        certs, locations="WWW", onAuthparams=f"{module}.params",
        onAuthNoCheckUri=f"{module}.public",
    )  # fmt: skip
    return module_config(
        tmp_path,
        module,
        app=APP,
        servers={
            "HTTP_BASIC": local_port(Locations="WWW", FwData={"Authorization": basic}),
            "HTTPS_OAUTH": oauth,
        },
        extra={"WWW": www},
    )


def test_files_are_behind_the_ports_scheme(tmp_path: Path, ca: trustme.CA) -> None:
    config = _schemed(tmp_path, ca, "static_app_basic")
    with Client(config, server="HTTP_BASIC") as client:
        assert client.get("/www/index.html").status_code == 401
        assert client.get("/www/index.html", auth=("ada", "Ada-Pw-1")).text == INDEX
    with Client(config, server="HTTPS_OAUTH") as client:
        assert client.get("/www/index.html").status_code == 401
        assert client.get("/www/sub/page.html").text == "<p>sub</p>"  # onAuthNoCheckUri


def test_a_wrong_method_on_a_file_meets_the_ports_scheme_first(
    tmp_path: Path, ca: trustme.CA
) -> None:
    """As for a route's 405: on a protected port the scheme refuses first (401 without
    credentials, 403 with wrong ones); with good ones, or on a public path, 405."""
    config = _schemed(tmp_path, ca, "static_app_405")
    with Client(config, server="HTTP_BASIC") as client:
        for path in ("/www/index.html", "/www/api/hello", "/www/nothing.txt"):
            refused = client.post(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith("Basic"), path
        assert client.post("/www/index.html", auth=("ada", "wrong")).status_code == 403
        good = ("ada", "Ada-Pw-1")
        for path in ("/www/index.html", "/www/api/hello"):  # a file, a route
            answer = client.post(path, auth=good)
            assert answer.status_code == 405, path
            assert answer.headers["allow"] == "GET, HEAD, OPTIONS", path
        assert client.post("/www/nothing.txt", auth=good).status_code == 404
    with Client(config, server="HTTPS_OAUTH") as client:
        assert client.post("/www/index.html").status_code == 401
        public = client.delete("/www/sub/page.html")  # onAuthNoCheckUri
        assert (public.status_code, public.headers["allow"]) == (405, "GET, HEAD, OPTIONS")


@pytest.mark.parametrize(
    ("www", "types", "message"),
    [
        ({"RootPath": "nowhere"}, None, "[WWW] RootPath: the folder"),
        ({"RootPath": "www", "DefaultPage": "a/index.html"}, None, "[WWW] DefaultPage: must be"),
        ({"RootPath": "www", "DefaultPage": ".index"}, None, "[WWW] DefaultPage: must be a file"),
        ({"DefaultPage": "index.html"}, None, "[WWW] DefaultPage: a DefaultPage needs a RootPath"),
        ({"RootPath": "www"}, {".x": "nonsense"}, "[TYPES] .x: 'nonsense' is not a media type"),
    ],
)
def test_a_bad_static_key_stops_the_start(
    tmp_path: Path, www: dict[str, Any], types: dict[str, str] | None, message: str
) -> None:
    make_tree(tmp_path)
    server = local_port(Locations="WWW")
    extra: dict[str, Any] = {"WWW": {"Path": "/www", "ThreadPool": "POOL", **www}}
    if types is not None:
        server["ContentTypes"] = "TYPES"
        extra["TYPES"] = types
    config = module_config(
        tmp_path, "static_app_bad", app=APP, servers={"HTTP_REST": server}, extra=extra
    )
    with pytest.raises(ConfigError) as caught:
        Client(config)
    assert message in str(caught.value)


def test_the_guides_static_files_example(tmp_path: Path) -> None:
    make_tree(tmp_path)
    sections = ini_example("locations-static")
    server = local_port(Locations="HTTP_WWW") | sections.pop("HTTP_REST")
    config = module_config(
        tmp_path, "static_app_guide", app=APP, servers={"HTTP_REST": server}, extra=sections
    )
    with Client(config) as client:
        assert client.get("/app/").text == INDEX
        xlsx = client.get("/app/data.xlsx")
        assert xlsx.headers["content-type"].endswith("spreadsheetml.sheet")


def test_the_guides_streaming_example(tmp_path: Path) -> None:
    config = module_config(tmp_path, "static_app_streams", app=example("locations-streaming").text)
    with Client(config) as client:
        assert client.get("/rest/report").text == "line 0\nline 1\nline 2\n"
        feed = client.get("/rest/feed")
        assert feed.headers["content-type"] == "application/x-ndjson"
        assert feed.text == '{"n": 0}\n{"n": 1}\n{"n": 2}\n'
