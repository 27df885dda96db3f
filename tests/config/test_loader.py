"""The loader: INI and JSON, case folding, JSON values, one clear error per bad configuration
(section, key, problem, fix); no application code imported."""

from __future__ import annotations

import copy
import dataclasses
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trustme

from fwrest import ConfigError
from fwrest.config import ServiceConfig, load_config
from fwrest.config.fwdata import AuthorizationData, FwData, NativeRoutesData, RouteList
from tests.conftest import Sections, base_sections, ini_text, run_cli
from tests.conftest import drop_key as _drop
from tests.conftest import set_values as _set


def base() -> Sections:
    """A small valid service; the bad cases below each break one thing of it."""
    return base_sections(8080)


def write(folder: Path, sections: Sections, fmt: str = "json") -> Path:
    """``sections`` written to ``service.json`` or ``service.ini`` in ``folder``."""
    path = folder / f"service.{fmt}"
    path.write_text(json.dumps(sections, indent=2) if fmt == "json" else ini_text(sections))
    return path


def load_error(source: Path | dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(source)
    return info.value


def assert_one_clear_error(err: ConfigError, *fragments: str) -> None:
    text = str(err)
    assert "\n" not in text, f"one error, one line: {text!r}"
    assert err.fix, f"no fix in {text!r}"
    assert " Fix: " in text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"


# -- formats and case folding ----------------------------------------------------------------------


def rich() -> Sections:
    sections = base()
    sections["HTTPSERVER"]["Servers"] = "HTTP_REST, HTTP_ADMIN"
    sections["HTTPSERVER"]["GracefulTimeout"] = 2500
    sections["GENERAL"] = {"rest_log_level": 4, "rest_trace_time": 1}
    sections["HTTP_REST"].update(
        FwData={"Authorization": {"scheme": "basic", "OnAuth": "app.check"}},
        UserData={"greeting": "hi", "list": [1, 2, 3]},
        LoadURNs={"/mapped/:id": {"GET": {"Function": "app.fn", "Description": "mapped"}}},
        MaxBodySize=2048,
    )
    sections["HTTP_ADMIN"] = {"HostName": "127.0.0.1", "Port": 8081, "Locations": "ROOT, ADMIN"}
    sections["ADMIN"] = {"Path": "/admin/", "ThreadPool": "POOL"}
    sections["POOL"].update(AcceptTimeout=500, ActiveTimeout=2000)
    sections["APP_MONITOR"] = {"Enable": 1, "Port": 9099}
    return sections


def test_ini_and_json_give_the_same_config(tmp_path: Path) -> None:
    from_json = load_config(write(tmp_path, rich()))
    from_ini = load_config(write(tmp_path, rich(), "ini"))
    assert from_json.source == tmp_path / "service.json"
    assert from_ini.source == tmp_path / "service.ini"
    assert dataclasses.replace(from_json, source=None) == dataclasses.replace(from_ini, source=None)
    # and the values are the typed ones, not text
    rest, admin = from_ini.servers
    assert (rest.name, rest.port, rest.max_body_size) == ("HTTP_REST", 8080, 2048)
    assert rest.fw_data == FwData(AuthorizationData("basic", on_auth="app.check"))
    assert rest.user_data == {"greeting": "hi", "list": [1, 2, 3]}
    assert rest.load_urns == {
        "/mapped/:id": {"GET": {"Function": "app.fn", "Description": "mapped"}}
    }
    assert [loc.path for loc in admin.locations] == ["/rest", "/admin"]
    assert admin.locations[0].thread_pool.accept_timeout_ms == 500
    assert admin.locations[0].thread_pool.environment.repository == ("app",)
    assert from_ini.tunables.rest_log_level == 4
    assert from_ini.tunables_in_file == {"rest_log_level": 4, "rest_trace_time": 1}
    assert from_ini.graceful_timeout_ms == 2500
    assert from_ini.monitor is not None and from_ini.monitor.port == 9099


@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_section_names_and_keys_are_case_insensitive(tmp_path: Path, fmt: str) -> None:
    auth = {"AUTHORIZATION": {"scheme": "basic", "OnAuth": "app.check"}}
    sections: Sections = {
        "httpserver": {"SERVERS": "http_rest", "statestore": "Memory"},
        "Http_Rest": {"hostname": "127.0.0.1", "PORT": "8080", "locations": "root", "fwdata": auth},
        "ROOT": {"path": "/rest", "THREADPOOL": "Pool"},
        "pool": {"ENVIRONMENT": "env", "minthreads": 2, "MaxThreads": 3},
        "Env": {"REPOSITORY": "app"},
        "General": {"REST_LOG_LEVEL": 5},
        "app_monitor": {"ENABLE": 1, "port": 9099, "apipath": "/m"},
    }
    config = load_config(write(tmp_path, sections, fmt))
    (server,) = config.servers
    assert (server.name, server.host, server.port) == ("Http_Rest", "127.0.0.1", 8080)
    assert server.fw_data == FwData(AuthorizationData("basic", on_auth="app.check"))
    (location,) = server.locations
    assert location.path == "/rest"
    assert (location.thread_pool.min_threads, location.thread_pool.max_threads) == (2, 3)
    assert location.thread_pool.environment.repository == ("app",)
    assert config.tunables.rest_log_level == 5
    assert config.state_store == "memory"
    assert config.monitor is not None and config.monitor.api_path == "/m"


FW_DATA = {"Authorization": {"scheme": "basic", "OnAuth": "app.check"}}
USER_DATA = {"tenant": "ACME", "Limits": [1, 2]}
LOAD_URNS = {"/things/{id}": {"get": {"Function": "app.thing"}}}


@pytest.mark.parametrize(
    "form", ["inline", "inline-string", "single-quoted", "relative-file", "absolute-file"]
)
@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_json_values_inline_quoted_or_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, form: str
) -> None:
    if fmt == "json" and form == "single-quoted":
        form = "inline-string"
    values = {"FwData": FW_DATA, "UserData": USER_DATA, "LoadURNs": LOAD_URNS}
    (tmp_path / "conf").mkdir()
    written: dict[str, Any] = {}
    for key, value in values.items():
        if form == "inline":
            written[key] = value
        elif form == "inline-string":
            written[key] = json.dumps(value)
        elif form == "single-quoted":
            written[key] = f"'{json.dumps(value)}'"
        else:
            path = tmp_path / "conf" / f"{key.lower()}.json"
            path.write_text(json.dumps(value, indent=2))
            written[key] = str(path) if form == "absolute-file" else f"conf/{path.name}"
    sections = base()
    sections["HTTP_REST"].update(written)
    config_path = write(tmp_path, sections, fmt)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a relative file name is relative to the config, not the cwd
    (server,) = load_config(config_path).servers
    assert server.fw_data == FwData(AuthorizationData("basic", on_auth="app.check"))
    assert server.user_data == USER_DATA  # UserData keeps its case
    assert server.load_urns == LOAD_URNS


