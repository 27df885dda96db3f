"""``fwrest.start()`` (SPEC 2, 9): in process on a thread, or a supervisor child with ``workers=N``.
Each in-process test serves a uniquely named module (the process-wide endpoint registry must not mix
tests); "no Repository" runs in a child Python process."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import fwrest
from tests.conftest import ROOT, free_config, free_port, port_is_free, wait_for


def unique_module(tmp_path: Path) -> tuple[str, Path]:
    """A module with a unique name and route prefix; returns (name, file)."""
    name = f"startapp_{uuid.uuid4().hex[:10]}"
    path = tmp_path / f"{name}.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import os
            import threading
            import time

            from fwrest import get, rest

            @get("/{name}/ping/:n")
            def ping(n):
                return {{"n": n, "module": __name__, "pid": os.getpid(),
                         "thread": threading.current_thread().name,
                         "user_data": rest.getServerUserData()}}

            @get("/{name}/aping")
            async def aping():
                return {{"pid": os.getpid()}}

            RUNNING = []

            @get("/{name}/slow/:ms")
            def slow(ms):
                RUNNING.append(ms)
                time.sleep(int(ms) / 1000)
                return {{"slept": int(ms)}}

            @get("/{name}/running")
            async def running():
                return {{"running": len(RUNNING)}}
            """
        )
    )
    return name, path


def config_dict(repository: str | None, port: int = 0, **server: Any) -> dict[str, Any]:
    env: dict[str, Any] = {} if repository is None else {"Repository": repository}
    return {
        "HTTPSERVER": {"Enable": 1, "Servers": "HTTP_REST", "StateStore": "memory"},
        "HTTP_REST": {"HostName": "127.0.0.1", "Port": port, "Locations": "ROOT", **server},
        "ROOT": {"Path": "/api", "ThreadPool": "POOL"},
        "POOL": {"Environment": "ENV", "MinThreads": 1, "MaxThreads": 2},
        "ENV": env,
    }


def test_start_serves_and_stop_frees_the_port(tmp_path: Path) -> None:
    name, path = unique_module(tmp_path)
    service = fwrest.start(config_dict(str(path), UserData={"from": "dict"}))
    try:
        assert isinstance(service, fwrest.Service)
        port = service.ports["HTTP_REST"]
        assert port > 0  # port 0 was replaced by the one the system picked
        assert service.urls == [f"http://127.0.0.1:{port}/api"]
        r = httpx.get(f"{service.urls[0]}/{name}/ping/7", timeout=10)
        assert r.status_code == 200
        body = r.json()
        assert (body["n"], body["module"], body["user_data"]) == ("7", name, {"from": "dict"})
        assert body["thread"].startswith("fwrest-")
        assert body["pid"] == os.getpid()  # in the calling process
        assert httpx.get(f"{service.urls[0]}/{name}/aping", timeout=10).status_code == 200
        assert not port_is_free(port)
    finally:
        service.stop()
    assert port_is_free(port)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{service.urls[0]}/{name}/ping/1", timeout=5)
    # stop() returns once the service has ended: its thread is gone
    assert not [t for t in threading.enumerate() if t.name == "fwrest-service"]


def test_stop_finishes_requests_in_flight(tmp_path: Path) -> None:
    name, path = unique_module(tmp_path)
    service = fwrest.start(config_dict(str(path)))
    base = service.urls[0]
    with ThreadPoolExecutor(1) as ex:
        submitted = time.monotonic()
        slow = ex.submit(httpx.get, f"{base}/{name}/slow/600", timeout=30)
        running = f"{base}/{name}/running"
        wait_for(lambda: httpx.get(running, timeout=5).json()["running"], 10, "the slow request")
        started = time.monotonic()
        service.stop()
        returned = time.monotonic()
        print(f"stop() returned after {returned - started:.3f} s")
        # stop() waited for the handler, which sleeps 600 ms from after it was submitted
        assert returned - submitted >= 0.6
        assert slow.result().status_code == 200
        assert slow.result().json() == {"slept": 600}


