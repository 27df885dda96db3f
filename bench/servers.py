"""Starting and stopping the servers under test, pinned with ``taskset``, on loopback only.

* fwrest: ``fwrest serve CONFIG --workers N`` on a config written here (port 0; the port is
  read from its ``fwrest: serving URL [SECTION]`` line);
* the ceiling: ``python -m bench.apps.ceiling`` (port 0; ``ceiling: serving URL``);
* the peers: ``uvicorn --factory ... --http httptools --loop uvloop --no-access-log`` on a
  free port picked here, or ``granian --interface asgi|rsgi --factory ...`` likewise;
* nginx (case 11): Debian's binary in the foreground on a free port, serving files.

Every wait has a deadline; every process started here is stopped here, by its own pid.
"""

from __future__ import annotations

import contextlib
import grp
import http.client
import json
import os
import pwd
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 10.0


class ServerError(RuntimeError):
    """A server did not start, or answered the check request wrongly."""


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_certs(folder: Path) -> tuple[Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 (trustme)."""
    import trustme

    folder.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    crt, key = folder / "server.crt", folder / "server.key"
    crt.write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    return crt, key


def fwrest_config(
    folder: Path,
    *,
    repository: str = "bench.apps.fw_app",
    fw_data: dict[str, Any] | None = None,
    certs: tuple[Path, Path] | None = None,
    log_level: int = 1,
    trace: int = 0,
    store: str = "memory",
    server_keys: dict[str, Any] | None = None,
    location_keys: dict[str, Any] | None = None,
    sections: dict[str, dict[str, Any]] | None = None,
    pool_keys: dict[str, Any] | None = None,
    httpserver_keys: dict[str, Any] | None = None,
) -> Path:
    """Write a one-port fwrest config (JSON) into ``folder``; return its path. The ``*_keys``
    add keys to the server, its location ``/rest``, its thread pool and ``[HTTPSERVER]``;
    ``sections`` adds sections."""
    folder.mkdir(parents=True, exist_ok=True)
    server: dict[str, Any] = {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT"}
    if certs is not None:
        server["SslCertificate"], server["SslCertificateKey"] = str(certs[0]), str(certs[1])
    if fw_data:
        server["FwData"] = fw_data
    all_sections = {
        "GENERAL": {"rest_log_level": log_level, "rest_trace_time": trace},
        "HTTPSERVER": {
            "Enable": 1,
            "Servers": "BENCH",
            "StateStore": store,
            "DataPath": ".fwrest",
            "GracefulTimeout": 2000,
            **(httpserver_keys or {}),
        },
        "BENCH": {**server, **(server_keys or {})},
        "ROOT": {"Path": "/rest", "ThreadPool": "POOL", **(location_keys or {})},
        "POOL": {"Environment": "ENV", "MinThreads": 1, "MaxThreads": 8, **(pool_keys or {})},
        "ENV": {"Repository": repository},
        **(sections or {}),
    }
    path = folder / "service.json"
    path.write_text(json.dumps(all_sections, indent=2))
    return path


@dataclass
class Running:
    """A started server: its process, base URL (``scheme://127.0.0.1:port``) and stderr."""

    proc: subprocess.Popen[bytes]
    base_url: str
    stderr_path: Path
    stdout_lines: list[str] = field(default_factory=list)

    def processes(self) -> list[psutil.Process]:
        """The server's process and all its descendants (supervisor + workers)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_seconds(self) -> dict[int, float]:
        """user + system CPU seconds per pid of the tree (clock ticks: 10 ms steps)."""
        out: dict[int, float] = {}
        for proc in self.processes():
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            out[proc.pid] = times.user + times.system
        return out

    def run_seconds(self) -> dict[int, float]:
        """CPU seconds per pid of the tree to the nanosecond: the scheduler's run time of
        each process's live threads (Linux ``/proc/PID/task/*/schedstat``; a thread that
        ended takes its time with it, so this is for servers whose threads stay, and
        :meth:`cpu_seconds` where schedstat is missing)."""
        out: dict[int, float] = {}
        for proc in self.processes():
            ran = _run_time_s(proc.pid)
            if ran is None:
                return self.cpu_seconds()
            out[proc.pid] = ran
        return out

    @property
    def port(self) -> int:
        """The TCP port of :attr:`base_url`."""
        return int(self.base_url.rsplit(":", 1)[1])

    def connections_per_worker(self) -> dict[int, int]:
        """The established connections on the server's port that each worker holds (pid ->
        count), read from outside in the same way for every server: the port's sockets from
        ``ss`` (the kernel filters them: a cheap read beside thousands of other sockets), each
        process's own from its file descriptors. A worker is a process of the tree that holds
        the listening socket and none of whose children does: fwrest's and uvicorn's
        supervisors bind it and keep it, a single-process server is its own worker; a
        connection not accepted yet counts for no worker."""
        listening, established = _port_sockets(self.port)
        holders: dict[int, int] = {}
        parents: set[int] = set()
        for proc in self.processes():
            try:
                inodes = _socket_inodes(proc.pid)
                ppid = proc.ppid()
            except (psutil.NoSuchProcess, OSError):
                continue
            if inodes & listening:
                holders[proc.pid] = len(inodes & established)
                parents.add(ppid)
        return {pid: n for pid, n in holders.items() if pid not in parents}

    def rss_bytes(self) -> int:
        """Resident memory summed over the tree."""
        total = 0
        for proc in self.processes():
            try:
                total += proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM the server (it stops its own workers), then SIGKILL what is left of the
        processes it had, by pid, after a deadline."""
        procs = self.processes()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_DEADLINE_S)
        _gone, alive = psutil.wait_procs(procs[1:], timeout=STOP_DEADLINE_S)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def _port_sockets(port: int) -> tuple[set[int], set[int]]:
    """The inodes of the listening and of the established TCP sockets whose local port is
    ``port`` (``ss -e``, iproute2)."""
    cmd = ["ss", "-tnHe", "state", "listening", "state", "established", f"( sport = :{port} )"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ServerError(f"ss could not list the port's sockets (iproute2): {exc}") from exc
    listening: set[int] = set()
    established: set[int] = set()
    for line in done.stdout.splitlines():
        m = re.search(r"\bino:(\d+)", line)
        if m:
            (listening if line.startswith("LISTEN") else established).add(int(m.group(1)))
    return listening, established


def _socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets a process has open (``/proc/PID/fd``)."""
    out: set[int] = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def _run_time_s(pid: int) -> float | None:
    """Seconds a process's threads have run on a CPU (Linux schedstat), or None."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except FileNotFoundError:
                continue  # a thread that ended meanwhile
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def _env(first: Path | None = None, engine: str | None = None) -> dict[str, str]:
    """The servers' environment: the bench importable, and ``first`` (a folder holding an
    ``fwrest`` package: a build of its own) before everything else; ``engine``: the HTTP
    engine fwrest serves with (``FWREST_ENGINE``; None: as the bench's own environment says)."""
    env = dict(os.environ)
    if engine is not None:
        env["FWREST_ENGINE"] = engine
    where = [str(first) if first else "", str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, where))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _spawn(
    cmd: list[str],
    cwd: Path,
    stderr_path: Path,
    cpus: str | None,
    first: Path | None = None,
    engine: str | None = None,
) -> subprocess.Popen[bytes]:
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    with stderr_path.open("wb") as err:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=_env(first, engine),
        )


