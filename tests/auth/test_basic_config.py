"""``FwData.Authorization`` is validated at start, never at request time (SPEC 2, 4, 4.1).

Every mistake makes ``fwrest check`` (and ``fwrest serve``, before binding) exit 2 with one
message naming the section, the key and what to do; ``fwrest.server.prepare`` raises
``ConfigError`` with the same fields.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fwrest.errors import ConfigError
from fwrest.server import prepare
from tests.conftest import free_config, run_cli

AUTH_SOURCE = """
def check(user, password):
    return password == "right-" + user


async def acheck(user, password):
    return True


def params():
    return {"username": "u", "password": "p"}


NOT_A_FUNCTION = 42
"""

VALID_SCHEMES_MSG = "basic or oAuth2"


def basic(on_auth: Any = "auth.check", **more: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"scheme": "basic", "OnAuth": on_auth, **more}
    return {"Authorization": body}


def write(
    tmp: Path,
    fw_data: Any = None,
    *,
    server: dict[str, Any] | None = None,
    extra: dict[str, dict[str, Any]] | None = None,
    fmt: str = "json",
) -> Path:
    """A service with one server ``HTTP_REST`` whose FwData is ``fw_data``."""
    (tmp / "auth.py").write_text(AUTH_SOURCE)
    section: dict[str, Any] = {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT"}
    if fw_data is not None:
        section["FwData"] = fw_data
    section.update(server or {})
    return free_config(
        tmp,
        servers={"HTTP_REST": section},
        extra={"ENV": {"Repository": "app,auth"}, **(extra or {})},
        fmt=fmt,
    )


def check_fails(config: Path) -> str:
    """``fwrest check CONFIG``: exit 2, one error on stderr; returns it."""
    done = run_cli("check", str(config))
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith("fwrest: configuration error: "), done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    return done.stderr


def check_passes(config: Path) -> str:
    done = run_cli("check", str(config))
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def isolated_imports() -> Iterator[None]:
    """``prepare`` imports the repository in this process: undo it after the test."""
    modules, path = set(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


# -- valid configurations ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_valid_basic_authorization_passes_check(tmp_path: Path, fmt: str) -> None:
    out = check_passes(write(tmp_path, basic(), fmt=fmt))
    assert "[HTTP_REST] 127.0.0.1:0 (plain HTTP, authorization: basic)" in out


def test_fw_data_keys_are_case_insensitive(tmp_path: Path) -> None:
    fw_data = {"AUTHORIZATION": {"SCHEME": "basic", "onauth": "auth.check", "MAXFAILURES": 5}}
    assert "authorization: basic" in check_passes(write(tmp_path, fw_data))


def test_fw_data_may_be_a_file(tmp_path: Path) -> None:
    (tmp_path / "fw.json").write_text(json.dumps(basic()))
    assert "authorization: basic" in check_passes(write(tmp_path, "fw.json"))


def test_prepare_compiles_the_port_authorization(tmp_path: Path, isolated_imports: None) -> None:
    plan = prepare(write(tmp_path, basic("Check")))  # a bare name, another capitalisation
    (port,) = plan.ports
    assert (port.auth.scheme, port.auth.on_auth, port.auth.has_callback) == ("basic", "Check", True)
    settings = port.auth_settings
    assert settings is not None
    assert settings.on_auth is not None
    assert settings.on_auth("ann", "right-ann") is True  # the repository's function itself
    assert settings.on_auth_is_async is False


def test_prepare_knows_an_async_on_auth(tmp_path: Path, isolated_imports: None) -> None:
    plan = prepare(write(tmp_path, basic("auth.acheck")))
    settings = plan.ports[0].auth_settings
    assert settings is not None
    assert settings.on_auth_is_async is True


def test_open_port_has_no_authorization(tmp_path: Path, isolated_imports: None) -> None:
    (port,) = prepare(write(tmp_path)).ports
    assert (port.auth.scheme, port.auth.on_auth, port.auth.has_callback) == ("", "", False)
    assert port.auth_settings is None


# -- OnAuth --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["auth.nothere", "nothere", "nomodule.check", "NOT_A_FUNCTION"])
def test_on_auth_naming_a_missing_function(tmp_path: Path, name: str) -> None:
    message = check_fails(write(tmp_path, basic(name)))
    assert "[HTTP_REST]" in message
    assert "OnAuth" in message
    assert repr(name) in message


def test_on_auth_missing_function_via_prepare(tmp_path: Path, isolated_imports: None) -> None:
    with pytest.raises(ConfigError) as info:
        prepare(write(tmp_path, basic("auth.nothere")))
    assert info.value.section == "HTTP_REST"
    assert "OnAuth" in (info.value.key or "")
    assert "'auth.nothere'" in info.value.problem


def test_on_auth_ambiguous_bare_name(tmp_path: Path) -> None:
    (tmp_path / "auth2.py").write_text("def check(user, password):\n    return True\n")
    config = write(tmp_path, basic("check"), extra={"ENV": {"Repository": "app,auth,auth2"}})
    message = check_fails(config)
    assert "[HTTP_REST]" in message
    assert "ambiguous" in message
    assert "auth.check" in message
    assert "auth2.check" in message


@pytest.mark.parametrize(
    "auth",
    [{"scheme": "basic"}, {"scheme": "basic", "OnAuth": ""}, {"scheme": "basic", "OnAuth": None}],
    ids=["absent", "empty", "null"],
)
def test_missing_on_auth(tmp_path: Path, auth: dict[str, Any]) -> None:
    message = check_fails(write(tmp_path, {"Authorization": auth}))
    assert "[HTTP_REST]" in message
    assert "needs OnAuth" in message


@pytest.mark.parametrize("value", [5, ["auth.check"], {"name": "auth.check"}, True])
def test_on_auth_that_is_not_a_name(tmp_path: Path, value: Any) -> None:
    message = check_fails(write(tmp_path, basic(value)))
    assert "[HTTP_REST]" in message
    assert "OnAuth must name a function" in message


# -- scheme --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["Basic", "BASIC", "digest", "oauth2", "OAUTH2", "", 1])
def test_unknown_scheme_names_the_valid_ones(tmp_path: Path, scheme: Any) -> None:
    message = check_fails(write(tmp_path, {"Authorization": {"scheme": scheme, "OnAuth": "check"}}))
    assert "[HTTP_REST]" in message
    assert repr(scheme) in message
    assert VALID_SCHEMES_MSG in message


def test_unknown_scheme_via_prepare(tmp_path: Path, isolated_imports: None) -> None:
    with pytest.raises(ConfigError) as info:
        prepare(write(tmp_path, {"Authorization": {"scheme": "Basic", "OnAuth": "auth.check"}}))
    assert (info.value.section, info.value.key) == ("HTTP_REST", "FwData")
    assert "'Basic'" in info.value.problem
    assert VALID_SCHEMES_MSG in (info.value.fix or "")


def test_missing_scheme_names_the_valid_ones(tmp_path: Path) -> None:
    message = check_fails(write(tmp_path, {"Authorization": {"OnAuth": "auth.check"}}))
    assert "[HTTP_REST]" in message
    assert "no scheme" in message
    assert VALID_SCHEMES_MSG in message


# -- the Authorization object ---------------------------------------------------------------------


@pytest.mark.parametrize("key", ["realm", "onAuthparams", "onAuthNoCheckUri", "OnAuthh"])
def test_unknown_key_inside_authorization(tmp_path: Path, key: str) -> None:
    message = check_fails(write(tmp_path, basic(**{key: "x"})))
    assert "[HTTP_REST]" in message
    assert f"unknown key {key!r}" in message
    assert "OnAuth" in message  # the fix lists the keys a basic port takes


def test_unknown_key_in_fw_data(tmp_path: Path) -> None:
    message = check_fails(write(tmp_path, {"Authorisation": basic()["Authorization"]}))
    assert "[HTTP_REST] FwData" in message
    assert "'Authorisation'" in message
    assert "Authorization" in message.split("Fix:", 1)[1]


@pytest.mark.parametrize("value", ["basic", ["basic", "auth.check"], 1])
def test_authorization_that_is_not_an_object(tmp_path: Path, value: Any) -> None:
    message = check_fails(write(tmp_path, {"Authorization": value}))
    assert "[HTTP_REST] FwData" in message
    assert "Authorization must be a JSON object" in message


@pytest.mark.parametrize("value", [0, -1, "10", True, 2.5])
def test_bad_max_failures(tmp_path: Path, value: Any) -> None:
    message = check_fails(write(tmp_path, basic(maxFailures=value)))
    assert "[HTTP_REST]" in message
    assert "maxFailures" in message


@pytest.mark.parametrize(
    "text",
    [
        '{"Authorization": {"scheme": "basic",, "OnAuth": "auth.check"}}',
        '{"Authorization": {"scheme": "basic" "OnAuth": "auth.check"}}',
        '{"Authorization": {"scheme": "basic", "OnAuth": "auth.check",}}',
        '{"Authorization": {"scheme": \'basic\', "OnAuth": "auth.check"}}',
    ],
)
@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_invalid_json_in_fw_data_gives_line_and_column(tmp_path: Path, fmt: str, text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    message = check_fails(write(tmp_path, text, fmt=fmt))
    assert "[HTTP_REST] FwData" in message
    assert "not valid JSON" in message
    assert f"line {expected.value.lineno}, column {expected.value.colno}" in message


def test_invalid_json_in_an_fw_data_file_gives_line_and_column(tmp_path: Path) -> None:
    text = '{\n  "Authorization": {\n    "scheme": "basic"\n    "OnAuth": "auth.check"\n  }\n}\n'
    (tmp_path / "fw.json").write_text(text)
    message = check_fails(write(tmp_path, "fw.json"))
    assert "[HTTP_REST] FwData" in message
    assert "line 4, column 5" in message


# -- where Authorization may be written ----------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "kind"),
    [
        ("ROOT", "location"),
        ("POOL", "thread pool"),
        ("ENV", "environment"),
        ("HTTPSERVER", "HTTPSERVER section"),
    ],
)
@pytest.mark.parametrize("key", ["Authorization", "FwData"])
def test_authorization_outside_a_server_section_is_refused(
    tmp_path: Path, section: str, kind: str, key: str
) -> None:
    value = basic() if key == "FwData" else basic()["Authorization"]
    message = check_fails(write(tmp_path, basic(), extra={section: {key: value}}))
    assert f"[{section}] {key}:" in message
    assert f"not per {kind}" in message
    assert "move it to FwData of the server section" in message


def test_authorization_refused_on_a_location_via_prepare(
    tmp_path: Path, isolated_imports: None
) -> None:
    with pytest.raises(ConfigError) as info:
        prepare(write(tmp_path, extra={"ROOT": {"Authorization": basic()["Authorization"]}}))
    assert (info.value.section, info.value.key) == ("ROOT", "Authorization")
    assert "server section" in (info.value.fix or "")


def test_authorization_directly_on_a_server_section_is_refused(tmp_path: Path) -> None:
    message = check_fails(write(tmp_path, server={"Authorization": basic()["Authorization"]}))
    assert "[HTTP_REST] Authorization" in message
    assert "FwData" in message  # the keys a server section takes include FwData


# -- oAuth2 and its alias ------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["oAuth2", "oAuth"])
def test_oauth2_without_tls_is_refused(tmp_path: Path, scheme: str) -> None:
    fw_data = {"Authorization": {"scheme": scheme, "onAuthparams": "auth.params"}}
    message = check_fails(write(tmp_path, fw_data))
    assert "[HTTP_REST]" in message
    assert "oAuth2 scheme needs TLS" in message
    assert "SslCertificate" in message


def test_oauth_alias_is_not_an_unknown_scheme(tmp_path: Path, certs: dict[str, Path]) -> None:
    fw_data = {"Authorization": {"scheme": "oAuth", "onAuthparams": "auth.params"}}
    tls = {"SslCertificate": str(certs["cert"]), "SslCertificateKey": str(certs["key"])}
    done = run_cli("check", str(write(tmp_path, fw_data, server=tls)))
    if done.returncode == 0:  # once oAuth2 is available: the alias shows as oAuth2
        assert "authorization: oAuth2" in done.stdout
    else:  # for now the start stops because oAuth2 is not there yet, not over the name
        assert done.returncode == 2, done.stderr
        assert "[HTTP_REST]" in done.stderr
        assert "'oAuth'" not in done.stderr
        assert "not a scheme" not in done.stderr
        assert "case-sensitive" not in done.stderr


def test_oauth2_keys_are_not_basic_keys(tmp_path: Path) -> None:
    message = check_fails(write(tmp_path, basic(onAuthNoCheckUri="auth.params")))
    assert "unknown key 'onAuthNoCheckUri' for the basic scheme" in message


# -- warnings ------------------------------------------------------------------------------------


def test_basic_without_tls_on_a_public_address_is_warned(tmp_path: Path) -> None:
    out = check_passes(write(tmp_path, basic(), server={"HostName": "0.0.0.0"}))
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert any("[HTTP_REST]" in w and "Basic" in w and "TLS" in w for w in warnings), out


def test_basic_on_loopback_is_not_warned(tmp_path: Path) -> None:
    out = check_passes(write(tmp_path, basic()))
    assert "warning:" not in out


# -- serve refuses before binding ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "fw_data",
    [
        basic("auth.nothere"),
        {"Authorization": {"scheme": "Basic", "OnAuth": "auth.check"}},
        {"Authorization": {"scheme": "oAuth2", "onAuthparams": "auth.params"}},
    ],
    ids=["missing-function", "bad-scheme", "oauth2-without-tls"],
)
def test_serve_with_bad_authorization_exits_2_and_binds_nothing(
    tmp_path: Path, fw_data: dict[str, Any]
) -> None:
    good_port, bad_port = _free_port(), _free_port()
    config = write(tmp_path)
    data = json.loads(config.read_text())
    data["HTTPSERVER"]["Servers"] = "HTTP_OPEN,HTTP_REST"
    data["HTTP_OPEN"] = {"HostName": "127.0.0.1", "Port": good_port, "Locations": "ROOT"}
    data["HTTP_REST"].update(Port=bad_port, FwData=fw_data)
    config.write_text(json.dumps(data))

    done = run_cli("serve", str(config), timeout=30)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "fwrest: configuration error:" in done.stderr
    assert "[HTTP_REST]" in done.stderr
    assert "serving" not in done.stdout
    assert "ready" not in done.stdout
    assert "starting" not in done.stderr  # no worker was started
    assert (
        not (tmp_path / "server.log").exists()
        or "worker" not in (tmp_path / "server.log").read_text()
    )
    for port in (good_port, bad_port):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: nothing holds or lingers on it
