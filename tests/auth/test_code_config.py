"""The code grant's configuration (SPEC 16.1): ``authorization_code`` in ``types``,
``redirect_uris``, ``"public": true``, ``loginPage``: checked at start (``fwrest check`` exits 2,
clear message) or reported as probably wrong."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import trustme

from fwrest.auth.oauth2.params import ParamsError, normalise
from tests.auth.conftest import check
from tests.auth.oauth2_support import issue_certs, oauth_section
from tests.conftest import module_config

USERS = {"users": [{"username": "ada", "password": "Ada-Pw-7731"}]}


def code_params(**client: Any) -> dict[str, Any]:
    types = [{"grant_type": "authorization_code"}, {"grant_type": "refresh_token"}]
    return {**USERS, "client": [{"client_id": "spa", **client}], "types": types}


def test_a_client_entry_registers_redirects_and_says_public() -> None:
    spa = ["https://app.example.com/cb", "http://127.0.0.1/cb"]
    params = normalise({**USERS, "client": [
        {"client_id": "spa", "public": True, "redirect_uris": spa},
        {"client_id": "web", "client_secret": "S", "redirect_uris": "https://w.example/cb"},
        # a second entry of a client changes nothing (the first decides)
        {"client_id": "spa", "redirect_uris": ["https://evil.example/cb"]},
    ]})  # fmt: skip
    assert params.public == frozenset({"spa"})
    assert params.redirect_uris["spa"] == frozenset(spa)
    assert params.redirect_uris["web"] == frozenset({"https://w.example/cb"})


@pytest.mark.parametrize(
    ("client", "needle"),
    [
        ({"redirect_uris": ["http://app.example.com/cb"]}, "http is allowed only for a loopback"),
        ({"redirect_uris": ["http://localhost/cb"]}, "names localhost"),
        ({"redirect_uris": ["https://app.example.com/cb#x"]}, "has a fragment"),
        ({"redirect_uris": ["https://*.example.com/cb"]}, "has a wildcard"),
        ({"redirect_uris": ["com.example.app:/cb"]}, "neither https://"),
        ({"redirect_uris": ["https://u:p@app.example.com/cb"]}, "has user info"),
        ({"redirect_uris": []}, "redirect_uris must be a list of URLs"),
        ({"redirect_uris": [7]}, "a redirect URI is a non-empty text"),
        ({"public": "yes"}, "public must be true or false"),
        ({"public": True, "client_secret": "S"}, "is public (no secret"),
    ],
)
def test_a_client_entry_that_cannot_work_is_refused(client: dict[str, Any], needle: str) -> None:
    with pytest.raises(ParamsError, match="the client 'spa'") as caught:
        normalise(code_params(**client))
    assert needle in str(caught.value)


def _config(
    tmp_path: Path,
    ca: trustme.CA,
    params: dict[str, Any],
    native: dict[str, list[str]] | None = None,
    **auth: Any,
) -> Path:
    certs = issue_certs(ca, tmp_path / "certs")
    (tmp_path / "params.json").write_text(json.dumps(params))
    section = oauth_section(certs, onAuthparams="file:params.json", **auth)
    if native is not None:
        section["FwData"]["NativeRoutes"] = native
    servers = {"OAUTH": section}
    return module_config(tmp_path, f"tcode_config_{uuid.uuid4().hex[:12]}", servers=servers)


def test_check_stops_on_a_redirect_a_grant_could_not_use(ca: trustme.CA, tmp_path: Path) -> None:
    config = _config(tmp_path, ca, code_params(redirect_uris=["http://app.example.com/cb"]))
    result = check(config, real=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "[OAUTH] onAuthparams:" in result.stderr
    assert "the client 'spa': http is allowed only for a loopback redirect" in result.stderr


NO_CODE = {**USERS, "client": [{"client_id": "spa", "redirect_uris": ["https://a.example/cb"]}]}


@pytest.mark.parametrize(
    ("params", "needle"),
    [(code_params(public=True), 'no client entry has "redirect_uris"'),
     (NO_CODE, "its types do not list authorization_code")],
)  # fmt: skip
def test_check_warns_about_a_grant_no_client_can_use(
    ca: trustme.CA, tmp_path: Path, params: dict[str, Any], needle: str
) -> None:
    config = _config(tmp_path, ca, params)
    result = check(config, real=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert needle in output
    # the GET warning only where types allow the password grant (NO_CODE lists no types)
    assert ("password grant over GET" in output) is (params is NO_CODE), output
    # the contrast: a client with its redirects and the grant listed draws no warning
    (tmp_path / "params.json").write_text(
        json.dumps(code_params(redirect_uris=["https://a.example/cb"]))
    )
    calm = check(config, real=False)
    assert "authorization_code" not in calm.stdout + calm.stderr
    assert "password grant over GET" not in calm.stdout + calm.stderr  # no password grant


def test_check_warns_about_a_code_grant_whose_route_is_disabled(
    ca: trustme.CA, tmp_path: Path
) -> None:
    params = code_params(redirect_uris=["https://a.example/cb"])
    config = _config(tmp_path, ca, params, native={"disable": ["oauth2/authorize"]})
    result = check(config, real=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "NativeRoutes disables oauth2/authorize" in output
    assert "the grant type authorization_code" in output


def test_a_login_page_template_is_read_at_start(ca: trustme.CA, tmp_path: Path) -> None:
    (tmp_path / "login.html").write_text("<p>{{client}}</p>{{form}}")
    params = code_params(redirect_uris=["https://a.example/cb"])
    config = _config(tmp_path, ca, params, loginPage="file:login.html")
    result = check(config, real=False)
    assert result.returncode == 0, result.stdout + result.stderr
    (tmp_path / "login.html").write_text("<p>{{client}}</p>")
    result = check(config, real=False)
    assert result.returncode == 2
    assert "lacks the form placeholder" in result.stderr
