"""``FwData.Authorization`` is validated at start, never per request (SPEC 2, 4, 4.1): ``fwrest
check`` (and ``serve``, before binding: tests/faults/test_broken_configs.py) exits 2 with one
message naming section, key and fix; ``prepare`` raises ``ConfigError`` alike. Variants through
``prepare``; most points once through ``fwrest check`` in process, the real command for one
refusal, pass and warning. Each test's module name is unique (``sys.modules`` keeps imports)."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fwrest.errors import ConfigError
from fwrest.server import prepare
from fwrest.server.build import ServicePlan
from tests.auth.conftest import check
from tests.conftest import free_config, local_port

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
CLI_PREFIX = "fwrest: configuration error: "


class Case:
    """One test's folder and its validator module ``self.mod`` (a unique name)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.mod = f"fwauth_{uuid.uuid4().hex[:12]}"
        (tmp / f"{self.mod}.py").write_text(AUTH_SOURCE)

    def basic(self, on_auth: Any = None, **more: Any) -> dict[str, Any]:
        on_auth = f"{self.mod}.check" if on_auth is None else on_auth
        return {"Authorization": {"scheme": "basic", "OnAuth": on_auth, **more}}

    def write(
        self,
        fw_data: Any = None,
        *,
        server: dict[str, Any] | None = None,
        extra: dict[str, dict[str, Any]] | None = None,
        fmt: str = "json",
    ) -> Path:
        """A service with one server ``HTTP_REST`` whose FwData is ``fw_data``."""
        section: dict[str, Any] = local_port()
        if fw_data is not None:
            section["FwData"] = fw_data
        section.update(server or {})
        return free_config(
            self.tmp,
            servers={"HTTP_REST": section},
            extra={"ENV": {"Repository": self.mod}, **(extra or {})},
            fmt=fmt,
        )

    def plan(self, fw_data: Any = None, **kw: Any) -> ServicePlan:
        return prepare(self.write(fw_data, **kw))

    def error(self, fw_data: Any = None, **kw: Any) -> ConfigError:
        """The ConfigError ``prepare`` raises for this service."""
        with pytest.raises(ConfigError) as info:
            prepare(self.write(fw_data, **kw))
        return info.value

    def check_fails(self, fw_data: Any = None, *, real: bool = False, **kw: Any) -> str:
        """``fwrest check`` (real or in process): exit 2, one error alone on stderr; returns it."""
        done = check(self.write(fw_data, **kw), real=real)
        assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
        assert done.stderr.startswith(CLI_PREFIX), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
        assert done.stdout == ""
        return done.stderr[len(CLI_PREFIX) :].strip()

    def check_passes(self, fw_data: Any = None, *, real: bool = False, **kw: Any) -> str:
        done = check(self.write(fw_data, **kw), real=real)
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Case]:
    path = list(sys.path)
    yield Case(tmp_path)
    sys.path[:] = path  # prepare puts the config's folder on the path


@pytest.fixture
def tls(certs: dict[str, Path]) -> dict[str, str]:
    """A server section's TLS keys, for an oAuth2 port."""
    return {"SslCertificate": str(certs["cert"]), "SslCertificateKey": str(certs["key"])}


def _auth(**more: Any) -> dict[str, Any]:
    return {"scheme": "basic", "OnAuth": "{mod}.check", **more}


def _rows(key: str, needles: tuple[str, ...], make: Any, *values: Any) -> list[Any]:
    """A row per value: ``make(value)``, key, text (``{v}``: the value as the file spells it,
    text quoted, anything else as JSON; ``^``: starts so; ``fix:``)."""

    def spelled(v: Any) -> str:
        return repr(v) if isinstance(v, str) else json.dumps(v)

    return [(make(v), key, tuple(n.replace("{v}", spelled(v)) for n in needles)) for v in values]


