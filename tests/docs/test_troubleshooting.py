"""docs/troubleshooting.md lists every start error as the server prints it. Each row has a broken
configuration provoking it (mostly tests/faults/test_broken_configs.py's cases by id), reported by
``fwrest check`` or ``fwrest serve`` (store, signing key, binding): exit 2, no traceback, one
``fwrest: configuration error:`` line the row matches (``<name>``: any value, ``...``: any text);
the ``fwrest.start()``, ``wsRestfulStart`` and ``fwrest openapi`` rows call those.

Every message the source can raise has a row: the texts of ``ConfigError(...)`` (and builders such
as ``raw.error(...)``) and ``RouteError`` are read from src/ with ``ast``, holes ``{...}`` standing
for values, rows may stop early; texts without words of their own (``f"{exc}"``) are skipped; the
store's messages are checked as rows. The page's example output is compared with ``fwrest check``'s.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import json
import logging
import os
import re
import shlex
import socket
import sqlite3
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import trustme

import fwrest
from tests.conftest import FWREST, ROOT, Sections, config_text, issue_certs, run_cli, run_forked
from tests.conftest import base_sections as base
from tests.docs.blocks import example
from tests.faults.test_broken_configs import (
    APP,
    CASES,
    Case,
    both,
    prepare,
    raw_file,
    setting,
    tls_auth,
)
from tests.redis_support import RedisServer, redis_tls

PAGE = ROOT / "docs" / "troubleshooting.md"
SRC = ROOT / "src" / "fwrest"


# -- the page --------------------------------------------------------------------------------


def rows() -> list[str]:
    """The message column of every table row (one code span each)."""
    found = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            m = re.match(r"^\| `([^`]+)` \|", line)
            assert m, f"docs/troubleshooting.md: a row whose message is not one code span: {line}"
            found.append(m[1])
    return found


_WILD = re.compile(r"(<[a-z][a-z ]*>|\.\.\.)")


def row_pattern(row: str) -> re.Pattern[str]:
    """``<name>`` stands for a value, ``...`` for any text; spaces for any white space."""
    regex = ""
    for piece in _WILD.split(row):
        if piece == "...":
            regex += ".*?"
        elif _WILD.fullmatch(piece):
            regex += r"\S.*?"
        else:
            regex += r"\s+".join(re.escape(word) for word in piece.split(" "))
    return re.compile(regex)


# -- provoking each row ----------------------------------------------------------------------


@dataclass(frozen=True)
class Broken:
    """A broken configuration and its reporting command (a test_broken_configs.py id, or here)."""

    case: Case | str
    command: str = "check"  # "serve": the mistake is found when the service opens or binds

    def resolve(self) -> Case:
        if isinstance(self.case, Case):
            return self.case
        found = {case.id: case for case in CASES}
        assert self.case in found, f"tests/faults/test_broken_configs.py has no case {self.case!r}"
        return found[self.case]


@dataclass(frozen=True)
class Outcome:
    failed_as_configured: bool  # exit code 2 (1 for wsRestfulStart), ConfigError for start()
    text: str


Special = Callable[[Path, dict[str, Path]], Outcome]
Mutate = Callable[[Sections, dict[str, Any]], None]


def sqlite_file_is_a_folder(s: Sections, ctx: dict[str, Any]) -> None:
    """A writable DataPath whose store file is a folder: only opening the store tells."""
    (ctx["folder"] / "data" / "state.sqlite3").mkdir(parents=True)
    s["HTTPSERVER"]["StateStore"] = "sqlite"
    s["HTTPSERVER"]["DataPath"] = "data"


def sqlite_file_of_a_newer_release(marker: bytes) -> Mutate:
    """The sqlite store file carries the schema marker ``marker`` (SPEC 17.2)."""

    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        (ctx["folder"] / "data").mkdir(parents=True)
        with contextlib.closing(sqlite3.connect(ctx["folder"] / "data" / "state.sqlite3")) as db:
            db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)")
            db.execute("INSERT INTO meta VALUES ('schema', ?)", (marker,))
            db.commit()
        s["HTTPSERVER"]["StateStore"] = "sqlite"
        s["HTTPSERVER"]["DataPath"] = "data"

    return mutate


def key_file_is_a_folder(s: Sections, ctx: dict[str, Any]) -> None:
    """An oAuth2 port whose signing key file is a folder."""
    tls_auth()(s, ctx)
    (ctx["folder"] / "keys" / "signing.key").mkdir(parents=True)
    s["HTTPSERVER"]["SigningKeyFile"] = "keys/signing.key"


def key_folder_is_a_file(s: Sections, ctx: dict[str, Any]) -> None:
    """An oAuth2 port whose signing key would be made in a 'folder' that is a file."""
    tls_auth()(s, ctx)
    (ctx["folder"] / "keys").write_text("a file where a folder should be\n")
    s["HTTPSERVER"]["SigningKeyFile"] = "keys/signing.key"


def key_set(content: str | None) -> Mutate:
    """An EdDSA port whose ``keys/keyset.json`` holds ``content``, or is a folder (None)."""

    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        tls_auth(signingAlg="EdDSA")(s, ctx)
        folder = ctx["folder"] / "keys"
        folder.mkdir(exist_ok=True)
        s["HTTPSERVER"]["SigningKeyFile"] = "keys/signing.key"
        if content is None:
            (folder / "keyset.json").mkdir()
        else:
            (folder / "keyset.json").write_text(content)

    return mutate


BAD_PEM_KEY_SET = json.dumps(
    {"keys": [{"kid": "k1", "alg": "EdDSA", "created": 1.0, "current": True, "pem": "x"}]}
)


def keys_on_hs256(folder: Path, certs: dict[str, Path]) -> Outcome:
    """``fwrest keys list`` of a service whose one oAuth2 port signs with HS256."""
    path, _port = prepare(Case("keys on HS256", "json", "", tls_auth()), 0, folder, certs)
    return cli_outcome(run_cli("keys", "list", str(path), cwd=path.parent))


def known(case_id: str, command: str = "check") -> Broken:
    return Broken(case_id, command)


def new(name: str, fmt: str, mutate: Callable[[Sections, dict[str, Any]], Any]) -> Broken:
    return Broken(Case(name, fmt, "", mutate))


def root_files(page: str) -> Mutate:
    """The location ROOT serves the folder www (made) with ``DefaultPage=page``."""

    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        (ctx["folder"] / "www").mkdir(exist_ok=True)
        s["ROOT"]["RootPath"] = "www"
        s["ROOT"]["DefaultPage"] = page

    return mutate


def module(name: str, source: str, repository: str) -> Callable[..., None]:
    """Write ``name`` beside the config and make ``repository`` the environment's Repository."""

    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        path = ctx["folder"] / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        s["ENV"]["Repository"] = repository

    return mutate


def nested_json(_s: Sections, _ctx: dict[str, Any]) -> str:
    return '{"HTTPSERVER": ' + "[" * 100_000 + "]" * 100_000 + "}"


def run_broken(broken: Broken, index: int, root: Path, certs: dict[str, Path]) -> Outcome:
    path, _port = prepare(broken.resolve(), index, root, certs)
    args = [broken.command, str(path)]
    if broken.command == "serve":
        args += ["--workers", "1"]
    done = run_forked(*args, cwd=path.parent, timeout=30)
    if done.returncode == -1:  # it started: the row's mistake went unnoticed
        return Outcome(False, f"it kept running: {done.stdout!r} {done.stderr!r}")
    return cli_outcome(done, path)


def cli_outcome(done: subprocess.CompletedProcess[str], config: Path | None = None) -> Outcome:
    """The command's outcome; ``config``: the file its error must name first (the page's
    promise: one error that names the file, the section and key)."""
    text = done.stdout + done.stderr
    ok = (
        done.returncode == 2
        and "Traceback" not in text
        and "fwrest: configuration error:" in done.stderr
    )
    if ok and config is not None:
        named = f"fwrest: configuration error: {config.resolve()}: "
        # or in the problem: "the file service.yaml is neither .ini nor .json"
        in_problem = f"fwrest: configuration error: the file {config.name} "
        if named not in done.stderr and in_problem not in done.stderr:
            return Outcome(False, f"the error does not name the file first ({named!r}): {text}")
    return Outcome(ok, f"exit {done.returncode}: {text}")


# `fwrest check` of Tracing=otlp without fwrest[otel] (its package hidden: installed here for the
# tracing tests), with the JSON protocol (no exporter), with gRPC lacking fwrest[otel-grpc]
CHECK_TRACING = """
import os, sys
os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = sys.argv[1]
if sys.argv[2]:
    sys.modules[sys.argv[2]] = None
if sys.argv[3]:
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = sys.argv[3]
from fwrest.cli import main
sys.exit(main(["check", "service.ini"]))
"""