@pytest.mark.parametrize("fmt", ["json", "ini"])
@pytest.mark.parametrize(
    "value", ["", "{}", {}], ids=["empty", "empty-object-text", "empty-object"]
)
def test_an_empty_loadurns_maps_nothing(tmp_path: Path, fmt: str, value: Any) -> None:
    """Empty is the key left out (as FwData); an empty list is refused (``loadurns-empty-list``)."""
    sections = base()
    sections["HTTP_REST"]["LoadURNs"] = value
    (server,) = load_config(write(tmp_path, sections, fmt)).servers
    assert server.load_urns == {}


def test_ini_inline_comments_and_semicolons_inside_json(tmp_path: Path) -> None:
    """``; comment`` after a value is dropped (SPEC 2's example); inside a JSON string, data."""
    path = tmp_path / "service.ini"
    path.write_text(
        textwrap.dedent(
            """
            ; a full-line comment
            # another one
            [HTTPSERVER]
            Servers=HTTP_REST          ; the servers
            StateStore=memory ; in memory
            [HTTP_REST]
            HostName=127.0.0.1
            Port=8080 ; a port
            Locations=ROOT
            UserData={"sql": "select 1 ; select 2", "x": "a;b"}   ; trailing comment
            FwData='{"NativeRoutes": {"hide": ["x ; y"]}}' ; quoted, then a comment
            LoadURNs={
                "/a": {"GET": {"Function": "app.a"}}  ; a comment inside the JSON lines
              }
            [ROOT]
            Path=/rest
            ThreadPool=POOL
            [POOL]
            MaxThreads=2
            """
        )
    )
    config = load_config(path)
    (server,) = config.servers
    assert config.state_store == "memory"
    assert server.port == 8080
    assert server.user_data == {"sql": "select 1 ; select 2", "x": "a;b"}
    hide = RouteList("hide", "hide", ("x ; y",))
    assert server.fw_data == FwData(native_routes=NativeRoutesData((hide,)))
    assert server.load_urns == {"/a": {"GET": {"Function": "app.a"}}}


