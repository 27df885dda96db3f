"""A throwaway ``redis-server`` for tests that need a real Redis (no mock).

Shared by ``tests/auth/test_oauth2_store.py`` and ``tests/faults/``. ``redis-server`` must be
installed (Debian's ``redis-server`` package): the tests fail, never skip, without it.
``free_port`` is tests/conftest.py's, named here for the tests that import it from this module.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from tests.conftest import free_port

__all__ = ["RedisServer", "free_port", "redis_binary"]


def redis_binary() -> str:
    found = shutil.which("redis-server") or "/usr/bin/redis-server"
    assert Path(found).is_file(), "redis-server is required for these tests (apt install redis)"
    return found


class RedisServer:
    """A ``redis-server`` on a free loopback port.

    Without ``persist`` nothing is kept across a restart; with it, every write is appended to
    an AOF file and fsynced before Redis answers (``appendfsync always``), so a stop and a
    restart on the same folder keep every key (a Redis that restarts the way a production one
    does).
    """

    def __init__(self, folder: Path, *, persist: bool = False) -> None:
        self.binary = redis_binary()
        self.folder = folder
        self.persist = persist
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        durability = ["--appendonly", "yes", "--appendfsync", "always"]
        if not self.persist:
            durability = ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             *durability, "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1)
        deadline = time.monotonic() + 15
        try:
            while True:
                assert self.proc.poll() is None, "redis-server exited"
                try:
                    if client.ping():
                        break
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"redis-server on port {self.port} never answered")
                time.sleep(0.02)
        finally:
            client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2)
