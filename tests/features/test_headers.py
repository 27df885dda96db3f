"""Security headers (SPEC 10.2): a location's ``XFrameOptions`` and ``ContentSecurityPolicy`` on its
answers, ``HSTS`` on its TLS port's (engine refusals over real TLS), ``nosniff`` on every answer of
every port (protocol errors and monitor, real sockets), the settings page's own headers kept, the
start errors."""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from fwrest import ConfigError
from fwrest.testing import Client
from tests.conftest import (
    free_config,
    ini_text,
    issue_certs,
    local_port,
    module_config,
    serving,
    tls_server,
)

APP = """
from fwrest import Response, get

@get("/hello")
def hello():
    return {"message": "hi"}

@get("/hsts")
def own_hsts():
    return Response({"v": 1}, headers={"Strict-Transport-Security": "max-age=0"})

def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")

@get("/framed")
def framed():
    return Response({"v": 1}, headers={"X-Frame-Options": "SAMEORIGIN", "X-Content-Type-Options": "x"})
"""

CSP = "default-src 'self'; frame-ancestors 'none'"
HSTS = "max-age=31536000; includeSubDomains"


def _config(tmp_path: Path, module: str, certs: dict[str, Path] | None, **root: Any) -> Path:
    locations = "ROOT, OTHER"
    server = tls_server(certs, Locations=locations) if certs else local_port(Locations=locations)
    extra = {"ROOT": root, "OTHER": {"Path": "/other", "ThreadPool": "POOL"}}
    return module_config(tmp_path, module, app=APP, servers={"HTTP_REST": server}, extra=extra)


