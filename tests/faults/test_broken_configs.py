"""Broken configurations (SPEC 1, 2, issue 9), INI and JSON: each mistake the loader, repository and
start know makes ``fwrest serve`` exit 2 with one clear message, no traceback, nothing on stdout,
no ``LogFile`` (but what only binding finds), the port free right after. Each case breaks one thing of a valid service (checked first), and expects a fragment naming
it, so it cannot pass failing for another reason."""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme

from tests.conftest import (
    Sections,
    config_text,
    free_port,
    issue_certs,
    port_is_free,
    run_cli,
    run_forked,
)
from tests.conftest import base_sections as base

APP = """
from fwrest import get


@get("/hello")
def hello():
    return {"hello": "world"}


def check_user(user, password):
    return user == "ada" and password == "pw"


def params():
    return {"client_id": "web", "username": "ada", "password": "pw"}


def nocheck_raises():
    raise ValueError("no list today")


def nocheck_number():
    return 42
"""

APP2 = """
def check_user(user, password):  # the same bare name as app.check_user: ambiguous
    return False
"""

BAD_MODULES = {
    "syntax_error.py": "def broken(:\n    pass\n",
    "raises_at_import.py": "raise RuntimeError('this module refuses to load')\n",
    "exits_at_import.py": "import sys\nsys.exit(3)\n",
    "interrupts_at_import.py": "raise KeyboardInterrupt\n",
    "duplicate_route.py": "from fwrest import get\n\n\n@get('/hello')\ndef hello_again():\n"
    "    return {}\n",
}


@dataclass
class Case:
    name: str
    fmt: str  # "ini", "json", or another suffix
    expect: str  # a fragment of the message on standard error
    mutate: Callable[[Sections, dict[str, Any]], Any] | None = None  # may return raw content

    @property
    def id(self) -> str:
        return f"{self.name}[{self.fmt}]"


# -- the mutations --------------------------------------------------------------------------


def setting(section: str, key: str, value: Any) -> Callable[[Sections, dict[str, Any]], None]:
    def mutate(s: Sections, _ctx: dict[str, Any]) -> None:
        s.setdefault(section, {})[key] = value

    return mutate


def dropping(section: str, key: str | None = None) -> Callable[[Sections, dict[str, Any]], None]:
    def mutate(s: Sections, _ctx: dict[str, Any]) -> None:
        if key is None:
            del s[section]
        else:
            del s[section][key]

    return mutate


def auth(**authorization: Any) -> Callable[[Sections, dict[str, Any]], None]:
    def mutate(s: Sections, _ctx: dict[str, Any]) -> None:
        s["HTTP_REST"]["FwData"] = {"Authorization": authorization}

    return mutate


def tls_auth(**authorization: Any) -> Callable[[Sections, dict[str, Any]], None]:
    """A TLS port with an oAuth2 ``Authorization`` (valid unless ``authorization`` breaks it)."""

    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        s["HTTP_REST"]["SslCertificate"] = str(ctx["certs"]["cert"])
        s["HTTP_REST"]["SslCertificateKey"] = str(ctx["certs"]["key"])
        s["HTTP_REST"]["FwData"] = {
            "Authorization": {"scheme": "oAuth2", "onAuthparams": "app.params", **authorization}
        }

    return mutate


def both(*steps: Callable[[Sections, dict[str, Any]], Any]) -> Callable[..., Any]:
    def mutate(s: Sections, ctx: dict[str, Any]) -> Any:
        out = None
        for step in steps:
            out = step(s, ctx) or out
        return out

    return mutate


def raw(text: str | bytes) -> Callable[[Sections, dict[str, Any]], Any]:
    return lambda _s, _ctx: text


def second_server(**overrides: Any) -> Callable[[Sections, dict[str, Any]], None]:
    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        s["HTTPSERVER"]["Servers"] = "HTTP_REST, OTHER"
        s["OTHER"] = {"HostName": "127.0.0.1", "Port": ctx["port2"], "Locations": "ROOT"}
        s["OTHER"].update(overrides)

    return mutate


def json_text(mutator: Callable[[str], str]) -> Callable[[Sections, dict[str, Any]], str]:
    return lambda s, _ctx: mutator(json.dumps(s, indent=2))