def _wait_for_line(
    proc: subprocess.Popen[bytes], pattern: str, ready_prefix: str | None, lines: list[str]
) -> str:
    """Read stdout until ``pattern`` matched (and ``ready_prefix`` seen); keep draining it on a
    thread afterwards. Returns the first match's group 1."""
    found: dict[str, str] = {}
    ready = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        with proc.stdout:  # closed at the end of the output (the server stopped)
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                lines.append(line)
                m = re.search(pattern, line)
                if m and "url" not in found:
                    found["url"] = m.group(1)
                if "url" in found and (ready_prefix is None or line.startswith(ready_prefix)):
                    ready.set()
        ready.set()

    threading.Thread(target=reader, daemon=True).start()
    if not ready.wait(START_DEADLINE_S) or "url" not in found or proc.poll() is not None:
        raise ServerError("the server printed no serving line in time")
    return found["url"]


def start_redis(
    folder: Path, *, tls: bool = False
) -> tuple[subprocess.Popen[bytes], str, Path | None]:
    """A ``redis-server`` on a free loopback port, without persistence, for the cases on a
    Redis store; its process, URL and CA file. ``tls``: the port speaks TLS only (``rediss://``,
    a trustme certificate, no client certificate asked for; the CA file verifies it).
    Unpinned: it is the store, not the server measured."""
    folder.mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    url, ca_file = f"redis://127.0.0.1:{port}/0", None
    if tls:
        import trustme

        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        crt, key, ca_file = folder / "redis.crt", folder / "redis.key", folder / "ca.pem"
        crt.write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
        cert.private_key_pem.write_to_path(str(key))
        ca.cert_pem.write_to_path(str(ca_file))
        cmd[1:3] = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(crt),
                    "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca_file),
                    "--tls-auth-clients", "no"]  # fmt: skip
        url = f"rediss://127.0.0.1:{port}/0"
    proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, url, ca_file
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise ServerError("redis-server did not start (apt install redis-server)") from None
            time.sleep(0.05)


_CLUSTER_NODES: list[subprocess.Popen[bytes]] = []