@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_a_file_starting_with_a_bom_loads(tmp_path: Path, fmt: str) -> None:
    """A UTF-8 byte order mark (Windows editors write one) is not part of the text."""
    path = write(tmp_path, base(), fmt)
    path.write_text("\ufeff" + path.read_text(), encoding="utf-8")
    (server,) = load_config(path).servers
    assert server.port == 8080


def test_a_json_file_named_by_a_key_may_start_with_a_bom(tmp_path: Path) -> None:
    """As the config file: the ``UserData``, ``FwData`` and ``LoadURNs`` files."""
    sections = base()
    values = {"FwData": FW_DATA, "UserData": USER_DATA, "LoadURNs": LOAD_URNS}
    for key, value in values.items():
        (tmp_path / f"{key}.json").write_text("\ufeff" + json.dumps(value), encoding="utf-8")
        sections["HTTP_REST"][key] = f"{key}.json"
    (server,) = load_config(write(tmp_path, sections)).servers
    assert server.fw_data == FwData(AuthorizationData("basic", on_auth="app.check"))
    assert server.user_data == USER_DATA
    assert server.load_urns == LOAD_URNS


def test_ini_lines_without_equals_are_named_with_number_text_and_section(tmp_path: Path) -> None:
    path = write(tmp_path, base(), "ini")
    text = path.read_text().replace("[ROOT]\n", "[ROOT]\nFoo\n").replace("Port=8080", "Port")
    path.write_text(text)
    lines = text.split("\n")
    port, foo = lines.index("Port") + 1, lines.index("Foo") + 1
    err = load_error(path)
    assert err.source == str(path)
    assert_one_clear_error(
        err,
        "not a valid INI file",
        f"line {port} in [HTTP_REST] 'Port'",
        f"line {foo} in [ROOT] 'Foo'",
        "are not Key=value lines",
    )
    path.write_text("Port=8080\n" + text)
    assert_one_clear_error(load_error(path), "line 1 'Port=8080' comes before any [SECTION] header")


@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_a_section_named_default_is_an_ordinary_section(tmp_path: Path, fmt: str) -> None:
    """configparser would merge [DEFAULT] into every section; fwrest reads it like JSON."""
    sections = base()
    sections["ROOT"]["ThreadPool"] = "DEFAULT"
    sections["DEFAULT"] = sections.pop("POOL") | {"MaxThreads": 2}
    (server,) = load_config(write(tmp_path, sections, fmt)).servers
    pool = server.locations[0].thread_pool
    assert (pool.name, pool.max_threads) == ("DEFAULT", 2)


def test_load_config_accepts_a_dict() -> None:
    sections = rich()
    config = load_config(sections)
    assert isinstance(config, ServiceConfig)
    assert config.source is None
    assert [s.name for s in config.servers] == ["HTTP_REST", "HTTP_ADMIN"]
    assert config.servers[0].user_data == {"greeting": "hi", "list": [1, 2, 3]}
    assert sections == rich(), "the caller's dict is not changed"


def test_the_base_config_is_valid(tmp_path: Path) -> None:
    """The control for every bad case below: without the one change, it loads."""
    for fmt in ("json", "ini"):
        (server,) = load_config(write(tmp_path, base(), fmt)).servers
        assert server.port == 8080


