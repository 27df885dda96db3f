"""An exception in ``onAdmin`` (SPEC 5, 7.1): no 403 but the handler's 500 with the error body,
logged with the id and where raised, nothing changed, the worker serving on. Every route asking
``onAdmin``: settings API and form, audit, usage reset (def and async ``onAdmin``),
``oauth2/revoke-user``. Values other than ``True`` (403): test_settings_api.py, test_audit.py,
tests/auth/test_revocation.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from fwrest.testing import Client
from tests.auth.oauth2_support import (
    WEB,
    LocalOAuth,
    LocalService,
    local_oauth,
    oauth_section,
    params_source,
)
from tests.conftest import APP_SOURCE, local_port, module_config
from tests.native.support import (
    FileLog,
    auth_service,
    basic,
    form_token,
    get_settings,
    post_form,
    post_settings,
)

# A user per exception onAdmin raises (made afresh at each call); ada is allowed
RAISING = """
import asyncio

RAISED = {
    "boom": lambda: RuntimeError("the admin list is unreachable"),
    "exit": lambda: SystemExit(3),
    "interrupt": KeyboardInterrupt,
    "generator": GeneratorExit,
    "cancelled": asyncio.CancelledError,
}


def admin(user):
    if user in RAISED:
        raise RAISED[user]()
    return user == "ada"


async def admin_async(user):
    await asyncio.sleep(0)
    if user in RAISED:
        raise RAISED[user]()
    return user == "ada"
"""
AUTH_SOURCE = (
    RAISING
    + """

def check(user, password):
    return password == "Pw-1"