def test_start_from_a_config_file(tmp_path: Path) -> None:
    name, _ = unique_module(tmp_path)
    config = free_config(tmp_path, extra={"ENV": {"Repository": f"{name}.py"}})
    with fwrest.start(config) as service:
        port = service.ports["HTTP_REST"]
        r = httpx.get(f"http://127.0.0.1:{port}/rest/{name}/ping/x", timeout=10)
        assert r.status_code == 200
        assert r.json()["n"] == "x"
    assert port_is_free(port)


def test_start_installs_no_signal_handlers(tmp_path: Path) -> None:
    _, path = unique_module(tmp_path)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    service = fwrest.start(config_dict(str(path)))
    try:
        during = {s: signal.getsignal(s) for s in before}
    finally:
        service.stop()
    after = {s: signal.getsignal(s) for s in before}
    assert during == before
    assert after == before


def test_bad_config_raises_config_error_and_binds_nothing(tmp_path: Path) -> None:
    port = free_port()
    many = config_dict(None, port=port)
    many["POOL"]["MaxThreads"] = "many"
    no_module = config_dict("no_such_module_here_xyz", port=port)
    for bad, named in ((no_module, "no_such_module_here_xyz"), (many, "MaxThreads")):
        with pytest.raises(fwrest.ConfigError) as info:
            fwrest.start(bad)
        assert named in str(info.value)
        assert port_is_free(port)


def test_a_port_that_cannot_be_bound_releases_the_others(tmp_path: Path) -> None:
    _, path = unique_module(tmp_path)
    first = free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    busy = holder.getsockname()[1]
    try:
        config = config_dict(str(path), port=first)
        config["HTTPSERVER"]["Servers"] = "HTTP_REST, HTTP_TWO"
        config["HTTP_TWO"] = {"HostName": "127.0.0.1", "Port": busy, "Locations": "ROOT"}
        with pytest.raises(fwrest.ConfigError) as info:
            fwrest.start(config)
        assert str(busy) in str(info.value) and "[HTTP_TWO]" in str(info.value)
        assert port_is_free(first)  # the first port was bound, then released
    finally:
        holder.close()


def test_without_repository_the_programs_endpoints_are_served(tmp_path: Path) -> None:
    script = program_file(
        tmp_path,
        """
@get("/prog/hello/:who")
def hello(who):
    return {"hello": who, "module": __name__}

@post("/prog/echo")
async def echo():
    return {"body": rest.getBodyRequest()}
""",
    )
    with program(script, config_dict(None)) as info:
        base = info["urls"][0]
        r = httpx.get(f"{base}/prog/hello/ann", timeout=10)
        assert r.status_code == 200
        assert r.json() == {"hello": "ann", "module": "__main__"}
        r = httpx.post(f"{base}/prog/echo", content=b"hi", timeout=10)
        assert r.json() == {"body": "hi"}
    assert port_is_free(info["ports"]["HTTP_REST"])


STOP_ON_A_LINE = 'sys.stdin.readline()\nservice.stop()\nprint("stopped", flush=True)\n'


def program_file(
    folder: Path,
    body: str,
    workers: int | None = None,
    pid: str = "os.getpid()",
    end: str = STOP_ON_A_LINE,
) -> Path:
    """``folder/program.py``: ``body``, ``fwrest.start()`` of the config in argv, a JSON line (urls,
    ports, ``pid``), then ``end`` (default: stop on a line on stdin)."""
    script = folder / "program.py"
    script.write_text(
        "import json, os, sys, time\n\nimport fwrest\nfrom fwrest import get, post, rest\n"
        f"{body}\nservice = fwrest.start(json.loads(sys.argv[1]), workers={workers})\n"
        f'print(json.dumps({{"urls": service.urls, "ports": service.ports, "pid": {pid}}}), flush=True)\n'
        + end
    )
    return script