@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_allowed_hosts_are_kept_canonical(tmp_path: Path, fmt: str) -> None:
    """``AllowedHosts`` (SPEC 7.1): as a Host header is compared, once each; absent, none."""
    sections = base()
    (server,) = load_config(write(tmp_path, sections, fmt)).servers
    assert server.allowed_hosts == ()
    given = "API.Example.com., [0:0::1], 10.0.0.5, *.Corp.Example, api.example.com, bücher.de"
    sections["HTTP_REST"]["AllowedHosts"] = given
    (server,) = load_config(write(tmp_path, sections, fmt)).servers
    canonical = ("api.example.com", "::1", "10.0.0.5", "*.corp.example", "xn--bcher-kva.de")
    assert server.allowed_hosts == canonical


# -- one clear error per bad configuration ---------------------------------------------------------


def _second_location(s: Sections) -> None:
    s["HTTP_REST"]["Locations"] = "ROOT, ROOT2"
    s["ROOT2"] = {"Path": "/rest/", "ThreadPool": "POOL"}


def _second_server(s: Sections) -> None:
    s["HTTPSERVER"]["Servers"] = "HTTP_REST, OTHER"
    s["OTHER"] = {"HostName": "127.0.0.1", "Port": 8080, "Locations": "ROOT"}


Bad = tuple[str, Callable[[Sections], None], str | None, str | None, tuple[str, ...]]


def _bad(name: str, section: str, key: str, value: Any, *fragments: str) -> Bad:
    """``key`` of ``section`` set to ``value``: the error names that section and key."""
    return (name, _set(section, **{key: value}), section, key, fragments)


def _missing(name: str, section: str, key: str, *fragments: str) -> Bad:
    """``key`` dropped from ``section``: the error names the section alone."""
    return (name, _drop(section, key), section, None, fragments)


