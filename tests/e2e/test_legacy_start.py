"""The legacy start (SPEC 6): ``wsRestfulStart(jo, path)`` / ``wsRestfulStop()`` in a subprocess
program (its endpoints exactly its own), from a dict or a JSON string: the endpoint served under the
extra path and the location, the program exits 0 when told, ports freed. Bad JSON or a port in use:
a non-zero code, logged."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.monitor.support import free_port, port_is_free

HANG_GUARD = 30.0  # seconds the program may take to print its return code

PROGRAM = textwrap.dedent(
    """
    import json
    import sys
    import threading

    import fwrest
    from fwrest import get


    @get("/greet/:name", description="greets")
    def greet(name):
        return {"hello": name, "path": fwrest.rest.getPathRequest()}


    @get("/thread")
    def thread():
        return {"thread": threading.current_thread().name}


    spec = json.loads(open(sys.argv[1]).read())
    jo = spec["jo"] if spec["as"] == "dict" else json.dumps(spec["jo"])
    if spec["as"] == "raw":
        jo = spec["jo"]  # a string exactly as given (maybe not JSON at all)
    if spec["as"] == "bytes":
        jo = json.dumps(spec["jo"]).encode()  # JSON text read from a file in binary
    rc = fwrest.rest.wsRestfulStart(jo, spec["path"])
    print("rc", rc, flush=True)
    for extra in spec.get("more", []):  # further calls in the same program
        print("rc", fwrest.rest.wsRestfulStart(extra["jo"], extra["path"]), flush=True)
    sys.stdin.readline()  # the test says when to stop
    if rc == 0:
        print("stopped", fwrest.rest.wsRestfulStop(), flush=True)
    print("bye", flush=True)
    """
)


def infrastructure(*ports: int) -> dict[str, Any]:
    """Infrastructure JSON in the shape of SPEC 2: one server per port, location /rest."""
    names = [f"HTTP_REST{i + 1}" for i in range(len(ports))]
    jo: dict[str, Any] = {
        "HTTPSERVER": {"Enable": 1, "Servers": ", ".join(names), "StateStore": "memory"},
        "ROOT": {"Path": "/rest", "ThreadPool": "POOL"},
        "POOL": {"Environment": "ENV", "MinThreads": 1, "MaxThreads": 2},
        "ENV": {},
    }
    for name, port in zip(names, ports, strict=True):
        jo[name] = {"HostName": "127.0.0.1", "Port": port, "Locations": "ROOT"}
    return jo


class Program:
    """The legacy program as a subprocess; ``rc`` is the code ``wsRestfulStart`` returned."""

    def __init__(
        self, tmp_path: Path, jo: Any, mode: str, path: str = "/legacy", **more: Any
    ) -> None:
        (tmp_path / "legacy_prog.py").write_text(PROGRAM)
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"jo": jo, "as": mode, "path": path, **more}))
        self.stderr_path = tmp_path / "prog.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "legacy_prog.py", str(spec)],
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        assert self.proc.stdout is not None
        started = time.monotonic()
        ready, _, _ = select.select([self.proc.stdout], [], [], HANG_GUARD)
        if not ready:
            self.proc.kill()
            self.finish()
            raise AssertionError(f"no return code within {HANG_GUARD}s:\n{self.log()}")
        line = self.proc.stdout.readline()
        print(f"program: {line.strip()!r} after {time.monotonic() - started:.2f}s")
        if not line.startswith("rc "):
            self.finish()
            raise AssertionError(f"no return code printed:\n{self.log()}")
        self.rc = int(line.split()[1])

    def log(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def finish(self, timeout: float = 40) -> tuple[int, str]:
        """Let the program go on (stop, exit); returns its exit code and the rest of stdout."""
        try:
            out, _ = self.proc.communicate("stop\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            raise AssertionError(f"the program did not exit:\n{self.log()}") from None
        finally:
            self._stderr.close()
        return self.proc.returncode, out


@pytest.mark.parametrize(
    ("mode", "path"),
    # "/legacy/" is the prefix /legacy, as a location's Path is
    [("dict", "/legacy"), ("str", "/legacy"), ("bytes", "/legacy"), ("dict", "/legacy/")],
)
def test_legacy_start_serves_under_the_extra_path(tmp_path: Path, mode: str, path: str) -> None:
    ports = (free_port(), free_port())
    prog = Program(tmp_path, infrastructure(*ports), mode, path)
    try:
        assert prog.rc == 0, prog.log()
        for port in ports:
            base = f"http://127.0.0.1:{port}"
            legacy = httpx.get(f"{base}/legacy/greet/bob", timeout=10)
            assert legacy.status_code == 200, legacy.text
            assert legacy.json() == {"hello": "bob", "path": "/legacy/greet/bob"}
            rest = httpx.get(f"{base}/rest/greet/al", timeout=10)
            assert rest.status_code == 200, rest.text
            assert rest.json() == {"hello": "al", "path": "/rest/greet/al"}
            assert httpx.get(f"{base}/legacy/nothing", timeout=10).status_code == 404
            assert httpx.get(f"{base}/other/greet/x", timeout=10).status_code == 404
            # the extra location is a location like any other: native routes under it too
            ok = httpx.get(f"{base}/legacy/fw/healthcheck/ok", timeout=10)
            assert ok.status_code == 200 and ok.text.strip() == "ok"
        print(prog.log())
    finally:
        code, out = prog.finish()
    print(out)
    assert code == 0, prog.log()
    assert "stopped 0" in out and "bye" in out
    for port in ports:
        assert port_is_free(port), port


def test_extra_path_uses_each_servers_own_thread_pool(tmp_path: Path) -> None:
    """Two servers on two pools: the extra location of each serves on that server's pool."""
    ports = (free_port(), free_port())
    jo = infrastructure(*ports)
    jo["ROOT2"] = {"Path": "/rest2", "ThreadPool": "POOL2"}
    jo["POOL2"] = {"Environment": "ENV", "MinThreads": 1, "MaxThreads": 2}
    jo["HTTP_REST2"]["Locations"] = "ROOT2"
    prog = Program(tmp_path, jo, "dict")
    try:
        assert prog.rc == 0, prog.log()
        for port, own, pool in ((ports[0], "/rest", "POOL"), (ports[1], "/rest2", "POOL2")):
            for prefix in (own, "/legacy"):
                resp = httpx.get(f"http://127.0.0.1:{port}{prefix}/thread", timeout=10)
                assert resp.status_code == 200, resp.text
                print(port, prefix, resp.json())
                assert resp.json()["thread"].startswith(f"fwrest-{pool}-"), (prefix, resp.json())
    finally:
        code, _ = prog.finish()
    assert code == 0


