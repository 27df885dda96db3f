"""Shared fixtures: configs written to tmp_path, the real server started on loopback.

* ``make_service(tmp_path)`` writes an app module and a config, returns its path;
* ``ServerProcess`` runs ``fwrest serve`` as a subprocess, waits for its readiness line (with
  a deadline, never a sleep), exposes the bound ports and the log;
* ``certs`` issues a CA and a server certificate with trustme (``issue_certs`` in any folder);
* config sections (``base_sections``), their text (``ini_text``, ``config_text``) and
  changes (``set_values``, ``drop_key``);
* ports (``free_port``, ``port_is_free``) and child processes (``children``, ``alive``,
  ``wait_children``);
* waiting on a state, never on a sleep: ``wait_for(check, timeout, what)`` polls ``check`` with
  a deadline; ``wait_ready_workers`` waits for the workers' ``ready`` lines in the log
  (``ready_workers`` reads them).
"""

from __future__ import annotations

import contextlib
import errno
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trustme

ROOT = Path(__file__).resolve().parent.parent
FWREST = [sys.executable, "-m", "fwrest"]

APP_SOURCE = textwrap.dedent(
    """
    import asyncio
    import os
    import threading
    import time

    from fwrest import Response, delete, get, patch, post, put, rest

    @get("/hello", description="says hello")
    def hello():
        return {"hello": "world", "pid": os.getpid()}

    @get("/items/:id")
    def item(id):
        return {"id": id}

    @get("/users/{uid}/orders/:oid")
    async def order(uid, oid):
        return {"uid": uid, "oid": oid}

    @post("/echo")
    def echo():
        return {
            "body": rest.getBodyRequest(),
            "query": dict(rest.getQueryRequest()),
            "method": rest.getMethodRequest(),
            "path": rest.getPathRequest(),
        }

    @get("/text")
    def text():
        return "plain text"

    @get("/bytes")
    def raw_bytes():
        return b"\\x00\\x01"

    @get("/boom")
    def boom():
        raise RuntimeError("kaboom-secret-detail")

    @get("/sleep/:ms")
    def sleep(ms):
        time.sleep(int(ms) / 1000)
        return {"slept": int(ms), "thread": threading.current_thread().name}

    @get("/asleep/:ms")
    async def asleep(ms):
        await asyncio.sleep(int(ms) / 1000)
        return {"slept": int(ms)}

    @get("/userdata")
    def userdata():
        return rest.getServerUserData()
    """
)


Sections = dict[str, dict[str, Any]]


def base_sections(port: int) -> Sections:
    """A small valid service: one server on ``127.0.0.1:port``, ``/rest`` serving ``app``."""
    return {
        "HTTPSERVER": {"Enable": 1, "Servers": "HTTP_REST", "StateStore": "memory"},
        "HTTP_REST": {"HostName": "127.0.0.1", "Port": port, "Locations": "ROOT"},
        "ROOT": {"Path": "/rest", "ThreadPool": "POOL"},
        "POOL": {"Environment": "ENV", "MinThreads": 1, "MaxThreads": 4},
        "ENV": {"Repository": "app"},
    }


def ini_text(sections: Sections) -> str:
    """``sections`` as INI text: a ``[NAME]`` block each, a dict or list value written as JSON."""
    lines = []
    for name, body in sections.items():
        lines.append(f"[{name}]")
        for key, value in body.items():
            if isinstance(value, dict | list):
                value = json.dumps(value)
            lines.append(f"{key}={value}")
        lines.append("")
    return "\n".join(lines)


def config_text(sections: Sections, fmt: str) -> str:
    """``sections`` as the text of a config file: indented JSON for ``"json"``, else INI."""
    return json.dumps(sections, indent=2) if fmt == "json" else ini_text(sections)


def set_values(section: str, **values: Any) -> Callable[[Sections], None]:
    """A change of a config's sections: set ``values`` in ``section`` (added if missing)."""
    return lambda sections: sections.setdefault(section, {}).update(values)


def drop_key(section: str, key: str) -> Callable[[Sections], None]:
    """A change of a config's sections: remove ``key`` from ``section``."""
    return lambda sections: sections[section].pop(key)


