"""Every code and config example of the user guide runs (issue 10) against real servers. The first
test fails on an unmarked block (:mod:`tests.docs.blocks`), a marker no test asks for, or a block
gone; the others run blocks as written with only these substitutions, each asserted found:
``Port=8080`` becomes ``Port=0`` (the real port read from ``serving`` lines; ``sh`` blocks via
``curl --connect-to``, :mod:`tests.docs.shell`; Python's ``127.0.0.1:8081`` replaced); the
``$argon2id$...`` placeholders real hashes of ``lovelace``/``hopper``; deploy.md's ``/srv/fwrest`` a
temporary folder, its ``fwrest`` this venv's; the example's CA by ``examples/make_certs.py``, others
by trustme.

Servers (real ``fwrest serve``, HTTP and TLS on loopback): the README's example service (examples/
as ``make run`` serves it) for the README's and Quickstart's curl walk-throughs and operations.md's
settings commands; the README's module and configuration, also serving endpoints.md's module and
``LoadURNs``; the "guide service" of authorization.md's Basic validator, oAuth2 ``FwData`` and
``params()``, operations.md's ``NativeRoutes`` and ``[APP_MONITOR]`` (scraped as its Prometheus
block says); deploy.md's systemd unit (``ExecStart`` in ``WorkingDirectory``, stopped by
``KillSignal`` within ``TimeoutStopSec``). Elsewhere: tests/e2e/test_scale_out.py,
tests/deploy/test_guide.py, tests/docs/test_troubleshooting.py."""

from __future__ import annotations

import ast
import configparser
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import requests
import trustme
import yaml  # type: ignore[import-untyped]
from argon2 import PasswordHasher
from prometheus_client.parser import text_string_to_metric_families

from fwrest.config.schema import KEYS
from tests.conftest import (
    ROOT,
    ReadyLines,
    ServerProcess,
    free_config,
    issue_certs,
    run_cli,
    wait_for,
)
from tests.docs.blocks import KINDS, Block, all_blocks, example, ids_asked_for, substitute
from tests.docs.shell import Reply, Step, run_block
from tests.e2e.support import example_copy, refresh_refused

EXAMPLES = ROOT / "examples"
EXAMPLE_APP = ("example-app", "example-secret")  # the OAuth2 client of examples/app
BIN = Path(sys.executable).parent


# -- coverage --------------------------------------------------------------------------------


def test_every_block_of_the_guide_is_run_or_compared_by_a_test() -> None:
    blocks = all_blocks()
    assert blocks, "no fenced blocks found in the guide"
    problems = [
        f"{b.where}: a ```{b.lang} block without a marker: add <!-- example: ID --> (a test "
        "runs it) or <!-- output: ID --> (a test compares it with real output) above it"
        for b in blocks
        if not b.kind
    ]
    problems += [
        f"{b.where}: unknown marker kind {b.kind!r}"
        for b in blocks
        if b.kind and b.kind not in KINDS
    ]
    ids = [b.id for b in blocks if b.id]
    problems += [
        f"the ID {i!r} marks more than one block" for i in sorted(set(ids)) if ids.count(i) > 1
    ]
    asked = ids_asked_for()
    problems += [
        f"{b.where}: no test asks for example({b.id!r})"
        for b in blocks
        if b.id and b.id not in asked
    ]
    problems += [
        f"{', '.join(where)}: example({i!r}) names no block of the guide"
        for i, where in sorted(asked.items())
        if i not in ids
    ]
    assert not problems, "\n".join(problems)


# -- helpers ---------------------------------------------------------------------------------


def doc_ports(ini_text: str) -> dict[str, str]:
    """The addresses an INI text documents: section -> ``HostName:Port``."""
    hosts: dict[str, str] = {}
    ports: dict[str, str] = {}
    section = ""
    for line in ini_text.splitlines():
        if m := re.match(r"^\[(\w+)\]", line):
            section = m[1]
        elif m := re.match(r"^HostName=(\S+)$", line):
            hosts[section] = m[1]
        elif m := re.match(r"^Port=(\d+)$", line):
            ports[section] = m[1]
    return {section: f"{hosts[section]}:{port}" for section, port in ports.items()}


def zero_ports(block: Block, text: str) -> str:
    """The block's text with every ``Port=N`` line set to ``Port=0``."""
    out, count = re.subn(r"(?m)^Port=\d+$", "Port=0", text)
    assert count, f"{block.where} ({block.id}): no Port= line to replace"
    return out


def connect_to(proc: ServerProcess, documented: dict[str, str]) -> dict[str, str]:
    """Documented address -> the real one, for each section that ``proc`` serves."""
    return {addr: f"127.0.0.1:{proc.ports[section]}" for section, addr in documented.items()}


