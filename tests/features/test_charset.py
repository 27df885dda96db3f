"""Charset (SPEC 10.6) in process: ``str`` answers in ``Charset`` with ``charset=``, JSON always
UTF-8, request bodies by their declared charset (415 for codecs no client means) else the server's,
and the start error of an unknown one."""

from __future__ import annotations

import codecs
import logging
from pathlib import Path

import pytest

from fwrest import ConfigError
from fwrest.testing import Client
from tests.conftest import local_port, module_config
from tests.docs.blocks import example

APP = """
from fwrest import Response, get, post, rest

@get("/text")
def text():
    return "caf\\u00e9 \\u20ac"

@get("/html")
def html():
    return Response("<p>caf\\u00e9</p>", media_type="text/html")

@get("/json")
def data():
    return {"word": "caf\\u00e9 \\u20ac"}

@get("/gathered")
def gathered():
    rest.setResponse("caf\\u00e9")
    rest.setResponse(" \\u20ac")

@get("/check")
def check():
    return "\\u2713"

@post("/echo")
def echo():
    return {"body": rest.getBodyRequest()}

@get("/json-text")
def json_text():
    return Response('{"a":"caf\u00e9"}', media_type="application/json")

@get("/problem-text")
def problem_text():
    return Response('{"a":"caf\u00e9"}', media_type="application/problem+json")

@get("/declared")
def declared():
    return Response("caf\u00e9", media_type=rest.getQueryRequest()["type"])

@get("/set-label")
def set_label():
    rest.setKeyHeaderResponse("Content-Type", rest.getQueryRequest()["type"])
    return "caf\u00e9"

@get("/set-gathered")
def set_gathered():
    rest.setKeyHeaderResponse("Content-Type", rest.getQueryRequest()["type"])
    rest.setResponse("caf\u00e9")

@get("/twice")
def twice():
    rest.setKeyHeaderResponse("Content-Type", rest.getQueryRequest()["type"])
    rest.setResponse("caf\u00e9")
    rest.setResponse("caf\u00e9")

@get("/streamed")
def streamed():
    return Response(iter(["caf", "\u00e9"]), media_type=rest.getQueryRequest()["type"])

@get("/chunked")
def chunked():
    rest.setKeyHeaderResponse("Content-Type", rest.getQueryRequest()["type"])
    rest.setChunkedResponse("caf")
    rest.setLastChunkedResponse("\u00e9")

@get("/chunked-euro")
def chunked_euro():
    rest.setKeyHeaderResponse("Content-Type", rest.getQueryRequest()["type"])
    rest.setChunkedResponse("\u20ac")

@get("/bytes-html")
def bytes_html():
    return Response(b"<p>caf\\xc3\\xa9</p>", media_type="text/html")

@get("/euro")
def euro():
    return Response("\u20ac", media_type=rest.getQueryRequest()["type"])
"""


STREAMS = ("/rest/streamed", "/rest/chunked")  # a streamed Response, setChunkedResponse
# a Response's media type, setKeyHeaderResponse (the answer returned, gathered), then streamed
DECLARING = ("/rest/declared", "/rest/set-label", "/rest/set-gathered", *STREAMS)


def _client(tmp_path: Path, module: str, charset: str | None) -> Client:
    server = local_port()
    if charset is not None:
        server["Charset"] = charset
    return Client(module_config(tmp_path, module, app=APP, servers={"HTTP_REST": server}))


def text_in(charset: str) -> dict[str, str]:
    return {"Content-Type": f"text/plain; charset={charset}"}


def test_cp1252_answers(tmp_path: Path) -> None:
    with _client(tmp_path, "charset_app_cp", "cp1252") as client:
        text = client.get("/rest/text")
        assert text.headers["content-type"] == "text/plain; charset=windows-1252"
        assert text.content == "café €".encode("cp1252")
        assert text.text == "café €"
        html = client.get("/rest/html")
        assert html.headers["content-type"] == "text/html; charset=windows-1252"
        assert html.content == "<p>café</p>".encode("cp1252")
        gathered = client.get("/rest/gathered")
        assert gathered.headers["content-type"] == "text/plain; charset=windows-1252"
        assert gathered.content == "café €".encode("cp1252")
        data = client.get("/rest/json")  # JSON stays UTF-8
        assert data.headers["content-type"] == "application/json"
        assert data.content == '{"word":"café €"}'.encode()
        unencodable = client.get("/rest/check")
        assert unencodable.status_code == 500
        assert unencodable.json()["code"] == 500
        body = "é€".encode("cp1252")
        assert client.post("/rest/echo", content=body).json() == {"body": "é€"}
        declared = client.post("/rest/echo", content="é".encode(), headers=text_in("UTF-8"))
        assert declared.json() == {"body": "é"}


