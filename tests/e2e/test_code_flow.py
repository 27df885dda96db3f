"""The code grant with PKCE (SPEC 16.1) through real clients on real ``fwrest serve`` over TLS:
Authlib's ``OAuth2Session`` with S256 (the form posted as a browser does); Chromium (Playwright)
with JavaScript off filling the login page and following the redirect to a native app's loopback
callback (a ``form-action`` lacking its origin would stop it), no request elsewhere, the picture in
``docs/img/login-page.png``; an SPA on another origin doing the flow by ``fetch`` under the
location's CORS; two hosts on one ``redis-server``: a page from one worker posted to another, the
code redeemed on the other host, redeemed again revokes the tokens on both. No Chromium or
redis-server: a failure, never a skip."""

from __future__ import annotations

import json
import re
import secrets
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import trustme
from authlib.integrations.requests_client import OAuth2Session

from tests.auth.oauth2_support import issue_certs, oauth_section
from tests.auth.test_authorization_code import form_fields, pkce
from tests.conftest import APP_SOURCE, ROOT, ServerProcess, free_config, wait_for
from tests.e2e.support import Pages, hosts_serving, redis_or_none

SECTION = "OAUTH"
AUTHORIZE = "/fw/oauth2/authorize"
TOKEN = "/fw/oauth2/token"
ADA = ("ada", "Ada-Pw-7731")
SCREENSHOT = ROOT / "docs" / "img" / "login-page.png"

APP = (
    APP_SOURCE
    + """

import json as _json
from pathlib import Path as _Path


def params():
    return _json.loads((_Path(__file__).parent / "params.json").read_text())


def open_paths():
    return ["/hello"]
"""
)

SPA_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>spa</title></head>
<body><p id="state">loaded</p>
<script>
const API = "%(api)s";
const CALLBACK = location.origin + "/cb.html";
function b64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
}
async function start() {
  const meta = await (await fetch(API + "/fw/oauth2/metadata")).json();
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const challenge = b64url(await crypto.subtle.digest("SHA-256",
                                                      new TextEncoder().encode(verifier)));
  const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
  sessionStorage.setItem("verifier", verifier);
  sessionStorage.setItem("state", state);
  const url = new URL(meta.authorization_endpoint);
  url.search = new URLSearchParams({response_type: "code", client_id: "spa",
    redirect_uri: CALLBACK, code_challenge: challenge, code_challenge_method: "S256",
    state: state, scope: "orders:read"}).toString();
  location.assign(url.toString());
}
async function finish() {
  const got = new URLSearchParams(location.search);
  const meta = await (await fetch(API + "/fw/oauth2/metadata")).json();
  const out = {stateOk: got.get("state") === sessionStorage.getItem("state"),
               issOk: got.get("iss") === meta.issuer};
  const tokenAnswer = await fetch(meta.token_endpoint, {method: "POST",
    body: new URLSearchParams({grant_type: "authorization_code", code: got.get("code"),
      redirect_uri: CALLBACK, client_id: "spa",
      code_verifier: sessionStorage.getItem("verifier")})});
  const tokens = await tokenAnswer.json();
  out.tokenStatus = tokenAnswer.status;
  out.scope = tokens.scope;
  const hello = await fetch(API + "/items/7",
                            {headers: {Authorization: "Bearer " + tokens.access_token}});
  out.apiStatus = hello.status;
  out.api = await hello.json();
  const revoked = await fetch(meta.revocation_endpoint, {method: "POST",
    body: new URLSearchParams({token: tokens.refresh_token, client_id: "spa"})});
  out.revokeStatus = revoked.status;
  out.token = tokens.access_token;
  document.body.dataset.result = JSON.stringify(out);
}
(location.pathname.endsWith("/cb.html") ? finish() : start()).catch(
  (e) => { document.body.dataset.result = JSON.stringify({error: String(e)}); });