# the Authorization objects prepare refuses ("{mod}": the test's module), by what is wrong
REFUSED = [
    *_rows("FwData OnAuth", ("{v}",), lambda v: _auth(OnAuth=v), "nothere", "nomodule.check",
           "NOT_A_FUNCTION", "{mod}.params2"),
    *_rows("FwData", ("needs OnAuth",), lambda v: {"scheme": "basic", "OnAuth": v}, "", None),
    *_rows("FwData", ("OnAuth must name a function",), lambda v: _auth(OnAuth=v), 5, ["check"],
           {"name": "check"}, True),
    *_rows("FwData", ("{v}", f"fix:{VALID_SCHEMES_MSG}"), lambda v: {"scheme": v, "OnAuth": "check"},
           "BASIC", "digest", "oauth2", "OAUTH2", "bearer", "", 1),
    *_rows("FwData", ("no scheme", f"fix:{VALID_SCHEMES_MSG}"), lambda v: {"OnAuth": "check"}, None),
    *_rows("FwData", ("unknown key {v}",), lambda v: _auth(**{v: "x"}), "onAuthparams",
           "onAuthNoCheckUri", "allowGetToken", "OnAuthh"),
    # an oAuth2 key is not a basic key
    *_rows("FwData", ("unknown key {v} for the basic scheme",),
           lambda v: _auth(**{v: "params"}), "onAuthNoCheckUri"),
    *_rows("FwData", ("Authorization must be a JSON object",), lambda v: v, "basic",
           ["basic", "check"], 1),
    *_rows("FwData", ("maxFailures",), lambda v: _auth(maxFailures=v), 0, -1, "10", True, 2.5),
    # the alias without TLS is refused as oAuth2
    *_rows("FwData", ("oAuth2 scheme needs TLS",), lambda v: {"scheme": v, "onAuthparams": "params"},
           "oAuth"),
    *_rows("FwData", ("^FwData Authorization OnAuthCache must be a duration", "{v}"),
           lambda v: _auth(OnAuthCache=v), "5 minutes", "1.5s", -1, True, [300], "²s", "9" * 40),
]  # fmt: skip


def _fill(value: Any, mod: str) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, mod) for k, v in value.items()}
    return value.replace("{mod}", mod) if isinstance(value, str) else value


@pytest.mark.parametrize(("authorization", "key", "needles"), REFUSED)
def test_a_wrong_authorization_is_refused(
    case: Case, authorization: Any, key: str, needles: tuple[str, ...]
) -> None:
    exc = case.error({"Authorization": _fill(authorization, case.mod)})
    assert (exc.section, exc.key) == ("HTTP_REST", key), exc
    for needle in (n.replace("{mod}", case.mod) for n in needles):
        if needle.startswith("^"):
            assert exc.problem.startswith(needle[1:]), (needle, exc.problem)
        elif needle.startswith("fix:"):
            assert needle[4:] in (exc.fix or ""), (needle, exc.fix)
        else:
            assert needle in exc.problem, (needle, exc.problem)


# what ``fwrest check`` prints for a refused Authorization ("{mod}": the test's module; "fix:": in
# the text after "Fix:")
CHECK_REFUSED = {
    "on-auth-naming-a-missing-function": ({"Authorization": _auth(OnAuth="{mod}.nothere")},
        ("[HTTP_REST] FwData OnAuth:", "the function '{mod}.nothere' is not in the repository")),
    "capitalised-scheme-naming-the-valid-ones": (
        {"Authorization": {"scheme": "Basic", "OnAuth": "check"}}, ("[HTTP_REST] FwData:", "'Basic'", "case-sensitive", f"write exactly {VALID_SCHEMES_MSG}")),
    # the keys a basic port takes in the fix
    "unknown-key-inside-authorization": ({"Authorization": _auth(realm="x")},
        ("[HTTP_REST] FwData:", "unknown key 'realm' for the basic scheme", "fix:OnAuth")),
    "unknown-key-in-fw-data": ({"Authorisation": _auth()},
        ("[HTTP_REST] FwData:", "'Authorisation'", "fix:Authorization")),
    "oauth2-without-tls": ({"Authorization": {"scheme": "oAuth2", "onAuthparams": "params"}},
        ("[HTTP_REST] FwData: the oAuth2 scheme needs TLS on the port",
         "SslCertificate and SslCertificateKey")),
    "bad-on-auth-cache": ({"Authorization": _auth(onauthcache="soon")},
        ("FwData Authorization onauthcache must be a duration in whole seconds",
         'Fix: write for example "OnAuthCache": "300s"')),
}  # fmt: skip


