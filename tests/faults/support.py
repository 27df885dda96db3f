"""Helpers of the fault tests (processes, ports, timed outcomes, figures); nothing is mocked."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.conftest import APP_SOURCE, ServerProcess, free_config
from tests.conftest import port_is_free as port_is_free  # the fault tests take it from here

# Extra routes of the fault tests, appended to the shared test app of tests/conftest.py.
FAULT_APP = (
    APP_SOURCE
    + '''

import json as _json

_started_lock = threading.Lock()


def _mark_started(kind):
    """Append one line per request started to the file UserData names (shared by workers)."""
    path = (rest.getServerUserData() or {}).get("started_file")
    if path:
        with _started_lock, open(path, "a") as fh:
            fh.write(f"{kind} {os.getpid()}\\n")


@get("/slow/:ms")
def slow(ms):
    _mark_started("def")
    time.sleep(int(ms) / 1000)
    return {"slept": int(ms), "pid": os.getpid()}


@get("/aslow/:ms")
async def aslow(ms):
    _mark_started("async")
    await asyncio.sleep(int(ms) / 1000)
    return {"slept": int(ms), "pid": os.getpid()}


@get("/pid")
def pid():
    return {"pid": os.getpid()}


@get("/apid")
async def apid():
    return {"pid": os.getpid()}


@post("/login-json")
def login_json():
    """A JSON body with a password field; the answer never repeats it."""
    body = _json.loads(rest.getBodyRequest() or "{}")
    return {"user": body.get("username"), "fields": sorted(body)}


@post("/sink")
def sink():
    """Takes any body and answers its length only (never repeats it)."""
    return {"length": len(rest.getBodyRequest())}


@get("/raise-auth")
def raise_auth():
    """A handler that puts the request's Authorization header into its exception."""
    raise RuntimeError("cannot serve: Authorization was " + rest.getHeaderRequest()["authorization"])


def public():
    return ["/pid", "/apid"]