def start_redis_cluster(folder: Path) -> tuple[subprocess.Popen[bytes], str, None]:
    """A Redis Cluster of three masters and three replicas on loopback (``redis-server`` with
    ``cluster-enabled yes``, made by ``redis-cli --cluster create``), without persistence, for
    case 18; the first node's process, the ``redis+cluster://`` URL naming every node, no CA.
    :func:`stop_redis_clusters` stops the other nodes. Unpinned: the store, not the server."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    ports: list[int] = []
    while len(ports) < 6:  # a node's bus port is its port + 10000: both below 32768
        port = 12000 + int.from_bytes(os.urandom(2), "big") % 10000
        if port in ports:
            continue
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        ports.append(port)
    procs = []
    for port in ports:
        node = folder / str(port)
        node.mkdir(parents=True, exist_ok=True)
        cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file",
               str(node / "nodes.conf"), "--cluster-node-timeout", "5000"]  # fmt: skip
        procs.append(
            subprocess.Popen(cmd, cwd=node, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
    _CLUSTER_NODES.extend(procs[1:])
    deadline = time.monotonic() + 10
    for port in ports:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise ServerError(
                        "redis-server did not start (apt install redis-server)"
                    ) from None
                time.sleep(0.05)
    nodes = [f"127.0.0.1:{port}" for port in ports]
    subprocess.run([cli, "--cluster", "create", *nodes, "--cluster-replicas", "1",
                    "--cluster-yes"], check=True, stdout=subprocess.DEVNULL, timeout=60)  # fmt: skip
    while True:  # every node sees every slot served
        states = [
            subprocess.run(
                [cli, "-p", str(port), "cluster", "info"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
            for port in ports
        ]
        if all("cluster_state:ok" in state for state in states):
            break
        if time.monotonic() > deadline + 30:
            raise ServerError("the Redis Cluster never came to cluster_state:ok")
        time.sleep(0.1)
    return procs[0], f"redis+cluster://{','.join(nodes)}/0", None


def stop_redis_clusters() -> None:
    """Stop the nodes :func:`start_redis_cluster` started (but each cluster's first)."""
    for proc in _CLUSTER_NODES:
        proc.terminate()
    for proc in _CLUSTER_NODES:
        proc.wait(10)
    _CLUSTER_NODES.clear()


def start_fwrest(
    config: Path,
    *,
    workers: int = 1,
    cpus: str | None = "0",
    build: Path | None = None,
    engine: str | None = None,
) -> Running:
    """``fwrest serve CONFIG``; ``build``: a folder whose ``fwrest`` package is imported
    instead of the installed one (the pure sources, or a compiled build: cases 1-3);
    ``engine``: ``FWREST_ENGINE`` (the native engine's rows of cases 1 and 2)."""
    stderr_path = config.parent / "stderr.log"
    cmd = [PYTHON, "-m", "fwrest", "serve", str(config), "--workers", str(workers)]
    proc = _spawn(cmd, config.parent, stderr_path, cpus, build, engine)
    lines: list[str] = []
    try:
        url = _wait_for_line(proc, r"fwrest: serving (\S+) \[", "fwrest: ready", lines)
    except ServerError as exc:
        running = Running(proc, "", stderr_path, lines)
        running.stop()
        raise ServerError(f"fwrest did not start: {running.log_tail()}") from exc
    m = re.match(r"(https?://[^/]+)", url)
    assert m is not None, url
    return Running(proc, m.group(1), stderr_path, lines)


PURE = ROOT / "src"  # fwrest's sources: imported first, they are the pure-Python build


def compiled_build(folder: Path) -> Path:
    """fwrest's wheel built with mypyc (``FWREST_COMPILE=1``: an error if it cannot compile)
    and unpacked into ``folder``; returns the folder holding its ``fwrest`` package."""
    wheels = folder / "wheel"
    done = subprocess.run(
        [PYTHON, "-m", "build", "--wheel", "--outdir", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "FWREST_COMPILE": "1"},
    )
    if done.returncode != 0:
        raise ServerError(f"the compiled build failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
    (wheel,) = wheels.glob("fwrest-*.whl")
    unpacked = folder / "compiled"
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(unpacked)
    return unpacked


def start_ceiling(
    folder: Path,
    job: str,
    *,
    certs: tuple[Path, Path] | None = None,
    cpus: str | None = "0",
    engine: str | None = None,
) -> Running:
    folder.mkdir(parents=True, exist_ok=True)
    stderr_path = folder / "stderr.log"
    cmd = [PYTHON, "-m", "bench.apps.ceiling", "--job", job]
    if certs is not None:
        cmd += ["--cert", str(certs[0]), "--key", str(certs[1])]
    proc = _spawn(cmd, ROOT, stderr_path, cpus, PURE, engine)  # as fwrest's pure rows run it
    lines: list[str] = []
    try:
        url = _wait_for_line(proc, r"ceiling: serving (\S+)", None, lines)
    except ServerError as exc:
        running = Running(proc, "", stderr_path, lines)
        running.stop()
        raise ServerError(f"the ceiling did not start: {running.log_tail()}") from exc
    return Running(proc, url, stderr_path, lines)


def start_uvicorn(
    folder: Path,
    factory: str,
    *,
    certs: tuple[Path, Path] | None = None,
    workers: int = 1,
    cpus: str | None = "0",
) -> Running:
    port = free_port()
    cmd = [
        PYTHON,
        "-m",
        "uvicorn",
        "--factory",
        factory,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--http",
        "httptools",
        "--loop",
        "uvloop",
        "--no-access-log",
        "--log-level",
        "warning",
        "--workers",
        str(workers),
        "--timeout-graceful-shutdown",
        "2",
    ]
    if certs is not None:
        cmd += ["--ssl-certfile", str(certs[0]), "--ssl-keyfile", str(certs[1])]
    return _start_asgi("uvicorn", folder, cmd, port, certs is not None, cpus, factory)


def start_granian(
    folder: Path,
    factory: str,
    *,
    certs: tuple[Path, Path] | None = None,
    workers: int = 1,
    cpus: str | None = "0",
    interface: str = "asgi",
) -> Running:
    """An app on granian (Rust HTTP, one runtime thread, uvloop, HTTP/1 only): the same ASGI
    app as uvicorn's (``interface="asgi"``) or an app on granian's own protocol
    (``interface="rsgi"``)."""
    port = free_port()
    cmd = [
        PYTHON,
        "-m",
        "granian",
        "--interface",
        interface,
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--http",
        "1",
        "--no-ws",
        "--loop",
        "uvloop",
        "--runtime-threads",
        "1",
        "--log-level",
        "warning",
        "--workers",
        str(workers),
    ]
    if certs is not None:
        cmd += ["--ssl-certificate", str(certs[0]), "--ssl-keyfile", str(certs[1])]
    cmd.append(factory)
    return _start_asgi("granian", folder, cmd, port, certs is not None, cpus, factory)


NGINX_CONF = """\
{user}daemon off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {folder}/tmp;
    proxy_temp_path {folder}/tmp;
    fastcgi_temp_path {folder}/tmp;
    uwsgi_temp_path {folder}/tmp;
    scgi_temp_path {folder}/tmp;
    types {{ application/json json; application/octet-stream bin; }}
    sendfile on;
    tcp_nopush on;
    gzip on;
    gzip_comp_level {gzip_level};
    gzip_min_length 1024;
    gzip_types application/json;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


def start_nginx(folder: Path, root: Path, *, gzip_level: int, cpus: str | None = "0") -> Running:
    """Debian's nginx (one worker process, in the foreground) serving the files of ``root``
    with ``sendfile on`` and ``gzip on`` at ``gzip_level`` for JSON."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise ServerError("nginx is missing (apt-get install nginx)")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tmp").mkdir(exist_ok=True)
    port = free_port()
    conf = folder / "nginx.conf"
    # as root, nginx's worker would run as nobody, who cannot read the bench's private folder
    user = ""
    if os.geteuid() == 0:
        user = f"user {pwd.getpwuid(0).pw_name} {grp.getgrgid(os.getegid()).gr_name};\n"
    conf.write_text(
        NGINX_CONF.format(user=user, folder=folder, port=port, root=root, gzip_level=gzip_level)
    )
    cmd = [binary, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(conf)]
    return _start_asgi("nginx", folder, cmd, port, False, cpus, str(root))


def _drain(proc: subprocess.Popen[bytes]) -> None:
    """Read a server's stdout to its end (it must never block on a full pipe), then close it."""
    if proc.stdout is not None:
        with proc.stdout:
            proc.stdout.read()


def _start_asgi(
    engine: str,
    folder: Path,
    cmd: list[str],
    port: int,
    tls: bool,
    cpus: str | None,
    factory: str,
) -> Running:
    folder.mkdir(parents=True, exist_ok=True)
    stderr_path = folder / "stderr.log"
    proc = _spawn(cmd, ROOT, stderr_path, cpus)
    scheme = "https" if tls else "http"
    running = Running(proc, f"{scheme}://127.0.0.1:{port}", stderr_path)
    threading.Thread(target=_drain, args=(proc,), daemon=True).start()
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return running
        except OSError:
            time.sleep(0.1)
    running.stop()
    raise ServerError(f"{engine} {factory} did not start: {running.log_tail()}")


def request(
    base_url: str,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: str | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, bytes]:
    """One request (TLS without verification: the certificate is the bench's own)."""
    scheme, _, hostport = base_url.partition("://")
    host, _, port = hostport.partition(":")
    conn: http.client.HTTPConnection
    if scheme == "https":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, int(port), timeout=timeout_s, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()