"""
)
RAISED = {
    "boom": "RuntimeError: the admin list is unreachable",
    "exit": "SystemExit: 3",
    "interrupt": "KeyboardInterrupt: ",
    "generator": "GeneratorExit: ",
    "cancelled": "CancelledError: ",
}
ADA = basic("ada", "Pw-1")
PORTS = ("HTTP_SYNC", "HTTP_ASYNC")
ACCESS_TAIL = "client=127.0.0.1 request_id="  # the access line's end, written after the failure
INTERNAL = {"code": 500, "detailedMessage": "", "message": "Internal Server Error"}


def _basic(on_admin: str) -> dict[str, Any]:
    authorization = {
        "scheme": "basic",
        "OnAuth": "on_admin_raises_auth.check",
        "onAdmin": f"on_admin_raises_auth.{on_admin}",
    }
    return local_port(FwData={"Authorization": authorization})


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return auth_service(
        tmp_path_factory.mktemp("on_admin_raises"),
        "on_admin_raises",
        AUTH_SOURCE,
        servers={"HTTP_SYNC": _basic("admin"), "HTTP_ASYNC": _basic("admin_async")},
        app=APP_SOURCE,
        extra={"HTTPSERVER": {"StateStore": "sqlite"}},
    )


def _config_json(client: Client, who: dict[str, str]) -> httpx.Response:
    return post_settings(client, {"rest_log_level": 5}, headers=who)


def _config_form(client: Client, who: dict[str, str]) -> httpx.Response:
    fields = {"rest_log_level": "5", "fw_csrf": form_token(client, headers=who)}
    return post_form(client, fields, headers=who)


def _audit(client: Client, who: dict[str, str]) -> httpx.Response:
    return client.get("/fw/rest/audit", headers=who)


def _usage_reset(client: Client, who: dict[str, str]) -> httpx.Response:
    return client.post("/fw/rest/usage/time/reset", json={}, headers=who)


ROUTES: dict[str, Callable[[Client, dict[str, str]], httpx.Response]] = {
    "config-json": _config_json,
    "config-form": _config_form,
    "audit": _audit,
    "usage-reset": _usage_reset,
}


def assert_logged_500(answer: httpx.Response, log: str, raised: str) -> str:
    """The handler's 500, logged as ``onAdmin``'s line with the request id, then where it raised."""
    assert answer.status_code == 500, answer.text
    assert answer.json() == INTERNAL
    rid = answer.headers["x-request-id"]
    lines = [line for line in log.splitlines() if line.endswith(f" request_id={rid}")]
    assert len(lines) >= 2, log[-3000:]
    assert "onAdmin raised; answered 500" in lines[0], lines
    assert f"]   {raised}" in lines[1], lines
    assert "_auth.py:" in lines[1] or "_oauth.py:" in lines[1], lines  # where onAdmin raised
    assert "answered 403" not in log
    return "\n".join(lines[:2])


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("user", sorted(RAISED))
@pytest.mark.parametrize("port", PORTS)
def test_an_exception_in_on_admin_answers_500_logged_and_changes_nothing(
    clients: dict[str, Client], file_log: FileLog, port: str, user: str, route: str
) -> None:
    client = clients[port]
    who = basic(user, "Pw-1")
    before = get_settings(client, headers=ADA)
    assert get_settings(client, headers=who) == before  # reading asks no onAdmin
    mark = len(file_log.log())
    answer = ROUTES[route](client, who)
    rid = answer.headers["x-request-id"]
    text = file_log.wait_log(f"{ACCESS_TAIL}{rid}", since=mark)  # after its failure
    print(assert_logged_500(answer, text, RAISED[user]))
    assert "usage figures reset" not in text
    assert get_settings(client, headers=ADA) == before
    # no access granted, and the worker serves on: ada's own change goes through
    assert client.get("/hello", headers=ADA).status_code == 200
    allowed = ROUTES[route](client, ADA)
    assert allowed.status_code in (200, 303), allowed.text
    if route.startswith("config"):
        assert get_settings(client, headers=ADA)["rest_log_level"]["runtime"] == 5
        assert post_settings(client, {"rest_log_level": None}, headers=ADA).status_code == 200


# -- oauth2/revoke-user ----------------------------------------------------------------------

OAUTH_MODULE = "on_admin_raises_oauth"
PEOPLE = [{"username": user, "password": "Pw-1"} for user in ("ada", "bob", *RAISED)]


def _write_oauth(folder: Path, certs: dict[str, Path]) -> Path:
    params = f"{OAUTH_MODULE}.params"
    servers = {
        name: oauth_section(certs, onAuthparams=params, onAdmin=f"{OAUTH_MODULE}.{func}")
        for name, func in (("OAUTH_SYNC", "admin"), ("OAUTH_ASYNC", "admin_async"))
    }
    app = APP_SOURCE + RAISING + params_source(client=[WEB], users=PEOPLE, access_expires="1h")
    extra = {"HTTPSERVER": {"StateStore": "sqlite", "LogFile": "server.log"}}
    return module_config(folder, OAUTH_MODULE, servers=servers, app=app, extra=extra)


@pytest.fixture(scope="module")
def oauth(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    yield from local_oauth(ca, tmp_path_factory.mktemp("on_admin_raises_oauth"), _write_oauth)


def _bearer(port: LocalOAuth, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {port.tokens(user, 'Pw-1', **WEB)['access_token']}"}


@pytest.mark.parametrize("user", ["boom", "exit", "cancelled"])
@pytest.mark.parametrize("server", ["OAUTH_SYNC", "OAUTH_ASYNC"])
def test_an_exception_in_on_admin_answers_500_to_revoke_user(
    oauth: LocalService, server: str, user: str
) -> None:
    port = oauth[server]
    url = port.base + "/fw/oauth2/revoke-user"
    bob = _bearer(port, "bob")
    mark = len(oauth.log())
    answer = port.http.post(url, json={"username": "bob"}, headers=_bearer(port, user))
    rid = answer.headers["x-request-id"]
    text = FileLog(oauth.folder / "server.log").wait_log(f"{ACCESS_TAIL}{rid}", since=mark)
    print(assert_logged_500(answer, text, RAISED[user]))
    assert port.get("/hello", bob["Authorization"].split()[1]).status_code == 200  # not revoked
    done = port.http.post(url, json={"username": "nobody"}, headers=_bearer(port, "ada"))
    assert done.status_code == 200, done.text  # the worker serves on, ada may
