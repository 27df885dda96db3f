"""State-changing native routes (settings POST, usage reset; SPEC 7.1): JSON or the form token, no
foreign ``Origin``, ``onAdmin``, and a ``Host`` naming the server (``HostName``, address,
``localhost`` on loopback, ``AllowedHosts``) against DNS rebinding, where the attacker's page sends
its own name as ``Host`` and a matching ``Origin``. In process (memory store): ``HTTP_REST``
(``AllowedHosts=api.example.com, *.corp.example``), ``HTTP_BASIC`` (``onAdmin`` ada), ``HTTP_ANY``
on 0.0.0.0; each port numbered in URL and ``Host``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from fwrest.testing import Client
from tests.conftest import APP_SOURCE, free_port, local_port
from tests.native.support import (
    ADA,
    ADMIN_AUTH_SOURCE,
    BOB,
    JSON_ACCEPT,
    FileLog,
    auth_service,
    form_token,
    get_settings,
    post_settings,
    wait_for,
)

RESET = "/fw/rest/usage/time/reset"
PORTS = ("HTTP_REST", "HTTP_BASIC", "HTTP_ANY")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    auth = {"scheme": "basic", "OnAuth": "state_changes_auth.check", "maxFailures": 1_000_000}
    auth["onAdmin"] = "state_changes_auth.admin"
    servers = {
        "HTTP_REST": local_port(Port=free_port(), AllowedHosts="api.example.com, *.corp.example"),
        "HTTP_BASIC": local_port(Port=free_port(), FwData={"Authorization": auth}),
        "HTTP_ANY": local_port(HostName="0.0.0.0", Port=free_port()),
    }
    folder = tmp_path_factory.mktemp("state_changes")
    return auth_service(folder, "state_changes", ADMIN_AUTH_SOURCE, servers=servers, app=APP_SOURCE)


@pytest.fixture(scope="module")
def base(clients: dict[str, Client]) -> Client:
    return clients["HTTP_REST"]


def port_of(clients: dict[str, Client], name: str = "HTTP_REST") -> int | None:
    return clients[name].base_url.port


def reset(base: Client, **kw: Any) -> httpx.Response:
    return base.post(RESET, timeout=10, **kw)


def calls(base: Client, endpoint: str = "/hello", **kw: Any) -> int:
    r = base.get("/fw/rest/usage/time", headers={**JSON_ACCEPT, **kw.pop("headers", {})})
    assert r.status_code == 200, r.text
    return sum(row["calls"] for row in r.json()["entry_points"] if row["endpoint"] == endpoint)


def count_calls(base: Client, n: int = 3, **kw: Any) -> None:
    for _ in range(n):
        assert base.get("/hello", **kw).status_code == 200
    wait_for(lambda: calls(base, **kw) >= n, 15, "the calls counted")


# -- Host: DNS rebinding ---------------------------------------------------------------------


def test_a_rebound_page_can_neither_change_settings_nor_reset_the_figures(
    clients: dict[str, Client], base: Client, file_log: FileLog
) -> None:
    """rebind.attacker.example rebound to 127.0.0.1: Host is its name, Origin matches it."""
    port = port_of(clients)
    foreign = f"rebind.attacker.example:{port}"
    headers = {"Host": foreign, "Origin": f"http://{foreign}"}
    before = get_settings(base)
    mark = len(file_log.log())
    changed = post_settings(base, {"rest_log_level": 5}, headers=headers)
    assert changed.status_code == 403, changed.text
    assert "name of this server" in changed.json()["detailedMessage"]
    count_calls(base)
    reset_attempt = reset(base, json={}, headers=headers)
    assert reset_attempt.status_code == 403, reset_attempt.text
    assert get_settings(base) == before
    assert calls(base) >= 3  # not reset
    logged = file_log.wait_log("a usage reset refused", since=mark)
    assert "a settings change refused: the Host 'rebind.attacker.example:" in logged
    # the same requests sent to the server's own name pass
    own = {"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port}"}
    assert post_settings(base, {}, headers=own).status_code == 200
    assert reset(base, json={}, headers=own).status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",  # its address, with or without the port
        "127.0.0.1:{port}",
        "localhost:{port}",  # bound to loopback
        "LOCALHOST.",
        "api.example.com",  # AllowedHosts
        "API.Example.com:8443",
        "a.corp.example",  # *.corp.example
        "x.y.corp.example:443",
    ],
)
def test_a_name_of_the_server_may_change_state(
    clients: dict[str, Client], base: Client, host: str
) -> None:
    headers = {"Host": host.format(port=port_of(clients))}
    r = post_settings(base, {}, headers=headers)
    assert r.status_code == 200, (host, r.text)
    assert reset(base, json={}, headers=headers).status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "corp.example",  # *.corp.example names what is under it only
        "evilcorp.example",
        "api.example.com.evil.example",
        "evil-api.example.com",
        "127.0.0.2",  # a loopback address, not the bound one
        "[::1]",
        "0.0.0.0",
        "2130706433",  # 127.0.0.1 as one number: no name fwrest compares
    ],
)
def test_a_host_that_does_not_name_the_server_is_refused(
    clients: dict[str, Client], base: Client, host: str
) -> None:
    before = get_settings(base)
    headers = {"Host": host}
    r = post_settings(base, {"rest_log_level": 5}, headers=headers)
    assert r.status_code == 403, (host, r.text)
    assert reset(base, json={}, headers=headers).status_code == 403
    # reading stays allowed (the GET routes change nothing)
    assert base.get("/fw/rest/config", headers=headers).status_code == 200
    assert get_settings(base) == before


@pytest.mark.parametrize("host", ["127.0.0.1:x", "ann@127.0.0.1", ""])
def test_a_host_that_is_no_host_and_port_is_refused_before_the_route(
    clients: dict[str, Client], base: Client, host: str
) -> None:
    # RFC 9112 3.2: 400 for every request, before any route (a GET too)
    before = get_settings(base)
    headers = {"Host": host}
    assert post_settings(base, {"rest_log_level": 5}, headers=headers).status_code == 400
    assert base.get("/fw/rest/config", headers=headers).status_code == 400
    assert get_settings(base) == before


def test_bound_to_every_interface_each_address_of_the_machine_names_it(
    clients: dict[str, Client],
) -> None:
    port = port_of(clients, "HTTP_ANY")
    base = clients["HTTP_ANY"]
    own = sorted(
        {
            entry.address
            for entries in psutil.net_if_addrs().values()
            for entry in entries
            if entry.family.name == "AF_INET"
        }
    )
    print(f"the machine's IPv4 addresses: {own}")
    for host in ("127.0.0.1", f"localhost:{port}", *own):
        assert post_settings(base, {}, headers={"Host": host}).status_code == 200, host
    elsewhere = next(a for a in ("198.51.100.77", "203.0.113.9", "192.0.2.201") if a not in own)
    for host in ("evil.example", elsewhere, "0.0.0.0", f"0.0.0.0:{port}"):
        r = post_settings(base, {}, headers={"Host": host})
        assert r.status_code == 403, (host, r.text)


# -- the usage reset: what the settings POST needs -------------------------------------------


def test_the_usage_reset_needs_json_or_the_page_form(
    clients: dict[str, Client], base: Client
) -> None:
    port = port_of(clients)
    count_calls(base)
    # what a cross-site page can send without a preflight: a "simple" request
    for kw in (
        {},
        {"content": b"x", "headers": {"Content-Type": "text/plain"}},
        {"data": {"a": "1"}},  # a form without the page's token
        {"data": {"fw_csrf": "0" * 64}},
        {"content": b"{}", "headers": {"Content-Type": "text/plain", "Origin": "http://evil"}},
        {"json": {}, "headers": {"Origin": "http://evil.example"}},
        {"json": {}, "headers": {"Origin": "null"}},
        {"json": {}, "headers": {"Origin": f"https://127.0.0.1:{port}"}},  # another scheme
        {"json": {}, "headers": {"Sec-Fetch-Site": "cross-site"}},
    ):
        r = reset(base, **kw)
        assert r.status_code in (403, 415), (kw, r.status_code, r.text)
    assert reset(base).status_code == 415
    assert reset(base, data={"a": "1"}).status_code == 403
    assert calls(base) >= 3  # nothing reset
    # the settings page's token is not the reset form's
    assert reset(base, data={"fw_csrf": form_token(base)}).status_code == 403
    # the usage page's own form: its button resets and goes back to the page
    usage = base.get("/fw/rest/usage/time")
    assert usage.status_code == 200 and usage.headers["content-type"].startswith("text/html")
    form = re.search(
        r'<form method="post" action="([^"]+)"><input type="hidden" name="fw_csrf" '
        r'value="([^"]+)">',
        usage.text,
    )
    assert form, usage.text
    action, token = form.groups()
    assert action == "/rest/fw/rest/usage/time/reset"
    done = base.post(
        f"http://127.0.0.1:{port}{action}",
        data={"fw_csrf": token},
        headers={"Origin": f"http://127.0.0.1:{port}"},
    )
    assert done.status_code == 303, done.text
    assert done.headers["location"] == "/rest/fw/rest/usage/time"
    wait_for(lambda: calls(base) == 0, 15, "the figures reset")
    # JSON, any body, from the page's origin or none
    count_calls(base)
    r = reset(base, content=b"", headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json() == {"reset": True}, r.text
    wait_for(lambda: calls(base) == 0, 15, "the figures reset")
    doc = base.get("/fw/rest/openapi.json").json()  # a bare POST is 415: the body is required
    assert doc["paths"]["/rest" + RESET]["post"]["requestBody"]["required"] is True


def test_on_admin_decides_who_may_reset_the_figures(clients: dict[str, Client]) -> None:
    base = clients["HTTP_BASIC"]
    count_calls(base, headers=ADA)
    assert reset(base, json={}).status_code == 401
    refused = reset(base, json={}, headers=BOB)
    assert refused.status_code == 403, refused.text
    assert refused.json()["detailedMessage"] == "this user may not reset the usage figures"
    assert calls(base, headers=ADA) >= 3
    assert reset(base, json={}, headers=ADA).status_code == 200
    wait_for(lambda: calls(base, headers=ADA) == 0, 15, "the figures reset")
