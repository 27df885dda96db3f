"""Scale-out (issue 10): two hosts on one Redis behind nginx round-robin, all real processes,
configured from docs/deploy.md's ``ini`` and ``nginx`` blocks with the test's addresses, ports and
files, so the page describes what runs here. Redis on 127.0.0.1; hosts A (127.0.0.2) and B
(127.0.0.3), one OAuth2 TLS port each, the key created once in Redis, ``healthcheck`` public, a host
label in ``UserData``; nginx on 127.0.0.1 terminating TLS, ``proxy_pass https://fwrest`` verifying
with the CA, retrying the other host (``proxy_next_upstream``, ``max_fails``), naming the host in
``X-Upstream``.

What is left here is the balancer's own: its probe target, public and UP on both hosts, and host B
stopped mid-load while the balancer keeps serving from A (last in the file: it stops B). Hosts are
asked directly from 127.0.0.4. State shared across hosts (tokens, revocations, settings, lock-outs):
tests/e2e/test_hosts_state.py, test_upgrade.py. No nginx or redis-server: a failure, never a
skip."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import ssl
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import trustme

from tests.auth.oauth2_support import bearer
from tests.conftest import ServerProcess, free_port, wait_for
from tests.docs.blocks import example, substitute
from tests.redis_support import RedisServer, redis_binary

HOST_ADDRESSES = {"A": "127.0.0.2", "B": "127.0.0.3"}
BALANCER_ADDRESS = "127.0.0.1"
DIRECT_CLIENT_ADDRESS = "127.0.0.4"  # direct checks of one host come from here
UPSTREAM_NAME = "fwrest.internal"  # the name nginx checks the hosts' certificates against
SECTION = "HTTPS_REST"  # the server section of the docs' host config
TOKEN = "/fw/oauth2/token"
PROBE = "/rest/fw/healthcheck"  # what the balancer probes (public through NativeRoutes)
MAX_FAILURES = 4
HANG_GUARD_S = 15.0
LOAD_THREADS = 4
WORKERS = 2  # per host

USERS = {"ada": "Ada-Pw-7731", "bob": "Bob-Pw-2207", "eve": "Eve-Pw-3141", "max": "Max-Pw-5190"}

APP = f'''
"""The application of both hosts: the same module, the same endpoints."""

import os
import time

from fwrest import get, rest

USERS = {USERS!r}


def params():
    return {{
        "client_id": "web",
        "users": [{{"username": u, "password": p}} for u, p in USERS.items()],
        "access_expires": "1h",
        "refresh_expires": "Date()+1",
    }}


@get("/host", description="which host answered (its UserData label)")
def host():
    return {{"host": rest.getServerUserData()["host"], "pid": os.getpid()}}


@get("/slow/:ms", description="answers after ms milliseconds")
def slow(ms):
    time.sleep(int(ms) / 1000)
    return {{"host": rest.getServerUserData()["host"], "slept": int(ms)}}
'''

# docs/deploy.md's configurations, marked <!-- example: ... --> there (tests/docs/blocks.py)
DOC_HOST = example("deploy-host")
DOC_NGINX = example("deploy-nginx")

# nginx's main file around the docs' block (conf.d/fwrest.conf on a real balancer): foreground,
# everything under the test's folder.
NGINX_MAIN = """\
{user}daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;

events {{
    worker_connections 512;
}}