def test_iso_8859_1_and_the_default(tmp_path: Path) -> None:
    with _client(tmp_path, "charset_app_latin", "ISO-8859-1") as client:
        html = client.get("/rest/html")
        assert html.headers["content-type"] == "text/html; charset=iso-8859-1"
        assert html.content == "<p>café</p>".encode("latin-1")
        assert client.get("/rest/text").status_code == 500  # no euro sign in ISO-8859-1
    with _client(tmp_path, "charset_app_default", None) as client:
        text = client.get("/rest/text")
        assert text.headers["content-type"] == "text/plain; charset=utf-8"
        assert text.content == "café €".encode()
        html = client.get("/rest/html")
        assert html.headers["content-type"] == "text/html; charset=utf-8"  # labelled, SPEC 10.6
        latin = client.post(
            "/rest/echo", content="é".encode("latin-1"), headers=text_in("ISO-8859-1")
        )
        assert latin.json() == {"body": "é"}


def test_a_declared_charset_is_one_a_client_can_mean(tmp_path: Path) -> None:
    """IANA charsets (names, aliases) decode; Python's other codecs (slow punycode, failing idna,
    escaping utf-7 and unicode_escape, transforms) and unknown names: 415 naming the accepted,
    undecoded."""
    with _client(tmp_path, "charset_app_accepted", "CP1252") as client:
        for label, text in (
            ("UTF-16", "h\u00e9 \u20ac"), ("utf-16le", "h\u00e9"), ("UTF-32BE", "h\u00e9"),
            ('"utf8"', "h\u00e9 \u20ac"), ("windows-1251", "\u043f\u0440\u0438"),
            ("cp1250", "\u0142"),
            ("ISO-8859-15", "\u20ac"), ("iso_8859-2", "\u0142"), ("latin1", "\u00e9"),
            ("US-ASCII", "plain"), ("KOI8-R", "\u043f"), ("Shift_JIS", "\u65e5\u672c"),
            ("GB18030", "\u4e2d"), ("Big5", "\u4e2d"),
        ):  # fmt: skip
            answer = client.post(
                "/rest/echo", content=text.encode(label.strip('"')), headers=text_in(label)
            )
            assert answer.status_code == 200, label
            assert answer.json() == {"body": text}, label
    with _client(tmp_path, "charset_app_refused", None) as client:
        for label in ("punycode", "idna", "utf-7", "unicode_escape", "raw-unicode-escape", "rot13",
                      '"base64"', "hz", "no-such-charset", ""):  # fmt: skip
            refused = client.post(
                "/rest/echo", content=b"+ADw-script+AD4-\\u003c", headers=text_in(label)
            )
            assert refused.status_code == 415, label
            error = refused.json()
            assert error["code"] == 415
            assert error["message"] == "Unsupported Media Type"
            assert "UTF-8, UTF-16" in error["detailedMessage"], label
            assert "windows-1250" in error["detailedMessage"]
            assert "the server's (UTF-8)" in error["detailedMessage"]


def test_the_guides_charset_example(tmp_path: Path) -> None:
    lines = example("locations-charset").text.splitlines()
    assert lines[0] == "[HTTP_REST]"
    charset = lines[1].split("=", 1)[1]
    with _client(tmp_path, "charset_app_guide", charset) as client:
        assert client.get("/rest/text").content == "café €".encode("cp1252")


def test_an_unknown_charset_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[HTTP_REST\] Charset: 'UTF-16' is not a charset"):
        _client(tmp_path, "charset_app_bad", "UTF-16")


UTF8_TEXT = "text/plain; charset=utf-8"
LATIN_TEXT = "text/plain; charset=iso-8859-1"


def test_json_text_is_utf8_on_any_port(tmp_path: Path) -> None:
    """A ``str`` body under a JSON type is UTF-8 (RFC 8259), whatever the server's charset."""
    with _client(tmp_path, "charset_app_json_text", "CP1252") as client:
        for path, media in (
            ("/rest/json-text", "application/json"),
            ("/rest/problem-text", "application/problem+json"),
        ):
            answer = client.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-type"] == media
            assert answer.content == '{"a":"café"}'.encode()
            assert answer.json() == {"a": "café"}
        answer = client.get("/rest/set-gathered", params={"type": "application/json"})
        assert answer.content == "café".encode()
        # and so is a JSON request body getBodyRequest reads (RFC 8259 8.1)
        for media in ("application/json", "application/vnd.x+json", "text/plain"):
            body = client.post("/rest/echo", content="é".encode(), headers={"Content-Type": media})
            assert body.json() == {"body": "é" if "json" in media else "Ã©"}, media