def ini_text(mutator: Callable[[str], str]) -> Callable[[Sections, dict[str, Any]], str]:
    return lambda s, _ctx: mutator(config_text(s, "ini"))


def corrupt_key(s: Sections, ctx: dict[str, Any]) -> None:
    key = ctx["folder"] / "broken.key"
    key.write_text("c2hvcnQ\n")
    s["HTTPSERVER"]["SigningKeyFile"] = str(key)


def corrupt_data_path_key(s: Sections, ctx: dict[str, Any]) -> None:
    data = ctx["folder"] / ".fwrest"
    data.mkdir(exist_ok=True)
    (data / "signing.key").write_text("!!! not base64 !!!\n")
    s["HTTPSERVER"]["StateStore"] = "sqlite"


def data_path_is_a_file(s: Sections, ctx: dict[str, Any]) -> None:
    (ctx["folder"] / "not-a-folder").write_text("a file where a folder should be\n")
    s["HTTPSERVER"]["StateStore"] = "sqlite"
    s["HTTPSERVER"]["DataPath"] = "not-a-folder"


def raw_file(name: str, text: str) -> Callable[[Sections, dict[str, Any]], None]:
    def mutate(_s: Sections, ctx: dict[str, Any]) -> None:
        (ctx["folder"] / name).write_text(text)

    return mutate


def log_file_is_a_folder(s: Sections, ctx: dict[str, Any]) -> None:
    (ctx["folder"] / "logs").mkdir()
    s["HTTPSERVER"]["LogFile"] = "logs"


LOCKED_PASS = "the-locked-key-pass-phrase"


def locked_key(ctx: dict[str, Any]) -> str:
    """The test certificate's key, encrypted with ``LOCKED_PASS``, beside the config."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(ctx["certs"]["key"].read_bytes(), None)
    encryption = serialization.BestAvailableEncryption(LOCKED_PASS.encode())
    pem, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    locked = key.private_bytes(pem, pkcs8, encryption)
    (ctx["folder"] / "locked.key").write_bytes(locked)
    return "locked.key"


def encrypted_key(s: Sections, ctx: dict[str, Any]) -> None:
    s["HTTP_REST"]["SslCertificate"] = str(ctx["certs"]["cert"])
    s["HTTP_REST"]["SslCertificateKey"] = locked_key(ctx)


def tls_options(
    section: str = "HTTP_REST", locked: bool = False, **keys: Any
) -> Callable[[Sections, dict[str, Any]], None]:
    """A TLS server (or monitor) with options ``keys`` (SPEC 11.2); ``locked``: key encrypted."""

    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        if section == "APP_MONITOR":
            s["APP_MONITOR"] = {"Enable": 1, "Port": ctx["port2"]}
        s[section]["SslCertificate"] = str(ctx["certs"]["cert"])
        s[section]["SslCertificateKey"] = locked_key(ctx) if locked else str(ctx["certs"]["key"])
        s[section].update(keys)

    return mutate


def another_ca(name: str) -> Callable[[Sections, dict[str, Any]], None]:
    """The certificate of a CA that issued nothing of the test's, as ``name``."""

    def mutate(_s: Sections, ctx: dict[str, Any]) -> None:
        trustme.CA().cert_pem.write_to_path(str(ctx["folder"] / name))

    return mutate


def garbage_cert(s: Sections, ctx: dict[str, Any]) -> None:
    (ctx["folder"] / "garbage.pem").write_text("-----BEGIN CERTIFICATE-----\nnope\n")
    s["HTTP_REST"]["SslCertificate"] = "garbage.pem"
    s["HTTP_REST"]["SslCertificateKey"] = str(ctx["certs"]["key"])


def monitor(**keys: Any) -> Callable[[Sections, dict[str, Any]], None]:
    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        s["APP_MONITOR"] = {"Enable": 1, "Port": ctx["port2"], **keys}

    return mutate