def module_path(block: Block) -> str:
    """The file a Python block names in its first line: ``# app/users.py`` -> ``app/users.py``."""
    first = block.text.splitlines()[0]
    m = re.fullmatch(r"# (\S+\.py)", first.strip())
    assert m, f"{block.where} ({block.id}): the first line should name the file, e.g. # app/x.py"
    return m[1]


def write_module(block: Block, folder: Path, text: str | None = None) -> Path:
    path = folder / module_path(block)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(block.text if text is None else text)
    return path


def run_python(block: Block, text: str, cwd: Path) -> tuple[dict[str, Any], Any]:
    """A client example run as pasted, warnings as errors: its namespace and last expression."""
    tree = ast.parse(text, filename=block.where)
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr):
        tree.body.pop()
    else:
        last = None
    namespace: dict[str, Any] = {"__name__": f"guide_{block.id.replace('-', '_')}"}
    before = Path.cwd()
    os.chdir(cwd)
    try:
        # recorded rather than raised: a library may install its own filter while importing
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exec(compile(tree, block.where, "exec"), namespace)
            value = None
            if last is not None:
                value = eval(compile(ast.Expression(last.value), block.where, "eval"), namespace)
    finally:
        os.chdir(before)
    # (a ResourceWarning may come from any object the collector happens to finalise here)
    warned = [
        f"{w.category.__name__}: {w.message}" for w in caught if w.category is not ResourceWarning
    ]
    if warned:
        close_all(namespace)
    assert not warned, f"{block.where} ({block.id}) warns: " + "; ".join(warned)
    return namespace, value


def close_all(namespace: dict[str, Any]) -> None:
    for value in namespace.values():
        if isinstance(value, httpx.Client | requests.Session):
            value.close()


def argon2_hash(password: str) -> str:
    """An argon2id hash with the library's defaults, those the guide shows (m=65536,t=3,p=4)."""
    return PasswordHasher().hash(password)


def by_command(replies: list[tuple[Step, Reply]], fragment: str) -> Reply:
    found = [reply for step, reply in replies if fragment in step.command]
    assert len(found) == 1, f"expected one command with {fragment!r}"
    return found[0]


# -- make ------------------------------------------------------------------------------------

