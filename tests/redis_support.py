"""A throwaway ``redis-server`` (no mock) for tests/auth/test_oauth2_store.py, tests/store/ and
tests/faults/; without Debian's ``redis-server``, ``redis-sentinel`` or ``redis-tools`` they fail,
never skip. SPEC 15's forms: TLS only (``tls``, client certificates optional), ``password``,
``unix``, ``replica_of``; :class:`SentinelGroup` (primary, replica, three sentinels);
:class:`RedisCluster` (three masters, three replicas, SPEC 17.1, ``redis-cli --cluster create``)."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import redis
import trustme

from tests.conftest import end_process, free_port, port_is_free, serving, wait_for

__all__ = [
    "STORE_APP", "RedisCluster", "RedisServer", "RedisTls", "SentinelGroup", "free_port",
    "redis_binary", "redis_tls", "sentinel_binary", "serves_unready", "started", "store_config",
]  # fmt: skip

STORE_APP = """
from fwrest import get

@get("/hello")
def hello():
    return {"hello": "world"}

def params():
    return {
        "client_id": "web",
        "users": [{"username": "ada", "password": "Ada-Pw-7731"}],
        "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"}],
    }
"""


def store_config(folder: Path, url: str, **keys: str) -> Path:
    """A service of :data:`STORE_APP` on one plain port ``S`` and the store ``url``."""
    folder.mkdir()
    (folder / "app.py").write_text(STORE_APP)
    config = folder / "service.json"
    config.write_text(json.dumps({
        "HTTPSERVER": {"Servers": "S", "StateStore": url, **keys},
        "S": {"HostName": "127.0.0.1", "Port": 0, "Locations": "R"},
        "R": {"Path": "/rest", "ThreadPool": "P"}, "P": {"Environment": "E"},
        "E": {"Repository": "app"},
    }))  # fmt: skip
    return config


def serves_unready(config: Path) -> None:
    """Its store out of reach, the service starts, serves what needs none, logs why, ready DOWN."""
    with serving(config) as proc:
        hello = httpx.get(proc.url("S") + "/hello", timeout=10)
        assert hello.status_code == 200, hello.text
        ready = httpx.get(proc.url("S") + "/fw/healthcheck/ready", timeout=10)
        assert ready.status_code == 503, ready.text
        assert ready.json()["status"] == "DOWN"
        assert "StateStore: the state store did not answer" in proc.log()


def _binary(name: str, tests: str, package: str) -> str:
    found = shutil.which(name) or f"/usr/bin/{name}"
    assert Path(found).is_file(), (
        f"{name} is required for {tests} (apt install {package}; .ci/run installs it)"
    )
    return found


def redis_binary() -> str:
    return _binary("redis-server", "these tests", "redis")


def sentinel_binary() -> str:
    return _binary("redis-sentinel", "the Sentinel tests", "redis-sentinel")


def _sentinel(port: int) -> redis.Redis:
    """A client of the sentinel on ``port``."""
    return redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)


@dataclass(frozen=True)
class RedisTls:
    """trustme files: Redis's certificate, its CA, a client certificate of it, and a wrong CA."""

    cert: Path
    key: Path
    ca: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def redis_tls(ca: trustme.CA, folder: Path) -> RedisTls:
    folder.mkdir(parents=True, exist_ok=True)
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("fwrest-client@example.org")
    paths = RedisTls(*(folder / n for n in ("redis.crt", "redis.key", "ca.pem", "client.crt",
                                             "client.key", "other-ca.pem")))  # fmt: skip
    paths.cert.write_bytes(b"".join(pem.bytes() for pem in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(paths.key))
    ca.cert_pem.write_to_path(str(paths.ca))
    client.cert_chain_pems[0].write_to_path(str(paths.client_cert))
    client.private_key_pem.write_to_path(str(paths.client_key))
    trustme.CA().cert_pem.write_to_path(str(paths.other_ca))
    return paths


class RedisServer:
    """A ``redis-server`` on a free loopback port. ``persist``: an AOF fsynced before each answer
    (``appendfsync always``), so a restart on the folder keeps every key, as in production; ``tls``
    (``client_certs``: one required); ``password``: ``requirepass``; ``unix``: ``url`` names a
    socket in ``folder``; ``replica_of``."""

    def __init__(
        self, folder: Path, *, persist: bool = False, tls: RedisTls | None = None,
        client_certs: bool = False, password: str | None = None, unix: bool = False,
        replica_of: RedisServer | None = None, port: int | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        self.binary = redis_binary()
        self.folder = folder
        self.persist = persist
        self.tls = tls
        self.client_certs = client_certs
        self.password = password
        self.replica_of = replica_of
        self.extra = extra
        self.port = free_port() if port is None else port
        self.socket = folder / "redis.sock" if unix else None
        scheme = "rediss" if tls else "redis"
        self.url = f"{scheme}://127.0.0.1:{self.port}/0"
        if self.socket is not None:
            self.url = f"unix://{self.socket}?db=0"
        self.proc: subprocess.Popen[bytes] | None = None

    def _options(self) -> list[str]:
        out = ["--port", str(self.port)]
        if self.tls is not None:
            out = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file",
                   str(self.tls.cert), "--tls-key-file", str(self.tls.key),
                   "--tls-ca-cert-file", str(self.tls.ca),
                   "--tls-auth-clients", "yes" if self.client_certs else "no"]  # fmt: skip
        if self.password is not None:
            out += ["--requirepass", self.password, "--masterauth", self.password]
        if self.socket is not None:
            out += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        if self.replica_of is not None:
            out += ["--replicaof", "127.0.0.1", str(self.replica_of.port)]
        return out + list(self.extra)

    def client_kwargs(self) -> dict[str, Any]:
        """How a test's own client reaches this server (as a superuser would)."""
        out: dict[str, Any] = {"port": self.port, "password": self.password}
        if self.tls is not None:
            out.update(ssl=True, ssl_ca_certs=str(self.tls.ca), ssl_certfile=str(self.tls.client_cert),
                       ssl_keyfile=str(self.tls.client_key))  # fmt: skip
        return out

    def start(self) -> RedisServer:
        durability = ["--appendonly", "yes", "--appendfsync", "always"]
        if not self.persist:
            durability = ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            # a replica attaching is sent the data at once (Redis waits 5 s by default for
            # more replicas to share the transfer: each Sentinel and cluster set-up waited)
            [self.binary, *self._options(), "--bind", "127.0.0.1", "--save", "",
             *durability, "--dir", str(self.folder), "--repl-diskless-sync-delay", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        proc = self.proc
        client = redis.Redis(socket_timeout=1, socket_connect_timeout=1, **self.client_kwargs())

        def answers() -> bool:
            assert proc.poll() is None, "redis-server exited"
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        with contextlib.closing(client):
            wait_for(answers, 15, f"redis-server on port {self.port} answering", interval=0.02)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)  # a frozen server ends only once thawed
            end_process(self.proc)
        self.proc = None

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the process is gone at once, as a crashed host's is."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(socket_timeout=2, socket_connect_timeout=2, **self.client_kwargs())


SENTINEL_CONF = """\
port {port}
bind 127.0.0.1
dir {folder}
sentinel myid {myid}
sentinel monitor {name} 127.0.0.1 {primary} 2
sentinel down-after-milliseconds {name} {down_ms}
sentinel failover-timeout {name} 3000
sentinel parallel-syncs {name} 1
{known}{auth}"""


class SentinelGroup:
    """Primary, replica and three sentinels (quorum 2) watching ``name``, down after ``down_ms``;
    ``password`` for all; ``url``: SPEC 15's ``redis+sentinel://``."""

    def __init__(
        self, folder: Path, name: str = "fwmain", down_ms: int = 500, password: str | None = None
    ) -> None:
        self.name = name
        self.down_ms = down_ms
        self.password = password
        (folder / "primary").mkdir(parents=True)
        (folder / "replica").mkdir()
        self.primary = RedisServer(folder / "primary", password=password)
        self.replica = RedisServer(folder / "replica", replica_of=self.primary, password=password)
        self.ports = [free_port() for _ in range(3)]
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.url = f"redis+sentinel://{hosts}/{name}/0"

    def start(self) -> SentinelGroup:
        self.primary.start()
        self.replica.start()
        binary = sentinel_binary()
        # each sentinel told its id and the others' (as a sentinel rewrites its file once it
        # found them): ready at once, not after their hello messages (every 2 s)
        ids = {port: f"{port:040x}" for port in self.ports}
        for port in self.ports:
            conf = self.folder / f"sentinel-{port}.conf"  # a sentinel rewrites its file
            auth = f"sentinel auth-pass {self.name} {self.password}\n" if self.password else ""
            known = "".join(
                f"sentinel known-sentinel {self.name} 127.0.0.1 {other} {ids[other]}\n"
                for other in self.ports
                if other != port
            )
            conf.write_text(SENTINEL_CONF.format(port=port, folder=self.folder, name=self.name,
                                                 primary=self.primary.port, down_ms=self.down_ms,
                                                 auth=auth, myid=ids[port], known=known))  # fmt: skip
            self.procs.append(subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))  # fmt: skip
        # ready: every sentinel knows the replica and the others, the replica in sync
        wait_for(self._ready, 30, "the sentinels seeing each other", interval=0.1)
        return self

    def _ready(self) -> bool:
        for port in self.ports:
            with contextlib.closing(_sentinel(port)) as client:
                try:
                    state = client.sentinel_master(self.name)
                    # the replica heard from (a store judges one by what they last heard)
                    replicas = client.sentinel_slaves(self.name)
                except redis.RedisError:
                    return False
                if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                    return False
                if not all(r.get("flags") == "slave" and r.get("info-refresh") for r in replicas):
                    return False
        with contextlib.closing(self.replica.client()) as replica:
            if replica.info("replication").get("master_link_status") != "up":
                return False
        with contextlib.closing(self.primary.client()) as primary:  # a write it confirms
            return int(primary.execute_command("WAIT", 1, 200)) >= 1

    def primary_port(self) -> int:
        """The port the sentinels name for the primary now."""
        with contextlib.closing(_sentinel(self.ports[0])) as client:
            return int(client.sentinel_get_master_addr_by_name(self.name)[1])

    def stop(self) -> None:
        for proc in self.procs:
            end_process(proc)
        self.procs = []
        self.replica.stop()
        self.primary.stop()