def tracing_check(protocol: str, hidden: str, endpoint: str = "") -> Special:
    def run(folder: Path, _certs: dict[str, Path]) -> Outcome:
        sections = base(0)
        sections["HTTPSERVER"]["Tracing"] = "otlp"
        service_on(folder, sections)
        return cli_outcome(python_c(CHECK_TRACING, protocol, hidden, endpoint, cwd=folder))

    return run


def python_c(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -c script args`` in ``cwd``, the repository on its path (for tests.conftest)."""
    return subprocess.run(
        [*FWREST[:1], "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def missing_file(folder: Path, _certs: dict[str, Path]) -> Outcome:
    return cli_outcome(run_cli("check", str(folder / "service.ini"), cwd=folder))


def unreadable_file(folder: Path, _certs: dict[str, Path]) -> Outcome:
    path = service_on(folder, 0)
    path.chmod(0)
    prefix = []
    if os.geteuid() == 0:  # root reads any file: drop the capabilities that allow it
        prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    done = subprocess.run(
        [*prefix, *FWREST, "check", str(path)], capture_output=True, text=True, timeout=30
    )
    return cli_outcome(done)


@contextlib.contextmanager
def occupied_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def service_on(folder: Path, port_or_sections: int | Sections) -> Path:
    """service.ini in ``folder`` (beside app.py): the base service on a port, or ``sections``."""
    sections = base(port_or_sections) if isinstance(port_or_sections, int) else port_or_sections
    (folder / "app.py").write_text(APP)
    path = folder / "service.ini"
    path.write_text(config_text(sections, "ini"))
    return path


def redis_file(key: str, name: str, cert: str | None = None, prefix: str = "") -> Mutate:
    """``[HTTPSERVER] key`` names ``name``: a copy of certificate ``cert``, or an empty file."""

    def mutate(s: Sections, ctx: dict[str, Any]) -> None:
        path = ctx["folder"] / name
        path.write_bytes(ctx["certs"][cert].read_bytes() if cert else b"")
        s["HTTPSERVER"][key] = prefix + str(path)

    return mutate


PROBE_PASSWORD = "Probe-Pw-7"


def asking_redis(
    command: str,
    *,
    ca: str = "ca",
    cert: bool = True,
    foreign_cert: bool = False,
    password: str = PROBE_PASSWORD,
    url_password: str | None = None,
) -> Special:
    """A mistake only Redis can tell (SPEC 15): a TLS ``redis-server`` asking for a client
    certificate and password, reached with CA ``ca`` (``other_ca``: wrong), a client certificate or
    not (``foreign_cert``: untrusted), ``password`` (``StateStorePassword``) or ``url_password``."""

    def provoke(folder: Path, _certs: dict[str, Path]) -> Outcome:
        files = redis_tls(trustme.CA(), folder / "tls")
        server = RedisServer(folder, tls=files, client_certs=True, password=PROBE_PASSWORD)
        sections = base(0)
        store: dict[str, Any] = {"StateStore": server.url}
        store["StateStoreCA"] = str(getattr(files, ca))
        if cert:
            store.update(StateStoreCert=str(files.client_cert), StateStoreKey=str(files.client_key))
        if foreign_cert:
            foreign = trustme.CA().issue_cert("intruder@example.org")
            foreign.cert_chain_pems[0].write_to_path(str(folder / "foreign.crt"))
            foreign.private_key_pem.write_to_path(str(folder / "foreign.key"))
            store.update(StateStoreCert=str(folder / "foreign.crt"))
            store.update(StateStoreKey=str(folder / "foreign.key"))
        if url_password is None:
            store["StateStorePassword"] = f"file:{folder / 'pw.txt'}"
            (folder / "pw.txt").write_text(password + "\n")
        else:
            store["StateStore"] = store["StateStore"].replace("://", f"://:{url_password}@")
        sections["HTTPSERVER"].update(store)
        path = service_on(folder, sections)
        server.start()
        try:
            args = [command, str(path)] + (["--workers", "1"] if command == "serve" else [])
            done = run_forked(*args, cwd=folder, timeout=30)
        finally:
            server.stop()
        text = done.stdout + done.stderr
        for secret in (PROBE_PASSWORD, password, url_password or PROBE_PASSWORD):
            if secret in text:
                return Outcome(False, f"the password is shown: {text}")
        return cli_outcome(done, path)

    return provoke


def redis_of_a_newer_release(command: str) -> Special:
    """A Redis state store whose schema marker a newer release wrote (SPEC 17.2)."""

    def provoke(folder: Path, _certs: dict[str, Path]) -> Outcome:
        server = RedisServer(folder)
        sections = base(0)
        sections["HTTPSERVER"]["StateStore"] = server.url
        path = service_on(folder, sections)
        server.start()
        try:
            with contextlib.closing(server.client()) as client:
                client.set("fwrest:schema", b'{"schema": 9, "compatible": 9, "release": "9.1.0"}')
            args = [command, str(path)] + (["--workers", "1"] if command == "serve" else [])
            done = run_forked(*args, cwd=folder, timeout=30)
        finally:
            server.stop()
        return cli_outcome(done, path)

    return provoke


def address_in_use(folder: Path, _certs: dict[str, Path]) -> Outcome:
    with occupied_port() as port:
        path = service_on(folder, port)
        done = subprocess.run(
            [*FWREST, "serve", str(path)], capture_output=True, text=True, cwd=folder, timeout=30
        )
    outcome = cli_outcome(done)  # with the fix for a port in use, not for another address
    fixed = "Fix: stop the process that uses it, or choose another Port." in done.stderr
    return Outcome(outcome.failed_as_configured and fixed, outcome.text)


START = """
import sys
import fwrest
try:
    fwrest.start(sys.argv[1], workers=1)
except fwrest.ConfigError as exc:
    print(f"ConfigError: {exc}")
    sys.exit(2)
"""


def start_with_workers(folder: Path, _certs: dict[str, Path]) -> Outcome:
    with occupied_port() as port:
        done = python_c(START, str(service_on(folder, port)), cwd=folder)
    ok = done.returncode == 2 and "ConfigError: " in done.stdout and "Traceback" not in done.stderr
    return Outcome(ok, done.stdout + done.stderr)


# start(workers=N) without a Repository: the endpoints of __main__, or of a module workers cannot
# import (its file gone)
START_TAIL = """
sections = base_sections(free_port())
sections["ENV"] = {}
try:
    fwrest.start(sections, workers=1)
except fwrest.ConfigError as exc:
    print(f"ConfigError: {exc}")
    sys.exit(2)
"""
START_HEAD = """
import pathlib
import sys
import fwrest
from fwrest import get
from tests.conftest import base_sections, free_port
"""
START_MAIN = (
    START_HEAD
    + """
@get("/mine")
def mine():
    return {}
"""
    + START_TAIL
)
START_GONE = (
    START_HEAD
    + """
pathlib.Path("gone_mod.py").write_text("from fwrest import get\\n@get('/gone')\\ndef gone():\\n    return {}\\n")
sys.path.insert(0, ".")
import gone_mod  # noqa: E402
pathlib.Path("gone_mod.py").unlink()
"""
    + START_TAIL
)


def start_script(script: str) -> Callable[[Path, dict[str, Path]], Outcome]:
    def run(folder: Path, _certs: dict[str, Path]) -> Outcome:
        done = python_c(script, cwd=folder)
        ok = done.returncode == 2 and "ConfigError: " in done.stdout
        return Outcome(ok and "Traceback" not in done.stderr, done.stdout + done.stderr)

    return run


def start_refused(config: object = None, workers: int = 1) -> Special:
    """``fwrest.start(config, workers=workers)`` (None: a valid service file) refused before any
    process is forked: a config neither a path nor a dict, a bad number of workers."""

    def run(folder: Path, _certs: dict[str, Path]) -> Outcome:
        given = str(service_on(folder, 0)) if config is None else config
        try:
            fwrest.start(given, workers=workers)  # type: ignore[arg-type]
        except fwrest.ConfigError as exc:
            return Outcome(True, str(exc))
        return Outcome(False, f"start({given!r}, workers={workers}) did not raise")

    return run


def start_with_on_start(folder: Path, name: str, source: str, on_start: str) -> Outcome:
    """``fwrest.start()`` with ``OnStart`` ``on_start`` of module ``name``: a ConfigError, nothing
    left serving (its own module: without a Repository, other tests' endpoints would be served)."""
    sections = copy.deepcopy(base(0))
    (folder / name).write_text(source)
    sections["ENV"] = {"Repository": str(folder / name)}
    sections["POOL"]["OnStart"] = on_start
    try:
        fwrest.start(sections)
    except fwrest.ConfigError as exc:
        left = [t.name for t in threading.enumerate() if t.name == "fwrest-service"]
        return Outcome(not left, f"{exc} (threads left: {left})")
    return Outcome(False, "start() did not raise")


def start_not_ready(folder: Path, _certs: dict[str, Path]) -> Outcome:
    """``fwrest.start()`` never ready in time (wait 0.2 s, ``OnStart`` 1 s, however scheduled)."""
    from fwrest.server import service as service_module

    source = (
        "import time\n\nfrom fwrest import get\n\n\n"
        'def slow_boot():\n    time.sleep(1.0)\n\n\n@get("/nr")\ndef nr():\n    return {}\n'
    )
    saved = service_module._READY_TIMEOUT_S
    service_module._READY_TIMEOUT_S = 0.2
    try:
        return start_with_on_start(folder, "not_ready_app.py", source, "slow_boot")
    finally:
        service_module._READY_TIMEOUT_S = saved


def start_on_start_fails(folder: Path, _certs: dict[str, Path]) -> Outcome:
    """``fwrest.start()`` of a service whose pool's ``OnStart`` raises."""
    source = "def boot():\n    raise RuntimeError('no database')\n"
    return start_with_on_start(folder, "on_start_fails_app.py", source, "boot")


def config_as_text(folder: Path, _certs: dict[str, Path]) -> Outcome:
    """JSON text where the file name belongs."""
    return cli_outcome(run_cli("check", json.dumps(base(0)), cwd=folder))


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass(frozen=True)
class Legacy:
    """``wsRestfulStart(jo, path)`` in process: 1 and the message logged on ``fwrest.server``."""

    jo: Any
    path: str = "/legacy"

    def __call__(self, _folder: Path, _certs: dict[str, Path]) -> Outcome:
        records = _Records()
        logger = logging.getLogger("fwrest.server")
        level = logger.level  # an earlier in-process start may have set rest_log_level=0
        logger.addHandler(records)
        logger.setLevel(logging.ERROR)
        try:
            code = fwrest.rest.wsRestfulStart(copy.deepcopy(self.jo), self.path)
        finally:
            logger.removeHandler(records)
            logger.setLevel(level)
        return Outcome(code == 1, "\n".join(records.lines))


def legacy_base(**changes: Any) -> dict[str, Any]:
    sections: dict[str, Any] = copy.deepcopy(base(0))
    for section, body in changes.items():
        if isinstance(body, dict) and isinstance(sections.get(section), dict):
            sections[section].update(body)
        else:
            sections[section] = body
    return sections


def openapi_server(folder: Path, _certs: dict[str, Path]) -> Outcome:
    path = service_on(folder, 0)
    return cli_outcome(run_cli("openapi", str(path), "--server", "NOPE", cwd=folder))


def openapi_unwritable(folder: Path, _certs: dict[str, Path]) -> Outcome:
    """``-o`` into a folder that does not exist: one line, exit 2, no traceback, no file."""
    path = service_on(folder, 0)
    out = folder / "missing" / "openapi.json"
    done = run_cli("openapi", str(path), "-o", str(out), cwd=folder)
    text = done.stdout + done.stderr
    ok = (
        done.returncode == 2
        and "Traceback" not in text
        and done.stderr.count("fwrest: error:") == 1
        and not out.parent.exists()
    )
    return Outcome(ok, f"exit {done.returncode}: {text}")


# the modules the rows below write beside a config ("module FILE = ..."), by file
MODULES = {
    "bad_route.py": 'from fwrest import get\n\n\n@get("/a/:id/:id")\ndef a(id):\n    return {}\n',
    "route_number.py": "from fwrest import get\n\n\n@get(1)\ndef a():\n    return {}\n",
    "typed_path.py": "from fwrest import get\n\n\n@get('/x/:id')\ndef f(id: list[int]):\n    return {}\n",
    "typed_two_bodies.py": (
        "import msgspec\nfrom fwrest import post\n\n\nclass A(msgspec.Struct):\n    n: int\n\n\n"
        "@post('/x')\ndef f(a: A, b: A):\n    return {}\n"
    ),
    "typed_unfilled.py": "from fwrest import get\n\n\n@get('/x')\ndef f(a: bytes = b''):\n    return {}\n",
    "typed_unresolved.py": (
        "from __future__ import annotations\n\nfrom fwrest import get\n\n\n"
        "@get('/x')\ndef f(a: Missing):\n    return {}\n"
    ),
    "lifetimes.py": (
        "def half_user():\n    return {'username': 'ada'}\n\n\n"
        "def zero():\n    return {'username': 'ada', 'password': 'pw', 'access_expires': 0}\n"
    ),
    "bad_scope.py": (
        'from fwrest import get\n\n\n@get("/a", scopes=["orders read"])\ndef a():\n    return {}\n'
    ),
    "scopes.py": (
        "def bad_scope():\n"
        "    return {'username': 'ada', 'password': 'pw', 'users': [\n"
        "        {'username': 'ada', 'password': 'pw', 'scopes': ['orders read']}]}\n\n\n"
        "def stray_scopes():\n"
        "    return {'users': [{'username': 'ada', 'password': 'pw'}], 'scopes': ['a']}\n"
    ),
    "lib/app.py": APP,
    "needs_a_package.py": "import no_such_package_here\n",
}

# A line per row: the row, then after " <= " a test_broken_configs.py case id (" | serve": only
# `fwrest serve` finds it) or "name[format]" written here, then per " <= " a change: "SECTION Key =
# value", "oAuth2 key = value" (a TLS port's oAuth2 key: tls_auth) or a file beside the config (the
# last group says how), values as JSON.
ROWS_OF_SETTINGS = r"""
# the file
the file service.yaml is neither .ini nor .json  <=  a .yaml file[yaml]
the file is not UTF-8 text  <=  not UTF-8[ini]
the file is not a valid INI file: ...  <=  no section header[ini]
the section [ROOT] appears twice (line <n>)  <=  section twice[ini]
[HTTP_REST] Port: the key appears twice in this section (line <n>)  <=  key twice[ini]
[HTTP_REST] PORT: the key is given twice (as Port and PORT)  <=  key twice in two cases[json]
the sections [ROOT] and [root] are the same section (section names are case-insensitive)  <=  section in two cases[json]
... is not valid JSON: <error> at line <n>, column <n>  <=  trailing comma[json]
[<server>] LoadURNs: the value gives the key '/x' twice in one object, the second time at line <n>, column <n>  <=  LoadURNs path twice[ini]  <=  HTTP_REST LoadURNs = "{\"/x\": {\"GET\": {\"Function\": \"app.hello\"}}, \"/x\": {}}"
the JSON file must hold an object whose keys are the sections  <=  a JSON array[json]
the section [ROOT] must be an object of keys, not a string  <=  section not an object[json]
# sections and keys
the section [HTTPSERVER] is missing  <=  an empty file[ini]
[HTTPSERVER] Servers: names [HTTP_RST], which is not a section of this configuration. Did you mean [HTTP_REST]?  <=  unknown server[ini]
[HTTP_REST]: the required key HostName is missing (...)  <=  no HostName[json]
[HTTPSERVER] Workers: unknown key for a HTTPSERVER section.  <=  unknown key[ini]
[HTTPSERVER] Enable: must be 0 or 1, got '2'  <=  Enable=2[ini]
[HTTPSERVER] GracefulTimeout: must be a whole number of milliseconds, got '30s'  <=  ms with a unit[ini]
[HTTP_REST] Port: 70000 is out of range (0-65535)  <=  Port 70000[json]
[HTTP_REST] HeaderTimeout: 10000000000 is out of range (1-86400000)  <=  HeaderTimeout in microseconds[ini]
[HTTP_REST] MaxHeaders: 0 is out of range (1-10000)  <=  MaxHeaders 0[ini]  <=  HTTP_REST MaxHeaders = 0
[HTTP_REST] HostName: must be text, got ["127.0.0.1"]  <=  HostName a list[json]  <=  HTTP_REST HostName = ["127.0.0.1"]
[HTTPSERVER] Servers: must be a comma-separated list, got 5  <=  Servers a number[json]  <=  HTTPSERVER Servers = 5
[ROOT] FwData: authorization is configured per port, not per location  <=  FwData on a location[json]
[HTTP_REST] Authorization: Authorization is not a key of its own: it belongs inside FwData  <=  Authorization outside FwData[ini]
# [HTTPSERVER]
[HTTPSERVER] Servers: lists no server  <=  empty Servers[json]
[HTTPSERVER] Servers: names [<server>] twice  <=  server twice[json]
[HTTPSERVER] Enable: Enable=0 and no monitor: there is nothing to serve  <=  nothing to serve[json]
[HTTPSERVER] StateStore: 'pg' is not a state store  <=  bad StateStore[json]
[HTTPSERVER] StateStore: the Redis state store <url> is not a Redis URL (...)  <=  Redis URL with a bad port[json]  <=  HTTPSERVER StateStore = "redis://:s3cret@127.0.0.1:notaport/0"
[HTTPSERVER] StateStore: the Redis state store <url> names no host  <=  Redis URL without a host[ini]  <=  HTTPSERVER StateStore = "redis://"
[HTTPSERVER] StateStore: the Redis state store <url> names no socket (...)  <=  Redis socket without a path[ini]  <=  HTTPSERVER StateStore = "unix://"
[HTTPSERVER] StateStore: the Redis state store <url> holds a user or password with a character that ends it early (/ ? #; the password is never shown)  <=  Redis password with a slash[json]  <=  HTTPSERVER StateStore = "rediss://fw:s3c/ret@127.0.0.1:6380/0"
[HTTPSERVER] StateStorePassword: StateStorePassword is set, but the state store is <store>  <=  StateStorePassword on sqlite[ini]  <=  HTTPSERVER StateStorePassword = "pw"
[HTTPSERVER] StateStore: the Redis state store <url> names the database <db>, which is not a number  <=  Redis URL with a named database[json]  <=  HTTPSERVER StateStore = "redis://127.0.0.1:6379/sessions"
# server sections
[<server>] Port: Port <port> is also the port of [<server>]  <=  two servers one port[ini]
[<server>] SslCertificateKey: SslCertificateKey is missing: TLS needs both a certificate and its key  <=  certificate without key[json]
[<server>] SslCertificate: the file <path> does not exist  <=  certificate file missing[ini]
[<server>] SslCertificate: the certificate <path> and key <path> cannot be loaded (...)  <=  garbage certificate[json]
[<server>] TrustedProxies: '10.0.0.300' is not an IP address or network  <=  TrustedProxies[ini]  <=  HTTP_REST TrustedProxies = "10.0.0.300"
[<server>] AllowedHosts: 'https://api.example.com' is not a host name or IP address  <=  AllowedHosts[json]  <=  HTTP_REST AllowedHosts = "api.internal, https://api.example.com"
[<server>] Locations: lists no location  <=  empty Locations[json]
[<server>] Locations: the locations [<location>] and [<location>] have the same Path /rest  <=  two locations one Path[ini]
[<server>] Locations: GET /rest/hello is registered twice: by ... and by ...  <=  route registered twice[json]
[<server>] Locations: GET /rest/x/:a and GET /rest/x/:b are one route (the same requests match both), registered twice: by ... and by ...  <=  LoadURNs one shape twice[json]  <=  HTTP_REST LoadURNs = {"/x/:a": {"GET": {"Function": "app.hello"}}, "/x/:b": {"GET": {"Function": "app.hello"}}}
[<server>] FwData: names the file <path>, which cannot be read (No such file or directory)  <=  FwData file missing[json]
[<server>] FwData: must be a JSON object  <=  FwData a list[json]
[<server>] FwData: FwData holds the unknown key 'Auth'; FwData is reserved for the framework  <=  FwData unknown key[ini]
# authorization
[<server>] FwData: FwData Authorization OnAuthCache must be a duration in whole seconds (300, 300s, 5m, 1h), got '5 minutes'  <=  OnAuthCache in words[json]  <=  HTTP_REST FwData = {"Authorization": {"scheme": "basic", "OnAuth": "app.check_user", "OnAuthCache": "5 minutes"}}
[<server>] FwData: FwData Authorization OnAuth must name a function, got 1  <=  OnAuth a number[json]  <=  HTTP_REST FwData = {"Authorization": {"scheme": "basic", "OnAuth": 1}}
[<server>] FwData: FwData Authorization must be a JSON object  <=  Authorization a string[json]  <=  HTTP_REST FwData = {"Authorization": "basic"}
[<server>] FwData: FwData Authorization has no scheme  <=  no scheme[ini]
[<server>] FwData: FwData Authorization scheme 'Basic' is not a scheme fwrest knows  <=  scheme Basic[json]
[<server>] FwData: FwData Authorization has the unknown key 'onAuthparams' for the basic scheme  <=  Authorization unknown key[ini]
[<server>] FwData: FwData Authorization maxFailures must be a whole number >= 1, got 0  <=  maxFailures 0[json]
[<server>] FwData: FwData Authorization needs OnAuth for the basic scheme  <=  basic without OnAuth[json]
[<server>] FwData OnAuth: the function 'nope' is not in the repository of this server's environments  <=  OnAuth missing[ini]
[<server>] FwData OnAuth: the function name 'check_user' is ambiguous: it matches app.check_user, app2.check_user  <=  OnAuth ambiguous[json]
[<server>] FwData: the oAuth2 scheme needs TLS on the port  <=  oAuth2 without TLS[ini]
[<server>] FwData: onAuthparams names the file <path>, which does not exist  <=  onAuthparams file[ini]
[<server>] onAuthparams: the file <path> cannot be used: ...  <=  onAuthparams file unusable[ini]
[<server>] onAuthparams: the file <path> is not valid JSON: ...  <=  onAuthparams file not JSON[json]
[<server>] FwData: FwData Authorization allowGetToken must be true or false, got 'no'  <=  allowGetToken no[json]
[<server>] FwData: onAuthNoCheckUri <function> raised ValueError: ...  <=  NoCheckUri raises[ini]
[APP_MONITOR] FwData: the monitor supports Basic authorization only  <=  monitor with oAuth2[ini]
[APP_MONITOR] FwData: the key 'NativeRoutes' has no effect on the monitor (it serves no native route)  <=  monitor NativeRoutes[json]
[APP_MONITOR] FwData: Authorization's key 'onAdmin' has no effect on the monitor (it serves no native route that would call it)  <=  monitor onAdmin[ini]
# native routes
[<server>] FwData: FwData NativeRoutes must be an object  <=  NativeRoutes a list[json]  <=  HTTP_REST FwData = {"NativeRoutes": ["x"]}
[<server>] FwData: FwData NativeRoutes has the unknown key 'show'  <=  NativeRoutes unknown key[json]
[<server>] FwData: FwData NativeRoutes public must be a list of route names  <=  NativeRoutes public 1[ini]  <=  HTTP_REST FwData = {"NativeRoutes": {"public": 1}}
[<server>] FwData: FwData NativeRoutes public names 'healthcheck/all', which is not a native route  <=  NativeRoutes unknown route[ini]
[<server>] FwData: FwData NativeRoutes disable names 'REST/CONFIG', which is not a native route. Did you mean 'rest/config'? Route names are case-sensitive, as paths are  <=  NativeRoutes name in capitals[json]  <=  HTTP_REST FwData = {"NativeRoutes": {"disable": ["REST/CONFIG"]}}
[<server>] FwData: FwData NativeRoutes hide names 'rest/usage/time/reset', which is not a native route. That path is a route of 'rest/usage/time'; name 'rest/usage/time'  <=  NativeRoutes the reset path[ini]  <=  HTTP_REST FwData = {"NativeRoutes": {"hide": ["rest/usage/time/reset"]}}
[<server>] FwData: FwData NativeRoutes public names '/rest/fw/healthcheck', which is not a native route. Names leave out the location and /fw/: write 'healthcheck'  <=  NativeRoutes a URL[json]  <=  HTTP_REST FwData = {"NativeRoutes": {"public": ["/rest/fw/healthcheck"]}}
# LoadURNs
[<server>] LoadURNs: must be a JSON object of paths  <=  LoadURNs a list[ini]
[<server>] LoadURNs: the path '/x' must map to an object of methods  <=  LoadURNs path to text[json]  <=  HTTP_REST LoadURNs = {"/x": "app.hello"}
[<server>] LoadURNs: 'FETCH' under '/x' is not a method fwrest serves  <=  LoadURNs method[json]
[<server>] LoadURNs: GET '/x' names no Function  <=  LoadURNs no Function[ini]  <=  HTTP_REST LoadURNs = {"/x": {"GET": {}}}
[<server>] LoadURNs: the route path '/x?y' is not a valid path  <=  LoadURNs query[json]  <=  HTTP_REST LoadURNs = {"/x?y": {"GET": {"Function": "app.hello"}}}
[<server>] LoadURNs: the route path '/x/:1' has a bad parameter name '1'  <=  LoadURNs parameter name[ini]  <=  HTTP_REST LoadURNs = {"/x/:1": {"GET": {"Function": "app.hello"}}}
[<server>] LoadURNs: the route path '/x/:id/:id' repeats the parameter 'id'  <=  LoadURNs parameter twice[json]  <=  HTTP_REST LoadURNs = {"/x/:id/:id": {"GET": {"Function": "app.hello"}}}
[<server>] LoadURNs: the route path '/x/../y' has a dot segment  <=  LoadURNs dot segment[ini]  <=  HTTP_REST LoadURNs = {"/x/../y": {"GET": {"Function": "app.hello"}}}
[<server>] LoadURNs: GET '/x' Scopes: 'orders read' is not a scope name (1 to 128 printable ASCII characters, no space, no " or \, RFC 6749 3.3)  <=  LoadURNs scope with a space[json]  <=  HTTP_REST LoadURNs = {"/x": {"GET": {"Function": "app.hello", "Scopes": ["orders read"]}}}
[<server>] LoadURNs: GET '/x' Scopes must be a list of scope names, got 'orders:read'  <=  LoadURNs Scopes as text[ini]  <=  HTTP_REST LoadURNs = {"/x": {"GET": {"Function": "app.hello", "Scopes": "orders:read"}}}
[<server>] LoadURNs: GET /rest/x calls app.check_user (...), whose parameter(s) 'user', 'password' the route does not give: every request would fail  <=  LoadURNs parameters the path lacks[ini]  <=  HTTP_REST LoadURNs = {"/x": {"GET": {"Function": "app.check_user"}}}
# locations and thread pools
[ROOT] Path: 'rest' is not a URL path prefix  <=  Path without slash[ini]
[ROOT] Path: '/a/../rest' holds a . or .. segment, which no request path keeps  <=  Path with a dot segment[json]  <=  ROOT Path = "/a/../rest"
[POOL] MinThreads: MinThreads=9 is above MaxThreads=4  <=  Min above Max[ini]
[ROOT] XFrameOptions: must be DENY or SAMEORIGIN, got 'ALLOW-FROM https://x.example'  <=  XFrameOptions ALLOW-FROM[ini]  <=  ROOT XFrameOptions = "ALLOW-FROM https://x.example"
[ROOT] HSTS: must start with max-age=SECONDS, got 'includeSubDomains'  <=  HSTS without max-age[ini]  <=  ROOT HSTS = "includeSubDomains"
[ROOT] ContentSecurityPolicy: holds a control or non-ASCII character, which a header value cannot carry  <=  CSP with a line break[json]  <=  ROOT ContentSecurityPolicy = "default-src 'self'\nSet-Cookie: a=b"
[ROOT] RootPath: the folder <path> does not exist (or is not a folder)  <=  RootPath missing[ini]  <=  ROOT RootPath = "www"
[ROOT] DefaultPage: a DefaultPage needs a RootPath  <=  DefaultPage without RootPath[ini]  <=  ROOT DefaultPage = "index.html"
[HTTP_REST] Charset: 'UTF-16' is not a charset fwrest answers in (UTF-8, CP1252, ISO-8859-1)  <=  Charset UTF-16[ini]  <=  HTTP_REST Charset = "UTF-16"
[HTTP_REST] Compression: 'deflate' is not a coding fwrest compresses with (gzip, br)  <=  Compression deflate[ini]  <=  HTTP_REST Compression = "gzip, deflate"
[HTTP_REST] Locations: the location [ROOT] sets HSTS, which only a TLS port can send  <=  HSTS on a plain port[ini]  <=  ROOT HSTS = "max-age=31536000"
# application hooks
[POOL] OnSend: the function 'nope' is not in the repository of this server's environments  <=  OnSend missing[ini]  <=  POOL OnSend = "nope"
[POOL] OnError: the function app.hello() cannot be called as OnError(exc): too many positional arguments  <=  OnError without a parameter[json]  <=  POOL OnError = "hello"
# your modules
[ENV] Repository: the module 'no_such_mod' was not found (looked in <folder> and the Python path)  <=  module not found[ini]
[ENV] Repository: the file <path> does not exist  <=  Repository file missing[json]  <=  ENV Repository = "missing.py"
[ENV] Repository: importing 'raises_at_import' failed: RuntimeError: this module refuses to load (<file>:<line>)  <=  raises at import[ini]
[ENV] Repository: importing 'exits_at_import' failed: it called sys.exit(3)  <=  exits at import[json]
[ENV] Repository: importing 'interrupts_at_import' failed: it raised KeyboardInterrupt (<file>:<line>), which is no Exception  <=  interrupts at import[ini]
# the monitor
[APP_MONITOR] Port: the monitor is enabled but has no Port  <=  monitor without Port[ini]
[HTTPSERVER] DataPath: the folder <path> (the sqlite state store) cannot be written: ...  <=  DataPath nowhere[ini]
[HTTPSERVER] LogFile: the log file <path> cannot be written: ...  <=  LogFile nowhere[json]
[HTTPSERVER] LogFormat: 'xml' is not a log format  <=  LogFormat xml[ini]  <=  HTTPSERVER LogFormat = "xml"
[HTTPSERVER] Tracing: 'jaeger' is not a tracing exporter (allowed: otlp)  <=  Tracing jaeger[ini]  <=  HTTPSERVER Tracing = "jaeger"
[<server>] SslCertificateKey: the private key <path> is encrypted (it asks for a pass phrase)  <=  encrypted TLS key[json]
[<server>] SslCertificatePass: the pass phrase does not open the private key <path>  <=  wrong pass phrase[ini]
[<server>] SslCertificatePass: the environment variable <name> is not set  <=  pass phrase variable unset[json]
[<server>] SslCertificatePass: env: names no environment variable  <=  pass phrase env: without a name[ini]
[<server>] SslCertificatePass: the file <path> cannot be read (No such file or directory)  <=  pass phrase file missing[ini]
[<server>] SslCertificatePass: the pass phrase is empty  <=  pass phrase file empty[json]
[<server>] SslCertificatePass: must be text  <=  pass phrase a number[json]
[<server>] SslCertificateCA: the chain <path> does not issue the certificate <path> (...)  <=  chain of another CA[json]
[<server>] SslCertificateCA: the file <path> holds no PEM certificate  <=  chain not PEM[ini]
[<server>] SslMinVersion: 'TLSv1.1' is not a TLS version fwrest accepts (TLSv1.2, TLSv1.3)  <=  TLSv1.1[ini]
[<server>] SslCiphers: OpenSSL selects no cipher from <ciphers> (...)  <=  ciphers refused[json]
[<server>] SslCiphers: no cipher of <ciphers> can be used with the key <path> (...)  <=  ciphers of another key type[ini]
[<server>] SslClientCA: SslClientCA is missing: SslClientCert=<n> asks clients for certificates, which must chain to the CAs it names  <=  client certificates without CA[ini]
[<server>] SslClientCA: the CA file <path> cannot be loaded (...)  <=  client CA garbage[json]
[<server>] SslMinVersion: SslMinVersion is a TLS option, and the port speaks plain HTTP  <=  TLS option on plain HTTP[ini]
[HTTPSERVER] SigningKeyFile: the signing key in <file> is corrupt or shorter than 32 bytes  <=  short SigningKeyFile[json]
[<server>] Port: 192.0.2.1:<port> cannot be bound: Cannot assign requested address  <=  address of no interface[ini] | serve
[<server>] HostName: the host name 'no.invalid' cannot be resolved (...)  <=  host unresolvable[json]
# oAuth2 ports
[<server>] FwData: FwData Authorization signingAlg 'eddsa' is not an algorithm fwrest signs tokens with (the value is case-sensitive)  <=  signingAlg lower case[json]  <=  oAuth2 signingAlg = "eddsa"
[<server>] FwData: FwData Authorization boundTokens 'DPoP' is not a binding fwrest knows (the value is case-sensitive)  <=  boundTokens capitalised[json]  <=  oAuth2 boundTokens = "DPoP"
[<server>] FwData: FwData Authorization "boundTokens": "mtls" binds tokens to the client certificate, and this server asks clients for none  <=  boundTokens mtls without client certificates[json]  <=  oAuth2 boundTokens = "mtls"
[<server>] FwData: FwData Authorization issuer must be an https URL without query or fragment, got 'http://auth.example.com'  <=  issuer over http[ini]  <=  oAuth2 issuer = "http://auth.example.com"
[<server>] FwData: FwData Authorization loginPage must name an HTML file as file:NAME.html, got 'login.html'  <=  loginPage no file:[json]  <=  oAuth2 loginPage = "login.html"
[<server>] FwData: FwData Authorization loginPage names <path>, which cannot be read: ...  <=  loginPage missing[json]  <=  oAuth2 loginPage = "file:missing-login.html"
[<server>] FwData: onAuthNoCheckUri <function> must return a list of paths, got 42  <=  NoCheckUri a number[ini]  <=  oAuth2 onAuthNoCheckUri = "nocheck_number"
# changes of two sections: the password of a rediss:// store, a section a location names
[HTTPSERVER] StateStorePassword: the environment variable <name> is not set  <=  StateStorePassword variable unset[ini]  <=  HTTPSERVER StateStore = "rediss://127.0.0.1:6380/0"  <=  HTTPSERVER StateStorePassword = "env:FWREST_NOT_SET_EVER"
[CORS_WEB] AllowOrigins: 'https://app.example.com/' is not an origin (scheme://host[:port], http or https, no path)  <=  CORS origin with a path[ini]  <=  ROOT CORS = "CORS_WEB"  <=  CORS_WEB AllowOrigins = "https://app.example.com/"
[CORS_WEB] AllowOrigins: 'https://*.com' allows every site under the top-level domain 'com' (a wildcard right over a single label matches the whole web there)  <=  CORS wildcard over a top-level domain[ini]  <=  ROOT CORS = "CORS_WEB"  <=  CORS_WEB AllowOrigins = "https://*.com"
[CORS_WEB] AllowOrigins: AllowOrigins=* cannot be used with AllowCredentials=1 (any site could then act with the user's credentials)  <=  CORS any origin with credentials[ini]  <=  ROOT CORS = "CORS_WEB"  <=  CORS_WEB AllowOrigins = "*"  <=  CORS_WEB AllowCredentials = 1
[CORS_WEB] AllowOrigins: the required key AllowOrigins is empty (no origin could call)  <=  CORS no origin[ini]  <=  ROOT CORS = "CORS_WEB"  <=  CORS_WEB AllowOrigins = ""
[CORS_WEB] AllowHeaders: 'X Bad' is not a header name (letters, digits and the marks of RFC 9110 5.6.2; no space, colon or other separator)  <=  CORS header with a space[ini]  <=  ROOT CORS = "CORS_WEB"  <=  CORS_WEB AllowOrigins = "https://app.example.com"  <=  CORS_WEB AllowHeaders = "Content-Type, X Bad"
[RL_API] Key: 'session' is not what a rate limit counts by (user or address)  <=  RateLimit Key[ini]  <=  ROOT RateLimit = "RL_API"  <=  RL_API Key = "session"
[RL_API] Window: must be a duration in whole seconds (60, 60s, 1m, 1h), got '1.5s'  <=  RateLimit Window not a duration[json]  <=  ROOT RateLimit = "RL_API"  <=  RL_API Window = "1.5s"
[RL_API] Window: 0 seconds is out of range (1-86400 seconds)  <=  RateLimit Window zero[ini]  <=  ROOT RateLimit = "RL_API"  <=  RL_API Window = "0s"
[TYPES] .xlsx: 'spreadsheet' is not a media type (type/subtype)  <=  ContentTypes without a slash[ini]  <=  HTTP_REST ContentTypes = "TYPES"  <=  TYPES .xlsx = "spreadsheet"
# files and modules beside the config: the store's TLS and password files ("file Key = [name,
# cert, prefix]": redis_file), a file written as given ("write NAME = text"), a module of MODULES
# and the environment's Repository ("module FILE = repository")
[HTTPSERVER] StateStoreCA: StateStoreCA is set, but StateStore is not a rediss:// or rediss+cluster:// (TLS) URL  <=  StateStoreCA on redis://[ini]  <=  HTTPSERVER StateStore = "redis://127.0.0.1:6379/0"  <=  file StateStoreCA = ["ca.pem", "ca"]
[HTTPSERVER] StateStoreCA: the file <path> holds no CA certificate (...)  <=  StateStoreCA garbage[json]  <=  HTTPSERVER StateStore = "rediss://127.0.0.1:6380/0"  <=  file StateStoreCA = ["ca.pem"]
[HTTPSERVER] StateStoreKey: StateStoreCert is set without StateStoreKey: a client certificate needs both  <=  StateStoreCert alone[ini]  <=  HTTPSERVER StateStore = "rediss://127.0.0.1:6380/0"  <=  file StateStoreCert = ["c.pem", "cert"]
[HTTPSERVER] StateStoreCert: the client certificate <path> and key <path> cannot be loaded (...)  <=  StateStoreCert garbage[json]  <=  HTTPSERVER StateStore = "rediss://127.0.0.1:6380/0"  <=  file StateStoreCert = ["c.pem"]  <=  file StateStoreKey = ["k.pem", "key"]
[HTTPSERVER] StateStorePassword: the password is empty  <=  StateStorePassword empty file[json]  <=  HTTPSERVER StateStore = "rediss://127.0.0.1:6380/0"  <=  file StateStorePassword = ["pw.txt", null, "file:"]
[<server>] FwData: FwData Authorization loginPage: the template <path> lacks the form placeholder, so its page could log no one in  <=  loginPage without form[json]  <=  write login.html = "<html><body>{{client}}</body></html>"  <=  oAuth2 loginPage = "file:login.html"
[<server>] onAuthparams: the function <function> returned settings that cannot be used: ...  <=  onAuthparams returns a user without password[json]  <=  module lifetimes.py = "app, lifetimes"  <=  oAuth2 onAuthparams = "half_user"
[<server>] onAuthparams: the function <function> returned settings that cannot be used: the scopes of the user 'ada': 'orders read' is not a scope name ...  <=  onAuthparams scope with a space[json]  <=  module scopes.py = "app, scopes"  <=  oAuth2 onAuthparams = "bad_scope"
[<server>] onAuthparams: the function <function> returned settings that cannot be used: a top-level scopes belongs to the single username or client_id, and there is none  <=  onAuthparams stray scopes[ini]  <=  module scopes.py = "app, scopes"  <=  oAuth2 onAuthparams = "stray_scopes"
[<server>] onAuthparams: the function <function> gives a lifetime no token request could use: ...  <=  onAuthparams access_expires 0[ini]  <=  module lifetimes.py = "app, lifetimes"  <=  oAuth2 onAuthparams = "zero"
[<server>] onAuthparams: the file <path> gives a lifetime no token request could use: ...  <=  onAuthparams file refresh_expires out of range[json]  <=  write params.json = "{\"refresh_expires\": \"Date()+99999999\"}"  <=  oAuth2 onAuthparams = "file:params.json"
[<server>] Locations: GET /rest/x/:id calls typed_path.f (annotation, ...): its path parameter 'id' is annotated list[int]: a path parameter converts to int, float, bool, str, decimal.Decimal, uuid.UUID, datetime.date, datetime.datetime, an Enum or a Literal  <=  typed path parameter a list[ini]  <=  module typed_path.py = "typed_path"
[<server>] Locations: POST /rest/x calls typed_two_bodies.f (annotation, ...): its parameters 'a', 'b' are each annotated as the JSON body; a request has one body  <=  typed two bodies[json]  <=  module typed_two_bodies.py = "typed_two_bodies"
[<server>] Locations: GET /rest/x calls typed_unfilled.f (annotation, ...): its parameter 'a' is annotated bytes, which fwrest cannot fill: ...  <=  typed hint unfilled with a default[ini]  <=  module typed_unfilled.py = "typed_unfilled"
[<server>] Locations: GET /rest/x calls typed_unresolved.f (annotation, ...): the annotation of its parameter 'a' ('Missing') cannot be resolved (NameError: name 'Missing' is not defined)  <=  typed hint unresolved[ini]  <=  module typed_unresolved.py = "typed_unresolved"
[ENV] Repository: the file <path> would be imported as module 'app', but a module of that name is already loaded from <path>  <=  two modules app[ini]  <=  module lib/app.py = "app, lib/app.py"
[ENV] Repository: importing 'needs_a_package' failed: ModuleNotFoundError: No module named ...  <=  missing package[json]  <=  module needs_a_package.py = "needs_a_package"
[ENV] Repository: importing 'bad_route' failed: the route path '/a/:id/:id' repeats the parameter 'id'  <=  route twice[ini]  <=  module bad_route.py = "bad_route"
[ENV] Repository: importing 'route_number' failed: a route path must be text, not int  <=  route a number[json]  <=  module route_number.py = "route_number"
[ENV] Repository: importing 'bad_scope' failed: the scopes of @get('/a'): 'orders read' is not a scope name ...  <=  route scope with a space[ini]  <=  module bad_scope.py = "bad_scope"
"""


def change(text: str) -> Mutate:
    """A ``ROWS_OF_SETTINGS`` change: ``SECTION Key = value``, ``oAuth2 key = value``, ``file Key =
    [...]``, ``write NAME = text``, ``module FILE = repository``."""
    target, value = text.split(" = ", 1)
    kind, key = target.split(" ")
    if kind == "oAuth2":
        return tls_auth(**{key: json.loads(value)})
    if kind == "file":
        return redis_file(key, *json.loads(value))
    if kind == "write":
        return raw_file(key, json.loads(value))
    if kind == "module":
        return module(key, MODULES[key], json.loads(value))
    return setting(kind, key, json.loads(value))


def rows_of_settings() -> dict[str, Broken]:
    found: dict[str, Broken] = {}
    for line in ROWS_OF_SETTINGS.strip().splitlines():
        if line.startswith("#"):
            continue
        row, case, *changes = line.split("  <=  ")
        assert row not in found, f"the row {row!r} twice"
        if changes:
            name, fmt = case.removesuffix("]").rsplit("[", 1)
            found[row] = new(name, fmt, both(*map(change, changes)))
        else:
            case_id, _, command = case.partition(" | ")
            found[row] = known(case_id, command or "check")
    return found


PROVOKED: dict[str, Broken | Special] = {
    **rows_of_settings(),
    # the file
    "the configuration file <path> does not exist or is not a file": missing_file,
    "the configuration file <path> cannot be read (Permission denied)": unreadable_file,
    "the configuration is given as text (JSON or INI), where a file name is expected": (
        config_as_text
    ),
    "... is not usable JSON: it is nested too deeply": new("nested", "json", nested_json),
    # location features
    "[ROOT] DefaultPage: must be a file name, got 'pages/index.html'": new(
        "DefaultPage with a folder", "json", root_files("pages/index.html")
    ),
    "[POOL] OnStart: the service did not start: OnStart <function> of [POOL] raised "
    "RuntimeError: ...": start_on_start_fails,
    # starting: the state store, the signing key, the ports
    "[HTTPSERVER] StateStore: the sqlite store <path> cannot be opened: ...": Broken(
        Case("sqlite file is a folder", "json", "", sqlite_file_is_a_folder), "serve"
    ),
    "[HTTPSERVER] StateStore: the state store <path> holds schema <n>, written by fwrest "
    "<version>, which fwrest <version> (schema <n>) cannot read. Fix: run fwrest <version> or "
    "newer on it, or point StateStore at a store of schema <n> or older, e.g. the copy fwrest "
    "store migrate made (docs/deploy.md, Upgrading).": new(
        "sqlite store of a newer release",
        "json",
        sqlite_file_of_a_newer_release(b'{"schema": 9, "compatible": 9, "release": "9.1.0"}'),
    ),
    "[HTTPSERVER] StateStore: the state store <url> holds schema <n>, written by fwrest "
    "<version>, which fwrest <version> (schema <n>) cannot read. Fix: run fwrest <version> or "
    "newer on it, or point StateStore at a Redis of schema <n> or older, e.g. one restored from "
    "a Redis backup (an RDB or AOF file) taken before the newer release started (docs/deploy.md, "
    "Upgrading).": redis_of_a_newer_release("serve"),
    "[HTTPSERVER] StateStore: the state store <path> holds a schema marker fwrest cannot read "
    "(...). Fix: restore the store's backup: fwrest did not write this marker (the sqlite meta "
    "row schema, the Redis key fwrest:schema).": new(
        "sqlite store marker garbage", "json", sqlite_file_of_a_newer_release(b"not a marker")
    ),
    "[HTTPSERVER] Tracing: Tracing=otlp needs the OpenTelemetry SDK and its OTLP exporter, "
    "which are not installed (<module> is missing)": tracing_check(
        "", "opentelemetry.exporter.otlp.proto.http"
    ),
    "[HTTPSERVER] Tracing: the environment variable <name>=<value> names no OTLP protocol fwrest "
    "exports spans with (supported: http/protobuf, grpc)": tracing_check("http/json", ""),
    "[HTTPSERVER] Tracing: the environment variable <name> is not an http:// or https:// URL "
    "with a host, where OTLP over HTTP sends spans": tracing_check("", "", "collector:4318"),
    "[HTTPSERVER] Tracing: the environment variable <name>=grpc needs OpenTelemetry's OTLP "
    "exporter for grpc, which is not installed (<module> is missing)": tracing_check(
        "grpc", "opentelemetry.exporter.otlp.proto.grpc"
    ),
    "[HTTPSERVER] StateStoreCA: Redis's TLS certificate does not verify: ... "
    "certificate verify failed: ...": asking_redis("serve", ca="other_ca"),
    "[HTTPSERVER] StateStoreCert: the TLS handshake with Redis failed (does Redis ask for a "
    "client certificate? tls-auth-clients): ...": asking_redis("check", cert=False),
    "[HTTPSERVER] StateStore: the TLS handshake with Redis failed: ...": asking_redis(
        "check", foreign_cert=True
    ),
    "[HTTPSERVER] StateStorePassword: Redis refused the password: ...": asking_redis(
        "serve", password="Wrong-Pw-1"
    ),
    "[HTTPSERVER] StateStore: Redis refused the password: ...": asking_redis(
        "check", url_password="Wrong-Pw-2"
    ),
    "[HTTPSERVER] SigningKeyFile: the signing key file <file> cannot be read: Is a directory": new(
        "signing key file is a folder", "json", key_file_is_a_folder
    ),
    "[HTTPSERVER] SigningKeyFile: the signing key file <file> cannot be created in <folder>: "
    "...": new("signing key folder is a file", "ini", key_folder_is_a_file),
    "[HTTPSERVER] SigningKeyFile: the key set in <file> is not JSON": new(
        "key set not JSON", "json", key_set("{broken")
    ),
    "[HTTPSERVER] SigningKeyFile: the key set file <file> cannot be read: Is a directory": new(
        "key set is a folder", "json", key_set(None)
    ),
    "[HTTPSERVER] SigningKeyFile: the key <kid> in <file> cannot be loaded (...)": new(
        "key set entry damaged", "json", key_set(BAD_PEM_KEY_SET)
    ),
    "[<server>] Port: 127.0.0.1:<port> cannot be bound: Address already in use": address_in_use,
    # starting from Python
    "start(): workers must be a whole number of at least 1, got 0": start_refused(workers=0),
    "start(): the configuration must be a file path or a dict, got int": start_refused(42),
    "start(): workers must be at most 256, got 1000": start_refused(workers=1000),
    "the service did not become ready within <n> s; see the log": start_not_ready,
    "the service did not start (exit code 2); see its log above": start_with_workers,
    "[ENV] Repository: start(..., workers=N) runs the service in new processes, which cannot "
    "import the endpoints of the main script": start_script(START_MAIN),
    "[HTTPSERVER] Repository: the calling program's module 'gone_mod' cannot be imported: "
    "...": start_script(START_GONE),
    "wsRestfulStart: the infrastructure JSON must be an object of sections": Legacy("[]"),
    "wsRestfulStart: the infrastructure JSON has no HTTPSERVER object": Legacy({}),
    "wsRestfulStart: [HTTPSERVER] Servers: HTTPSERVER lists no Servers": Legacy({"HTTPSERVER": {}}),
    "wsRestfulStart: the extra path 'rest' must start with /": Legacy(legacy_base(), "rest"),
    "wsRestfulStart: the server 'HTTP_REST' is not in the infrastructure JSON": Legacy(
        {"HTTPSERVER": {"Servers": "HTTP_REST"}}
    ),
    "wsRestfulStart: [HTTP_REST] Locations: Locations must name location sections "
    "(comma-separated, or a list)": Legacy(legacy_base(HTTP_REST={"Locations": 5})),
    "wsRestfulStart: [ROOT]: the location [ROOT] is not an object of keys": Legacy(
        legacy_base(ROOT="Path=/rest")
    ),
    # a ThreadPool written as a number names section "5", none for the extra location
    "wsRestfulStart: no server location names a ThreadPool to serve the extra path": Legacy(
        legacy_base(ROOT={"ThreadPool": 5}, **{"5": base(0)["POOL"]})
    ),
    # fwrest keys
    "[<server>] FwData: the oAuth2 port(s) <name> sign with HS256: there is no key set (HS256 "
    "signs with one secret key, SigningKeyFile, which is never published nor rotated by this "
    "command)": keys_on_hs256,
    # fwrest openapi
    "there is no server 'NOPE'; the servers are HTTP_REST": openapi_server,
    "fwrest: error: cannot write the OpenAPI document to <path> (No such file or directory)": (
        openapi_unwritable
    ),
}


@pytest.fixture(scope="module")
def outcomes(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every provocation run once: the broken configurations in parallel."""
    root = tmp_path_factory.mktemp("troubleshooting")
    certs = issue_certs(ca, root / "certs")
    found: dict[str, Outcome] = {}
    (root / "broken").mkdir()

    def run(job: tuple[int, tuple[str, Broken | Special]]) -> Outcome:
        index, (_row, how) = job
        if isinstance(how, Broken):
            return run_broken(how, index, root / "broken", certs)
        folder = root / f"special-{index:02d}"
        folder.mkdir()
        return how(folder, certs)

    # processes in parallel; wsRestfulStart in this process, one at a time
    jobs = [job for job in enumerate(PROVOKED.items()) if not isinstance(job[1][1], Legacy)]
    with ThreadPoolExecutor(3) as pool:
        for (_index, (row, _how)), outcome in zip(jobs, pool.map(run, jobs), strict=True):
            found[row] = outcome
    for job in enumerate(PROVOKED.items()):
        if isinstance(job[1][1], Legacy):
            found[job[1][0]] = run(job)
    return found


def test_every_row_has_a_broken_configuration() -> None:
    page = rows()
    assert len(page) == len(set(page)), "a row appears twice"
    missing = [row for row in page if row not in PROVOKED]
    stale = [row for row in PROVOKED if row not in page]
    assert not missing, "rows of docs/troubleshooting.md without a provocation here:\n" + "\n".join(
        missing
    )
    assert not stale, "provocations of rows docs/troubleshooting.md no longer has:\n" + "\n".join(
        stale
    )


# the first row's setup runs every provocation (~150 processes, 3 at a time): minutes
@pytest.mark.timeout(400)
@pytest.mark.parametrize("row", rows())
def test_the_row_is_the_real_message(row: str, outcomes: dict[str, Outcome]) -> None:
    assert row in outcomes, f"no broken configuration provokes {row!r}"
    outcome = outcomes[row]
    assert outcome.failed_as_configured, outcome.text
    assert row_pattern(row).search(outcome.text), (
        f"docs/troubleshooting.md says {row!r}; the server said:\n{outcome.text}"
    )


# -- the source's messages -------------------------------------------------------------------

Part = str | None  # literal text, or None: a value (a hole in a template, a wildcard in a row)


@dataclass(frozen=True)
class Template:
    where: str  # file:line
    parts: tuple[Part, ...]
    wrapped: bool  # RouteError: shown inside another message, not at its start

    def __str__(self) -> str:
        return "".join("{}" if p is None else p for p in self.parts)


def _parts(node: ast.expr) -> tuple[Part, ...] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, ast.JoinedStr):
        return tuple(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else None
            for v in node.values
        )
    return None


def _factories(tree: ast.Module) -> dict[str, int]:
    """Helpers returning ``ConfigError(problem, ...)``: name -> position of ``problem``."""
    found: dict[str, int] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        params = [a.arg for a in fn.args.args]
        skip = 1 if params[:1] == ["self"] else 0
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Return)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "ConfigError"
                and node.value.args
                and isinstance(node.value.args[0], ast.Name)
                and node.value.args[0].id in params
            ):
                found[fn.name] = params.index(node.value.args[0].id) - skip
    return found


@cache
def templates() -> tuple[Template, ...]:
    """The problem text of every ``ConfigError`` and ``RouteError`` src/ can raise."""
    out: list[Template] = []
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in SRC.rglob("*.py")}
    # helpers are called in their own package only (raw.error(...) in config/)
    package_factories: dict[Path, dict[str, int]] = {}
    for path, tree in trees.items():
        package_factories.setdefault(path.parent, {}).update(_factories(tree))
    for path in sorted(trees):
        tree = trees[path]
        factories = package_factories[path.parent]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            position = 0 if name in ("ConfigError", "RouteError") else factories.get(name)
            if position is None or len(node.args) <= position:
                continue
            parts = _parts(node.args[position])
            if parts is None:  # a helper passing its parameter on
                continue
            literal = "".join(p for p in parts if p is not None)
            if not re.search(r"[a-z]{2}", literal):  # f"{exc}": another error's message
                continue
            where = f"{path.relative_to(ROOT).as_posix()}:{node.lineno}"
            out.append(Template(where, parts, wrapped=name == "RouteError"))
    return tuple(out)


def _chars(parts: tuple[Part, ...]) -> tuple[Part, ...]:
    """Literal text one character at a time (white space folded), values as None."""
    out: list[Part] = []
    for part in parts:
        if part is None:
            out.append(None)
        else:
            out.extend(re.sub(r"\s+", " ", part))
    return tuple(out)


def row_problem(row: str) -> tuple[Part, ...]:
    """A row without the log prefix and ``[section] key:``, wildcards as None."""
    text = row.removeprefix("wsRestfulStart: ")
    text = re.sub(r"^\[[^\]]+\][^:]*: ", "", text)
    return tuple(None if _WILD.fullmatch(p) else p for p in _WILD.split(text) if p)


ENOUGH_LETTERS = 10  # of the message's own words a row must show (all, when it has fewer)


@cache
def _words(template: tuple[Part, ...]) -> tuple[int, tuple[bool, ...]]:
    """The template words' letters and, per position, whether words follow (once per template:
    ``covers`` runs per row per start)."""
    tail = [False] * (len(template) + 1)
    for j in range(len(template) - 1, -1, -1):
        tail[j] = tail[j + 1] or (template[j] or "").isalpha()
    return sum(1 for t in template if t is not None and t.isalpha()), tuple(tail)


def covers(row: tuple[Part, ...], template: tuple[Part, ...]) -> bool:
    """Whether the row shows the template's message from its start: holes stand for any value (shown
    or a wildcard); the row's wildcards (``<name>``, ``...``) stand for values and their
    punctuation, never the message's words; the row may stop early but not inside a value words
    follow, and must show ``ENOUGH_LETTERS`` letters of words."""
    letters, tail_has_words = _words(template)

    @cache
    def best(i: int, j: int) -> int:
        """The most letters of the template's words matched from here; -1: no match."""
        if i == len(row):
            return 0
        if row[i] is None:  # a wildcard: skips holes and punctuation of the template
            out, k = -1, j
            while True:
                out = max(out, best(i + 1, k))
                if k == len(template) or (template[k] or "").isalpha():
                    return out
                k += 1
        if j == len(template):
            return -1
        if template[j] is None:  # a hole: the row shows a value, maybe abridged
            out = best(len(row), j + 1) if not tail_has_words[j + 1] else -1
            for k in range(i, len(row)):  # no row ends inside a value that words follow
                out = max(out, best(k, j + 1))
            return out
        if row[i] != template[j]:
            return -1
        rest = best(i + 1, j + 1)
        return rest + int(str(template[j]).isalpha()) if rest >= 0 else -1

    return best(0, 0) >= min(letters, ENOUGH_LETTERS)


def test_every_message_of_the_source_has_a_row() -> None:
    found = templates()
    assert len(found) > 80, f"only {len(found)} messages found in src/: is the scan broken?"
    problems = [_chars(row_problem(row)) for row in rows()]
    missing = []
    for template in found:
        wanted = _chars(template.parts)
        # a wrapped message (RouteError) shows inside another: "importing 'x' failed: ..."
        if not any(
            covers(problem[start:], wanted)
            for problem in problems
            for start in (range(len(problem)) if template.wrapped else (0,))
        ):
            missing.append(f"{template.where}: {template}")
    assert not missing, (
        "messages the server can stop a start with and docs/troubleshooting.md does not list "
        "(add a row and a broken configuration in this file):\n" + "\n".join(missing)
    )


# -- the page's example ----------------------------------------------------------------------


def test_the_example_output_is_what_fwrest_check_prints(tmp_path: Path) -> None:
    block = example("troubleshooting-check")
    command, *expected = block.text.splitlines()
    assert command.startswith("$ "), block.where
    args = shlex.split(command[2:])
    assert args[:2] == ["fwrest", "check"] and len(args) == 3, block.where
    sections = base(8080)
    sections["HTTPSERVER"]["Servers"] = "HTTP_REST, HTTP_ADMIN"
    sections["HTTP_ADMIN"] = {"HostName": "127.0.0.1", "Port": 8080, "Locations": "ROOT"}
    (tmp_path / args[2]).write_text(config_text(sections, "ini"))
    (tmp_path / "app.py").write_text(APP)
    done = subprocess.run(
        [*FWREST, *args[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=30
    )
    assert done.returncode == 2
    assert (done.stdout + done.stderr).splitlines() == expected