@contextlib.contextmanager
def launched(
    script: Path, config: dict[str, Any], stderr: Any = subprocess.PIPE
) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """``python SCRIPT CONFIG_JSON`` and its printed JSON line; killed after the block if alive."""
    proc = subprocess.Popen(
        [sys.executable, str(script), json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=script.parent,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        yield proc, json.loads(line)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@contextlib.contextmanager
def program(script: Path, config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The program's JSON line; a line on stdin stops it, which must exit 0."""
    with launched(script, config) as (proc, info):
        yield info
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "stopped"
        assert proc.wait(30) == 0


def test_start_with_workers_runs_the_supervisor(tmp_path: Path) -> None:
    with fwrest.start(free_config(tmp_path), workers=2) as service:
        assert service.urls, "no URL reported"
        base = service.urls[0]
        port = int(base.split(":")[2].split("/")[0])
        assert service.ports == {"HTTP_REST": port}
        pids = set()
        for _ in range(40):
            r = httpx.get(f"{base}/hello", timeout=10)
            assert r.status_code == 200
            pids.add(r.json()["pid"])
            if len(pids) == 2:
                break
        print(f"worker pids seen: {sorted(pids)}")
        assert os.getpid() not in pids  # served by worker processes, not by this one
        assert len(pids) == 2
    assert port_is_free(port)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/hello", timeout=5)


def test_start_with_workers_from_a_dict(tmp_path: Path) -> None:
    _, path = unique_module(tmp_path)
    with fwrest.start(config_dict(str(path)), workers=1) as service:
        port = service.ports["HTTP_REST"]
        r = httpx.get(f"http://127.0.0.1:{port}/api/{path.stem}/ping/3", timeout=10)
        assert r.status_code == 200
    assert port_is_free(port)


def test_start_with_workers_and_a_bad_config_raises(tmp_path: Path) -> None:
    with pytest.raises(fwrest.ConfigError):
        fwrest.start(config_dict("no_such_module_here_xyz"), workers=2)


def test_start_with_workers_without_repository_serves_the_programs_modules(
    tmp_path: Path,
) -> None:
    # SPEC 2: no Repository: the program's endpoints; workers=N import its modules by name
    (tmp_path / "progmod.py").write_text(
        textwrap.dedent(
            """
            import os

            from fwrest import get

            @get("/progmod/who")
            def who():
                return {"module": __name__, "pid": os.getpid()}
            """
        )
    )
    # the program imports progmod: its endpoints are the program's
    script = program_file(tmp_path, "import progmod", workers=2)
    with program(script, config_dict(None)) as info:
        r = httpx.get(f"{info['urls'][0]}/progmod/who", timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["module"] == "progmod"
        assert r.json()["pid"] != info["pid"]  # a worker process served it


def test_start_rejects_workers_below_one_and_a_config_of_another_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, path = unique_module(tmp_path)
    monkeypatch.chdir(tmp_path)  # where start(workers=N) would write a temporary config
    for workers in (0, -1, True, "2"):
        with pytest.raises(fwrest.ConfigError) as info:
            fwrest.start(config_dict(str(path)), workers=workers)  # type: ignore[arg-type]
        print(info.value)
        assert "workers must be a whole number of at least 1" in str(info.value)
    with pytest.raises(fwrest.ConfigError, match="workers must be at most 256, got 257"):
        fwrest.start(config_dict(str(path)), workers=257)
    for config in (42, [config_dict(str(path))], None):  # neither a path nor a dict
        with pytest.raises(fwrest.ConfigError, match="must be a file path or a dict, got"):
            fwrest.start(config)  # type: ignore[arg-type]


def test_start_given_config_text_names_the_mistake(tmp_path: Path) -> None:
    """JSON text where a path or a dict belongs: the message says so, not 'no such file'."""
    for text in (json.dumps(config_dict(None)), "[HTTPSERVER]\nServers=HTTP_REST\n"):
        with pytest.raises(fwrest.ConfigError) as info:
            fwrest.start(text)
        print(info.value)
        assert "given as text" in str(info.value)
        assert "json.loads" in str(info.value)


def fwrest_handlers() -> list[Any]:
    return [h for h in logging.getLogger("fwrest").handlers if getattr(h, "_fwrest", False)]


def test_a_failed_start_leaves_no_log_handler_behind(tmp_path: Path) -> None:
    """Port taken: start() raises and closes its LogFile, leaving no rest_log_level in force."""
    _, path = unique_module(tmp_path)
    before = fwrest_handlers()
    level = logging.getLogger("fwrest").level
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        config = config_dict(str(path), port=busy.getsockname()[1])
        config["HTTPSERVER"]["LogFile"] = str(tmp_path / "service.log")
        config["GENERAL"] = {"rest_log_level": 0}
        for _ in range(3):
            with pytest.raises(fwrest.ConfigError):
                fwrest.start(config)
    assert fwrest_handlers() == before
    assert logging.getLogger("fwrest").level == level


def test_stopping_one_of_two_services_keeps_the_others_log(tmp_path: Path) -> None:
    """Two services share the later start's log handlers: stopping the first keeps the second's."""
    name, path = unique_module(tmp_path)
    log_file = tmp_path / "second.log"
    first = fwrest.start(config_dict(str(path)))
    second_config = config_dict(str(path))
    second_config["HTTPSERVER"]["LogFile"] = str(log_file)
    second = fwrest.start(second_config)
    try:
        first.stop()
        r = httpx.get(f"{second.urls[0]}/{name}/ping/after-first-stopped", timeout=10)
        assert r.status_code == 200
    finally:
        second.stop()
        first.stop()
    text = log_file.read_text()
    print(text)
    assert "after-first-stopped" in text


SLOW = """
@get("/prog/slow")
def slow():
    time.sleep(1.0)
    return {"slow": "done"}
"""


def test_the_programs_end_stops_the_service_gracefully(tmp_path: Path) -> None:
    """On a daemon thread: the program's end stops it gracefully, no request in flight cut."""
    end = 'sys.stdin.readline()\nprint("the program ends without service.stop()", flush=True)\n'
    script = program_file(tmp_path, SLOW, end=end)
    with launched(script, config_dict(None)) as (proc, info):
        assert proc.stdin is not None
        with ThreadPoolExecutor(1) as ex:
            slow = ex.submit(httpx.get, f"{info['urls'][0]}/prog/slow", timeout=30)
            time.sleep(0.3)  # the request is in the handler
            proc.stdin.write("\n")
            proc.stdin.flush()
            result = slow.result()
        out, err = proc.communicate(timeout=30)
        print(out, err)
        assert result.status_code == 200, result.text
        assert result.json() == {"slow": "done"}
        assert proc.returncode == 0
        assert "stopped after 1 request(s)" in err
    assert port_is_free(info["ports"]["HTTP_REST"])


def test_start_with_workers_stops_when_the_program_is_killed(tmp_path: Path) -> None:
    """Killed, the program cannot stop its supervisor child: it stops itself, freeing the ports."""
    _, path = unique_module(tmp_path)
    # the pid printed is the supervisor's
    script = program_file(
        tmp_path, "", workers=1, pid="service._process.pid", end="time.sleep(120)\n"
    )
    log = tmp_path / "program.log"  # a file: the supervisor would hold a pipe open
    with log.open("w") as stderr, launched(script, config_dict(str(path)), stderr) as (_, info):
        port = info["ports"]["HTTP_REST"]
        assert httpx.get(f"{info['urls'][0]}/{path.stem}/ping/1", timeout=10).status_code == 200
    killed = time.monotonic()  # launched() killed the program
    while not port_is_free(port) and time.monotonic() < killed + 20:
        time.sleep(0.1)
    print(f"the port was free {time.monotonic() - killed:.2f} s after the kill")
    print(log.read_text())
    if not port_is_free(port):
        os.kill(info["pid"], signal.SIGKILL)  # the test's own leftover, not the service's stop
        raise AssertionError("the supervisor outlived the program")


def test_start_with_workers_that_fails_leaves_no_temporary_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary config written for the child from a dict is removed when the start fails."""
    _, path = unique_module(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        with pytest.raises(fwrest.ConfigError) as info:
            fwrest.start(config_dict(str(path), port=busy.getsockname()[1]), workers=1)
    print(info.value)
    assert list(work.iterdir()) == []


def test_start_and_stop_from_other_threads(tmp_path: Path) -> None:
    """From a non-main thread (no signal handler installed), stopped from another thread."""
    name, path = unique_module(tmp_path)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with ThreadPoolExecutor(1) as ex:
        service = ex.submit(fwrest.start, config_dict(str(path))).result(timeout=30)
    try:
        r = httpx.get(f"{service.urls[0]}/{name}/ping/t", timeout=10)
        assert r.status_code == 200 and r.json()["n"] == "t"
        assert {s: signal.getsignal(s) for s in before} == before
    finally:
        service.stop()
    assert port_is_free(service.ports["HTTP_REST"])