def oauth2_monitor(s: Sections, ctx: dict[str, Any]) -> None:
    fw_data = {"Authorization": {"scheme": "oAuth2", "onAuthparams": "app.params"}}
    tls = {
        "SslCertificate": str(ctx["certs"]["cert"]),
        "SslCertificateKey": str(ctx["certs"]["key"]),
    }
    s["APP_MONITOR"] = {"Enable": 1, "Port": ctx["port2"], **tls, "FwData": fw_data}


def monitor_fw_data(fw_data: dict[str, Any]) -> Callable[[Sections, dict[str, Any]], None]:
    """A plain monitor whose FwData is ``fw_data``."""

    def change(s: Sections, ctx: dict[str, Any]) -> None:
        s["APP_MONITOR"] = {"Enable": 1, "Port": ctx["port2"], "FwData": fw_data}

    return change


def section_as_text(s: Sections, _ctx: dict[str, Any]) -> None:
    s["ROOT"] = "Path=/rest"  # type: ignore[assignment]


def two_locations_same_path(s: Sections, _ctx: dict[str, Any]) -> None:
    s["HTTP_REST"]["Locations"] = "ROOT, ROOT2"
    s["ROOT2"] = {"Path": "/rest/", "ThreadPool": "POOL"}


def json_duplicate_key_case(s: Sections, _ctx: dict[str, Any]) -> None:
    s["HTTP_REST"]["PORT"] = 8080


def json_duplicate_section_case(s: Sections, _ctx: dict[str, Any]) -> None:
    s["root"] = {"Path": "/x", "ThreadPool": "POOL"}


def ini_duplicate_key(text: str) -> str:
    return text.replace("[HTTP_REST]\n", "[HTTP_REST]\nPort=1\n", 1)