def cluster_port() -> int:
    """Free with its bus port (+10000), below the ephemeral range (32768): no client takes them."""
    for _ in range(1000):
        port = random.randrange(12000, 22000)
        if port_is_free(port) and port_is_free(port + 10000):
            return port
    raise AssertionError("no free port pair for a cluster node")


class RedisCluster:
    """Three masters, three replicas (``cluster-enabled yes``, own folders), by ``redis-cli
    --cluster create --cluster-replicas 1``; ready at ``cluster_state:ok`` everywhere and replicas
    in sync. ``node_timeout_ms``: silence before a failover; ``url``: SPEC 17.1's
    ``redis+cluster://`` of every node; ``password``: each node's."""

    def __init__(
        self, folder: Path, node_timeout_ms: int = 1000, password: str | None = None, db: int = 0,
        *, replicas: int = 1, tls: RedisTls | None = None,
    ) -> None:  # fmt: skip
        self.folder = folder
        self.password = password
        self.replicas = replicas
        self.tls = tls
        self.nodes: list[RedisServer] = []
        for i in range(3 * (1 + replicas)):
            (folder / f"node{i}").mkdir(parents=True)
            port = cluster_port()
            extra = ("--cluster-enabled", "yes", "--cluster-config-file",
                     str(folder / f"node{i}" / "nodes.conf"), "--cluster-node-timeout",
                     str(node_timeout_ms))  # fmt: skip
            if tls is not None:  # the cluster bus and the replication on TLS too
                extra += ("--tls-cluster", "yes", "--tls-replication", "yes")
            self.nodes.append(RedisServer(folder / f"node{i}", password=password, port=port,
                                          extra=extra, tls=tls, client_certs=tls is not None))  # fmt: skip
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        scheme = "rediss+cluster" if tls is not None else "redis+cluster"
        self.url = f"{scheme}://{hosts}/{db}"

    def start(self) -> RedisCluster:
        for node in self.nodes:
            node.start()
        cli = _binary("redis-cli", "the Redis Cluster tests", "redis-tools")
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        if self.tls is not None:
            auth += ["--tls", "--cacert", str(self.tls.ca), "--cert", str(self.tls.client_cert),
                     "--key", str(self.tls.client_key)]  # fmt: skip
        subprocess.run(
            [cli, *auth, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
        )  # fmt: skip
        wait_for(self._ready, 30, "cluster_state:ok on every node", interval=0.1)
        return self

    def _ready(self) -> bool:
        for node in self.nodes:
            if node.proc is None:
                continue
            with contextlib.closing(node.client()) as client:
                try:
                    info = client.execute_command("CLUSTER INFO")
                    replication = client.info("replication")
                except redis.RedisError:
                    return False
            if isinstance(info, bytes):
                info = info.decode()
            if isinstance(info, str):
                info = dict(line.split(":", 1) for line in info.split() if ":" in line)
            if info.get("cluster_state") != "ok":
                return False
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return False
        return True

    def client(self) -> redis.RedisCluster:
        """A test's own cluster client (as a superuser would reach it)."""
        node = next(n for n in self.nodes if n.proc is not None)
        kwargs = node.client_kwargs()  # its port, its password and TLS files
        return redis.RedisCluster(
            host="127.0.0.1", socket_timeout=2, socket_connect_timeout=2, **kwargs
        )

    def flush(self) -> None:
        """Every key gone (FLUSHALL on each master; the replicas follow)."""
        for node in self.nodes:
            with contextlib.closing(node.client()) as client:
                if client.info("replication").get("role") == "master":
                    client.flushall()

    def master_of(self, key: str) -> RedisServer:
        """The node that is master of ``key``'s slot now."""
        with contextlib.closing(self.client()) as client:
            port = int(client.get_node_from_key(key).port)
        return next(n for n in self.nodes if n.port == port)

    def replica_of(self, master: RedisServer) -> RedisServer:
        """The node that replicates ``master``."""
        for node in self.nodes:
            if node is master or node.proc is None:
                continue
            with contextlib.closing(node.client()) as client:
                info = client.info("replication")
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
                return node
        raise AssertionError(f"no replica of {master.port}")

    def role(self, node: RedisServer) -> str:
        with contextlib.closing(node.client()) as client:
            return str(client.info("replication").get("role"))

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


S = TypeVar("S", RedisServer, SentinelGroup, RedisCluster)


@contextlib.contextmanager
def started(server: S) -> Iterator[S]:
    """``server`` started (a missing binary fails), stopped after the block or a half-way failed
    start: ``with started(RedisServer(tmp_path)) as server: yield server``."""
    try:
        yield server.start()
    finally:
        server.stop()