</script></body></html>
"""


class Hosts:
    def __init__(
        self, a: ServerProcess, b: ServerProcess, certs: dict[str, Path], pages: Pages
    ) -> None:
        self.a, self.b, self.certs, self.pages = a, b, certs, pages
        self.base_a, self.base_b = a.url(SECTION), b.url(SECTION)
        self.ctx = ssl.create_default_context(cafile=str(certs["ca"]))

    def client(self) -> httpx.Client:
        """A new client (a new connection: any worker of a host may take it)."""
        return httpx.Client(verify=self.ctx, timeout=15)


def write_host(folder: Path, certs: dict[str, Path], redis_url: str, pages: Pages) -> Path:
    (folder / "params.json").write_text(_params())
    return free_config(
        folder,
        app=APP,
        servers={
            SECTION: oauth_section(
                certs, onAuthparams="app.params", onAuthNoCheckUri="app.open_paths"
            )
        },
        extra={
            "HTTPSERVER": {"StateStore": redis_url},
            "ROOT": {"CORS": "CORS_SPA"},
            "CORS_SPA": {"AllowOrigins": pages.origin},
        },
    )


def _params() -> str:
    return json.dumps(
        {
            "client": [
                {
                    "client_id": "spa",
                    "public": True,
                    "scopes": ["orders:read"],
                    # the app's origin is http://127.0.0.1:<port>: a loopback redirect
                    "redirect_uris": ["http://127.0.0.1/cb.html"],
                },
                {
                    "client_id": "native",
                    "public": True,
                    "redirect_uris": [
                        "http://127.0.0.1/callback.html",
                        "http://[::1]/callback.html",
                    ],
                },
            ],
            "users": [{"username": ADA[0], "password": ADA[1], "scopes": ["orders:read"]}],
            "types": [{"grant_type": "authorization_code"}, {"grant_type": "refresh_token"}],
            "access_expires": "10m",
        }
    )


@pytest.fixture(scope="module")
def hosts(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    root = tmp_path_factory.mktemp("code_flow")
    certs = issue_certs(ca, root / "certs")
    (root / "redis").mkdir()
    (root / "pages").mkdir()
    pages = Pages(root / "pages")
    try:
        with redis_or_none(root / "redis") as redis:
            assert redis is not None
            for label in ("a", "b"):
                (root / label).mkdir()
            configs = [(write_host(root / "a", certs, redis.url, pages), 2)]
            configs.append((write_host(root / "b", certs, redis.url, pages), 1))
            with hosts_serving(configs) as started:
                api = started[0].url(SECTION)
                (root / "pages" / "index.html").write_text(SPA_PAGE % {"api": api})
                (root / "pages" / "cb.html").write_text(SPA_PAGE % {"api": api})
                (root / "pages" / "callback.html").write_text("the native app's callback")
                yield Hosts(started[0], started[1], certs, pages)
    finally:
        pages.stop()


def query_of(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def test_authlib_oauth2_session_with_s256_pkce(hosts: Hosts) -> None:
    callback = "http://127.0.0.1:51234/cb.html"
    session = OAuth2Session(
        "spa",
        redirect_uri=callback,
        scope="orders:read",
        code_challenge_method="S256",
        token_endpoint_auth_method="none",
    )
    ca = str(hosts.certs["ca"])
    verifier = secrets.token_urlsafe(64)
    url, state = session.create_authorization_url(hosts.base_a + AUTHORIZE, code_verifier=verifier)
    assert "code_challenge_method=S256" in url
    with hosts.client() as browser:  # the user's browser: the page, then the form
        shown = browser.get(url)
        assert shown.status_code == 200, shown.text
        posted = browser.post(
            hosts.base_a + AUTHORIZE,
            data={**form_fields(shown), "username": ADA[0], "password": ADA[1]},
        )
    assert posted.status_code == 302, posted.text
    location = posted.headers["location"]
    assert location.startswith(callback + "?")
    assert query_of(location)["state"] == state
    token = session.fetch_token(
        hosts.base_a + TOKEN, authorization_response=location, code_verifier=verifier, verify=ca
    )
    assert token["token_type"] == "Bearer" and token["scope"] == "orders:read"
    answer = session.get(hosts.base_a + "/items/9", verify=ca)
    assert answer.status_code == 200, answer.text
    # the same code again (Authlib, as a client that retried): refused
    with pytest.raises(Exception, match="invalid_grant"):
        session.fetch_token(
            hosts.base_a + TOKEN, authorization_response=location, code_verifier=verifier, verify=ca
        )


def test_the_login_page_in_chromium_without_javascript(browser: Any, hosts: Hosts) -> None:
    verifier, challenge = pkce()
    callback = f"http://127.0.0.1:{hosts.pages.port}/callback.html"
    query = _native_query(callback, challenge, "st-native")
    context = browser.new_context(java_script_enabled=False, ignore_https_errors=True)
    requested: list[str] = []
    try:
        page = context.new_page()
        page.on("request", lambda request: requested.append(request.url))
        shown = page.goto(hosts.base_a + AUTHORIZE + "?" + query)
        assert shown is not None and shown.status == 200
        headers = shown.headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "script-src" not in headers["content-security-policy"]
        assert headers["cache-control"] == "no-store"
        assert headers["x-frame-options"] == "DENY"
        assert page.is_visible("text=native")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT))
        assert SCREENSHOT.stat().st_size > 5_000
        # a wrong password first: the page again, one message
        page.fill("#fw-username", ADA[0])
        page.fill("#fw-password", "Not-Her-Pw")
        with page.expect_navigation():
            page.click("button[type=submit]")
        assert page.is_visible("text=Invalid username or password.")
        page.fill("#fw-password", ADA[1])
        with page.expect_navigation(url=re.compile(re.escape(callback) + r"\?")):
            page.click("button[type=submit]")
        values = query_of(page.url)
        assert values["state"] == "st-native"
    finally:
        context.close()
    fwrest_origin = hosts.base_a.split("/rest", 1)[0]
    outside = [u for u in requested if not u.startswith((fwrest_origin, callback))]
    assert outside == [], outside  # no script, style, font or image from anywhere else
    assert any(p.startswith("/callback.html?code=") for p in hosts.pages.asked)
    with hosts.client() as client:
        answer = client.post(
            hosts.base_a + TOKEN,
            data={
                "grant_type": "authorization_code",
                "code": values["code"],
                "redirect_uri": callback,
                "client_id": "native",
                "code_verifier": verifier,
            },
        )
    assert answer.status_code == 200, answer.text


def _log_in_without_javascript(
    browser: Any, login_url: str, callback: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Chromium without JavaScript: the login page at ``login_url``, the form filled and posted,
    the redirect followed to ``callback``; (the page's headers, the callback's query)."""
    context = browser.new_context(java_script_enabled=False, ignore_https_errors=True)
    try:
        page = context.new_page()
        shown = page.goto(login_url)
        assert shown is not None and shown.status == 200
        page.fill("#fw-username", ADA[0])
        page.fill("#fw-password", ADA[1])
        with page.expect_navigation(url=re.compile(re.escape(callback) + r"\?"), timeout=15_000):
            page.click("button[type=submit]")
        return shown.headers, query_of(page.url)
    finally:
        context.close()