NO_SECTION_INI = "Servers=HTTP_REST\nPort=8080\n"
# fmt: off
CASES: list[Case] = [
    # the file itself
    Case("trailing comma", "json", "not valid JSON", json_text(lambda t: t[:-2] + ",}")),
    Case("a JSON array", "json", "must hold an object", raw("[]")),
    Case("section not an object", "json", "must be an object of keys", section_as_text),
    Case("not UTF-8", "json", "not UTF-8", raw(b'{"HTTPSERVER": {"Servers": "\xff"}}')),
    Case("not UTF-8", "ini", "not UTF-8", raw(b"[HTTPSERVER]\nServers=\xff\n")),
    Case("no section header", "ini", "not a valid INI file", raw(NO_SECTION_INI)),
    Case("section twice", "ini", "appears twice", ini_text(lambda t: t + "\n[ROOT]\nPath=/x\n")),
    Case("key twice", "ini", "appears twice", ini_text(ini_duplicate_key)),
    Case("key twice in two cases", "json", "given twice", json_duplicate_key_case),
    Case("section in two cases", "json", "same section", json_duplicate_section_case),
    Case("an empty file", "ini", "[HTTPSERVER] is missing", raw("")),
    Case("a .yaml file", "yaml", "neither .ini nor .json", raw("HTTPSERVER: {}\n")),
    # [HTTPSERVER] and [GENERAL]
    Case("no Servers", "ini", "required key Servers is missing", dropping("HTTPSERVER", "Servers")),
    Case("empty Servers", "json", "lists no server", setting("HTTPSERVER", "Servers", "")),
    Case("unknown server", "ini", "not a section", setting("HTTPSERVER", "Servers", "HTTP_RST")),
    Case("server twice", "json", "twice", setting("HTTPSERVER", "Servers", "HTTP_REST,http_rest")),
    Case("unknown key", "ini", "unknown key", setting("HTTPSERVER", "Workers", 2)),
    Case("bad StateStore", "json", "not a state store", setting("HTTPSERVER", "StateStore", "pg")),
    Case("Enable=2", "ini", "must be 0 or 1", setting("HTTPSERVER", "Enable", 2)),
    Case("nothing to serve", "json", "nothing to serve", setting("HTTPSERVER", "Enable", 0)),
    Case("negative ms", "ini", "out of range", setting("HTTPSERVER", "GracefulTimeout", -5)),
    Case("ms with a unit", "ini", "whole number", setting("HTTPSERVER", "GracefulTimeout", "30s")),
    Case("FwData on HTTPSERVER", "json", "configured per port",
         setting("HTTPSERVER", "FwData", {"Authorization": {"scheme": "basic"}})),
    Case("short SigningKeyFile", "json", "corrupt or shorter", both(corrupt_key, tls_auth())),
    Case("corrupt signing.key", "ini", "corrupt or shorter",
         both(corrupt_data_path_key, tls_auth())),
    Case("DataPath is a file", "json", "it is not a folder", data_path_is_a_file),
    Case("DataPath nowhere", "ini", "cannot be written",
         both(setting("HTTPSERVER", "StateStore", "sqlite"),
              setting("HTTPSERVER", "DataPath", "/proc/nope"))),
    Case("LogFile nowhere", "json", "cannot be written",
         setting("HTTPSERVER", "LogFile", "/proc/nope/fw.log")),
    Case("LogFile is a folder", "ini", "it is a folder", log_file_is_a_folder),
    Case("encrypted TLS key", "json", "is encrypted", encrypted_key),
    Case("log level 9", "ini", "out of range", setting("GENERAL", "rest_log_level", 9)),
    # server sections
    Case("no HostName", "json", "required key HostName", dropping("HTTP_REST", "HostName")),
    Case("empty HostName", "ini", "HostName is empty", setting("HTTP_REST", "HostName", "")),
    Case("Port 70000", "json", "out of range", setting("HTTP_REST", "Port", 70000)),
    Case("unknown location", "ini", "not a section", setting("HTTP_REST", "Locations", "ROOTS")),
    Case("empty Locations", "json", "lists no location", setting("HTTP_REST", "Locations", " ")),
    Case("two servers one port", "ini", "also the port of", second_server(Port="{port}")),
    Case("certificate without key", "json", "SslCertificateKey is missing",
         setting("HTTP_REST", "SslCertificate", "server.crt")),
    Case("certificate file missing", "ini", "does not exist",
         both(setting("HTTP_REST", "SslCertificate", "missing.crt"),
              setting("HTTP_REST", "SslCertificateKey", "missing.key"))),
    Case("garbage certificate", "json", "cannot be loaded", garbage_cert),
    # the TLS options (SPEC 11.2)
    Case("wrong pass phrase", "ini", "does not open the private key",
         tls_options(locked=True, SslCertificatePass="not-the-pass-phrase")),
    Case("pass phrase variable unset", "json", "FWREST_NO_SUCH_VARIABLE is not set",
         tls_options(locked=True, SslCertificatePass="env:FWREST_NO_SUCH_VARIABLE")),
    Case("pass phrase env: without a name", "ini", "names no environment variable",
         tls_options(locked=True, SslCertificatePass="env:")),
    Case("pass phrase file missing", "ini", "cannot be read (No such file or directory)",
         tls_options(locked=True, SslCertificatePass="file:no-pass.txt")),
    Case("pass phrase file empty", "json", "the pass phrase is empty",
         both(raw_file("pass.txt", ""),
              tls_options(locked=True, SslCertificatePass="file:pass.txt"))),
    Case("pass phrase a number", "json", "SslCertificatePass: must be text",
         tls_options(locked=True, SslCertificatePass=1234)),
    Case("chain of another CA", "json", "does not issue the certificate",
         both(another_ca("other-ca.pem"), tls_options(SslCertificateCA="other-ca.pem"))),
    Case("chain not PEM", "ini", "holds no PEM certificate",
         both(raw_file("chain.txt", "no certificate here\n"),
              tls_options(SslCertificateCA="chain.txt"))),
    Case("chain file missing", "json", "does not exist",
         tls_options(SslCertificateCA="no-chain.pem")),
    Case("TLSv1.1", "ini", "not a TLS version", tls_options(SslMinVersion="TLSv1.1")),
    Case("ciphers refused", "json", "selects no cipher", tls_options(SslCiphers="NO-SUCH-CIPHER")),
    Case("ciphers of another key type", "ini", "can be used with the key",
         tls_options(SslCiphers="ECDHE-RSA-AES128-GCM-SHA256")),
    Case("DHE ciphers only", "json", "DHE ciphers are never chosen (fwrest loads no DH parameters)",
         tls_options(SslCiphers="DHE-RSA-AES128-GCM-SHA256:DHE-RSA-CHACHA20-POLY1305")),
    Case("SslClientCert 3", "json", "out of range (0-2)", tls_options(SslClientCert=3)),
    Case("client certificates without CA", "ini", "SslClientCA is missing",
         tls_options(SslClientCert=2)),
    Case("client CA garbage", "json", "cannot be loaded",
         both(raw_file("clients.pem", "-----BEGIN CERTIFICATE-----\nnope\n"),
              tls_options(SslClientCert=1, SslClientCA="clients.pem"))),
    Case("TLS option on plain HTTP", "ini", "is a TLS option",
         setting("HTTP_REST", "SslMinVersion", "TLSv1.3")),
    Case("monitor client certificates without CA", "json",
         "[APP_MONITOR] SslClientCA: SslClientCA is missing",
         tls_options("APP_MONITOR", SslClientCert=2, SslMinVersion="TLSv1.3")),
    Case("MaxHeaderSize 10", "ini", "out of range", setting("HTTP_REST", "MaxHeaderSize", 10)),
    Case("HeaderTimeout in microseconds", "ini", "out of range (1-86400000)",
         setting("HTTP_REST", "HeaderTimeout", 10_000_000_000)),
    Case("TlsHandshakeTimeout huge", "json", "out of range (1-86400000)",
         setting("HTTP_REST", "TlsHandshakeTimeout", 99999999999999999999)),
    Case("FwData bad JSON", "ini", "line 1, column", setting("HTTP_REST", "FwData", '{"a":}')),
    Case("FwData a list", "json", "must be a JSON object", setting("HTTP_REST", "FwData", [1])),
    Case("FwData unknown key", "ini", "reserved", setting("HTTP_REST", "FwData", {"Auth": {}})),
    Case("FwData file missing", "json", "cannot be read", setting("HTTP_REST", "FwData", "no.json")),
    Case("Authorization outside FwData", "ini", "belongs inside FwData",
         setting("HTTP_REST", "Authorization", {"scheme": "basic"})),
    Case("scheme Basic", "json", "not a scheme", auth(scheme="Basic", OnAuth="app.check_user")),
    Case("no scheme", "ini", "has no scheme", auth(OnAuth="app.check_user")),
    Case("basic without OnAuth", "json", "needs OnAuth", auth(scheme="basic")),
    Case("OnAuth missing", "ini", "not in the repository", auth(scheme="basic", OnAuth="nope")),
    Case("OnAuth ambiguous", "json", "ambiguous",
         both(setting("ENV", "Repository", "app, app2"),
              auth(scheme="basic", OnAuth="check_user"))),
    Case("Authorization unknown key", "ini", "unknown key",
         auth(scheme="basic", OnAuth="app.check_user", onAuthparams="app.params")),
    Case("maxFailures 0", "json", "maxFailures must be",
         auth(scheme="basic", OnAuth="app.check_user", maxFailures=0)),
    Case("oAuth2 without TLS", "ini", "needs TLS", auth(scheme="oAuth2", onAuthparams="app.params")),
    Case("no onAuthparams", "json", "needs onAuthparams", tls_auth(onAuthparams="")),
    Case("onAuthparams file", "ini", "does not exist", tls_auth(onAuthparams="file:nope.json")),
    Case("onAuthparams file unusable", "ini", "cannot be used: ",
         both(raw_file("params.json", '{"users": 5}'), tls_auth(onAuthparams="file:params.json"))),
    Case("onAuthparams file not JSON", "json", "is not valid JSON: Expecting",
         both(raw_file("params.json", '{"client_id": "web",'),
              tls_auth(onAuthparams="file:params.json"))),
    Case("allowGetToken no", "json", "true or false", tls_auth(allowGetToken="no")),
    Case("NoCheckUri raises", "ini", "raised ValueError",
         tls_auth(onAuthNoCheckUri="nocheck_raises")),
    Case("monitor with oAuth2", "ini", "Basic authorization only", oauth2_monitor),
    Case("monitor NativeRoutes", "json", "no effect on the monitor",
         monitor_fw_data({"NativeRoutes": {"public": ["*"]}})),
    Case("monitor onAdmin", "ini", "no effect on the monitor",
         monitor_fw_data({"Authorization": {"scheme": "basic", "OnAuth": "app.check_user",
                                            "onAdmin": "app.check_user"}})),
    Case("NativeRoutes unknown key", "json", "unknown key",
         setting("HTTP_REST", "FwData", {"NativeRoutes": {"show": ["healthcheck"]}})),
    Case("NativeRoutes unknown route", "ini", "not a native route",
         setting("HTTP_REST", "FwData", {"NativeRoutes": {"public": ["healthcheck/all"]}})),
    Case("LoadURNs a list", "ini", "JSON object of paths", setting("HTTP_REST", "LoadURNs", ["/x"])),
    Case("LoadURNs method", "json", "not a method",
         setting("HTTP_REST", "LoadURNs", {"/x": {"FETCH": {"Function": "app.hello"}}})),
    Case("LoadURNs duplicates a route", "ini", "registered twice",
         setting("HTTP_REST", "LoadURNs", {"/hello": {"GET": {"Function": "app.check_user"}}})),
    # locations, thread pools, environments
    Case("Path without slash", "ini", "not a URL path prefix", setting("ROOT", "Path", "rest")),
    Case("two locations one Path", "ini", "same Path", two_locations_same_path),
    Case("FwData on a location", "json", "per port, not per location",
         setting("ROOT", "FwData", {})),
    Case("Min above Max", "ini", "above MaxThreads", setting("POOL", "MinThreads", 9)),
    Case("Authorization on a pool", "json", "per port, not per thread pool",
         setting("POOL", "Authorization", {"scheme": "basic"})),
    Case("module not found", "ini", "was not found", setting("ENV", "Repository", "no_such_mod")),
    Case("syntax error", "json", "failed", setting("ENV", "Repository", "syntax_error")),
    Case("raises at import", "ini", "refuses to load",
         setting("ENV", "Repository", "raises_at_import")),
    Case("exits at import", "json", "sys.exit", setting("ENV", "Repository", "exits_at_import")),
    Case("interrupts at import", "ini", "it raised KeyboardInterrupt (",
         setting("ENV", "Repository", "interrupts_at_import")),
    Case("route registered twice", "json", "registered twice",
         setting("ENV", "Repository", "app, duplicate_route")),
    # the monitor
    Case("monitor without Port", "ini", "has no Port", setting("APP_MONITOR", "Enable", 1)),
    Case("monitor on the server's port", "json", "also the port of", monitor(Port="{port}")),
    # binding: the first port binds, the second cannot; the first must be released
    Case("address of no interface", "ini", "cannot be bound", second_server(HostName="192.0.2.1")),
    Case("host unresolvable", "json", "cannot be resolved", second_server(HostName="no.invalid")),
]
# fmt: on