http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {tmp}/fwrest.conf;
}}
"""


def nginx_binary() -> str:
    found = shutil.which("nginx") or "/usr/sbin/nginx"
    assert Path(found).is_file(), (
        "nginx is required for the scale-out test (Debian: apt-get install -y nginx; "
        ".ci/run installs it)"
    )
    return found


def write_cert(ca: trustme.CA, folder: Path, *names: str) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cert = ca.issue_cert(*names)
    paths = {"cert": folder / "server.crt", "key": folder / "server.key", "ca": folder / "ca.pem"}
    with paths["cert"].open("wb") as fh:
        for pem in cert.cert_chain_pems:
            fh.write(pem.bytes())
    cert.private_key_pem.write_to_path(str(paths["key"]))
    ca.cert_pem.write_to_path(str(paths["ca"]))
    return paths


def host_config(folder: Path, label: str, store: str) -> Path:
    """Host ``label``: the docs' INI with its address, a free port, the test's Redis; ``app.py``."""
    (folder / "app.py").write_text(APP)
    text = substitute(
        DOC_HOST,
        {
            "HostName=10.0.0.11": f"HostName={HOST_ADDRESSES[label]}",
            "Port=8443": "Port=0",
            "StateStore=redis://10.0.0.5:6379/0": f"StateStore={store}",
            '"maxFailures":10': f'"maxFailures":{MAX_FAILURES}',
            'UserData={"host":"A"}': f'UserData={{"host":"{label}"}}',
            "TrustedProxies=10.0.0.2": "TrustedProxies=127.0.0.1",
            # the balancer's name, as its clients send it in Host (here its address)
            "AllowedHosts=api.example.com": f"AllowedHosts={BALANCER_ADDRESS}",
        },
    )
    path = folder / "service.ini"
    path.write_text(text)
    return path


class Nginx:
    """Debian's nginx in the foreground, everything it writes under ``folder``."""

    def __init__(self, folder: Path, main: str, site: str) -> None:
        self.folder = folder
        self.conf_path = folder / "nginx.conf"
        self.conf_path.write_text(main)
        (folder / "fwrest.conf").write_text(site)
        self.error_log = folder / "error.log"
        self._stderr = (folder / "stderr.log").open("wb")
        self.proc = subprocess.Popen(
            [nginx_binary(), "-p", str(folder), "-e", str(self.error_log), "-c",
             str(self.conf_path)],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )  # fmt: skip

    def log(self) -> str:
        parts = [p.read_text(errors="replace") for p in (self.error_log, self.folder / "stderr.log")
                 if p.exists()]  # fmt: skip
        return "\n".join(parts)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()


@dataclass
class Host:
    label: str
    proc: ServerProcess
    base: str  # https://127.0.0.x:port/rest
    direct: httpx.Client  # from DIRECT_CLIENT_ADDRESS


@dataclass
class Cluster:
    redis: RedisServer
    hosts: dict[str, Host]
    nginx: Nginx
    lb_origin: str  # https://127.0.0.1:port
    ctx: ssl.SSLContext
    lb: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.lb = httpx.Client(base_url=self.lb_origin + "/rest", verify=self.ctx, timeout=15)

    def by_upstream(self) -> dict[str, str]:
        return {f"{HOST_ADDRESSES[h.label]}:{h.proc.ports[SECTION]}": h.label
                for h in self.hosts.values()}  # fmt: skip

    def answered_by(self, response: httpx.Response) -> str:
        """The host nginx's ``X-Upstream`` names (the last one tried)."""
        upstream = response.headers.get("x-upstream", "")
        last = upstream.split(",")[-1].strip()
        assert last in self.by_upstream(), f"X-Upstream {upstream!r} names no host"
        return self.by_upstream()[last]

    def grant(self, user: str, password: str, client: httpx.Client | None = None,
              base: str = "") -> httpx.Response:  # fmt: skip
        data = {"grant_type": "password", "username": user, "password": password}
        return (client or self.lb).post(base + TOKEN, data=data)

    def close(self) -> None:
        self.lb.close()
        for host in self.hosts.values():
            host.direct.close()