def _broken(**changes: Any) -> dict[str, Any]:
    jo = infrastructure(1)
    for section, value in changes.items():
        jo[section] = value
    return jo


def refused(prog: Program, needle: str) -> str:
    """A non-zero code, a log naming ``wsRestfulStart`` and ``needle``, no traceback; stdout."""
    code, out = prog.finish()
    log = prog.log()
    print(f"rc {prog.rc}; log:\n{log}")
    assert prog.rc != 0
    assert "wsRestfulStart" in log and needle in log
    assert "Traceback" not in log
    assert code == 0
    return out


NO_HTTPSERVER = {"SERVERS": {"HostName": "127.0.0.1"}}
NO_LOCATIONS = {"HostName": "127.0.0.1", "Port": 1}


@pytest.mark.parametrize(
    ("jo", "mode", "needle"),
    [
        pytest.param(NO_HTTPSERVER, "dict", "HTTPSERVER", id="no-httpserver-dict"),
        pytest.param(NO_HTTPSERVER, "str", "HTTPSERVER", id="no-httpserver-str"),
        pytest.param("{not json", "raw", "invalid", id="not-json"),
        pytest.param(["HTTPSERVER"], "dict", "object", id="not-an-object"),
        # odd sections
        pytest.param(_broken(ROOT="not an object"), "dict", "ROOT", id="location-not-an-object"),
        pytest.param(
            _broken(HTTP_REST1={**NO_LOCATIONS, "Locations": 5}),
            "dict",
            "Locations",
            id="locations-a-number",
        ),
        pytest.param(_broken(HTTP_REST1=NO_LOCATIONS), "dict", "Locations", id="no-locations"),
    ],
)
def test_bad_infrastructure_json_returns_non_zero_never_raises(
    tmp_path: Path, jo: Any, mode: str, needle: str
) -> None:
    assert "bye" in refused(Program(tmp_path, jo, mode), needle)  # returned a code, not raised


def test_extra_path_equal_to_a_location_returns_non_zero(tmp_path: Path) -> None:
    port = free_port()
    refused(Program(tmp_path, infrastructure(port), "dict", path="/rest"), "/rest")
    assert port_is_free(port)


def test_port_in_use_returns_non_zero_and_binds_nothing(tmp_path: Path) -> None:
    first = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        prog = Program(tmp_path, infrastructure(first, taken), "dict")
        try:
            log = prog.log()
            print(f"rc {prog.rc}; log:\n{log}")
            assert prog.rc != 0
            assert "wsRestfulStart" in log and str(taken) in log
            assert "in use" in log or "cannot be bound" in log
            # all or nothing: the other server's port was released while the program runs
            assert port_is_free(first)
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://127.0.0.1:{first}/legacy/greet/x", timeout=5)
        finally:
            code, _ = prog.finish()
    assert code == 0


def test_called_twice_serves_both_and_stop_ends_both(tmp_path: Path) -> None:
    """A second call starts a second service; one on served ports gives 2; stop ends every one."""
    first, second = free_port(), free_port()
    more = [
        {"jo": infrastructure(first), "path": "/again"},  # the first's port: in use
        {"jo": infrastructure(second), "path": "/other"},
    ]
    prog = Program(tmp_path, infrastructure(first), "dict", more=more)
    assert prog.proc.stdout is not None
    codes = [prog.rc] + [int(prog.proc.stdout.readline().split()[1]) for _ in more]
    try:
        print(f"return codes {codes}; log:\n{prog.log()}")
        assert codes == [0, 2, 0]
        for port, prefix in ((first, "/legacy"), (second, "/other"), (second, "/rest")):
            r = httpx.get(f"http://127.0.0.1:{port}{prefix}/greet/x", timeout=10)
            assert r.status_code == 200, (port, prefix, r.text)
        r = httpx.get(f"http://127.0.0.1:{first}/again/greet/x", timeout=10)
        assert r.status_code == 404
    finally:
        code, out = prog.finish()
    assert code == 0 and "stopped 0" in out
    assert port_is_free(first) and port_is_free(second)


def test_the_legacy_functions_import_from_fwrest_rest() -> None:
    """``from fwrest.rest import wsRestfulStart`` works, as the original's ``<vendor>.rest``."""
    import fwrest
    from fwrest.rest import wsRestfulStart, wsRestfulStop

    assert wsRestfulStart.__func__ is fwrest.rest.wsRestfulStart.__func__
    assert wsRestfulStart("[]", "/legacy") == 1
    assert wsRestfulStop() == 0
    assert callable(fwrest.rest.getPathRequest)  # still the REST object