def _fill_ports(sections: Sections, port: int) -> None:
    for body in sections.values():
        if not isinstance(body, dict):
            continue
        for key, value in body.items():
            if value == "{port}":
                body[key] = port


# found by binding, after the LogFile is open: the others stop before (no log, no worker)
AT_BIND = ("address of no interface", "host unresolvable")


def prepare(case: Case, index: int, root: Path, certs: dict[str, Path]) -> tuple[Path, int]:
    folder = root / f"{index:02d}"
    folder.mkdir()
    (folder / "app.py").write_text(APP)
    (folder / "app2.py").write_text(APP2)
    for name, text in BAD_MODULES.items():
        (folder / name).write_text(text)
    port = free_port()
    sections = copy.deepcopy(base(port))
    sections["HTTPSERVER"]["LogFile"] = "server.log"  # never created (but AT_BIND)
    ctx = {"certs": certs, "folder": folder, "port2": free_port()}
    content = case.mutate(sections, ctx) if case.mutate else None
    _fill_ports(sections, port)
    if content is None:
        content = config_text(sections, case.fmt)
    path = folder / f"service.{case.fmt}"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path, port


def serve_once(path: Path, port: int) -> tuple[subprocess.CompletedProcess[str], bool, float]:
    """``fwrest serve PATH --workers 2``; one that starts is stopped after 20 s (exit code -1)."""
    started = time.monotonic()
    result = run_forked("serve", str(path), "--workers", "2", cwd=path.parent, timeout=20)
    if result.returncode == -1:  # it was killed; its workers follow it
        time.sleep(2)  # the workers notice the supervisor is gone
    return result, port_is_free(port), time.monotonic() - started