def _native_query(callback: str, challenge: str, state: str) -> str:
    """The native client's authorization request to ``callback`` with PKCE S256."""
    return (
        f"response_type=code&client_id=native&redirect_uri={callback}"
        f"&code_challenge={challenge}&code_challenge_method=S256&state={state}"
    )


def _redeemed(hosts: Hosts, code: str, callback: str, verifier: str) -> int:
    with hosts.client() as client:
        answer = client.post(
            hosts.base_a + TOKEN,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": callback,
                "client_id": "native",
                "code_verifier": verifier,
            },
        )
    return answer.status_code


def test_chromium_follows_the_redirect_to_an_ipv6_loopback_callback(
    browser: Any, hosts: Hosts, tmp_path: Path
) -> None:
    """``http://[::1]:PORT``, which no CSP host-source can name, is reached after the post: the
    page's ``form-action`` allows ``http://*:PORT`` (not every ``http:`` URL)."""
    (tmp_path / "callback.html").write_text("the native app's callback")
    app = Pages(tmp_path, host="::1")
    try:
        verifier, challenge = pkce()
        callback = f"{app.origin}/callback.html"
        query = _native_query(callback, challenge, "st-v6")
        headers, values = _log_in_without_javascript(
            browser, hosts.base_a + AUTHORIZE + "?" + query, callback
        )
    finally:
        app.stop()
    assert f"form-action 'self' http://*:{app.port};" in headers["content-security-policy"]
    assert values["state"] == "st-v6"
    assert any(p.startswith("/callback.html?code=") for p in app.asked), app.asked
    assert _redeemed(hosts, values["code"], callback, verifier) == 200


def test_a_single_page_app_on_another_origin_does_the_whole_flow(
    browser: Any, hosts: Hosts
) -> None:
    context = browser.new_context(ignore_https_errors=True)
    try:
        page = context.new_page()
        page.goto(hosts.pages.origin + "/index.html")
        page.wait_for_url(re.compile(re.escape(hosts.base_a + AUTHORIZE)), timeout=15_000)
        page.fill("#fw-username", ADA[0])
        page.fill("#fw-password", ADA[1])
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(re.escape(hosts.pages.origin + "/cb.html")), timeout=15_000)
        page.wait_for_function("document.body.dataset.result !== undefined", timeout=15_000)
        result = json.loads(page.evaluate("document.body.dataset.result"))
    finally:
        context.close()
    assert "error" not in result, result
    assert result["stateOk"] and result["issOk"], result
    assert (result["tokenStatus"], result["scope"]) == (200, "orders:read")
    assert result["apiStatus"] == 200, result
    assert result["revokeStatus"] == 200
    # revoked: every worker and host refuses the access token within 1 s (SPEC 12.3)
    with hosts.client() as client:
        wait_for(lambda: _refused(hosts, client, result["token"]), 5, "the revoked token refused")
    log = (hosts.a.config.parent / "server.log").read_text()
    assert "OPTIONS /rest/items/7 204" in log  # the browser's preflight of the bearer call


