"""Compression (SPEC 10.4): gzip and br by ``Accept-Encoding`` (q-values, ``identity;q=0``),
``Vary``, minimum size, compressible types, never the token route, settings page or ``no-store``;
``rest.sendZipped``. In process, then raw bytes and httpx on ``fwrest serve``."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import brotli
import httpx
import pytest
import trustme

from fwrest import ConfigError
from fwrest.testing import Client
from tests.auth.oauth2_support import TOKEN, oauth_section
from tests.conftest import (
    ServerProcess,
    free_config,
    issue_certs,
    local_port,
    module_config,
    serving,
)
from tests.docs.blocks import example

APP = """
from fwrest import Response, get, rest

TEXT = "fwrest compresses what is worth it. " * 200

@get("/big")
def big():
    return {"text": TEXT}

@get("/small")
def small():
    return {"text": "short"}

@get("/sized/:n")
def sized(n):
    return Response("x" * int(n), media_type="text/plain")

@get("/png")
def png():
    return Response(b"\\x89PNG" + b"\\0" * 5000, media_type="image/png")

@get("/private")
def private():
    return Response({"text": TEXT}, headers={"Cache-Control": "no-store"})

@get("/svg")
def svg():
    return Response("<svg>" + "<g/>" * 2000 + "</svg>", media_type="image/svg+xml")

@get("/tagged/:kind")
def tagged(kind):
    return Response({"text": TEXT}, headers={"ETag": '"v1"' if kind == "strong" else 'W/"v2"'})

@get("/zipped")
def zipped():
    rest.sendZipped(TEXT)

def params():
    return {"client_id": "web", "client_secret": "Web-Secret-9q",
            "users": [{"username": "ada", "password": "Ada-Pw-1" * 300}],
            "types": [{"grant_type": "password"}]}