def test_the_base_configuration_is_valid_in_both_formats(tmp_path: Path) -> None:
    for fmt in ("ini", "json"):
        folder = tmp_path / fmt
        folder.mkdir()
        (folder / "app.py").write_text(APP)
        path = folder / f"service.{fmt}"
        path.write_text(config_text(base(free_port()), fmt))
        result = run_cli("check", str(path), cwd=folder)
        assert result.returncode == 0, result.stderr


def test_every_broken_config_exits_2_without_traceback_or_bound_port(
    ca: trustme.CA, tmp_path: Path
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    jobs = [(case, *prepare(case, i, tmp_path, certs)) for i, case in enumerate(CASES)]
    formats = Counter(case.fmt for case in CASES)
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda job: serve_once(job[1], job[2]), jobs))
    took = time.monotonic() - started
    problems = []
    for (case, path, port), (result, free, _took) in zip(jobs, results, strict=True):
        out = result.stdout + result.stderr
        if result.returncode != 2:
            problems.append(f"{case.id}: exit {result.returncode}")
        if "Traceback" in out:
            problems.append(f"{case.id}: a traceback:\n{out}")
        if "fwrest: configuration error:" not in result.stderr:
            problems.append(f"{case.id}: no configuration error line: {result.stderr!r}")
        if case.expect not in result.stderr:
            problems.append(f"{case.id}: expected {case.expect!r} in {result.stderr!r}")
        if result.stdout:  # no "serving", no "ready" line
            problems.append(f"{case.id}: it wrote to stdout: {result.stdout!r}")
        if case.name not in AT_BIND and (path.parent / "server.log").exists():
            problems.append(f"{case.id}: its LogFile was set up")
        if not free:
            problems.append(f"{case.id}: port {port} still bound after the exit")
    durations = [r[2] for r in results]
    print(
        f"{len(CASES)} broken configs ({dict(formats)}) served with --workers 2 in {took:.1f} s "
        f"(each {min(durations):.2f}-{max(durations):.2f} s): exit codes "
        f"{dict(Counter(r[0].returncode for r in results))}; "
        f"{sum(1 for r in results if r[1])} ports free right after the exit"
    )
    for (case, _path, _port), (result, _free, _t) in list(zip(jobs, results, strict=True))[:3]:
        print(f"  e.g. {case.id}: {result.stderr.strip().splitlines()[0]}")
    assert len(CASES) >= 60
    assert formats["ini"] >= 25 and formats["json"] >= 25
    assert not problems, "\n".join(problems)