@pytest.mark.parametrize(("fw_data", "needles"), CHECK_REFUSED.values(), ids=list(CHECK_REFUSED))
def test_a_wrong_authorization_fails_check(
    case: Case, fw_data: dict[str, Any], needles: tuple[str, ...]
) -> None:
    message = case.check_fails(_fill(fw_data, case.mod))
    for needle in (n.replace("{mod}", case.mod) for n in needles):
        if needle.startswith("fix:"):
            assert needle[4:] in message.split("Fix:", 1)[1], (needle, message)
        else:
            assert needle in message, (needle, message)


# -- valid configurations ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_valid_basic_authorization_passes_check(case: Case, fmt: str) -> None:
    out = case.check_passes(case.basic(), fmt=fmt, real=fmt == "ini")
    assert "[HTTP_REST] 127.0.0.1:0 (plain HTTP, authorization: basic)" in out


def test_prepare_compiles_the_port_authorization(case: Case) -> None:
    (port,) = case.plan(case.basic("Check")).ports  # a bare name, another capitalisation
    assert (port.auth.scheme, port.auth.on_auth, port.auth.has_callback) == ("basic", "Check", True)
    settings = port.auth_settings
    assert settings is not None
    assert settings.on_auth is not None
    assert settings.on_auth("ann", "right-ann") is True  # the repository's function itself
    assert settings.on_auth("ann", "wrong") is False
    assert settings.on_auth_is_async is False


def test_prepare_knows_an_async_on_auth(case: Case) -> None:
    settings = case.plan(case.basic(f"{case.mod}.acheck")).ports[0].auth_settings
    assert settings is not None
    assert settings.on_auth_name == f"{case.mod}.acheck"
    assert settings.on_auth_is_async is True


def test_open_port_has_no_authorization(case: Case) -> None:
    (port,) = case.plan().ports
    assert (port.auth.scheme, port.auth.on_auth, port.auth.has_callback) == ("", "", False)
    assert port.auth_settings is None


def test_fw_data_keys_are_case_insensitive(case: Case) -> None:
    fw_data = {"AUTHORIZATION": {"SCHEME": "basic", "onauth": f"{case.mod}.check"}}
    (port,) = case.plan(fw_data).ports
    assert (port.auth.scheme, port.auth.on_auth) == ("basic", f"{case.mod}.check")


def test_fw_data_may_be_a_file(case: Case) -> None:
    (case.tmp / "fw.json").write_text(json.dumps(case.basic()))
    assert case.plan("fw.json").ports[0].auth.scheme == "basic"


# -- OnAuth --------------------------------------------------------------------------------------


def test_on_auth_ambiguous_bare_name(case: Case) -> None:
    other = f"{case.mod}_b"
    (case.tmp / f"{other}.py").write_text("def check(user, password):\n    return True\n")
    exc = case.error(case.basic("check"), extra={"ENV": {"Repository": f"{case.mod},{other}"}})
    assert exc.section == "HTTP_REST"
    assert "ambiguous" in exc.problem
    assert f"{case.mod}.check" in exc.problem
    assert f"{other}.check" in exc.problem


def test_missing_on_auth_fails_check(case: Case) -> None:
    message = case.check_fails({"Authorization": {"scheme": "basic"}}, real=True)
    assert message.endswith(
        "[HTTP_REST] FwData: FwData Authorization needs OnAuth for the basic scheme. "
        'Fix: add "OnAuth": "module.function".'
    )


# -- the Authorization object ---------------------------------------------------------------------


BAD_JSON = [
    '{"Authorization": {"scheme": "basic",, "OnAuth": "check"}}',
    '{"Authorization": {"scheme": "basic" "OnAuth": "check"}}',
    '{"Authorization": {"scheme": "basic", "OnAuth": "check",}}',
    '{"Authorization": {"scheme": \'basic\', "OnAuth": "check"}}',
]