@pytest.fixture(scope="module")
def cluster(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("scale_out")
    nginx_binary()  # fail before starting anything when it is missing
    redis = RedisServer(root).start()
    procs: list[ServerProcess] = []
    nginx: Nginx | None = None
    built: Cluster | None = None
    try:
        hosts: dict[str, Host] = {}
        for label, address in HOST_ADDRESSES.items():
            folder = root / f"host_{label}"
            folder.mkdir()
            certs = write_cert(ca, folder / "certs", UPSTREAM_NAME, address)
            proc = ServerProcess(host_config(folder, label, redis.url), workers=WORKERS)
            procs.append(proc)
            proc.wait_ready()
            ctx = ssl.create_default_context(cafile=str(certs["ca"]))
            transport = httpx.HTTPTransport(verify=ctx, local_address=DIRECT_CLIENT_ADDRESS)
            direct = httpx.Client(transport=transport, timeout=15)
            hosts[label] = Host(label, proc, proc.url(SECTION).rstrip("/"), direct)
            print(f"host {label}: {proc.url(SECTION)} (pid {proc.pid})")
        lb_folder = root / "nginx"
        lb_folder.mkdir()
        lb_certs = write_cert(ca, lb_folder / "certs", BALANCER_ADDRESS, "localhost")
        port = free_port()
        user = ""
        if os.geteuid() == 0:  # nginx would run its worker as nobody; keep the current user
            user = (f"user {pwd.getpwuid(os.geteuid()).pw_name} "
                    f"{grp.getgrgid(os.getegid()).gr_name};\n")  # fmt: skip
        main = NGINX_MAIN.format(user=user, tmp=lb_folder)
        site = substitute(
            DOC_NGINX,
            {
                "10.0.0.11:8443": f"{HOST_ADDRESSES['A']}:{hosts['A'].proc.ports[SECTION]}",
                "10.0.0.12:8443": f"{HOST_ADDRESSES['B']}:{hosts['B'].proc.ports[SECTION]}",
                "listen 443 ssl;": f"listen {BALANCER_ADDRESS}:{port} ssl;",
                "/etc/nginx/tls/balancer.crt": str(lb_certs["cert"]),
                "/etc/nginx/tls/balancer.key": str(lb_certs["key"]),
                "/etc/nginx/tls/fwrest-ca.pem": str(lb_certs["ca"]),
            },
        )
        nginx = Nginx(lb_folder, main, site)
        ctx = ssl.create_default_context(cafile=str(lb_certs["ca"]))
        built = Cluster(redis, hosts, nginx, f"https://{BALANCER_ADDRESS}:{port}", ctx)

        def balancer_up() -> bool:
            assert nginx is not None and nginx.proc.poll() is None, f"nginx exited:\n{nginx.log()}"
            try:
                return built is not None and built.lb.get("/fw/healthcheck").status_code == 200
            except httpx.TransportError:
                return False

        took = wait_for(balancer_up, HANG_GUARD_S, "nginx answering on its port")
        print(f"nginx: {built.lb_origin} ready in {took:.3f} s")
        yield built
    finally:
        if built is not None:
            built.close()
        if nginx is not None:
            nginx.stop()
            print(f"nginx log:\n{nginx.log()[-2000:]}")
        for proc in procs:
            proc.stop()
        redis.stop()


def test_nginx_and_redis_server_are_installed() -> None:
    """The scenarios below fail, never skip, without them (.ci/run installs both)."""
    nginx = subprocess.run([nginx_binary(), "-v"], capture_output=True, text=True, timeout=10,
                           check=False)  # fmt: skip
    redis_version = subprocess.run([redis_binary(), "--version"], capture_output=True,
                                   text=True, timeout=10, check=False)  # fmt: skip
    print(f"{nginx.stderr.strip()}; {redis_version.stdout.strip()}")
    assert nginx.returncode == 0 and "nginx/" in nginx.stderr, nginx.stderr
    assert redis_version.returncode == 0 and "Redis server" in redis_version.stdout


# -- 6. the balancer's probe: /rest/fw/healthcheck, public, UP ----------------------------------


def test_the_health_probe_target_is_public_and_up_through_the_balancer(cluster: Cluster) -> None:
    answered: Counter[str] = Counter()
    for _ in range(4):
        response = httpx.get(cluster.lb_origin + PROBE, verify=cluster.ctx, timeout=15)
        assert response.status_code == 200, response.text  # no credentials: it is public
        body = response.json()
        assert body["status"] == "UP", body
        assert body["checks"]["store"]["status"] == "UP", body
        assert body["checks"]["store"]["kind"] == "redis", body
        answered[cluster.answered_by(response)] += 1
    print(f"probe {PROBE} through the balancer answered by {dict(answered)}")
    assert set(answered) == set(cluster.hosts)
    # only the health route is public: its sibling still needs a token
    sibling = httpx.get(cluster.lb_origin + PROBE + "/datetime", verify=cluster.ctx, timeout=15)
    assert sibling.status_code == 401, sibling.text
    for host in cluster.hosts.values():
        direct = host.direct.get(host.base + "/fw/healthcheck")
        assert direct.status_code == 200 and direct.json()["status"] == "UP", direct.text


# -- 5. stopping one host mid-load --------------------------------------------------------------


@dataclass
class Outcome:
    started: float
    ended: float
    path: str
    status: int | str
    host: str = ""
    upstream: str = ""


def test_stopping_one_host_mid_load_keeps_the_balancer_serving(cluster: Cluster) -> None:
    a, b = cluster.hosts["A"], cluster.hosts["B"]
    granted = cluster.grant("ada", USERS["ada"], a.direct, a.base)  # 127.0.0.4 is not locked
    assert granted.status_code == 200, granted.text
    token = granted.json()["access_token"]
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    stop = threading.Event()

    def load(worker: int) -> None:
        with httpx.Client(base_url=cluster.lb_origin + "/rest", verify=cluster.ctx,
                          timeout=HANG_GUARD_S) as client:  # fmt: skip
            n = 0
            while not stop.is_set():
                path = "/slow/200" if (n + worker) % 2 else "/host"
                n += 1
                started = time.monotonic()
                try:
                    response = client.get(path, headers=bearer(token))
                    result = Outcome(
                        started,
                        time.monotonic(),
                        path,
                        response.status_code,
                        upstream=response.headers.get("x-upstream", ""),
                    )
                    if response.status_code == 200:
                        result.host = response.json()["host"]
                except httpx.HTTPError as exc:
                    result = Outcome(started, time.monotonic(), path, type(exc).__name__)
                with lock:
                    outcomes.append(result)

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(LOAD_THREADS)]
    for thread in threads:
        thread.start()
    try:

        def served_by(label: str) -> int:
            with lock:
                return sum(1 for o in outcomes if o.host == label)

        wait_for(lambda: served_by("A") >= 10 and served_by("B") >= 10, HANG_GUARD_S,
                 "the load reaching both hosts")  # fmt: skip
        stopped_at = time.monotonic()
        b.proc.signal(signal.SIGTERM)
        code = b.proc.proc.wait(40)
        exited_at = time.monotonic()
        wait_for(lambda: sum(1 for o in list(outcomes) if o.started > exited_at) >= 20,
                 HANG_GUARD_S, "20 requests through the balancer after host B exited")  # fmt: skip
    finally:
        stop.set()
        for thread in threads:
            thread.join(HANG_GUARD_S + 5)
    assert not any(t.is_alive() for t in threads), "a load thread hung"
    assert code == 0, b.proc.log()[-3000:]

    failures = [o for o in outcomes if o.status != 200]
    before = Counter(o.host for o in outcomes if o.ended < stopped_at)
    after = Counter(o.host or str(o.status) for o in outcomes if o.started > exited_at)
    drained = [o for o in outcomes if o.host == "B" and o.started < stopped_at < o.ended]
    print(f"{len(outcomes)} requests through the balancer by {LOAD_THREADS} threads; before the "
          f"stop {dict(before)}; host B drained in {exited_at - stopped_at:.3f} s, finishing "
          f"{len(drained)} requests in flight at SIGTERM; after B exited {dict(after)}")  # fmt: skip
    retried = [o for o in outcomes if "," in o.upstream]
    print(f"nginx passed {len(retried)} requests on to the next host: "
          f"{[o.upstream for o in retried]}")  # fmt: skip
    print(f"failures: {len(failures)}: "
          f"{[(o.path, o.status, round(o.started - stopped_at, 3)) for o in failures]}")  # fmt: skip
    # one request in flight per load thread: at most that many lost, only around the stop
    assert len(failures) <= LOAD_THREADS, failures
    for o in failures:  # only around the stop, and only requests that went to host B
        assert o.ended >= stopped_at and o.started <= exited_at, o
        assert not o.upstream or HOST_ADDRESSES["B"] in o.upstream, o
    assert after and set(after) == {"A"}, after
    for _ in range(10):  # and the balancer goes on serving, from host A
        response = cluster.lb.get("/host", headers=bearer(token))
        assert response.status_code == 200 and response.json()["host"] == "A", response.text
    probe = httpx.get(cluster.lb_origin + PROBE, verify=cluster.ctx, timeout=15)
    assert probe.status_code == 200 and probe.json()["status"] == "UP", probe.text
