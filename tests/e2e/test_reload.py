"""Reload without downtime (SPEC 13.1) and the development loop (SPEC 13.2): a bounded load (two
kept-alive threads, two connecting per request) through three reloads (an answer changed, a port
added, a broken configuration) sees no request fail or refused."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import trustme
from cryptography import x509

from tests.conftest import (
    FWREST,
    ServerProcess,
    children,
    free_config,
    issue_certs,
    local_port,
    port_is_free,
    run_cli,
    run_forked,
    serving,
    tls_server,
    wait_for,
)
from tests.docs.blocks import example
from tests.native.support import get_settings, post_settings

APP = """\
import os
import time

from fwrest import get

VERSION = {version}


@get("/v")
def version():
    return {{"v": VERSION, "pid": os.getpid()}}


@get("/slow")
def slow():  # until the test creates the file "release" (in the service's folder)
    open("slow", "w").close()  # in flight
    deadline = time.monotonic() + 20
    while not os.path.exists("release") and time.monotonic() < deadline:
        time.sleep(0.02)
    return {{"v": VERSION}}
"""

LOAD_LIMIT_S = 90.0  # the loop's hang guard: it ends when the test says, or then


def write_app(folder: Path, version: int | str) -> None:
    (folder / "app.py").write_text(APP.format(version=version))


def versioned(tmp_path: Path) -> Path:
    """:func:`free_config`'s service serving :data:`APP` at version 1."""
    config = free_config(tmp_path)
    write_app(tmp_path, 1)
    return config


def edit_config(config: Path, change: dict[str, dict[str, object]]) -> None:
    sections = json.loads(config.read_text())
    for name, body in change.items():
        sections.setdefault(name, {}).update(body)
    config.write_text(json.dumps(sections, indent=2))


class Load:
    """Requests to ``url`` from a few threads until :meth:`stop`: every outcome recorded."""

    def __init__(self, url: str, verify: ssl.SSLContext | bool = True) -> None:
        self.url = url
        self.verify = verify
        self.outcomes: Counter[str] = Counter()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(keep,), daemon=True)
            for keep in (True, True, False, False)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _record(self, outcome: str, failure: str | None = None) -> None:
        with self._lock:
            self.outcomes[outcome] += 1
            if failure is not None:
                self.failures.append(failure)

    def _run(self, keep_alive: bool) -> None:
        deadline = time.monotonic() + LOAD_LIMIT_S
        client = httpx.Client(timeout=10, verify=self.verify) if keep_alive else None
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                try:
                    if client is not None:
                        answer = client.get(self.url)
                    else:
                        answer = httpx.get(
                            self.url,
                            timeout=10,
                            headers={"Connection": "close"},
                            verify=self.verify,
                        )
                    if answer.status_code == 200:
                        self._record(f"v{answer.json().get('v', '')}")  # a probe's: "v"
                    else:
                        self._record("error", f"{answer.status_code} {answer.text[:200]}")
                except httpx.HTTPError as exc:
                    self._record("error", f"{type(exc).__name__}: {exc}")
                time.sleep(0.005)
        finally:
            if client is not None:
                client.close()


def version_now(url: str) -> int:
    """The version a new connection gets."""
    return int(httpx.get(url, timeout=10, headers={"Connection": "close"}).json()["v"])


def wait_line(proc: ServerProcess, text: str, timeout: float = 30) -> None:
    wait_for(lambda: any(text in line for line in proc.stdout_lines), timeout, repr(text))