"""

TEXT = "fwrest compresses what is worth it. " * 200


def _config(tmp_path: Path, module: str, **server: Any) -> Path:
    extra = server.pop("servers", {})
    return module_config(
        tmp_path, module, app=APP, servers={"HTTP_REST": local_port(**server), **extra}
    )


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    config = _config(tmp_path_factory.mktemp("gz"), "gz_app_main", Compression="gzip, br")
    with Client(config) as c:
        yield c


def get(client: Client, path: str, accept: str | None) -> httpx.Response:
    headers = {"Accept-Encoding": accept} if accept is not None else {}
    return client.get(path, headers=headers)


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        ("gzip", "gzip"), ("br", "br"), ("gzip, br", "br"),  # equal q: br, the smaller
        ("gzip;q=1, br;q=0.5", "gzip"), ("br;q=0, *", "gzip"), ("*", "br"), ("GZIP;Q=0.3", "gzip"),
        ("deflate", None), ("identity", None), ("gzip;q=0, br;q=0", None), ("gzip;q=abc", None),
        ("", None),
        # identity weighted above the codings, by name or by * (RFC 9110 12.4.2, 12.5.3)
        ("identity;q=1, gzip;q=0.5", None), ("br;q=0.1, identity;q=0.9", None),
        ("gzip;q=0.5, *", "br"), ("gzip;q=0.5, br;q=0.5, *", None), ("identity;q=0.5, gzip", "gzip"),
    ],
)  # fmt: skip
def test_the_coding_follows_accept_encoding(
    client: Client, accept: str | None, coding: str | None
) -> None:
    response = get(client, "/rest/big", accept)
    assert response.status_code == 200
    assert response.json() == {"text": TEXT}  # httpx decompressed it
    assert response.headers.get("content-encoding") == coding
    assert response.headers["vary"] == "Accept-Encoding"
    if coding is not None:
        assert response.num_bytes_downloaded < len(TEXT) // 10


def test_the_minimum_size(client: Client) -> None:
    assert get(client, "/rest/sized/1023", "gzip").headers.get("content-encoding") is None
    at_minimum = get(client, "/rest/sized/1024", "gzip")
    assert at_minimum.headers["content-encoding"] == "gzip"
    assert at_minimum.text == "x" * 1024
    small = get(client, "/rest/small", "gzip")
    assert small.headers.get("content-encoding") is None
    # the same for every client: no Vary (as nginx's gzip_vary), none below the minimum
    assert "vary" not in small.headers
    assert "vary" not in get(client, "/rest/sized/1023", "gzip").headers
    assert get(client, "/rest/sized/1023", None).headers.get("vary") is None
    assert get(client, "/rest/sized/1024", None).headers["vary"] == "Accept-Encoding"
    # a client that refuses the uncompressed form gets a small answer compressed
    refused = get(client, "/rest/small", "gzip, identity;q=0")
    assert refused.headers["content-encoding"] == "gzip"
    assert refused.json() == {"text": "short"}


def test_only_compressible_types(client: Client) -> None:
    png = get(client, "/rest/png", "gzip")
    assert png.headers.get("content-encoding") is None
    assert "vary" not in png.headers
    svg = get(client, "/rest/svg", "gzip")
    assert svg.headers["content-encoding"] == "gzip"


def test_a_compressed_answer_has_a_weak_etag(client: Client) -> None:
    # a strong tag is one byte sequence (RFC 9110 8.8.1): compressed, weak, as nginx's gzip
    for coding in ("gzip", "br"):
        packed = get(client, "/rest/tagged/strong", coding)
        assert packed.headers["content-encoding"] == coding
        assert packed.headers["etag"] == 'W/"v1"'
        assert packed.json() == {"text": TEXT}
        assert get(client, "/rest/tagged/weak", coding).headers["etag"] == 'W/"v2"'
    plain = get(client, "/rest/tagged/strong", "identity")
    assert "content-encoding" not in plain.headers
    assert plain.headers["etag"] == '"v1"'


def test_never_a_no_store_answer_nor_the_settings_page(client: Client) -> None:
    private = get(client, "/rest/private", "gzip, br")
    assert private.headers.get("content-encoding") is None
    assert private.json() == {"text": TEXT}
    page = get(client, "/rest/fw/rest/config", "gzip, br")
    assert page.status_code == 200
    assert len(page.content) > 1024
    assert page.headers.get("content-encoding") is None


def test_never_the_token_route(tmp_path: Path, ca: trustme.CA) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    section = oauth_section(certs, onAuthparams="gz_app_token.params")
    section |= {"Compression": "gzip", "CompressionMinSize": 0}
    config = module_config(tmp_path, "gz_app_token", app=APP, servers={"HTTPS_OAUTH": section})
    with Client(config) as c:
        form = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-1" * 300,
                "client_id": "web", "client_secret": "Web-Secret-9q"}  # fmt: skip
        gz = {"Accept-Encoding": "gzip"}
        grant = c.post(f"/rest{TOKEN}", data=form, headers=gz)
        assert grant.status_code == 200, grant.text
        assert grant.headers.get("content-encoding") is None
        refused = c.post(f"/rest{TOKEN}", data={**form, "password": "x"}, headers=gz)
        assert refused.status_code in (400, 401)
        assert refused.headers.get("content-encoding") is None
        bearer = {"Authorization": f"Bearer {grant.json()['access_token']}", **gz}
        assert c.get("/rest/big", headers=bearer).headers["content-encoding"] == "gzip"


def test_off_unless_configured_and_send_zipped(tmp_path: Path) -> None:
    config = _config(tmp_path, "gz_app_off")
    with Client(config) as c:
        big = get(c, "/rest/big", "gzip, br")
        assert big.headers.get("content-encoding") is None
        assert "vary" not in big.headers
        zipped = get(c, "/rest/zipped", "gzip")
        assert zipped.headers["content-encoding"] == "gzip"
        assert zipped.headers["vary"] == "Accept-Encoding"
        assert zipped.text == TEXT
        plain = get(c, "/rest/zipped", "br")
        assert plain.headers.get("content-encoding") is None
        assert plain.text == TEXT


def test_the_guides_compression_example(tmp_path: Path) -> None:
    lines = example("locations-compression").text.splitlines()
    assert lines[0] == "[HTTP_REST]"
    keys = dict(line.split("=", 1) for line in lines[1:])
    with Client(_config(tmp_path, "gz_app_guide", **keys)) as c:
        assert get(c, "/rest/sized/1024", "br").headers["content-encoding"] == "br"
        assert get(c, "/rest/sized/1023", "br").headers.get("content-encoding") is None


@pytest.mark.parametrize(("server", "message"), [
    ({"Compression": "gzip, deflate"}, "[HTTP_REST] Compression: 'deflate' is not a coding"),
    ({"CompressionMinSize": -1}, "[HTTP_REST] CompressionMinSize"),
])  # fmt: skip
def test_a_bad_compression_key_stops_the_start(
    tmp_path: Path, server: dict[str, Any], message: str
) -> None:
    config = _config(tmp_path, "gz_app_bad", **server)
    with pytest.raises(ConfigError) as caught:
        Client(config)
    assert message in str(caught.value)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("gz_serve")
    config = free_config(tmp, app=APP, servers={"HTTP_REST": local_port(Compression="gzip, br")})
    with serving(config) as proc:
        yield proc


def test_raw_bytes_and_httpx_over_the_wire(served: ServerProcess) -> None:
    url = served.url() + "/big"
    with httpx.stream("GET", url, headers={"Accept-Encoding": "br"}, timeout=10) as response:
        raw = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == "br"
    assert int(response.headers["content-length"]) == len(raw)
    assert brotli.decompress(raw) == b'{"text":"' + TEXT.encode() + b'"}'
    with httpx.stream("GET", url, headers={"Accept-Encoding": "gzip"}, timeout=10) as response:
        raw = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == "gzip"
    assert gzip.decompress(raw) == b'{"text":"' + TEXT.encode() + b'"}'
    decoded = httpx.get(url, headers={"Accept-Encoding": "gzip, br"}, timeout=10)
    assert decoded.json() == {"text": TEXT}
    head = httpx.head(url, headers={"Accept-Encoding": "gzip"}, timeout=10)
    assert head.headers["content-encoding"] == "gzip"
    assert int(head.headers["content-length"]) == len(raw)