R, P, HS, NO_SECTION = "HTTP_REST", "POOL", "HTTPSERVER", "not a section"
HOSTS_FIX = "without scheme, port or path"
ARRAY = "must be a JSON object of paths, got a JSON array"
# (id, change, section, key, fragments of the message)
# fmt: off
BAD: list[Bad] = [
    _bad("unknown-server", HS, "Servers", "HTTP_RES", "[HTTP_RES]", NO_SECTION,
         "Did you mean [HTTP_REST]?"),
    _bad("unknown-location", R, "Locations", "ROTO", "[ROTO]", NO_SECTION, "Did you mean [ROOT]?"),
    _bad("unknown-thread-pool", "ROOT", "ThreadPool", "POOLS", "[POOLS]", NO_SECTION,
         "Did you mean [POOL]?"),
    _bad("unknown-environment", P, "Environment", "ENV2", "[ENV2]", NO_SECTION,
         "Did you mean [ENV]?"),
    _bad("unknown-section-no-hint", R, "Locations", "ZZZZZZ", "[ZZZZZZ]", NO_SECTION,
         "add a [ZZZZZZ] section"),
    _bad("port-text", R, "Port", "eighty", "whole number", "'eighty'", "0-65535"),
    _bad("port-negative", R, "Port", -1, "-1", "0-65535"),
    _bad("port-too-big", R, "Port", 70000, "70000", "out of range", "0-65535"),
    _missing("missing-hostname", R, "HostName", "HostName is missing"),
    _missing("missing-port", R, "Port", "Port is missing"),
    _missing("missing-locations", R, "Locations", "Locations"),
    _missing("missing-path", "ROOT", "Path", "Path is missing"),
    _missing("missing-threadpool", "ROOT", "ThreadPool", "ThreadPool"),
    _missing("missing-servers", HS, "Servers", "Servers"),
    _bad("unknown-key", R, "HostNmae", "127.0.0.1", "unknown key", "Did you mean HostName?"),
    _bad("key-twice-in-another-case", R, "PORT", 8081, "given twice (as Port and PORT)"),
    _bad("unknown-key-location", "ROOT", "Prefix", "/x", "unknown key", "Path, ThreadPool"),
    ("cert-without-key", _set(R, SslCertificate="server.crt"), R, "SslCertificateKey",
     ("SslCertificateKey is missing", "both")),
    ("key-without-cert", _set(R, SslCertificateKey="server.key"), R, "SslCertificate",
     ("SslCertificate is missing", "both")),
    ("cert-file-missing", _set(R, SslCertificate="nope.crt", SslCertificateKey="nope.key"), R,
     "SslCertificate", ("nope.crt", "does not exist")),
    _bad("fwdata-invalid-json", R, "FwData", '{"Authorization": {"scheme": "basic",}}',
         "not valid JSON", "line 1, column 38"),
    _bad("fwdata-unknown-key", R, "FwData", {"Authorisation": {"scheme": "basic"}},
         "'Authorisation'", "unknown key", "UserData"),
    _bad("fwdata-key-twice-in-another-case", R, "FwData",
         {"NativeRoutes": {"hide": ["healthcheck"]}, "nativeroutes": {"disable": ["*"]}},
         "FwData gives the key twice (as NativeRoutes and nativeroutes)", "case-insensitive"),
    _bad("fwdata-authorization-key-twice", R, "FwData",
         {"Authorization": {"scheme": "basic", "OnAuth": "app.check", "onauth": "app.ep.hello"}},
         "FwData Authorization gives the key twice (as OnAuth and onauth)", "case-insensitive"),
    _bad("fwdata-native-routes-key-twice", R, "FwData",
         {"NativeRoutes": {"hide": ["healthcheck"], "Hide": ["rest/config"]}},
         "FwData NativeRoutes gives the key twice (as hide and Hide)", "case-insensitive"),
    _bad("fwdata-file-missing", R, "FwData", "auth/missing.json", "missing.json", "cannot be read"),
    _bad("authorization-on-location", "ROOT", "Authorization",
         {"scheme": "basic", "OnAuth": "app.check"}, "per port, not per location",
         "FwData of the server section"),
    _bad("fwdata-on-thread-pool", P, "FwData", {"Authorization": {"scheme": "basic"}},
         "per port, not per thread pool", "FwData of the server section"),
    _bad("authorization-on-thread-pool", P, "Authorization", {"scheme": "basic"},
         "per port, not per thread pool", "server"),
    ("min-above-max", _set(P, MinThreads=5, MaxThreads=2), P, "MinThreads",
     ("MinThreads=5", "MaxThreads=2")),
    ("same-path-twice", _second_location, R, "Locations", ("[ROOT]", "[ROOT2]", "same Path /rest")),
    ("same-port-twice", _second_server, "OTHER", "Port", ("Port 8080", "[HTTP_REST]", "own port")),
    _bad("general-out-of-range", "GENERAL", "rest_log_level", 9, "9", "out of range", "0-5"),
    _bad("general-unknown-key", "GENERAL", "rest_log_levle", 3, "unknown key",
         "Did you mean rest_log_level?"),
    _bad("bad-state-store", HS, "StateStore", "mongodb://x", "'mongodb://x'", "not a state store",
         "redis://"),
    ("monitor-port-is-a-server-port", _set("APP_MONITOR", Enable=1, Port=8080), "APP_MONITOR",
     "Port", ("Port 8080", "[HTTP_REST]")),
    _bad("bad-location-path", "ROOT", "Path", "rest", "'rest'", "not a URL path prefix",
         "starts with /"),
    _bad("bad-enable", HS, "Enable", "maybe", "0 or 1"),
    # an empty list maps nothing; it used to be taken silently for "no LoadURNs"
    _bad("loadurns-empty-list", R, "LoadURNs", [], ARRAY, '{"/path/:p": {"GET"'),
    *[
        _bad(f"allowedhosts-{name}", R, "AllowedHosts", f"api.example.com, {value}",
             f"{value!r} is not a host name or IP address", HOSTS_FIX)
        for name, value in (
            ("scheme", "https://api.example.com"),
            ("port", "api.example.com:443"),
            ("path", "api.example.com/rest"),
            ("user", "ann@api.example.com"),
            ("blank", "api example.com"),
            ("star-alone", "*"),
            ("star-inside", "api.*.example.com"),
        )
    ],
    _bad("loadurns-list-of-mappings", R, "LoadURNs", [{"/x": {"GET": {"Function": "app.fn"}}}],
         ARRAY),
]
# fmt: on


