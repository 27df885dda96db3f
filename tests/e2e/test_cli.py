"""``fwrest check | serve | routes | --version | --help`` as a user runs them: exit codes and
output. ``serve``, ``--version``, ``--help`` start a fresh interpreter; ``check``, ``routes``,
``openapi`` (some twenty configurations) run forked (``run_forked``: its own process, without half a
second of imports each)."""

from __future__ import annotations

import os
import socket
import subprocess
import textwrap
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

import fwrest
from tests.conftest import (
    APP_SOURCE,
    FWREST,
    Sections,
    base_sections,
    config_text,
    free_config,
    free_port,
    run_cli,
    run_forked,
)
from tests.conftest import set_values as _set


def sections(port: int = 18080) -> Sections:
    return base_sections(port)


def write_config(folder: Path, data: Sections, fmt: str = "json") -> Path:
    """``app.py`` (the shared test app) and a config serving it."""
    (folder / "app.py").write_text(APP_SOURCE)
    path = folder / f"service.{fmt}"
    path.write_text(config_text(data, fmt))
    return path


def can_bind(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
        return True


def assert_config_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 2, one ``configuration error`` line on standard error, no traceback (besides the
    start's warnings logged before it failed, e.g. that of a port without a scheme)."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [x for x in result.stderr.strip().splitlines() if " WARNING fwrest.server " not in x]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fwrest: configuration error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert " Fix: " in lines[0], lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"


# -- check -----------------------------------------------------------------------------------------


def test_check_prints_a_summary_of_servers_and_urls(tmp_path: Path) -> None:
    data = sections()
    data["HTTPSERVER"]["Servers"] = "HTTP_REST, HTTP_ADMIN"
    data["HTTP_ADMIN"] = {"HostName": "0.0.0.0", "Port": 18081, "Locations": "ROOT, OPS"}
    data["OPS"] = {"Path": "/ops", "ThreadPool": "POOL"}
    config = write_config(tmp_path, data, "ini")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_forked("check", str(config), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert f"{config}: OK" in out
    assert "[HTTP_REST] 127.0.0.1:18080" in out
    assert "[HTTP_ADMIN] 0.0.0.0:18081" in out
    for url in (
        "http://127.0.0.1:18080/rest",
        "http://127.0.0.1:18081/rest",
        "http://127.0.0.1:18081/ops",
    ):
        assert url in out, out
    assert "route(s)" in out
    assert "state store: memory" in out


def test_check_binds_no_port(tmp_path: Path) -> None:
    """A port held by the test does not make ``check`` fail: it never binds."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_forked("check", str(write_config(tmp_path, sections(port))), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"127.0.0.1:{port}/rest" in result.stdout


def test_check_resolves_host_names_as_serve_does(tmp_path: Path) -> None:
    """SPEC 1: ``check`` fails as ``serve`` does (one error line) on an unresolvable HostName."""
    data = sections(free_port())
    for host in ("localhost", "127.0.0.1", "0.0.0.0"):
        data["HTTP_REST"]["HostName"] = host
        passed = run_forked("check", str(write_config(tmp_path, data)), cwd=tmp_path)
        assert passed.returncode == 0, passed.stderr
        assert f"[HTTP_REST] {host}:" in passed.stdout
    data["HTTP_REST"]["HostName"] = "999.1.1.1"
    config = write_config(tmp_path, data)
    checked = run_forked("check", str(config), cwd=tmp_path)
    served = run_cli("serve", str(config), cwd=tmp_path, timeout=30)
    assert_config_error(checked, "[HTTP_REST] HostName:", "'999.1.1.1' cannot be resolved")
    assert_config_error(served, "[HTTP_REST] HostName:", "'999.1.1.1' cannot be resolved")
    # the same error line (serve logged its start's warnings before it)
    assert checked.stderr.splitlines()[-1] == served.stderr.splitlines()[-1]
    assert checked.stdout == ""


def _changed(change: Callable[[Sections], None], fmt: str = "json") -> Callable[[Path], Path]:
    def writer(folder: Path) -> Path:
        data = sections()
        change(data)
        return write_config(folder, data, fmt)

    return writer


def _with_module(
    name: str, source: str, change: Callable[[Sections], None]
) -> Callable[[Path], Path]:
    def writer(folder: Path) -> Path:
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
        data = sections()
        change(data)
        return write_config(folder, data)

    return writer


def _json(section: str, **values: object) -> Callable[[Path], Path]:
    return _changed(_set(section, **values))


@dataclass(frozen=True)
class Bad:
    """A BAD_CONFIGS case: id, how its config is written, what its error line names (``says``)."""

    case: str
    writer: Callable[[Path], Path]

    def says(self, *fragments: str) -> Any:
        return pytest.param(self.writer, fragments, id=self.case)


BAD_CONFIGS = [
    Bad("hostname-unresolvable", _json("HTTP_REST", HostName="999.1.1.1")).says(
        "[HTTP_REST] HostName:", "the host name '999.1.1.1' cannot be resolved"
    ),
    Bad(
        "monitor-hostname-unresolvable",
        _json("APP_MONITOR", Enable=1, Port=18090, HostName="999.1.1.1"),
    ).says("[APP_MONITOR] HostName:", "'999.1.1.1' cannot be resolved"),
    Bad("general-out-of-range", _json("GENERAL", rest_trace_time=7)).says(
        "[GENERAL] rest_trace_time:", "0-2"
    ),
    Bad(
        "repository-syntax-error",
        _with_module("broken", "x = (\n", _set("ENV", Repository="app, broken.py")),
    ).says("[ENV] Repository:", "broken.py", "SyntaxError", "line 1"),
    Bad(
        "load-urns-missing-function",
        _json("HTTP_REST", LoadURNs={"/m": {"GET": {"Function": "app.nothing"}}}),
    ).says("[HTTP_REST] LoadURNs:", "'app.nothing'"),
    Bad(
        "duplicate-route",
        _json("HTTP_REST", LoadURNs={"/hello": {"GET": {"Function": "app.text"}}}),
    ).says("GET /rest/hello", "twice", "app.hello", "app.text"),
]


@pytest.mark.parametrize(("writer", "fragments"), BAD_CONFIGS)
def test_check_bad_config_exits_2_with_one_error(
    tmp_path: Path, writer: Callable[[Path], Path], fragments: tuple[str, ...]
) -> None:
    config = writer(tmp_path)
    result = run_forked("check", str(config), cwd=tmp_path)
    assert_config_error(result, str(config), *fragments)
    assert result.stdout == ""


def test_check_tls_port_shows_https(tmp_path: Path, certs: dict[str, Path]) -> None:
    data = sections()
    data["HTTP_REST"].update(SslCertificate="server.crt", SslCertificateKey="server.key")
    result = run_forked("check", str(write_config(tmp_path, data)), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "https://127.0.0.1:18080/rest" in result.stdout
    assert "TLS" in result.stdout


# -- serve fails before binding --------------------------------------------------------------------


PROBE = """
import socket

with socket.socket() as s:
    s.settimeout(2)
    state = "bound" if s.connect_ex(("127.0.0.1", {port})) == 0 else "free"
open({out!r}, "w").write(state)
"""


@pytest.mark.parametrize("kind", ["config", "repository"])
def test_serve_bad_config_exits_2_and_binds_nothing(tmp_path: Path, kind: str) -> None:
    port = free_port()
    data = sections(port)
    probe_out = tmp_path / "probe.txt"
    if kind == "config":
        data["POOL"]["MaxThreads"] = "many"
    else:
        # imported during the start, before any bind, to see whether the port is open; then the
        # start fails on a missing function
        name = f"probe_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(PROBE.format(port=port, out=str(probe_out)))
        data["ENV"]["Repository"] = f"app, {name}"
        data["HTTP_REST"]["LoadURNs"] = {"/x": {"GET": {"Function": "missing_fn"}}}
    config = write_config(tmp_path, data)
    result = run_cli("serve", str(config), cwd=tmp_path, timeout=30)
    if kind == "config":
        assert_config_error(result, "[POOL] MaxThreads:", "'many'")
    else:
        assert_config_error(result, "[HTTP_REST] LoadURNs:", "'missing_fn'")
        assert probe_out.read_text() == "free", "the port was bound before the checks ended"
    assert "serving" not in result.stdout
    assert "ready" not in result.stdout
    assert can_bind(port)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--workers", "-1"), "from 0 to 256, got -1"),
        (("--workers", "100000"), "from 0 to 256, got 100000"),  # was forked until OOM-killed
        (("--workers", "0", "--reload"), "--reload needs --workers 1 or more"),
    ],
)
def test_serve_workers_must_be_in_range(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    result = run_cli("serve", str(write_config(tmp_path, sections())), *args, timeout=30)
    assert result.returncode == 2
    assert says in result.stderr and result.stderr.count("\n") == 1, result.stderr


# -- routes, version, help -------------------------------------------------------------------------


def test_routes_lists_method_path_function_and_source(tmp_path: Path) -> None:
    config = free_config(
        tmp_path,
        extra={"HTTP_REST": {"LoadURNs": {"/mapped/{key}": {"POST": {"Function": "app.echo"}}}}},
    )
    result = run_forked("routes", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0] == ["METHOD", "PATH", "FUNCTION", "SOURCE"]
    by_route = {(row[0], row[1].split(":0", 1)[1]): row[2:] for row in rows[1:]}
    assert by_route[("GET", "/rest/hello")] == ["app.hello", "annotation"]
    assert by_route[("GET", "/rest/users/:uid/orders/:oid")] == ["app.order", "annotation"]
    assert by_route[("POST", "/rest/echo")] == ["app.echo", "annotation"]
    assert by_route[("POST", "/rest/mapped/:key")] == ["app.echo", "mapping"]
    assert by_route[("GET", "/rest/fw/healthcheck")][1] == "native"
    assert all(row[1].startswith("http://127.0.0.1:0/rest/") for row in rows[1:])


@pytest.mark.parametrize("command", ["routes", "openapi", "check"])
def test_output_to_a_reader_that_went_away_is_no_traceback(tmp_path: Path, command: str) -> None:
    """``fwrest routes CONFIG | head -1``, reader gone first: exit 1, no traceback, even at exit."""
    config = free_config(tmp_path)
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            [*FWREST, command, str(config)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
    finally:
        os.close(write)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr


def test_routes_of_a_bad_config_exits_2(tmp_path: Path) -> None:
    data = sections()
    data["ENV"]["Repository"] = "nowhere"
    result = run_forked("routes", str(write_config(tmp_path, data)), cwd=tmp_path)
    assert_config_error(result, "[ENV] Repository:", "'nowhere'")


@pytest.mark.parametrize("target", ["missing/openapi.json", "."])
def test_openapi_to_an_unwritable_file_exits_2_with_one_line(tmp_path: Path, target: str) -> None:
    config = free_config(tmp_path)
    out = tmp_path / target
    result = run_forked("openapi", str(config), "-o", str(out), cwd=tmp_path)
    print(result.stderr)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"fwrest: error: cannot write the OpenAPI document to {out} (")
    assert not (tmp_path / "missing").exists()
    assert result.stdout == ""


def test_version_is_the_package_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"fwrest {version('fwrest')}"
    assert fwrest.__version__ == version("fwrest")


def test_help_names_the_commands() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("serve", "check", "routes"):
        assert command in result.stdout
    assert "Exit codes" in result.stdout


def test_help_says_what_each_exit_code_means(tmp_path: Path) -> None:
    """SPEC 13.6: 2 is not only an invalid configuration; a refused command input (fwrest
    reload's missing pid file, a users command's bad name) exits 2 too, as the help says."""
    result = run_cli("--help")
    assert result.returncode == 0
    said = " ".join(result.stdout.split()).partition("Exit codes: ")[2]
    assert said.startswith("0 success; 1 a failure while running"), said
    assert "2 an invalid configuration, or a command refused before it changed anything" in said
    for cause in ("a missing or stale pid file", "a bad or existing user or client name"):
        assert cause in said, said
    assert "2 invalid configuration." not in said
    # what the help says of 2, as the commands do it
    reload = run_cli("reload", str(tmp_path / "no.pid"))
    assert reload.returncode == 2 and "fwrest: error: " in reload.stderr, reload
    config = write_config(tmp_path, sections())
    check = run_cli("check", str(config).replace("service", "nothing"), cwd=tmp_path)
    assert check.returncode == 2 and "configuration error" in check.stderr, check


def test_serve_help_names_workers() -> None:
    result = run_cli("serve", "--help")
    assert result.returncode == 0
    assert "--workers" in result.stdout
    assert "CONFIG" in result.stdout


def test_no_command_prints_help_and_fails() -> None:
    result = run_cli()
    assert result.returncode == 2
    assert "serve" in result.stdout + result.stderr


def test_check_warns_that_max_body_size_0_refuses_every_body(tmp_path: Path) -> None:
    def warnings(**server: object) -> list[str]:
        servers = {"HTTP_REST": {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT", **server}}
        done = run_forked("check", str(free_config(tmp_path, servers=servers)), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        text = done.stdout + done.stderr
        return [line for line in text.splitlines() if "MaxBodySize" in line]

    (line,) = warnings(MaxBodySize=0)
    print(line)
    assert "[HTTP_REST] MaxBodySize=0 refuses every request body with 413" in line
    assert "does not mean unlimited" in line
    assert warnings(MaxBodySize=1) == []