def test_a_declared_charset_encodes_the_text(tmp_path: Path) -> None:
    """However declared (a ``Response``'s media type, ``setKeyHeaderResponse``, a streamed
    ``Response``), else in the server's, labelled."""
    with _client(tmp_path, "charset_app_declared_cp", "CP1252") as client:
        for path in DECLARING:
            answer = client.get(path, params={"type": UTF8_TEXT})
            assert answer.status_code == 200, path
            assert answer.headers["content-type"] == UTF8_TEXT, path
            assert answer.content == "café".encode(), path
            plain = client.get(path, params={"type": "text/plain"})
            assert plain.headers["content-type"] == "text/plain; charset=windows-1252", path
            assert plain.content == "café".encode("cp1252"), path
    with _client(tmp_path, "charset_app_declared_utf8", None) as client:
        for path in DECLARING:
            answer = client.get(path, params={"type": LATIN_TEXT})
            assert answer.headers["content-type"] == LATIN_TEXT, path
            assert answer.content == "café".encode("latin-1"), path
        for path in (*DECLARING, "/rest/twice"):
            utf16 = client.get(path, params={"type": "text/csv; charset=UTF-16"})
            assert utf16.content.startswith(codecs.BOM_UTF16), path  # one byte order mark
            assert utf16.content.count(codecs.BOM_UTF16) == 1, path
            assert utf16.content.decode("utf-16").replace("café", "") == "", path


def test_an_unknown_or_unencodable_declared_charset_is_a_500_named_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with _client(tmp_path, "charset_app_declared_bad", None) as client:
        for path in ("/rest/declared", *STREAMS):
            with caplog.at_level(logging.ERROR, logger="fwrest.app"):
                answer = client.get(path, params={"type": "text/plain; charset=x-no-such"})
            assert answer.status_code == 500, path
            assert answer.json()["code"] == 500
            assert "charset 'x-no-such'" in caplog.text, path
            caplog.clear()
        with caplog.at_level(logging.ERROR, logger="fwrest.app"):
            answer = client.get("/rest/euro", params={"type": LATIN_TEXT})
        assert answer.status_code == 500
        assert "the Content-Type's charset 'iso-8859-1' cannot encode" in caplog.text
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="fwrest.app"):  # before the head went out
            answer = client.get("/rest/chunked-euro", params={"type": LATIN_TEXT})
        assert answer.status_code == 500 and answer.json()["code"] == 500
        assert "charset (latin-1) cannot encode ('€' at 0)" in caplog.text, caplog.text
        caplog.clear()
        euro = client.get("/rest/euro", params={"type": "text/plain; charset=windows-1252"})
        assert euro.content == "€".encode("cp1252")
    with _client(tmp_path, "charset_app_declared_latin", "ISO-8859-1") as client:
        with caplog.at_level(logging.ERROR, logger="fwrest.app"):
            assert client.get("/rest/euro", params={"type": "text/plain"}).status_code == 500
        assert "Charset=ISO-8859-1 cannot encode" in caplog.text  # the server's, named so


def test_the_default_charset_labels_text_answers(tmp_path: Path) -> None:
    """On a UTF-8 port too, a ``str`` answer under a ``text/...`` type without a charset gets
    ``; charset=utf-8`` (a browser reads an unlabelled ``text/html`` as windows-1252), however
    it is labelled; one that names a charset, a non-text type and a bytes body keep theirs."""
    with _client(tmp_path, "charset_app_default_label", None) as client:
        for path in DECLARING:
            for media in ("text/plain", "text/html", "Text/CSV"):
                answer = client.get(path, params={"type": media})
                assert answer.status_code == 200, (path, media)
                assert answer.headers["content-type"] == f"{media}; charset=utf-8", (path, media)
                assert answer.content == "café".encode(), (path, media)
            answer = client.get(path, params={"type": "text/html; charset=UTF-8"})
            assert answer.headers["content-type"] == "text/html; charset=UTF-8", path
            answer = client.get(path, params={"type": "application/xml"})
            assert answer.headers["content-type"] == "application/xml", path
        assert client.get("/rest/bytes-html").headers["content-type"] == "text/html"