'''
)


@contextlib.contextmanager
def all_closed(things: Iterable[Any]) -> Iterator[None]:
    """Each of ``things`` (clients, sockets; a list may grow in the block) closed after it."""
    try:
        yield
    finally:
        for thing in things:
            thing.close()


@contextlib.contextmanager
def served_cleanly(config: Path, **kwargs: Any) -> Iterator[ServerProcess]:
    """``fwrest serve CONFIG`` for the block; a block that passed also asserts exit code 0."""
    proc = ServerProcess(config, **kwargs).wait_ready()
    try:
        yield proc
    finally:
        code = proc.stop()
    assert code == 0


def password_grant(user: str, password: str) -> dict[str, str]:
    """The form of a password grant (RFC 6749 4.3)."""
    return {"grant_type": "password", "username": user, "password": password}


def oauth_params(
    users: Iterable[tuple[str, str]], *, long_lived: bool = False, **extra: Any
) -> dict[str, Any]:
    """``onAuthparams``'s ``web``, ``users`` and ``extra``; ``long_lived``: tokens outlive a run."""
    lifetimes = {"access_expires": "1h", "refresh_expires": "Date()+1"} if long_lived else {}
    users_list = [{"username": u, "password": p} for u, p in users]
    return {"client_id": "web", **extra, **lifetimes, "users": users_list}


def app_with(params: dict[str, Any] | None = None, basic: dict[str, str] | None = None) -> str:
    """:data:`FAULT_APP` plus ``params()`` and ``basic_check`` (accepting ``basic``'s users)."""
    return (
        FAULT_APP
        + f"\n\n_PARAMS = {params or {}!r}\n_BASIC = {basic or {}!r}\n\n\n"
        + "def params():\n    return _PARAMS\n\n\n"
        + "def basic_check(user, password):\n"
        + "    return user in _BASIC and _BASIC[user] == password\n"
    )


def store_config(
    folder: Path,
    servers: dict[str, Any],
    store: str,
    params: dict[str, Any],
    max_threads: int | None = None,
) -> Path:
    """:func:`free_config` of ``app_with(params)``, ``servers`` on ``StateStore=store``."""
    extra: dict[str, Any] = {"HTTPSERVER": {"StateStore": store}}
    if max_threads is not None:
        extra["POOL"] = {"MaxThreads": max_threads}
    return free_config(folder, app=app_with(params), servers=servers, extra=extra)


def service_rss(pid: int) -> tuple[int, dict[int, int]]:
    """Resident bytes of a supervisor and all its descendants: (total, per pid)."""
    root = psutil.Process(pid)
    per: dict[int, int] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            per[proc.pid] = proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return sum(per.values()), per


@dataclass(slots=True)
class Outcome:
    """One request of a load thread: when it ran and how it ended."""

    kind: str
    started: float  # time.monotonic()
    ended: float
    status: int | None  # None: a transport error
    error: str = ""
    pid: int | None = None
    body: Any = None

    @property
    def took(self) -> float:
        return self.ended - self.started


class Recorder:
    """Runs ``call`` in ``threads`` threads until stopped, recording each :class:`Outcome`."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.crashed: list[BaseException] = []

    def add(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)

    def run(self, name: str, threads: int, call: Callable[[int], Outcome | None]) -> None:
        def loop(index: int) -> None:
            try:
                while not self._stop.is_set():
                    outcome = call(index)
                    if outcome is not None:
                        self.add(outcome)
            except BaseException as exc:  # reported by stop(); a load thread must not die quietly
                self.crashed.append(exc)

        for i in range(threads):
            thread = threading.Thread(target=loop, args=(i,), name=f"{name}-{i}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 30) -> list[Outcome]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"load threads still running after {timeout} s: {alive}"
        assert not self.crashed, self.crashed
        with self._lock:
            return list(self.outcomes)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()


def figures(values: Iterable[float], unit: str = "ms", scale: float = 1000.0) -> str:
    """``n=…, min/median/p99/max`` of durations in seconds, shown in ``unit``."""
    data = sorted(values)
    if not data:
        return "n=0"
    p99 = data[min(len(data) - 1, int(len(data) * 0.99))]
    return (
        f"n={len(data)} min={data[0] * scale:.1f}{unit} "
        f"median={statistics.median(data) * scale:.1f}{unit} "
        f"p99={p99 * scale:.1f}{unit} max={data[-1] * scale:.1f}{unit}"
    )


class Pinned:
    """A client with one keep-alive connection, hence one worker; ``pid`` is that worker's."""

    def __init__(
        self,
        base: str,
        *,
        address: str | None = None,
        verify: Any = True,
        auth: tuple[str, str] | None = None,
        pid_path: str = "/pid",
    ) -> None:
        self.base = base
        self.address = address
        self.auth = auth  # credentials for asking /pid on a Basic port
        self.pid_path = pid_path  # a route that answers {"pid": ...}
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        transport = httpx.HTTPTransport(local_address=address, verify=verify, limits=limits)
        self.http = httpx.Client(transport=transport, timeout=15)
        self.pid = self.ask_pid()

    def ask_pid(self) -> int:
        response = self.http.get(self.base + self.pid_path, auth=self.auth)
        assert response.status_code == 200, response.text
        return int(response.json()["pid"])

    def still_pinned(self) -> bool:
        return self.ask_pid() == self.pid

    def close(self) -> None:
        self.http.close()


def pinned_per_worker(
    base: str,
    count: int = 2,
    *,
    address: str | None = None,
    addresses: list[str] | None = None,
    verify: Any = True,
    auth: tuple[str, str] | None = None,
    timeout: float = 15.0,
    pid_path: str = "/pid",
) -> list[Pinned]:
    """A :class:`Pinned` client on each of ``count`` workers, the n-th from ``addresses[n]``."""
    found: dict[int, Pinned] = {}
    deadline = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        source = addresses[len(found)] if addresses else address
        client = Pinned(base, address=source, verify=verify, auth=auth, pid_path=pid_path)
        if client.pid in found:
            client.close()
        else:
            found[client.pid] = client
    if len(found) < count:
        for client in found.values():
            client.close()
        raise AssertionError(f"connections never reached {count} workers")
    return list(found.values())


def simultaneous(
    count: int,
    connect: Callable[[httpx.Client], object],
    send: Callable[[httpx.Client, int], httpx.Response],
    verify: Any = True,
    addresses: list[str] | None = None,
) -> tuple[list[httpx.Response], float]:
    """``count`` clients (from ``addresses`` in turn), connected, then released by a barrier to
    ``send``: their answers and the seconds to the last."""
    addresses = addresses or ["127.0.0.1"]
    clients = [
        httpx.Client(
            transport=httpx.HTTPTransport(
                local_address=addresses[i % len(addresses)], verify=verify
            ),
            timeout=60,
        )
        for i in range(count)
    ]
    barrier = threading.Barrier(count + 1, timeout=60)
    answers: list[Any] = [None] * count

    def run(i: int) -> None:
        try:
            connect(clients[i])
            barrier.wait()
            answers[i] = send(clients[i], i)
        except Exception as exc:  # shown by the assertion below
            answers[i] = exc
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    with all_closed(clients):
        for thread in threads:
            thread.start()
        # a client that failed to connect breaks the barrier: its error is shown below
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        released = time.monotonic()
        for thread in threads:
            thread.join(120)
        took = time.monotonic() - released
    failed = [a for a in answers if not isinstance(a, httpx.Response)]
    causes = [a for a in failed if not isinstance(a, threading.BrokenBarrierError)]
    assert not failed, f"{len(failed)} clients failed; the causes: {causes[:3]}"
    return answers, took