# what `fwrest check` must refuse as `serve` does: everything but what only binding can tell
CHECKED_TOO = (
    "short SigningKeyFile", "corrupt signing.key", "DataPath is a file", "DataPath nowhere",
    "LogFile nowhere", "LogFile is a folder", "encrypted TLS key", "empty HostName",
)  # fmt: skip


def test_check_refuses_what_serve_refuses_and_leaves_nothing_behind(
    ca: trustme.CA, tmp_path: Path
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    by_name = {case.name: case for case in CASES}
    for i, name in enumerate(CHECKED_TOO):
        case = by_name[name]
        path, _port = prepare(case, i, tmp_path, certs)
        before = sorted(p.name for p in path.parent.iterdir())
        # a forked child's stdin is /dev/null: an encrypted key cannot wait on a pass phrase
        result = run_forked("check", str(path), cwd=path.parent)
        assert result.returncode == 2, (case.id, result.stdout, result.stderr)
        assert case.expect in result.stderr, (case.id, result.stderr)
        assert "Traceback" not in result.stderr
        assert "pass phrase" not in result.stdout + result.stderr.replace(
            "it asks for a pass phrase", ""
        )
        # the probe of LogFile and DataPath removes what it made
        assert sorted(p.name for p in path.parent.iterdir()) == before, case.id