def _refused(hosts: Hosts, client: httpx.Client, token: str) -> bool:
    """Whether both hosts refuse the access ``token`` (401)."""
    bearer = {"Authorization": f"Bearer {token}"}
    return all(
        client.get(base + "/items/7", headers=bearer).status_code == 401
        for base in (hosts.base_a, hosts.base_b)
    )


def _whoami(client: httpx.Client, base: str) -> int:
    return int(client.get(base + "/hello").json()["pid"])


def _client_on_other_worker(hosts: Hosts, pid: int) -> httpx.Client:
    """A client whose connection another worker of host A took."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        client = hosts.client()
        if _whoami(client, hosts.base_a) != pid:
            return client
        client.close()
    raise AssertionError("no connection reached host A's other worker within 30 s")


def test_a_code_crosses_workers_and_hosts_and_a_replay_revokes_on_both(hosts: Hosts) -> None:
    verifier, challenge = pkce()
    callback = "http://127.0.0.1/cb.html"
    params = {
        "response_type": "code",
        "client_id": "spa",
        "redirect_uri": callback,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st-x",
    }
    with hosts.client() as first:
        pid = _whoami(first, hosts.base_a)
        shown = first.get(hosts.base_a + AUTHORIZE, params=params)
        assert shown.status_code == 200
    fields = {**form_fields(shown), "username": ADA[0], "password": ADA[1]}
    # the page of one worker, posted to the other (the CSRF token is the service's)
    second = _client_on_other_worker(hosts, pid)
    try:
        posted = second.post(hosts.base_a + AUTHORIZE, data=fields)
    finally:
        second.close()
    assert posted.status_code == 302, posted.text
    code = query_of(posted.headers["location"])["code"]
    # and to another host: a page of host A is valid on host B too
    with hosts.client() as other:
        on_b = other.post(hosts.base_b + AUTHORIZE, data=fields)
    assert on_b.status_code == 302, on_b.text
    exchange = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": callback,
        "client_id": "spa",
        "code_verifier": verifier,
    }
    with hosts.client() as client:
        redeemed = client.post(hosts.base_b + TOKEN, data=exchange)  # host B redeems A's code
        assert redeemed.status_code == 200, redeemed.text
        access = redeemed.json()["access_token"]
        bearer = {"Authorization": f"Bearer {access}"}
        assert client.get(hosts.base_a + "/items/1", headers=bearer).status_code == 200
        again = client.post(hosts.base_a + TOKEN, data=exchange)  # host A: the replay
        assert again.json()["error"] == "invalid_grant"
        started = time.monotonic()
        wait_for(
            lambda: _refused(hosts, client, access),
            5,
            "the replayed code's tokens refused on both hosts",
        )
        print(f"refused on both hosts {time.monotonic() - started:.2f} s after the replay")
    for proc in (hosts.a, hosts.b):
        text = proc.log() + (proc.config.parent / "server.log").read_text()
        for secret in (ADA[1], code, verifier, fields["fw_csrf"], access):
            assert secret not in text


def test_the_token_revoke_and_metadata_routes_grant_the_spas_preflight(hosts: Hosts) -> None:
    with hosts.client() as client:
        for route in (TOKEN, "/fw/oauth2/revoke", "/fw/oauth2/metadata"):
            answer = client.options(
                hosts.base_a + route,
                headers={
                    "Origin": hosts.pages.origin,
                    "Access-Control-Request-Method": "GET" if "metadata" in route else "POST",
                    "Access-Control-Request-Headers": "content-type",
                },
            )
            assert answer.status_code == 204, (route, answer.text)
            assert answer.headers["access-control-allow-origin"] == hosts.pages.origin
        refused = client.options(
            hosts.base_a + TOKEN,
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert refused.status_code == 403
        assert "access-control-allow-origin" not in refused.headers