def _where(text: str) -> str:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    return f"line {expected.value.lineno}, column {expected.value.colno}"


def test_invalid_json_in_fw_data_fails_check_with_line_and_column(case: Case) -> None:
    message = case.check_fails(BAD_JSON[0], fmt="ini")
    assert "[HTTP_REST] FwData:" in message
    assert (
        f"not valid JSON: Expecting property name enclosed in double quotes at {_where(BAD_JSON[0])}."
        in message
    )


@pytest.mark.parametrize("text", BAD_JSON)
@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_invalid_json_in_fw_data_gives_line_and_column(case: Case, fmt: str, text: str) -> None:
    exc = case.error(text, fmt=fmt)
    assert (exc.section, exc.key) == ("HTTP_REST", "FwData")
    assert "not valid JSON" in exc.problem
    assert _where(text) in exc.problem


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
@pytest.mark.parametrize("key", ["Authorization", "FwData", "authorization"])
def test_authorization_outside_a_server_section_is_refused(
    case: Case, section: str, kind: str, key: str
) -> None:
    value = case.basic() if key == "FwData" else case.basic()["Authorization"]
    exc = case.error(case.basic(), extra={section: {key: value}})
    assert (exc.section, exc.key) == (section, key)
    assert f"authorization is configured per port, not per {kind}" in exc.problem
    assert "move it to FwData of the server section" in (exc.fix or "")


def test_authorization_directly_on_a_server_section_is_refused(case: Case) -> None:
    exc = case.error(server={"Authorization": case.basic()["Authorization"]})
    assert (exc.section, exc.key) == ("HTTP_REST", "Authorization")
    assert "FwData" in (exc.fix or "")  # the keys a server section takes include FwData


# -- oAuth2 and its alias ------------------------------------------------------------------------


def test_oauth_alias_is_accepted_as_oauth2(case: Case, tls: dict[str, str]) -> None:
    fw_data = {"Authorization": {"scheme": "oAuth", "onAuthparams": f"{case.mod}.params"}}
    done = check(case.write(fw_data, server=tls), real=False)
    assert done.returncode == 0, done.stderr
    assert "[HTTP_REST] 127.0.0.1:0 (TLS, authorization: oAuth2)" in done.stdout
    assert "not a scheme" not in done.stdout + done.stderr


# -- OnAuthCache (SPEC 4.1) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("300s", 300), ("5m", 300), (300, 300), ("1h", 3600), ("0", 0), (None, 0)],
    ids=["300s", "5m", "300", "1h", "0", "none-by-default"],
)
def test_on_auth_cache_is_a_duration(case: Case, value: Any, seconds: int) -> None:
    cache = {} if value is None else {"OnAuthCache": value}
    settings = case.plan(case.basic(**cache)).ports[0].auth_settings
    assert settings is not None
    assert settings.cache_s == seconds


def test_on_auth_cache_is_a_basic_key(case: Case, tls: dict[str, str]) -> None:
    authorization = {"scheme": "oAuth2", "onAuthparams": f"{case.mod}.params", "OnAuthCache": 60}
    exc = case.error({"Authorization": authorization}, server=tls)
    assert "unknown key 'OnAuthCache' for the oAuth2 scheme" in exc.problem


def test_an_on_auth_cache_over_an_hour_is_warned(case: Case) -> None:
    assert case.plan(case.basic(OnAuthCache="1h")).config.warnings == ()
    out = case.check_passes(case.basic(OnAuthCache="2h"))
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert any("[HTTP_REST] OnAuthCache=7200s" in w for w in warnings), out


# -- warnings ------------------------------------------------------------------------------------


def test_basic_without_tls_on_a_public_address_is_warned(case: Case) -> None:
    out = case.check_passes(case.basic(), server={"HostName": "0.0.0.0"}, real=True)
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert any("[HTTP_REST]" in w and "Basic" in w and "TLS" in w for w in warnings), out


def test_basic_on_loopback_is_not_warned(case: Case) -> None:
    assert case.plan(case.basic()).config.warnings == ()