def test_three_reloads_under_load_fail_no_request(tmp_path: Path) -> None:
    config = free_config(tmp_path, servers={"HTTP_REST": local_port(KeepAliveTimeout=1000)})
    write_app(tmp_path, 1)
    pid_file = tmp_path / "fwrest.pid"
    proc = ServerProcess(config, workers=2, args=("--pid-file", str(pid_file))).wait_ready()
    try:
        assert int(pid_file.read_text()) == proc.proc.pid
        url = proc.url() + "/v"
        first_workers = children(proc.proc.pid)
        with Load(url) as load:
            wait_for(lambda: load.outcomes["v1"] > 20, 20, "the load runs")

            # 1. new code: `fwrest reload PIDFILE`, a request in flight meanwhile
            slow: list[httpx.Response] = []
            in_flight = threading.Thread(
                target=lambda: slow.append(httpx.get(proc.url() + "/slow", timeout=20))
            )
            in_flight.start()
            write_app(tmp_path, 2)
            sent = run_cli("reload", str(pid_file))
            assert sent.returncode == 0, sent.stderr
            assert f"pid {proc.proc.pid}" in sent.stdout
            wait_line(proc, "reloaded: generation 2")
            assert version_now(url) == 2
            assert in_flight.is_alive()
            (tmp_path / "release").touch()
            in_flight.join(20)
            assert [(a.status_code, a.json()["v"]) for a in slow] == [(200, 1)]
            ready = [x.startswith("fwrest: ready") for x in proc.stdout_lines].index(True)
            lines = proc.stdout_lines[ready + 1 :]
            seen = load.outcomes["v2"]
            wait_for(lambda: load.outcomes["v2"] > seen + 20, 20, "the load gets the new code")

            # 2. a port added: SIGHUP
            edit_config(
                config, {"HTTPSERVER": {"Servers": "HTTP_REST,HTTP_TWO"}, "HTTP_TWO": local_port()}
            )
            proc.signal(signal.SIGHUP)
            wait_line(proc, "reloaded: generation 3")
            assert proc.ports["HTTP_REST"] == int(url.split(":")[2].split("/")[0])
            assert httpx.get(proc.url("HTTP_TWO") + "/v", timeout=10).json()["v"] == 2
            assert version_now(url) == 2
            # generation 2's workers drain meanwhile (under load, still there at this line)
            wait_for(lambda: len(children(proc.proc.pid)) == 2, 30, "generation 2 drained")
            third_workers = children(proc.proc.pid)

            # 3. a broken configuration: logged as `fwrest check` prints it, nothing changes
            edit_config(config, {"HTTP_REST": {"NoSuchKey": 1}})
            checked = run_cli("check", str(config), cwd=tmp_path)
            assert checked.returncode == 2
            proc.signal(signal.SIGHUP)
            wait_line(proc, "reload failed")
            seen = load.outcomes["v2"]
            wait_for(lambda: load.outcomes["v2"] > seen + 20, 20, "the load goes on")
        log = proc.log()
        assert checked.stderr.strip() in log, log[-3000:]
        assert "generation 4" not in "\n".join(proc.stdout_lines)
        assert children(proc.proc.pid) == third_workers
        assert not first_workers & third_workers
        assert httpx.get(proc.url("HTTP_TWO") + "/v", timeout=10).json()["v"] == 2
        print(f"outcomes across three reloads: {dict(load.outcomes)}")
        assert load.failures == [], load.failures[:10]
        shown = example("operations-reload-lines").text.splitlines()
        assert [re.sub(r":\d+/", ":PORT/", x) for x in lines[:3]] == [
            re.sub(r":\d+/", ":PORT/", x) for x in shown
        ]
        assert load.outcomes["v1"] and load.outcomes["v2"] > 60
        assert proc.stop() == 0
        assert not pid_file.exists()
    finally:
        proc.stop()