def local_port(**keys: Any) -> dict[str, Any]:
    """A server section on 127.0.0.1, on a port the system picks, serving ``ROOT``; ``keys``
    add to it or replace those."""
    return {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT", **keys}


def free_config(
    tmp_path: Path, *, servers: Sections | None = None, extra: Sections | None = None,
    app: str = APP_SOURCE, fmt: str = "json", general: dict[str, Any] | None = None,
) -> Path:  # fmt: skip
    """Write ``app.py`` and a config serving it on port 0 (the system picks)."""
    (tmp_path / "app.py").write_text(app)
    servers = servers or {"HTTP_REST": local_port()}
    sections: Sections = {
        "HTTPSERVER": {"Enable": 1, "Servers": ",".join(servers), "StateStore": "memory",
                       "LogFile": "server.log", "GracefulTimeout": 5000},
        **servers,
        "ROOT": {"Path": "/rest", "ThreadPool": "POOL"},
        "POOL": {"Environment": "ENV", "MinThreads": 1, "MaxThreads": 4},
        "ENV": {"Repository": "app"},
    }  # fmt: skip
    if general:
        sections["GENERAL"] = general
    for name, body in (extra or {}).items():
        sections.setdefault(name, {}).update(body)
    path = tmp_path / ("service.json" if fmt == "json" else "service.ini")
    path.write_text(config_text(sections, fmt))
    return path


def module_config(tmp_path: Path, module: str, **kwargs: Any) -> Path:
    """:func:`free_config`'s service with its app module named ``module``: for
    ``fwrest.testing.Client``, which imports the module into the test process, where ``app``
    may already be another test's module."""
    config = free_config(tmp_path, **kwargs)
    text = config.read_text().replace('"Repository": "app"', f'"Repository": "{module}"')
    config.write_text(text)
    (tmp_path / "app.py").rename(tmp_path / f"{module}.py")
    return config


class ServerProcess:
    """``fwrest serve CONFIG`` in a subprocess; ``urls`` maps server section -> base URL."""

    def __init__(
        self, config: Path, workers: int = 1, env: dict[str, str] | None = None,
        args: tuple[str, ...] = (), command: Sequence[str] = FWREST,
    ):  # fmt: skip
        """``command``: how ``fwrest`` is run (another environment's, e.g. an installed
        wheel's)."""
        self.config = config
        self.stderr_path = config.parent / "stderr.log"
        self.stdout_lines: list[str] = []
        self.urls: dict[str, str] = {}
        self.ports: dict[str, int] = {}
        self.pid = 0
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [*command, "serve", str(config), "--workers", str(workers), *args],
            stdout=subprocess.PIPE, stderr=self._stderr, cwd=config.parent,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stdout_lines.append(line)
            m = re.match(r"fwrest: serving (\S+) \[(\S+)\]", line)
            if m:
                url, name = m.groups()
                self.urls.setdefault(name, url)
                self.ports[name] = int(re.search(r":(\d+)", url.split("//", 1)[1]).group(1))  # type: ignore[union-attr]
            if line.startswith("fwrest: ready"):
                self.pid = int(line.rsplit(" ", 1)[1])
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout: float = 30) -> ServerProcess:
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise AssertionError(f"fwrest serve did not become ready:\n{self.log()}")
        return self

    def url(self, name: str = "HTTP_REST") -> str:
        return self.urls[name]

    def log(self) -> str:
        """Everything the server wrote to standard error so far."""
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def file_log(self) -> str:
        path = self.config.parent / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_log(self, needle: str, timeout: float = 10, since: int = 0) -> str:
        """The log from offset `since` on, once `needle` appears in it.

        A server shared by several tests already holds their lines: pass
        `since=len(server.log())` taken before the request, or an earlier test's
        line satisfies the wait before this test's is written.
        """
        try:
            wait_for(lambda: needle in self.log()[since:], timeout, f"{needle!r} in the log")
        except AssertionError:
            shown = self.log()[since:]
            raise AssertionError(f"{needle!r} never appeared in the log:\n{shown}") from None
        return self.log()[since:]

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 20) -> int:
        code = end_process(self.proc, timeout)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        return code


def end_process(proc: subprocess.Popen[bytes], timeout: float = 10) -> int:
    """SIGTERM to ``proc`` if it still runs, SIGKILL if it has not ended ``timeout`` s later;
    its exit code once reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(config, workers=1)`` starts ``fwrest serve`` and waits until it is ready."""
    with contextlib.ExitStack() as started:

        def _serve(config: Path, workers: int = 1, **kw: Any) -> ServerProcess:
            return started.enter_context(serving(config, workers=workers, **kw))

        yield _serve


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


def issue_certs(ca: trustme.CA, folder: Path) -> dict[str, Path]:
    """A server certificate for 127.0.0.1/localhost in ``folder``: cert, key, CA bundle."""
    folder.mkdir(parents=True, exist_ok=True)
    cert = ca.issue_cert("127.0.0.1", "localhost")
    crt, key, ca_pem = folder / "server.crt", folder / "server.key", folder / "ca.pem"
    crt.write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_pem))
    return {"cert": crt, "key": key, "ca": ca_pem}