@pytest.mark.parametrize("fmt", ["json", "ini"])
@pytest.mark.parametrize(
    ("change", "section", "key", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD],
)
def test_bad_config_gives_one_clear_error(
    tmp_path: Path,
    fmt: str,
    change: Callable[[Sections], None],
    section: str | None,
    key: str | None,
    fragments: tuple[str, ...],
) -> None:
    sections = copy.deepcopy(base())
    change(sections)
    path = write(tmp_path, sections, fmt)
    err = load_error(path)
    assert err.section == section
    assert err.key == key
    assert err.source == str(path)
    where = f"[{section}] {key}: " if key else f"[{section}]: "
    assert_one_clear_error(err, str(path), where, *fragments)


def test_the_same_error_from_a_dict() -> None:
    sections = base()
    sections["HTTP_REST"]["Port"] = 70000
    err = load_error(sections)
    assert err.source is None
    assert_one_clear_error(err, "[HTTP_REST] Port: ", "70000 is out of range")


@pytest.mark.parametrize(
    ("spoiled", "fragments"),
    [
        ("garbage-certificate", ("server.crt", "PEM")),
        ("key-of-another-certificate", ()),
        ("unreadable-key", ("server.key",)),
    ],
    ids=["garbage-certificate", "key-of-another-certificate", "unreadable-key"],
)
def test_a_certificate_that_cannot_be_loaded_is_refused(
    tmp_path: Path, certs: dict[str, Path], ca: trustme.CA, spoiled: str, fragments: tuple[str, ...]
) -> None:
    key = "server.key"
    if spoiled == "garbage-certificate":
        certs["cert"].write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n")
    elif spoiled == "key-of-another-certificate":
        key = "other.key"
        ca.issue_cert("other.example").private_key_pem.write_to_path(str(tmp_path / key))
    else:
        certs["key"].write_bytes(b"\xff\xfe\x00garbage")
    sections = base()
    sections["HTTP_REST"].update(SslCertificate="server.crt", SslCertificateKey=key)
    err = load_error(write(tmp_path, sections))
    assert (err.section, err.key) == ("HTTP_REST", "SslCertificate")
    assert_one_clear_error(err, "[HTTP_REST] SslCertificate: ", "cannot be loaded", *fragments)


def test_valid_certificate_makes_the_port_tls(tmp_path: Path, certs: dict[str, Path]) -> None:
    sections = base()
    sections["HTTP_REST"].update(SslCertificate="server.crt", SslCertificateKey="server.key")
    (server,) = load_config(write(tmp_path, sections, "ini")).servers
    assert server.is_tls and server.scheme == "https"
    assert server.ssl_certificate == certs["cert"]


INI = ini_text(base())
INLINE_FWDATA = 'FwData=\'{"Authorization": {"scheme": basic}}\''
# (id, file name, its text, fragments of the message: "{path}" the file's path)
# fmt: off
NO_CONFIG = [
    ("invalid-json", "service.json",
     '{\n  "HTTPSERVER": {"Servers": "HTTP_REST"},\n  "HTTP_REST": {"Port": 8080,}\n}',
     ("{path}", "not valid JSON", "line 3, column 30")),
    ("inline-fwdata-in-ini", "service.ini",
     INI.replace("Locations=ROOT", f"Locations=ROOT\n{INLINE_FWDATA}"),
     ("[HTTP_REST] FwData: ", "not valid JSON", "line 1, column 30")),
    ("duplicate-section-in-ini", "service.ini", INI + "\n[ROOT]\nPath=/other\nThreadPool=POOL\n",
     ("[ROOT]", "appears twice", "line ")),
    ("duplicate-key-in-ini", "service.ini", INI.replace("Port=8080", "Port=8080\nPort=8081"),
     ("[HTTP_REST] Port: ", "twice")),
    ("json-not-an-object", "service.json", "[1, 2]", ("{path}", "object")),
    ("unknown-suffix", "service.yaml", "HTTPSERVER: {}\n", ("service.yaml", ".ini or .json")),
]
# fmt: on