def test_a_locations_headers_are_on_every_answer_of_its_requests(
    tmp_path: Path, ca: trustme.CA
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    headers = {"HSTS": HSTS, "XFrameOptions": "sameorigin", "ContentSecurityPolicy": CSP}
    config = _config(tmp_path, "headers_app_tls", certs, **headers)
    with Client(config) as client:
        for path, status in (("/rest/hello", 200), ("/rest/nowhere", 404)):
            answer = client.get(path)
            assert answer.status_code == status
            assert answer.headers["strict-transport-security"] == HSTS
            assert answer.headers["x-frame-options"] == "SAMEORIGIN"
            assert answer.headers["content-security-policy"] == CSP
        assert client.delete("/rest/hello").headers["x-frame-options"] == "SAMEORIGIN"  # 405
        other = client.get("/other/hello")
        assert other.status_code == 200
        for name in ("x-frame-options", "content-security-policy"):
            assert name not in other.headers
        # HSTS is the port's: on every answer, another location's and outside every location
        assert other.headers["strict-transport-security"] == HSTS
        assert client.get("/nowhere").headers["strict-transport-security"] == HSTS
        # an answer that sets a header itself keeps its own (once)
        framed = client.get("/rest/framed")
        assert framed.headers.get_list("x-frame-options") == ["SAMEORIGIN"]


def test_an_ini_value_is_sent_whole_as_the_json_one(tmp_path: Path, ca: trustme.CA) -> None:
    """`` ; `` in an INI ``ContentSecurityPolicy`` or ``HSTS`` is the header's, not a comment."""
    certs = issue_certs(ca, tmp_path / "certs")
    csp, hsts = (
        "default-src 'self' ; frame-ancestors 'none'",
        "max-age=31536000 ; includeSubDomains",
    )
    config = _config(tmp_path, "headers_app_ini", certs, HSTS=hsts, ContentSecurityPolicy=csp)
    ini = config.with_suffix(".ini")
    ini.write_text(ini_text(json.loads(config.read_text())))
    for path in (config, ini):
        with Client(path) as client:
            answer = client.get("/rest/hello")
            assert answer.status_code == 200
            assert answer.headers["content-security-policy"] == csp, path.name
            assert answer.headers["strict-transport-security"] == hsts, path.name


def test_hsts_is_on_every_answer_of_the_tls_port(tmp_path: Path, ca: trustme.CA) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    basic = {"Authorization": {"scheme": "basic", "OnAuth": "headers_app_port.check"}}
    server = tls_server(certs, Locations="OTHER, ROOT, THIRD", FwData=basic)
    extra = {
        "ROOT": {"HSTS": HSTS},  # /rest: the shortest prefix that sets HSTS
        "OTHER": {"Path": "/other", "ThreadPool": "POOL", "HSTS": "max-age=60"},
        "THIRD": {"Path": "/third", "ThreadPool": "POOL"},
    }
    config = module_config(
        tmp_path, "headers_app_port", app=APP, servers={"HTTP_REST": server}, extra=extra
    )
    ada = ("ada", "Ada-Pw-1")
    with Client(config) as client:
        cases = [
            ("/rest/hello", None, 401, HSTS),  # the guard's refusal, in the location
            ("/nowhere", None, 401, HSTS),  # before routing, outside every location
            ("/nowhere", ada, 404, HSTS),  # outside every location: the port's
            ("/rest/hello", ada, 200, HSTS),
            ("/other/hello", None, 401, "max-age=60"),  # the path's own location's value
            ("/other/hello", ada, 200, "max-age=60"),
            ("/third/hello", ada, 200, HSTS),  # a location without one: the port's
            ("/third/hello", ("ada", "wrong"), 403, HSTS),  # the guard refused the pair
            ("/rest/hsts", ada, 200, "max-age=0"),  # an answer's own is kept, alone
        ]
        for path, auth, status, value in cases:
            answer = client.get(path, auth=auth)
            assert answer.status_code == status, (path, auth)
            assert answer.headers.get_list("strict-transport-security") == [value], path
        # a refusal the engine makes itself: the port's value, and the request's id
        many = {f"x-h{i}": "1" for i in range(120)}
        refused = client.get("/other/hello", headers={**many, "x-request-id": "mine-1"})
        assert refused.status_code == 431
        assert refused.headers.get_list("strict-transport-security") == [HSTS]
        assert refused.headers["x-request-id"] == "mine-1"


def test_the_settings_page_keeps_its_own_frame_and_csp_headers(tmp_path: Path) -> None:
    config = _config(tmp_path, "headers_app_page", None, XFrameOptions="SAMEORIGIN")
    with Client(config) as client:
        page = client.get("/rest/fw/rest/config")
        assert page.status_code == 200
        assert page.headers.get_list("x-frame-options") == ["DENY"]
        assert "default-src 'none'" in page.headers["content-security-policy"]


def test_nosniff_on_every_answer_of_every_port(tmp_path: Path) -> None:
    monitor = {"Enable": 1, "HostName": "127.0.0.1", "Port": 0}
    config = free_config(tmp_path, extra={"APP_MONITOR": monitor})
    with serving(config) as proc:
        base = proc.url("HTTP_REST")
        for url in (base + "/hello", base + "/nowhere", base + "/fw/rest/config"):
            answer = httpx.get(url, timeout=10)
            assert answer.headers.get_list("x-content-type-options") == ["nosniff"], url
        # a protocol error, answered by the HTTP engine itself
        with socket.create_connection(("127.0.0.1", proc.ports["HTTP_REST"]), timeout=10) as s:
            s.sendall(b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
            raw = s.recv(65536).decode("latin-1")
        assert raw.startswith("HTTP/1.1 400"), raw
        assert "\r\nx-content-type-options: nosniff\r\n" in raw
        monitor = httpx.get(proc.url("APP_MONITOR") + "/metrics", timeout=10)
        assert monitor.headers["x-content-type-options"] == "nosniff"


def test_hsts_over_real_tls(tmp_path: Path, ca: trustme.CA) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    config = _config(tmp_path, "headers_app_wire", certs, HSTS=HSTS)
    with serving(config) as proc:
        context = ssl.create_default_context(cafile=str(certs["ca"]))
        answer = httpx.get(proc.url("HTTP_REST") + "/hello", verify=context, timeout=10)
        assert answer.status_code == 200
        assert answer.headers["strict-transport-security"] == HSTS
        # a protocol error, answered by the HTTP engine itself: the port's HSTS too
        port = proc.ports["HTTP_REST"]
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"GET /rest/hello HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
            head = tls.recv(65536).decode("latin-1")
        assert head.startswith("HTTP/1.1 400"), head
        assert f"\r\nstrict-transport-security: {HSTS}\r\n" in head


@pytest.mark.parametrize(
    ("root", "tls", "message"),
    [
        ({"HSTS": HSTS}, False,
         "[HTTP_REST] Locations: the location [ROOT] sets HSTS, which only a TLS"),
        ({"HSTS": "includeSubDomains"}, True, "[ROOT] HSTS: must start with max-age=SECONDS"),
        ({"XFrameOptions": "ALLOW-FROM x"}, False,
         "[ROOT] XFrameOptions: must be DENY or SAMEORIGIN"),
        ({"ContentSecurityPolicy": "default-src 'self'\r\nSet-Cookie: a=b"}, False,
         "[ROOT] ContentSecurityPolicy: holds a control or non-ASCII character"),
        ({"XFrameOptions": "DENY\u00e9"}, False,
         "[ROOT] XFrameOptions: holds a control or non-ASCII"),
    ],
)  # fmt: skip
def test_a_bad_header_key_stops_the_start(
    tmp_path: Path, ca: trustme.CA, root: dict[str, str], tls: bool, message: str
) -> None:
    certs = issue_certs(ca, tmp_path / "certs") if tls else None
    config = _config(tmp_path, "headers_app_bad", certs, **root)
    with pytest.raises(ConfigError) as caught:
        Client(config)
    assert message in str(caught.value)