def client_cert(ca: trustme.CA, folder: Path, name: str) -> tuple[Path, Path]:
    """A client certificate of ``ca`` for ``name`` (its common name), in ``folder``: cert, key."""
    issued = ca.issue_cert(f"{name}@example.org", common_name=name)
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return cert, key


def tls_server(certs: dict[str, Path], **keys: Any) -> dict[str, Any]:
    """A server section on ``127.0.0.1``, port 0, serving ``ROOT`` over TLS with ``certs``
    (:func:`issue_certs`'); ``keys`` add to it or replace its keys."""
    tls = {"SslCertificate": str(certs["cert"]), "SslCertificateKey": str(certs["key"])}
    return local_port(**{**tls, **keys})


@pytest.fixture
def certs(ca: trustme.CA, tmp_path: Path) -> dict[str, Path]:
    """A server certificate for 127.0.0.1/localhost: paths of cert, key and the CA bundle."""
    return issue_certs(ca, tmp_path)


@contextlib.contextmanager
def serving(config: Path, **kwargs: Any) -> Iterator[ServerProcess]:
    """``fwrest serve CONFIG`` ready for the block, stopped after it."""
    proc = ServerProcess(config, **kwargs)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def exchange(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send raw request bytes to ``127.0.0.1:port``; all the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while True:
            piece = sock.recv(65536)
            if not piece:
                return data
            data += piece


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``fwrest ARGS`` and capture its output."""
    return subprocess.run(
        [*FWREST, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False
    )


# Modules whose tests measure time, deadlines or CPU shares: `make test` runs them one at a time
# at normal priority, while the rest runs beside them two processes at once (pytest-xdist) at a
# low CPU priority (nice 10: the Makefile), so that the rest takes mostly the CPU they leave.
SERIAL = frozenset((
    "tests/auth/test_jwks_clients.py", "tests/auth/test_password_timing.py",
    "tests/auth/test_refresh_claims.py", "tests/bench/test_at_once.py",
    "tests/e2e/test_code_flow.py", "tests/e2e/test_dpop_hosts.py", "tests/e2e/test_hosts_state.py",
    "tests/e2e/test_reload.py", "tests/e2e/test_scale_out.py", "tests/e2e/test_revocation_e2e.py",
    "tests/e2e/test_workers.py", "tests/faults/test_brute_force.py",
    "tests/faults/test_idle_connections.py", "tests/faults/test_lockout_outage.py",
    "tests/faults/test_redis_outage.py",
    "tests/faults/test_sentinel_failover.py", "tests/faults/test_cluster_failover.py",
    "tests/faults/test_dpop_store_down.py", "tests/faults/test_keyset_store_down.py",
    "tests/faults/test_sigterm_drain.py",
    "tests/faults/test_slowloris.py", "tests/faults/test_sqlite_refresh.py",
    "tests/faults/test_tls_handshakes.py", "tests/faults/test_token_burst.py",
    "tests/faults/test_worker_kill.py", "tests/features/test_streaming.py",
    "tests/hostile/test_mutation.py", "tests/native/test_probes.py",
    "tests/native/test_settings_api.py", "tests/native/test_settings_browser.py",
    "tests/server/test_backpressure.py", "tests/server/test_connstate.py",
    "tests/server/test_head_limits.py", "tests/server/test_hooks_calls.py",
    "tests/server/test_pool.py", "tests/store/test_redis_forms.py",
    "tests/store/test_sqlite_locked.py", "tests/verify/test_fetch_deadlines.py",
))  # fmt: skip
# Modules that load the machine for minutes but assert no time: in the parallel part, first (the
# longest; the wheel's compiled build is two minutes of one process, which at the end of the
# part would leave the other process idle), beside the light modules (pytest-xdist's --dist
# loadfile keeps a module on one process; --no-loadscope-reorder keeps this order instead of
# the most tests first).
HEAVY = (
    "tests/faults/test_soak.py",
    "tests/packaging/test_wheel.py",
    "tests/hostile/test_corpus.py",
)


# Modules of the second engine's run (the Makefile's ENGINE_SLICE: the pure engine on the
# compiled wheel, FWREST_ENGINE_SLICE=1) that start no server: in process (fwrest.testing.Client)
# or no HTTP at all, they test no engine, so that run does not collect them (they run once, in
# the run of each build).
ENGINE_FREE = frozenset(
    (
        "tests/hostile/test_feature_headers.py",
        "tests/hostile/test_properties.py",
        "tests/server/test_hooks_calls.py",
        "tests/server/test_hooks_config.py",
        "tests/server/test_hooks_guide.py",
        "tests/server/test_hooks_stages.py",
        "tests/server/test_pipeline.py",
        "tests/server/test_proxies.py",
        "tests/server/test_trace_times.py",
        "tests/server/test_typed.py",
    )
)


def _serial(path: Path) -> bool:
    where = path.relative_to(ROOT).as_posix()
    return where in SERIAL or where.rsplit("/", 1)[0] in SERIAL


def _build_problem(build: str) -> str | None:
    """What is wrong with the fwrest this suite imports, for ``FWREST_TEST_BUILD=build``
    (the Makefile sets it): ``compiled``, the installed wheel's C extensions, never the
    checkout's sources; ``pure``, the checkout's Python sources (the editable install). None:
    it is the build asked for."""
    import importlib.machinery

    import fwrest
    import fwrest.wire

    wire = Path(fwrest.wire.__file__ or "")
    package = Path(fwrest.__file__ or "").resolve().parent
    extension = any(wire.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)
    if build == "compiled":
        if not extension:
            return f"fwrest.wire is {wire}, not a compiled extension"
        if package.is_relative_to(ROOT / "src"):
            return f"fwrest is imported from the checkout's sources ({package})"
        return None
    if build == "pure":
        if wire.suffix != ".py":
            return f"fwrest.wire is {wire}, not Python source"
        if not package.is_relative_to(ROOT / "src"):
            return f"fwrest is imported from {package}, not from the checkout's sources"
        return None
    return f"FWREST_TEST_BUILD={build!r}: 'compiled' or 'pure'"


def pytest_configure(config: pytest.Config) -> None:
    """With ``FWREST_TEST_BUILD`` set (``make test``), the suite refuses to run on another
    build than the one it was asked to test; with the native engine (the default, or
    ``FWREST_ENGINE=native``), where it is not built."""
    build = os.environ.get("FWREST_TEST_BUILD")
    problem = build and _build_problem(build)
    if problem:
        raise pytest.UsageError(f"FWREST_TEST_BUILD={build}: {problem}")
    if os.environ.get("FWREST_ENGINE", "").strip().lower() in ("", "native"):
        # the servers the tests start (and test_engines) serve with the native engine: it
        # must be there, else the run would test the pure one in its place
        from fwrest._native import native_parser

        if native_parser() is None:
            raise pytest.UsageError(
                "the native engine (the default) is not built here: build it (a C compiler, "
                "then the install again), or run with FWREST_ENGINE=pure"
            )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m serial`` and ``-m "not serial"`` (make test's two parts) import only the modules
    whose tests they run: the others' would all be deselected, after seconds spent importing
    and collecting them (about 15 s of the serial part's). In the second engine's run
    (``FWREST_ENGINE_SLICE=1``), the modules of ``ENGINE_FREE`` are not collected."""
    name = collection_path.name
    if not (name.startswith("test_") and name.endswith(".py")):
        return None
    if not collection_path.is_relative_to(ROOT):
        return None
    engine_slice = os.environ.get("FWREST_ENGINE_SLICE", "") == "1"
    if engine_slice and collection_path.relative_to(ROOT).as_posix() in ENGINE_FREE:
        return True
    wanted = {"serial": True, "not serial": False}.get(config.getoption("markexpr"))
    if wanted is None:
        return None
    return True if _serial(collection_path) != wanted else None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marks each test as it is collected, before any hook reads the marks."""
    if _serial(Path(str(item.path))):
        item.add_marker(pytest.mark.serial)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        where = Path(str(item.path)).relative_to(ROOT).as_posix()
        return HEAVY.index(where) if where in HEAVY else len(HEAVY)

    items.sort(key=rank)  # stable: each module's tests keep their order


_FORKS = multiprocessing.get_context("forkserver")
# what `fwrest check` and `fwrest serve` import besides the CLI: a child that imports them
# itself spends about half a second (most of a broken configuration's check) doing so
_FORKS.set_forkserver_preload(
    ["fwrest.cli", "tests.forked", "fwrest._native", "fwrest.server", "fwrest.server.build"]
)


def run_forked(
    *args: str, cwd: Path, timeout: float = 60, stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``fwrest ARGS`` as :func:`run_cli` gives it, in a process forked from one that imported
    fwrest once (tests/forked.py): for tests that run hundreds of commands. A command still
    running after ``timeout`` is killed: exit code -1 with what it wrote. ``stdin``: its input
    (else none); ``env``: variables added to its environment (the test's own changes to
    ``os.environ`` do not reach it)."""
    from tests import forked

    with tempfile.TemporaryDirectory(prefix="fwrest-forked-") as tmp:
        out, err, written = (os.path.join(tmp, name) for name in ("out", "err", "code"))
        source = None
        if stdin is not None:
            source = os.path.join(tmp, "in")
            Path(source).write_text(stdin)
        child = _FORKS.Process(
            target=forked.run, args=(list(args), str(cwd), out, err, written, source, env)
        )
        child.start()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            code = -1
        elif os.path.exists(written):
            code = int(Path(written).read_text())
        else:  # it died before it could say (a signal, a crash)
            code = child.exitcode if child.exitcode is not None else -1
        texts = [Path(name).read_text(errors="replace") if os.path.exists(name) else ""
                 for name in (out, err)]  # fmt: skip
    return subprocess.CompletedProcess(["fwrest", *args], code, texts[0], texts[1])


def free_port() -> int:
    """A port nobody listens on now (bound to 0, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``port`` (a bind without SO_REUSEPORT succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(1)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
        return True


def children(pid: int) -> set[int]:
    """The child processes of ``pid`` (a supervisor's workers), read from ``/proc``."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except FileNotFoundError:
            continue
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = next((line for line in status.splitlines() if line.startswith("State:")), "")
    return "Z" not in state.split()[1:2]


def wait_for(
    check: Callable[[], object], timeout: float, what: str, interval: float = 0.05
) -> float:
    """Poll ``check()`` every ``interval`` s until it is truthy; the seconds that took.

    A hang guard, not a speed test: once ``timeout`` s have passed (``check`` is asked once
    more at the deadline) it raises ``AssertionError`` naming ``what``.
    """
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if check():
            return time.monotonic() - started
        now = time.monotonic()
        if now >= deadline:
            raise AssertionError(f"{what}: not seen within {timeout} s")
        time.sleep(min(interval, deadline - now))


def wait_children(pid: int, count: int, timeout: float = 10) -> set[int]:
    """The live child processes of ``pid`` (a supervisor's workers), once there are ``count``.

    Zombies are left out: a worker that died is one until the supervisor reaps it.
    """
    found: set[int] = set()

    def counted() -> bool:
        found.clear()
        found.update(kid for kid in children(pid) if alive(kid))
        return len(found) == count

    try:
        wait_for(counted, timeout, f"process {pid} having {count} live children")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its children: {sorted(children(pid))}") from None
    return set(found)


class ReadyLines:
    """The stdout lines of a ``fwrest serve`` started by hand (``subprocess.Popen``, stdout a
    pipe), read in a thread; ``ready`` is set at its ``fwrest: ready`` line."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode())
            if raw.startswith(b"fwrest: ready"):
                self.ready.set()

    def close(self) -> None:
        """Kills the process if it still runs, then ends the reader and closes the pipe."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


READY_LINE = re.compile(r"worker (\d+) ready \(pid (\d+)\)")


def ready_workers(log: str) -> dict[int, int]:
    """Worker number -> pid, from the latest ``worker N ready (pid P)`` line of each."""
    return {int(n): int(pid) for n, pid in READY_LINE.findall(log)}


def wait_ready_workers(proc: ServerProcess, count: int, timeout: float = 15) -> dict[int, int]:
    """Worker number -> pid (:func:`ready_workers`) once the log has the ``ready`` line of each
    of workers 1 to ``count``.

    ``fwrest: ready`` on standard output does not mean those lines are written: a worker tells
    the supervisor it is ready (a byte on a pipe) before it logs its ``ready`` line, and a
    worker's log lines leave at the end of its event loop's turn. Right after the start, on a
    busy machine, a worker's line may still be missing.
    """
    wanted = set(range(1, count + 1))
    found: dict[int, int] = {}

    def logged() -> bool:
        found.clear()
        found.update(ready_workers(proc.log()))
        return wanted <= set(found)

    try:
        wait_for(logged, timeout, f"the ready lines of workers {sorted(wanted)} in the log")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; found {found}; the log:\n{proc.log()[-3000:]}") from None
    return dict(found)


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]  # fmt: skip


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (the pages and CORS are tested in a real browser;
    without it the tests FAIL, never skip)."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's Chromium (apt-get install -y chromium); "
            "the HTML pages and CORS are tested in a real browser, never skipped"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(f"Playwright for Python is missing ({exc}): pip install -e '.[dev]'")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()