@pytest.mark.parametrize(
    ("name", "text", "fragments"), [pytest.param(*case[1:], id=case[0]) for case in NO_CONFIG]
)
def test_a_file_that_is_no_config_gives_one_clear_error(
    tmp_path: Path, name: str, text: str, fragments: tuple[str, ...]
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert_one_clear_error(load_error(path), *(f.format(path=path) for f in fragments))


def test_invalid_json_in_an_fwdata_file_reports_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "auth.json").write_text('{\n  "Authorization":\n    {"scheme" "basic"}\n}')
    sections = base()
    sections["HTTP_REST"]["FwData"] = "auth.json"
    err = load_error(write(tmp_path, sections, "ini"))
    assert (err.section, err.key) == ("HTTP_REST", "FwData")
    assert_one_clear_error(err, "auth.json", "not valid JSON", "line 3, column 15")


@pytest.mark.parametrize("fmt", ["json", "ini"])
def test_sections_differing_only_in_case_are_one_section(tmp_path: Path, fmt: str) -> None:
    sections = base()
    sections["root"] = {"Path": "/other", "ThreadPool": "POOL"}
    err = load_error(write(tmp_path, sections, fmt))
    assert_one_clear_error(err, "[ROOT]", "[root]", "same section")


def test_missing_httpserver_section(tmp_path: Path) -> None:
    sections = base()
    del sections["HTTPSERVER"]
    err = load_error(write(tmp_path, sections))
    assert_one_clear_error(err, "[HTTPSERVER]", "missing")


def test_a_missing_file(tmp_path: Path) -> None:
    assert_one_clear_error(load_error(tmp_path / "nope.json"), "nope.json", "does not exist")


# what the file holds -> what the error shows of it: JSON's words, never Python's (True, None,
# NoneType, list); an INI value as written, quoted
SPELLED: list[tuple[str, Callable[[Sections], Any], str]] = [
    ("json", _set(R, Port=True), "[HTTP_REST] Port: must be a whole number, got true."),
    ("json", _set(R, Port=None), "[HTTP_REST] Port: must be a whole number, got null."),
    ("json", _set(R, Port=80.5), "[HTTP_REST] Port: must be a whole number, got 80.5."),
    ("json", _set(R, HostName=["127.0.0.1"]), 'HostName: must be text, got ["127.0.0.1"].'),
    ("json", _set(HS, Servers={"a": None}), 'list, got {"a": null}.'),
    ("json", _set(HS, GracefulTimeout=True), "GracefulTimeout: must be a whole number of "
     "milliseconds, got true."),
    ("json", lambda s: s.update(ROOT=None), "the section [ROOT] must be an object of keys, "
     "not null."),
    ("json", lambda s: s.update(ROOT=[1]), "the section [ROOT] must be an object of keys, "
     "not an array."),
    ("json", _set(R, FwData={"Authorization": {"scheme": "basic", "OnAuth": "app.check",
                                               "maxFailures": True}}),
     "maxFailures must be a whole number >= 1, got true."),
    ("json", _set(R, FwData={"Authorization": {"scheme": False}}), "scheme false is not"),
    ("ini", _set(R, Port="eighty"), "[HTTP_REST] Port: must be a whole number, got 'eighty'."),
    ("ini", _set(HS, Enable="true2"), "[HTTPSERVER] Enable: must be 0 or 1, got 'true2'."),
    ("ini", _set(R, FwData={"Authorization": {"scheme": "basic", "OnAuth": "app.check",
                                              "maxFailures": None}}),
     "maxFailures must be a whole number >= 1, got null."),
]  # fmt: skip


def test_the_error_shows_a_value_as_the_file_spells_it(tmp_path: Path) -> None:
    """``fwrest check``'s error shows a JSON value as JSON writes it (true, null, an array) and
    names JSON's types; an INI value as written."""
    python = ("True", "False", "None", "NoneType", "not list", "not str", "['")
    for i, (fmt, change, expected) in enumerate(SPELLED):
        sections = copy.deepcopy(base())
        change(sections)
        (tmp_path / f"{i}").mkdir()
        path = write(tmp_path / f"{i}", sections, fmt)
        done = run_cli("check", str(path), cwd=path.parent)
        assert done.returncode == 2, (fmt, expected, done)
        assert expected in done.stderr, (fmt, expected, done.stderr)
        assert not any(word in done.stderr for word in python), (fmt, done.stderr)
