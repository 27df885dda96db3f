"""``FwData`` typed at load: Authorization and NativeRoutes without the application; function and
route names left to the start."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from fwrest.config import load_config
from fwrest.config.fwdata import AuthorizationData, FwData, NativeRoutesData, RouteList
from fwrest.errors import ConfigError
from tests.conftest import ROOT, Sections, base_sections, free_port, ini_text, run_cli


def write(folder: Path, sections: Sections) -> Path:
    path = folder / "service.json"
    path.write_text(json.dumps(sections))
    return path


def tls(certs: dict[str, Path]) -> dict[str, str]:
    return {"SslCertificate": str(certs["cert"]), "SslCertificateKey": str(certs["key"])}


def test_basic_authorization_is_a_typed_record_with_names_unresolved(tmp_path: Path) -> None:
    sections = base_sections(8080)
    # OnAuth is resolved at start, not at load
    authorization = {"SCHEME": "basic", "onauth": "no_such_module.check", "onAdmin": ""}
    sections["HTTP_REST"]["FwData"] = {"authorization": {**authorization, "MaxFailures": 3}}
    (server,) = load_config(write(tmp_path, sections)).servers
    assert server.fw_data == FwData(
        AuthorizationData("basic", on_auth="no_such_module.check", max_failures=3)
    )


def test_oauth_alias_file_params_and_defaults(tmp_path: Path, certs: dict[str, Path]) -> None:
    (tmp_path / "params.json").write_text("{}")
    sections = base_sections(8443)
    authorization = {"scheme": "oAuth", "onAuthparams": " file: params.json"}
    authorization["onAuthNoCheckUri"] = "app.public"
    sections["HTTP_REST"].update(tls(certs), FwData={"Authorization": authorization})
    (server,) = load_config(write(tmp_path, sections)).servers
    auth = server.fw_data.authorization
    params_file = tmp_path / "params.json"
    assert auth == AuthorizationData(
        "oAuth2", on_auth_params_file=params_file, on_auth_no_check_uri="app.public"
    )
    assert (auth.max_failures, auth.allow_get_token, auth.on_auth) == (10, True, "")


def test_bound_tokens_takes_dpop_and_mtls(tmp_path: Path, certs: dict[str, Path]) -> None:
    """SPEC 16.2: "dpop" or "mtls" (their behaviour is the token service's); absent, none."""
    for value in ("dpop", "mtls", None):
        authorization = {"scheme": "oAuth2", "onAuthparams": "app.params"}
        if value is not None:
            authorization["BoundTokens"] = value  # the key's case is free (SPEC 9)
        sections = base_sections(8443)
        sections["HTTP_REST"].update(tls(certs), FwData={"Authorization": authorization})
        if value == "mtls":  # a certificate binding needs client certificates
            sections["HTTP_REST"].update(SslClientCert=2, SslClientCA=str(certs["ca"]))
        (server,) = load_config(write(tmp_path, sections)).servers
        assert server.fw_data.authorization is not None
        assert server.fw_data.authorization.bound_tokens == (value or "")


def test_native_routes_keep_their_lists_as_written(tmp_path: Path) -> None:
    sections = base_sections(8080)
    sections["HTTP_REST"]["FwData"] = {
        "NativeRoutes": {"Public": "healthcheck", "hide": ["*", "no/such/route"]}
    }
    (server,) = load_config(write(tmp_path, sections)).servers
    public = RouteList("public", "Public", ("healthcheck",))
    hide = RouteList("hide", "hide", ("*", "no/such/route"))  # checked at start
    assert server.fw_data == FwData(native_routes=NativeRoutesData((public, hide)))


def test_the_monitor_takes_the_authorization_it_uses_only(tmp_path: Path) -> None:
    """SPEC 2: a key with no effect stops the start. The monitor serves no native route: its
    FwData refuses NativeRoutes and Authorization's onAdmin, naming the section and the key."""
    basic = {"scheme": "basic", "OnAuth": "app.check", "OnAuthCache": 60, "maxFailures": 3}
    sections = base_sections(8080)
    sections["APP_MONITOR"] = {"Enable": 1, "Port": 9099, "FwData": {"Authorization": basic}}
    monitor = load_config(write(tmp_path, sections)).monitor
    assert monitor is not None
    expected = AuthorizationData("basic", on_auth="app.check", on_auth_cache_s=60, max_failures=3)
    assert monitor.fw_data == FwData(expected)
    unused = {
        "NativeRoutes": {"NativeRoutes": {"public": ["*"]}, "Authorization": basic},
        "nativeroutes": {"nativeroutes": {"hide": ["healthcheck"]}},
        "onAdmin": {"Authorization": {**basic, "onAdmin": "app.admin"}},
    }
    for key, fw_data in unused.items():
        sections["APP_MONITOR"]["FwData"] = fw_data
        with pytest.raises(ConfigError) as caught:
            load_config(write(tmp_path, sections))
        message = str(caught.value)
        assert "[APP_MONITOR] FwData: " in message, message
        assert f"key {key!r} has no effect on the monitor" in message, message
        print(message)


def test_the_monitor_refuses_oauth2_first_with_or_without_tls(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    """The monitor takes Basic only: an oAuth2 monitor is told so first, not sent to add TLS (a
    fix that only leads to this error). ``fwrest check`` on an INI file, as a user meets it."""
    (tmp_path / "app.py").write_text("from fwrest import get\n")
    oauth2 = {"Authorization": {"scheme": "oAuth2", "onAuthparams": "app.params"}}
    for keys in ({}, tls(certs)):
        sections = base_sections(free_port())
        sections["APP_MONITOR"] = {"Enable": 1, "Port": free_port(), **keys, "FwData": oauth2}
        path = tmp_path / "service.ini"
        path.write_text(ini_text(sections))
        result = run_cli("check", str(path), cwd=tmp_path)
        assert result.returncode == 2, result
        assert "needs TLS" not in result.stderr, result.stderr
        assert (
            f"{path.resolve()}: [APP_MONITOR] FwData: the monitor supports Basic authorization "
            'only. Fix: use "scheme": "basic" with an OnAuth function.'
        ) in result.stderr, result.stderr


def test_config_imports_nothing_above_it() -> None:
    """docs/architecture.md: config/ sits below auth/, native/ and the rest; of store/ it reads only
    ``redis_target.py``, a leaf importing no fwrest module."""
    allowed = ("fwrest.config", "fwrest.errors", "fwrest.log", "fwrest.store.redis_target")
    leaf = (ROOT / "src" / "fwrest" / "store" / "redis_target.py").read_text(encoding="utf-8")
    assert "from fwrest" not in leaf and "import fwrest" not in leaf
    for path in sorted((ROOT / "src" / "fwrest" / "config").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name == "fwrest" or name.startswith("fwrest."):
                    assert name.startswith(allowed), f"{path.name} imports {name}"