def trusting(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


def serial_of(port: int, ca_file: Path) -> int:
    context = trusting(ca_file)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return int(tls.getpeercert()["serialNumber"], 16)  # type: ignore[index, arg-type]


def test_a_reload_s_workers_take_the_run_time_settings_without_a_warning(tmp_path: Path) -> None:
    """SPEC 5, 13.1: run-time settings outlive a reload; the new generation's workers take them
    as they start (an INFO line), as the service already ran with them: not a WARNING of a
    change, which the operator would read as one after every reload."""
    config = free_config(tmp_path, extra={"HTTPSERVER": {"StateStore": "sqlite"}})
    with serving(config, workers=2) as proc:
        answer = post_settings(proc.url(), {"rest_log_stringsize": 33})
        assert answer.status_code == 200, answer.text
        for worker in ("w1", "w2"):  # the change's own lines, before the reload
            proc.wait_log(f"[{worker}] settings changed")
        mark = len(proc.log())
        proc.signal(signal.SIGHUP)
        wait_line(proc, "reloaded: generation 2")
        taken = proc.wait_log("settings changed (start): rest_log_stringsize 200 -> 33", since=mark)
        lines = [line for line in taken.splitlines() if "settings changed" in line]
        assert lines and all(" INFO " in line and "(start)" in line for line in lines), lines
        assert get_settings(proc.url())["rest_log_stringsize"]["effective"] == 33
        # SPEC 13.5: the reload that turns the log off is in it (at the level before it), the
        # one that turns it on again too (at the level after it)
        for generation, level in ((3, 0), (4, 3)):
            doc = json.loads(config.read_text())
            config.write_text(json.dumps({**doc, "GENERAL": {"rest_log_level": level}}))
            proc.signal(signal.SIGHUP)
            wait_line(proc, f"reloaded: generation {generation}")
            event = f'{{"outcome":"done","generation":{generation},'
            proc.wait_log(f"reload actor='signal' client=- port=- {event}")


def test_ready_stays_200_across_reloads(tmp_path: Path) -> None:
    """SPEC 13.1, 13.3: a new worker serves once its store was checked, and an old one that
    drains for a reload answers ready as the service is (UP): no probe fails across a reload."""
    config = free_config(tmp_path, extra={"HTTPSERVER": {"StateStore": "sqlite"}})  # pinged
    with serving(config, workers=2) as proc, Load(proc.url() + "/fw/healthcheck/ready") as load:
        for generation in (2, 3, 4):
            seen = load.outcomes["v"]
            wait_for(lambda n=seen: load.outcomes["v"] > n + 20, 20, "the probes run")
            proc.signal(signal.SIGHUP)
            wait_line(proc, f"reloaded: generation {generation}")
        seen = load.outcomes["v"]
        wait_for(lambda: load.outcomes["v"] > seen + 20, 20, "the probes go on")
    assert load.failures == [], load.failures[:5]


def test_renewed_certificate_is_served_after_a_reload(ca: trustme.CA, tmp_path: Path) -> None:
    certs = issue_certs(ca, tmp_path / "tls")
    config = free_config(tmp_path, servers={"HTTPS_REST": tls_server(certs)})
    write_app(tmp_path, 1)
    with (
        serving(config, workers=2) as proc,
        Load(proc.url("HTTPS_REST") + "/v", trusting(certs["ca"])) as load,
    ):
        port = proc.ports["HTTPS_REST"]
        before = serial_of(port, certs["ca"])
        wait_for(lambda: load.outcomes["v1"] > 20, 20, "the load runs")
        issue_certs(ca, tmp_path / "tls")  # renewed on disk, under the same names
        renewed = x509.load_pem_x509_certificate(certs["cert"].read_bytes()).serial_number
        assert renewed != before
        proc.signal(signal.SIGHUP)
        wait_line(proc, "reloaded: generation 2")
        assert serial_of(port, certs["ca"]) == renewed
        seen = load.outcomes["v1"]
        wait_for(lambda: load.outcomes["v1"] > seen + 20, 20, "the load goes on")
    assert load.failures == [], load.failures[:10]


def test_reload_without_a_running_service_exits_2(tmp_path: Path) -> None:
    missing = run_forked("reload", str(tmp_path / "none.pid"), cwd=tmp_path)
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr and "--pid-file" in missing.stderr
    gone = tmp_path / "gone.pid"
    with os.popen("sh -c 'echo $$'") as shell:  # a process that has ended since
        gone.write_text(shell.read())
    stale = run_forked("reload", str(gone), cwd=tmp_path)
    assert stale.returncode == 2
    assert "stale" in stale.stderr and "Traceback" not in stale.stderr
    other = tmp_path / "other.pid"
    other.write_text(f"{os.getpid()}\n")  # a live process that is not `fwrest serve`
    foreign = run_forked("reload", str(other), cwd=tmp_path)
    assert foreign.returncode == 2
    assert "is not `fwrest serve`" in foreign.stderr
    nowhere = str(tmp_path / "no-such-folder" / "fwrest.pid")
    unwritable = run_forked("serve", str(versioned(tmp_path)), "--pid-file", nowhere, cwd=tmp_path)
    assert unwritable.returncode == 2
    assert f"cannot write the pid file {nowhere}" in unwritable.stderr


def test_reload_flag_takes_an_edit_within_2_s_and_keeps_serving_through_a_syntax_error(
    tmp_path: Path,
) -> None:
    config = versioned(tmp_path)
    edit_config(config, {"HTTP_REST": {"FwData": "fwdata.json"}})  # a file of the config's own
    (tmp_path / "fwdata.json").write_text("{}")
    with serving(config, workers=1, args=("--reload",)) as proc:
        url = proc.url() + "/v"
        wait_line(proc, "watching")
        # a watcher that dies is replaced, as a worker is
        worker = int(re.findall(r"worker 1 ready \(pid (\d+)", proc.wait_log("ready (pid"))[0])
        (watcher,) = children(proc.proc.pid) - {worker}
        os.kill(watcher, signal.SIGTERM)
        proc.wait_log("the process that watches the files died (signal 15); starting another")
        lines = proc.stdout_lines
        wait_for(lambda: sum(x.startswith("fwrest: watching") for x in lines) == 2, 10, "again")
        time.sleep(0.3)  # the watcher's first turn sets its watches up
        assert version_now(url) == 1
        write_app(tmp_path, 2)
        took = wait_for(lambda: version_now(url) == 2, 2.0, "the edit served")
        print(f"the edit was served {took:.2f} s after it was written")
        wait_line(proc, "reloaded: generation 2")
        (tmp_path / "fwdata.json").write_text('{"NativeRoutes": {}}')
        wait_line(proc, "changed: fwdata.json; reloading")
        wait_line(proc, "reloaded: generation 3")
        write_app(tmp_path, "2 +")  # a syntax error
        proc.wait_log("SyntaxError", timeout=10)
        assert "configuration error" in proc.log()
        for _ in range(5):
            assert version_now(url) == 2
            time.sleep(0.1)
        assert "generation 4" not in "\n".join(proc.stdout_lines)


def test_a_new_generation_that_does_not_start_leaves_the_old_one_serving(tmp_path: Path) -> None:
    config = versioned(tmp_path)
    with serving(config, workers=1) as proc:
        url = proc.url() + "/v"
        before = children(proc.proc.pid)
        write_app(tmp_path, 2)
        with (tmp_path / "app.py").open("a") as fh:
            fh.write("\n\ndef refuse():\n    raise RuntimeError('no database')\n")
        edit_config(config, {"POOL": {"OnStart": "refuse"}})
        proc.signal(signal.SIGHUP)
        wait_line(proc, "reload failed")
        assert "the new workers did not start" in proc.wait_log("did not start")
        assert "no database" in proc.log()
        assert version_now(url) == 1
        wait_for(lambda: children(proc.proc.pid) == before, 10, "the new worker gone")
        edit_config(config, {"POOL": {"OnStart": ""}})  # fixed: the next reload takes
        proc.signal(signal.SIGHUP)
        wait_line(proc, "reloaded: generation 3")
        assert version_now(url) == 2


def test_a_port_removed_is_closed_once_the_old_workers_drained(tmp_path: Path) -> None:
    two = local_port()
    config = free_config(tmp_path, servers={"HTTP_REST": dict(two), "HTTP_TWO": two})
    write_app(tmp_path, 1)
    with serving(config, workers=1) as proc:
        removed = proc.ports["HTTP_TWO"]
        assert not port_is_free(removed)
        edit_config(config, {"HTTPSERVER": {"Servers": "HTTP_REST"}})
        proc.signal(signal.SIGHUP)
        proc.wait_log("the workers of generation 1 have drained")
        assert port_is_free(removed)
        assert version_now(proc.url() + "/v") == 1


def test_a_host_name_spelt_otherwise_for_the_same_address_keeps_its_socket(
    tmp_path: Path,
) -> None:
    config = versioned(tmp_path)
    with serving(config, workers=1) as proc:
        port = proc.ports["HTTP_REST"]
        write_app(tmp_path, 2)
        edit_config(config, {"HTTP_REST": {"HostName": "localhost", "Port": port}})
        proc.signal(signal.SIGHUP)
        wait_line(proc, "reloaded: generation 2", 15)
        assert version_now(proc.url() + "/v") == 2


def test_workers_0_runs_the_handler_in_the_serve_process(tmp_path: Path) -> None:
    with serving(versioned(tmp_path), workers=0) as proc:
        answer = httpx.get(proc.url() + "/v", timeout=10).json()
        assert answer["pid"] == proc.proc.pid
        assert children(proc.proc.pid) == set()
        assert proc.stop() == 0


def test_a_module_that_interrupts_or_hangs_at_import_does_not_end_the_service(
    tmp_path: Path,
) -> None:
    """SPEC 13.1: KeyboardInterrupt or another BaseException at import fails the reload, logged
    as `check` prints it, the old code goes on; an import that hangs does not hold a stop
    (SPEC 1, 7): SIGTERM abandons the reload and drains, a second SIGTERM forces. A real
    Ctrl-C while a module imports at start stops `fwrest check`, no configuration error."""
    config = free_config(
        tmp_path, app="open('importing', 'w').close()\nimport time\ntime.sleep(60)\n"
    )
    check = subprocess.Popen(
        [*FWREST, "check", str(config)],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not a runner's SIG_IGN
    )
    wait_for((tmp_path / "importing").exists, 20, "the import")
    check.send_signal(signal.SIGINT)
    assert (check.wait(10), check.communicate()[1]) == (0, "")
    with serving(versioned(tmp_path), workers=1) as proc:
        url = proc.url() + "/v"
        raising = {"KeyboardInterrupt": "raise KeyboardInterrupt\n",
                   "Stop: why": "class Stop(BaseException):\n    pass\n\nraise Stop('why')\n"}  # fmt: skip
        for count, (shown, source) in enumerate(raising.items(), 1):
            (tmp_path / "app.py").write_text(source)
            proc.signal(signal.SIGHUP)
            wait_for(lambda n=count: proc.log().count("reload failed") == n, 10, "reload fails")
            assert f"it raised {shown} (" in proc.log() and "Traceback" not in proc.log()
            assert version_now(url) == 1 and proc.proc.poll() is None
        slow: list[str] = []

        def ask_slow() -> None:
            try:
                slow.append(str(httpx.get(proc.url() + "/slow", timeout=30).status_code))
            except httpx.HTTPError as exc:
                slow.append(type(exc).__name__)

        in_flight = threading.Thread(target=ask_slow)
        in_flight.start()
        wait_for((tmp_path / "slow").exists, 20, "the request in flight")
        mark = tmp_path / "reloading"
        hang = f"open({str(mark)!r}, 'w').close()\nimport time\n\ntime.sleep(1000)\n"
        (tmp_path / "app.py").write_text(hang)
        proc.signal(signal.SIGHUP)
        wait_for(mark.exists, 20, "the third reload's import")
        proc.signal(signal.SIGTERM)
        proc.wait_log("reload abandoned: a stop signal came while it loaded")
        wait_line(proc, "stopping: draining")
        time.sleep(0.5)
        assert proc.proc.poll() is None  # the request in flight drains
        proc.signal(signal.SIGTERM)
        assert proc.proc.wait(10) == 0
        in_flight.join(30)
        assert "fwrest: second signal: forcing the stop" in proc.stdout_lines
        assert slow == ["RemoteProtocolError"]  # dropped by the forced stop