# What the comments of the make blocks promise, as commands `make -n -B` prints.
MAKE_PROMISES = {
    "run": [
        "-m venv .venv",
        "pip install",
        "examples/make_certs.py",
        "fwrest serve examples/service.ini",
    ],
    "test": [
        "-m venv .venv",
        "pip install",
        "ruff check",
        "ruff format --check",
        "mypy",
        "tests.tools.mypyc_lint",
        "FWREST_COMPILE=1 .venv/bin/python -m build --outdir .wheel .",
        "FWREST_TEST_BUILD=compiled",
        ".venv-wheel/bin/pytest",
        "FWREST_TEST_BUILD=pure",
        ".venv/bin/pytest",
    ],
}


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_make_targets_do_what_the_quickstart_says(page: str) -> None:
    block = example("readme-make") if page == "README.md" else example("index-make")
    targets = [line.split("#")[0].split()[1] for line in block.text.splitlines() if line.strip()]
    assert targets == list(MAKE_PROMISES), f"{block.where}: update MAKE_PROMISES for {targets}"
    for target in targets:
        # -n prints the commands without running them; -B as on a fresh checkout
        done = subprocess.run(
            ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        for command in MAKE_PROMISES[target]:
            assert command in done.stdout, f"make {target} does not run {command!r}:\n{done.stdout}"


def test_make_check_validates_the_example_on_a_fresh_checkout() -> None:
    """README: ``make check`` validates the example's configuration; on a fresh checkout (no
    certificates yet, only ``make run`` made them) it makes them first, as ``make run`` does."""
    done = subprocess.run(
        ["make", "-n", "-B", "check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    commands = done.stdout
    assert "examples/make_certs.py" in commands, commands
    assert "fwrest check examples/service.ini" in commands, commands
    made = commands.index("examples/make_certs.py")
    assert made < commands.index("fwrest check examples/service.ini"), commands


# -- the example service ---------------------------------------------------------------------


@dataclass
class Running:
    proc: ServerProcess
    folder: Path  # where the commands run
    connect_to: dict[str, str]
    ca: str  # the file of the CA its TLS port's certificate chains to, under ``folder``

    def url(self, section: str) -> str:
        return self.proc.url(section).rstrip("/")

    def tls(self, **options: Any) -> httpx.Client:
        """A client that trusts the service's CA (``options``: httpx's, such as ``auth``)."""
        context = ssl.create_default_context(cafile=str(self.folder / self.ca))
        return httpx.Client(verify=context, **options)

    def run(self, block: Block) -> list[tuple[Step, Reply]]:
        """The ``sh`` block's commands, run in ``folder`` against this service."""
        return run_block(block, self.folder, self.connect_to)


@pytest.fixture(scope="module")
def example_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """examples/ copied as on a fresh checkout (make_certs.py), service.ini served with ports 0."""
    work = tmp_path_factory.mktemp("example")
    documented = doc_ports((EXAMPLES / "service.ini").read_text())
    assert set(documented) == {"HTTP_REST", "HTTPS_REST", "HTTP_BASIC", "APP_MONITOR"}
    ini = example_copy(work)
    proc = ServerProcess(ini).wait_ready()
    try:
        yield Running(proc, work, connect_to(proc, documented), "examples/certs/ca.pem")
    finally:
        assert proc.stop() == 0, proc.log()


def test_readme_walk_through_of_the_example_service(example_service: Running) -> None:
    replies = example_service.run(example("readme-example-curls"))
    hello = by_command(replies, "/rest/hello?name=Bob").json()
    assert hello == {"message": "Hello, Bob!", "team": "example"}  # UserData of HTTP_REST
    created = by_command(replies, "-X POST")
    assert created.status == 201
    assert created.json()["name"] == "Kim" and created.json()["id"] not in ("1", "2")
    assert by_command(replies, "/rest/mapped/Zoe").body == "Hello, Zoe, from a mapped route"


def test_readme_oauth2_walk_through(example_service: Running) -> None:
    replies = example_service.run(example("readme-oauth2-curls"))
    grants = [json.loads(reply.body) for step, reply in replies if "oauth2/token" in step.command]
    assert len(grants) == 2
    assert grants[0]["refresh_token"] != grants[1]["refresh_token"], "the refresh gave a new pair"
    assert grants[0]["expires_in"] == 900  # access_expires of the example's params
    assert by_command(replies, "Bearer $ACCESS_TOKEN").json()["user"] == "grace"
    log = example_service.proc.log()
    assert "hopper" not in log and grants[0]["refresh_token"] not in log
    assert by_command(replies, "oauth2/revoke").body == ""  # logged out: the family is revoked
    base = example_service.url("HTTPS_REST")
    with example_service.tls() as http:
        assert http.get(f"{base}/whoami").status_code == 401  # no token
        assert http.get(f"{base}/hello").status_code == 200  # onAuthNoCheckUri
        refresh_refused(
            http, f"{base}/fw/oauth2/token", grants[1]["refresh_token"], auth=EXAMPLE_APP
        )


def test_readme_authorization_code_walk_through(example_service: Running) -> None:
    replies = example_service.run(example("readme-code-curls"))
    page = by_command(replies, "authorize?$Q")
    assert page.headers["content-type"].startswith("text/html")
    assert "example-native" in page.body and 'name="password"' in page.body
    tokens = by_command(replies, "grant_type=authorization_code").json()
    with example_service.tls() as http:
        who = http.get(
            f"{example_service.url('HTTPS_REST')}/whoami",
            headers={"Authorization": f"Bearer {tokens['access_token']}"},
        )
    assert who.status_code == 200 and who.json()["user"] == "grace", who.text
    log = example_service.proc.log()
    assert "hopper" not in log and tokens["refresh_token"] not in log
    code = by_command(replies, "fw_csrf=$CSRF").headers["location"].split("code=")[1]
    assert code.split("&")[0] not in log


def test_authorization_code_guide_commands(example_service: Running) -> None:
    replies = example_service.run(example("code-guide-curls"))
    wrong = by_command(replies, "password=wrong")
    assert "Invalid username or password." in wrong.body
    first, second = [r for step, r in replies if "example-web:example-web-secret" in step.command]
    assert first.json()["scope"] == "default"
    assert second.json()["error"] == "invalid_grant"


def test_authorization_code_guide_params() -> None:
    from fwrest.auth.oauth2.params import normalise

    params = normalise(json.loads(example("code-params").text))
    assert params.public == frozenset({"spa", "cli"})
    assert params.redirect_uris["cli"] == frozenset({"http://127.0.0.1/callback"})
    assert params.types == ("authorization_code", "refresh_token")


def test_readme_operating_commands(example_service: Running) -> None:
    replies = example_service.run(example("readme-operating-curls"))
    routes = by_command(replies, "/fw/rest/list/service").json()
    assert isinstance(routes, list) and any(r["endpoint"] == "/users/:id" for r in routes)
    openapi = by_command(replies, "openapi.json").json()
    assert isinstance(openapi, dict) and openapi["openapi"].startswith("3.1")
    settings = by_command(replies, "-H 'Accept: application/json'").json()["settings"]
    assert settings["rest_log_level"]["file"] == 3  # [GENERAL] of examples/service.ini
    changed = by_command(replies, '{"rest_log_level": 5}').json()["settings"]["rest_log_level"]
    assert changed["effective"] == 5
    metrics = by_command(replies, "9090").json()
    values = {m["name"]: m["value"] for entry in metrics for m in entry["metrics"]}
    assert set(values) == {"memory_resident", "uptime"} and values["memory_resident"] > 0
    audit = by_command(replies, "/fw/rest/audit")
    assert audit.status == 200 and isinstance(audit.json(), list), audit.body
    # the README's settings change is in the trail (kept off the request's way: waited for)
    deadline = time.monotonic() + 10
    while True:
        trail = httpx.get(
            f"{example_service.url('HTTP_BASIC')}/fw/rest/audit?event=settings.change",
            auth=("ada", "lovelace"),
        ).json()
        mine = [e for e in trail if e["details"]["new"] == 5 and e["port"] == "HTTP_REST"]
        if mine:
            break
        assert time.monotonic() < deadline, trail
        time.sleep(0.1)
    assert mine[0]["actor"] == "anonymous" and mine[0]["details"]["key"] == "rest_log_level"
    # put back the file's log level the README's change set
    back = httpx.post(
        f"{example_service.url('HTTP_REST')}/fw/rest/config", json={"rest_log_level": None}
    )
    assert back.status_code == 200, back.text


def test_quickstart_commands(example_service: Running) -> None:
    replies = example_service.run(example("index-curls"))
    assert by_command(replies, "/rest/users/1").json() == {"id": "1", "name": "Ada"}
    me = by_command(replies, "ada:lovelace").json()
    assert (me["user"], me["scheme"]) == ("ada", "basic")
    wrong = httpx.get(f"{example_service.url('HTTP_BASIC')}/whoami", auth=("ada", "wrong"))
    assert wrong.status_code == 403
    assert by_command(replies, "healthcheck").json()["status"] == "UP"


def test_operations_settings_commands(example_service: Running) -> None:
    block = example("operations-settings-curls")
    replies = example_service.run(block)
    assert len(replies) == 2
    changed, back = (reply.json()["settings"]["rest_log_level"] for _step, reply in replies)
    assert changed["effective"] == 5 and changed["runtime"] == 5
    assert back["runtime"] is None and back["effective"] == back["file"] == 3  # the file's value
    page = httpx.get(
        f"{example_service.url('HTTP_REST')}/fw/rest/config", headers={"Accept": "application/json"}
    )
    assert page.json()["settings"]["rest_log_level"] == back  # as the settings page shows it


def test_operations_usage_reset_command(example_service: Running) -> None:
    """The reset is a state change (SPEC 7.1): JSON, sent to a name of the server."""
    block = example("operations-usage-reset")
    replies = example_service.run(block)
    assert [reply.json() for _step, reply in replies] == [{"reset": True}]
    plain = httpx.post(f"{example_service.url('HTTP_REST')}/fw/rest/usage/time/reset")
    assert plain.status_code == 415, plain.text  # neither JSON nor the page's form


def _line_shape(line: str) -> str:
    """An access line with what differs between runs replaced: time, worker, numbers, client."""
    line = re.sub(r"^\S+Z ", "TS ", line)
    line = re.sub(r"\[w\d+\]", "[W]", line)
    line = re.sub(r"=\d+us", "=Nus", line)
    line = re.sub(r"port=\d+", "port=P", line)
    line = re.sub(r"request_id=\S+", "request_id=R", line)
    return re.sub(r"client=\S+", "client=C", line)


def _access_line(proc: ServerProcess, url: str) -> str:
    """The access line written for one GET of ``url`` (a worker writes it after the answer)."""
    mark = len(proc.log())
    assert httpx.get(url).status_code == 200
    wanted = f" GET {urlsplit(url).path} "

    def lines() -> list[str]:
        return [x for x in proc.log()[mark:].splitlines() if " fwrest.access " in x and wanted in x]

    wait_for(lines, 15, f"the access line of{wanted}")
    found = lines()
    assert len(found) == 1, proc.log()[mark:]
    return found[0]


def test_operations_access_lines_are_what_the_service_writes(example_service: Running) -> None:
    documented = [_line_shape(x) for x in example("operations-access-lines").text.splitlines()]
    base = example_service.url("HTTP_REST")
    written = []
    try:
        for trace in (0, 1, 2):
            changed = httpx.post(f"{base}/fw/rest/config", json={"rest_trace_time": trace})
            assert changed.status_code == 200, changed.text
            # every worker has it within 1 s (SPEC 5.4); a busy machine's request may meet one that
            # has not: ask until the line has this level's shape (or the guard ends)
            deadline = time.monotonic() + 15
            while True:
                shape = _line_shape(_access_line(example_service.proc, f"{base}/hello"))
                if shape == documented[trace] or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            written.append(shape)
    finally:
        httpx.post(f"{base}/fw/rest/config", json={"rest_trace_time": None})
    assert written == documented


# -- the README's own module and configuration, and endpoints.md -----------------------------


def test_operations_kubernetes_probes_answer(example_service: Running) -> None:
    """The manifest's probes, on the example service's monitor port as documented."""
    manifest = yaml.safe_load(example("operations-kubernetes-probes").text)
    (container,) = manifest["containers"]
    ports = {p["containerPort"] for p in container["ports"]}
    assert ports == {8080, 9090}
    probes = {name: container[name]["httpGet"] for name in container if name.endswith("Probe")}
    assert set(probes) == {"startupProbe", "livenessProbe", "readinessProbe"}
    for name, get in probes.items():
        where = example_service.connect_to[f"127.0.0.1:{get['port']}"]
        url = f"http://{where}{get['path']}"
        # ready once the store's first ping answered
        wait_for(lambda u=url: httpx.get(u).status_code == 200, 10, f"{name} {url}: 200", 0.1)
        assert httpx.get(url).json()["status"] == "UP"
    # the same routes of the REST port, as the text says
    base = example_service.url("HTTP_REST")
    assert httpx.get(f"{base}/fw/healthcheck/ready").status_code == 200


def test_operations_json_lines_have_the_documented_fields(tmp_path: Path) -> None:
    """The documented JSON lines against a real LogFormat=json run's: same records, same fields."""
    from fwrest.testing import Client
    from tests.conftest import module_config

    documented = [json.loads(line) for line in example("operations-json-lines").text.splitlines()]
    config = module_config(
        tmp_path, "json_lines_doc_app", extra={"HTTPSERVER": {"LogFormat": "json"}}
    )
    with Client(config) as http:
        assert http.get("/rest/hello?password=x").status_code == 200
        boom = http.get("/rest/boom", headers={"X-Request-ID": "checkout-7f3a:2"})
        assert boom.status_code == 500
    lines = (tmp_path / "server.log").read_text().splitlines()
    real = [json.loads(line) for line in lines]
    assert len(real) == len(documented) == 4, lines
    stable = ("level", "logger", "method", "route", "path", "status", "user")
    for doc, got in zip(documented, real, strict=True):
        assert set(doc) == set(got), (doc, got)
        assert {k: doc.get(k) for k in stable} == {k: got.get(k) for k in stable}
        assert type(doc.get("duration_us")) is type(got.get("duration_us"))
    assert real[0]["message"].startswith("GET /rest/hello?password=*** 200 port=")
    assert [r["request_id"] for r in real[1:]] == ["checkout-7f3a:2"] * 3
    assert re.fullmatch(r"[0-9a-f]{32}", real[0]["request_id"])


def serve_folder(folder: Path, config: Path) -> ServerProcess:
    checked = run_cli("check", str(config), cwd=folder)
    assert checked.returncode == 0, checked.stderr
    return ServerProcess(config).wait_ready()


def test_readme_module_and_configuration(tmp_path: Path) -> None:
    module, ini = example("readme-endpoints-module"), example("readme-config")
    write_module(module, tmp_path)
    config = tmp_path / "service.ini"
    config.write_text(zero_ports(ini, ini.text))
    proc = serve_folder(tmp_path, config)
    try:
        base = proc.url("HTTP_REST").rstrip("/")
        assert httpx.get(f"{base}/users/1").json() == {"id": "1"}
        created = httpx.post(f"{base}/users", content='{"name":"Kim"}')
        assert created.status_code == 201
        assert created.json() == {"created": '{"name":"Kim"}'}
        routes = run_cli("routes", str(config), cwd=tmp_path).stdout
        assert re.search(r"GET .*/rest/users/:id .*get_user", routes), routes
    finally:
        assert proc.stop() == 0


def test_endpoints_page_testing_example_passes_with_pytest(tmp_path: Path) -> None:
    """The guide's in-process test run by pytest against the README's module and configuration."""
    write_module(example("readme-endpoints-module"), tmp_path)
    ini = example("readme-config")
    (tmp_path / "service.ini").write_text(zero_ports(ini, ini.text))
    write_module(example("endpoints-testing"), tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_users.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout


def test_endpoints_page_module_and_loadurns(tmp_path: Path) -> None:
    module, line, ini = (
        example("endpoints-annotations"),
        example("endpoints-loadurns"),
        example("readme-config"),
    )
    assert module_path(module) == "app/users.py"
    write_module(module, tmp_path)
    (tmp_path / "app" / "__init__.py").write_text("")
    shutil.copy(EXAMPLES / "app" / "mapped.py", tmp_path / "app" / "mapped.py")
    config = tmp_path / "service.ini"
    text = substitute(
        ini,
        {"Locations=HTTP_ROOT\n": "Locations=HTTP_ROOT\n" + line.text},
        zero_ports(ini, ini.text),
    )
    config.write_text(text)
    proc = serve_folder(tmp_path, config)
    try:
        base = proc.url("HTTP_REST").rstrip("/")
        assert httpx.get(f"{base}/users/7").json() == {"id": "7"}
        assert httpx.get(f"{base}/users/7/orders").json() == [{"user": "7", "order": 1}]
        mapped = httpx.get(f"{base}/mapped/Zoe")
        assert mapped.text == "Hello, Zoe, from a mapped route"
        listing = httpx.get(f"{base}/fw/rest/list/service").json()
        described = {(r["endpoint"], m["description"]) for r in listing for m in r["methods"]}
        assert ("/users/:id", "One user by id") in described
        assert ("/users/:id/orders", "Orders of a user") in described
    finally:
        assert proc.stop() == 0


def test_endpoints_page_typed_handlers(tmp_path: Path) -> None:
    """The typed module in process beside its untyped twin, and the refusals the page shows."""
    from fwrest.testing import Client
    from tests.conftest import module_config

    module = example("endpoints-typed")
    assert module_path(module) == "app/orders.py"
    config = module_config(tmp_path, "guide_typed_orders", app=module.text)
    order = {"customer": "Kim", "lines": [{"sku": "tea", "qty": 2}]}
    with Client(config) as http:
        assert http.get("/rest/orders/7?verbose=1").json() == {"id": "7", "verbose": True}
        assert http.get("/rest/typed/orders/7?verbose=1").json() == dict(
            customer="Kim", lines=[{"sku": "tea", "qty": 7}]
        )
        created = http.post("/rest/typed/orders", json=order)
        assert (created.status_code, created.json()) == (201, order)
        shown = []
        lines = example("endpoints-typed-refused").text.splitlines()
        for request, answer in zip(lines[::2], lines[1::2], strict=True):
            method, target, *body = request.split(" ", 2)
            content = body[0].encode() if body else None
            headers = {"content-type": "application/json"} if body else {}
            r = http.request(method, target, content=content, headers=headers)
            shown += [request, f"{r.status_code} {r.text}"]
            assert f"{r.status_code} {r.text}" == answer
        assert shown == lines
        doc = http.get("/rest/fw/rest/openapi.json").json()
    schema = doc["paths"]["/rest/typed/orders"]["post"]["requestBody"]["content"]
    assert schema["application/json"]["schema"] == {"$ref": "#/components/schemas/Order"}


# -- the guide service: authorization.md and operations.md -----------------------------------

GUIDE_INI = """\
[HTTPSERVER]
Servers=HTTP_BASIC, HTTPS_REST, HTTP_OPS
LogFile=server.log

[HTTP_BASIC]
HostName=127.0.0.1
Port=0
Locations=HTTP_ROOT
{basic_fw_data}
[HTTPS_REST]
HostName=127.0.0.1
Port=0
Locations=HTTP_ROOT
SslCertificate=certs/server.crt
SslCertificateKey=certs/server.key
FwData=oauth2.json
UserData={{"greeting": "Hello over TLS", "team": "guide"}}

[HTTP_OPS]
HostName=127.0.0.1
Port=0
Locations=HTTP_ROOT
FwData={ops_fw_data}

[HTTP_ROOT]
Path=/rest
ThreadPool=POOL

[POOL]
Environment=APP
MaxThreads=4

[APP]
Repository=app

{monitor}"""


@pytest.fixture(scope="module")
def guide_service(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    folder = tmp_path_factory.mktemp("guide")
    shutil.copytree(EXAMPLES / "app", folder / "app")
    certs = issue_certs(ca, folder / "certs")
    shutil.copy(certs["ca"], folder / "ca.pem")
    validator, params = (
        example("authorization-basic-validator"),
        example("authorization-oauth2-params"),
    )
    assert module_path(validator) == "app/auth.py" and module_path(params) == "app/oauth.py"
    write_module(
        validator,
        folder,
        substitute(validator, {"$argon2id$v=19$m=65536,t=3,p=4$...": argon2_hash("lovelace")}),
    )
    write_module(params, folder, substitute(params, {"$argon2id$...": argon2_hash("hopper")}))
    (folder / "oauth2.json").write_text(example("authorization-oauth2-fwdata").text)
    basic = example("authorization-basic-fwdata").text
    assert basic.startswith("FwData=") and basic.count("\n") == 1
    native = json.loads(example("operations-native-routes").text)
    ops = {**json.loads(basic.removeprefix("FwData=")), **native}
    monitor = example("operations-monitor")
    config = folder / "service.ini"
    config.write_text(
        GUIDE_INI.format(
            basic_fw_data=basic,
            ops_fw_data=json.dumps(ops),
            monitor=zero_ports(monitor, monitor.text),
        )
    )
    proc = serve_folder(folder, config)
    documented = {
        "HTTP_BASIC": "127.0.0.1:8081",
        "HTTPS_REST": "127.0.0.1:8443",
        **doc_ports(monitor.text),
    }
    try:
        yield Running(proc, folder, connect_to(proc, documented), "ca.pem")
    finally:
        assert proc.stop() == 0, proc.log()


def test_basic_validator_with_curl_and_httpx(guide_service: Running) -> None:
    replies = guide_service.run(example("authorization-basic-curl"))
    assert replies[0][1].json()["user"] == "ada"
    block = example("authorization-basic-httpx")
    real = guide_service.connect_to["127.0.0.1:8081"]
    _namespace, answer = run_python(
        block, substitute(block, {"127.0.0.1:8081": real}), guide_service.folder
    )
    assert isinstance(answer, httpx.Response) and answer.status_code == 200, answer
    assert answer.json()["user"] == "ada" and answer.json()["scheme"] == "basic"
    base = guide_service.url("HTTP_BASIC")
    assert httpx.get(f"{base}/whoami", auth=("ada", "wrong")).status_code == 403
    assert httpx.get(f"{base}/whoami", auth=("bob", "lovelace")).status_code == 403
    unauthorized = httpx.get(f"{base}/whoami")
    assert unauthorized.status_code == 401
    assert (
        unauthorized.headers["www-authenticate"]
        == 'Basic realm="Access to REST", charset="ISO-8859-1"'
    )


def test_oauth2_token_commands(guide_service: Running) -> None:
    replies = guide_service.run(example("authorization-oauth2-curls"))
    first = by_command(replies, "grant_type=password").json()
    assert isinstance(first, dict) and set(first) == {
        "access_token",
        "refresh_token",
        "scope",
        "token_type",
        "expires_in",
    }
    assert first["expires_in"] == 900  # "access_expires": "15m"
    assert by_command(replies, "Bearer $ACCESS_TOKEN").json()["user"] == "grace"
    again = by_command(replies, "grant_type=refresh_token").json()
    assert isinstance(again, dict) and again["refresh_token"] != first["refresh_token"]


def test_oauth2_revocation_and_introspection_commands(guide_service: Running) -> None:
    replies = guide_service.run(example("authorization-oauth2-revoke-curls"))
    revoked = by_command(replies, "/fw/oauth2/revoke")
    assert revoked.status == 200 and revoked.body == "", revoked.body
    issued = by_command(replies, "grant_type=password").json()
    token_route = guide_service.url("HTTPS_REST") + "/fw/oauth2/token"
    with guide_service.tls(auth=EXAMPLE_APP) as http:
        refresh_refused(http, token_route, issued["refresh_token"])


def test_operations_logout_command(guide_service: Running) -> None:
    """operations.md's runbook: the command as written, on the guide's service (sqlite)."""
    token_route = guide_service.url("HTTPS_REST") + "/fw/oauth2/token"
    with guide_service.tls(auth=EXAMPLE_APP) as client:
        grant = {"grant_type": "password", "username": "grace", "password": "hopper"}
        tokens = client.post(token_route, data=grant).json()
        block = example("operations-tokens-revoke")
        words = shlex.split(block.text)
        assert words[:3] == ["fwrest", "tokens", "revoke"], block.text
        done = run_cli(*words[1:], cwd=guide_service.folder)
        assert done.returncode == 0, done.stderr
        assert re.fullmatch(
            r"fwrest tokens: revoked \d+ token families of user 'grace'\n", done.stdout
        )
        refresh_refused(client, token_route, tokens["refresh_token"])


def test_oauth2_client_library(guide_service: Running) -> None:
    block = example("authorization-oauth2-authlib")
    real = guide_service.connect_to["127.0.0.1:8443"]
    text = block.text.replace("127.0.0.1:8443", real)
    assert text != block.text
    namespace, answer = run_python(block, text, guide_service.folder)
    try:
        assert isinstance(answer, requests.Response) and answer.status_code == 200, answer
        assert answer.json()["user"] == "grace"
        assert namespace["client"].token["token_type"] == "Bearer"
        assert namespace["client"].token["expires_in"] == 900
    finally:
        close_all(namespace)


def test_dpop_client_example(guide_service: Running) -> None:
    block = example("dpop-client")
    real = guide_service.connect_to["127.0.0.1:8443"]
    text = block.text.replace("127.0.0.1:8443", real)
    assert text != block.text
    namespace, answer = run_python(block, text, guide_service.folder)
    try:
        assert isinstance(answer, httpx.Response) and answer.status_code == 200, answer
        assert answer.json()["user"] == "grace"
        assert namespace["tokens"]["token_type"] == "DPoP"
        # the token is bound: as a bearer token it is refused
        client, base, access = namespace["client"], namespace["base"], namespace["access"]
        refused = client.get(f"{base}/whoami", headers={"Authorization": f"Bearer {access}"})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("DPoP ")
    finally:
        close_all(namespace)


def test_oauth2_public_paths_and_params(guide_service: Running) -> None:
    base = guide_service.url("HTTPS_REST")
    with guide_service.tls() as client:
        assert client.get(f"{base}/hello").status_code == 200  # onAuthNoCheckUri
        assert client.get(f"{base}/users").status_code == 401
        token_get = client.get(
            f"{base}/fw/oauth2/token",
            params={"grant_type": "password", "username": "grace", "password": "hopper"},
            auth=EXAMPLE_APP,
        )
        assert token_get.status_code == 400, token_get.text  # "allowGetToken": false
        assert token_get.json()["error"] == "invalid_request"


def test_native_routes_options(guide_service: Running) -> None:
    base = guide_service.url("HTTP_OPS")
    assert httpx.get(f"{base}/fw/healthcheck").status_code == 200  # public, no credentials
    assert httpx.get(f"{base}/fw/rest/list/service").status_code == 401  # not public
    creds = ("ada", "lovelace")
    assert httpx.get(f"{base}/fw/rest/config", auth=creds).status_code == 404  # disabled
    listing = httpx.get(f"{base}/fw/rest/list/service", auth=creds).json()
    endpoints = {r["endpoint"] for r in listing}
    assert "/fw/rest/usage/time" not in endpoints  # hidden
    assert "/fw/healthcheck" in endpoints
    assert httpx.get(f"{base}/fw/rest/usage/time", auth=creds).status_code == 200  # still served


def test_monitor_and_prometheus_scrape(guide_service: Running) -> None:
    scrape = yaml.safe_load(example("operations-prometheus").text)
    (job,) = scrape["scrape_configs"]
    (static,) = job["static_configs"]
    (target,) = static["targets"]
    address = guide_service.connect_to[target]
    answer = httpx.get(f"http://{address}{job['metrics_path']}", params=job["params"])
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    families = {f.name for f in text_string_to_metric_families(answer.text)}
    assert "fwrest_memory_resident_kilobytes" in families, answer.text
    listing = httpx.get(f"http://{address}{job['metrics_path']}")
    assert listing.status_code == 200
    assert listing.headers["content-type"].startswith("application/json")


# -- deploy.md: the systemd unit -------------------------------------------------------------


def test_systemd_unit_starts_and_stops_the_service(tmp_path: Path) -> None:
    block = example("deploy-systemd")
    assert block.text == (ROOT / "deploy" / "fwrest.service").read_text(), (
        f"{block.where}: the unit shown is deploy/fwrest.service"
    )
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(block.text)
    service = unit["Service"]
    folder = tmp_path / "srv"
    folder.mkdir()
    exec_start = substitute(
        block,
        {service["WorkingDirectory"] + "/.venv/bin/fwrest": str(BIN / "fwrest")},
        service["ExecStart"],
    )
    free_config(folder, fmt="ini")
    stop_s = int(service["TimeoutStopSec"])
    graceful = next(k for k in KEYS if k.name == "GracefulTimeout")
    assert isinstance(graceful.default, int) and stop_s * 1000 > graceful.default, (
        "TimeoutStopSec must outlast the drain"
    )
    stderr = folder / "stderr.log"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            shlex.split(exec_start), cwd=folder, stdout=subprocess.PIPE, stderr=err
        )
    out = ReadyLines(proc)
    lines, ready = out.lines, out.ready
    try:
        assert ready.wait(30), "".join(lines) + stderr.read_text()
        url = next(line.split()[2] for line in lines if line.startswith("fwrest: serving"))
        assert httpx.get(f"{url.rstrip('/')}/hello").status_code == 200
        proc.send_signal(signal.Signals[service["KillSignal"]])
        code = proc.wait(stop_s)
    finally:
        out.close()
    log = stderr.read_text()
    assert code == 0, log  # 0: Restart=on-failure leaves a stopped service stopped
    started = re.search(r"starting (\d+) worker", log)
    assert started and f"--workers {started[1]}" in exec_start, log


# -- security.md -----------------------------------------------------------------------------


def test_security_fault_suite_command_collects_every_fault_test() -> None:
    block = example("security-fault-suite")
    (command,) = [line for line in block.text.splitlines() if line.strip()]
    # the command of the development set-up (.venv): not for the build this suite runs on
    env = {k: v for k, v in os.environ.items() if k != "FWREST_TEST_BUILD"}
    done = subprocess.run(
        [*shlex.split(command), "--collect-only", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (ROOT / "docs" / "security.md").read_text()
    for name in set(re.findall(r"tests/faults/(test_\w+\.py)", page)):
        assert f"tests/faults/{name}::" in done.stdout, f"{name} is not collected"
