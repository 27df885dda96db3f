"""Helpers of the native-route tests (SPEC 5): a module's own service (``auth_service``), one port's
in-process client (``sqlite_client``) and its log, the settings JSON API (a server's URL or a
client), spreading requests over both workers, the workers' log labels (waited for), and when each
worker shows a settings change (from its own log lines)."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import trustme

from fwrest.testing import Client
from tests.conftest import (
    READY_LINE,
    ServerProcess,
    free_config,
    local_port,
    module_config,
    wait_ready_workers,
)
from tests.conftest import wait_for as wait_for
from tests.faults.support import Pinned, pinned_per_worker

SETTING_NAMES = (
    "rest_log_level",
    "rest_error_full",
    "rest_trace_time",
    "rest_reload_time",
    "rest_log_stringsize",
)
SETTLE_S = 1.0  # SPEC 5: a change reaches every worker within 1 s
ORANGE = "rgb(255, 165, 0)"

# Every native route of SPEC 5 (the token route only on oAuth2 ports): name, method, path.
NATIVE = (
    ("rest/config", "GET", "/fw/rest/config"),
    ("rest/config", "POST", "/fw/rest/config"),
    ("rest/list/service", "GET", "/fw/rest/list/service"),
    ("rest/openapi.json", "GET", "/fw/rest/openapi.json"),
    ("rest/docs", "GET", "/fw/rest/docs"),
    ("rest/usage/time", "GET", "/fw/rest/usage/time"),
    ("rest/usage/time", "POST", "/fw/rest/usage/time/reset"),
    ("environment", "GET", "/fw/environment"),
    ("server/environment", "GET", "/server/environment"),
    ("vendor/environment", "GET", "/vendor/environment"),
    ("server/environment", "GET", "/fw/server/environment"),
    ("vendor/environment", "GET", "/fw/vendor/environment"),
    ("healthcheck", "GET", "/fw/healthcheck"),
    ("healthcheck/ok", "GET", "/fw/healthcheck/ok"),
    ("healthcheck/datetime", "GET", "/fw/healthcheck/datetime"),
)
NATIVE_PATHS = sorted({path for _, _, path in NATIVE})

# A Basic validator (ada, Ada-Pw-1) and an oAuth2 port's onAuthparams (client web, user ada)
AUTH_SOURCE = """
def check(user, password):
    return (user, password) == ("ada", "Ada-Pw-1")


def params():
    return {
        "client_id": "web",
        "client_secret": "Web-Secret-9q",
        "username": "ada",
        "password": "Ada-Pw-7731",
        "grant_type": "password",
        "access_expires": 3600000,
    }
"""

JSON_ACCEPT = {"Accept": "application/json"}


def oauth2_port(tmp: Path, ca: trustme.CA, params: str, **fw_data: Any) -> dict[str, Any]:
    """An oAuth2 TLS section (127.0.0.1, free port, ROOT), files in ``tmp``; ``params``."""
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp / "server.crt"))
    cert.private_key_pem.write_to_path(str(tmp / "server.key"))
    authorization = {"scheme": "oAuth2", "onAuth": "", "onAuthparams": params}
    return local_port(
        SslCertificate="server.crt",
        SslCertificateKey="server.key",
        FwData={"Authorization": authorization, **fw_data},
    )


# a real server's base URL (``http://127.0.0.1:PORT/rest``) or an in-process client (``in_process``)
Base = str | httpx.Client


@contextmanager
def in_process(config: Path, server: str, location: str = "/rest") -> Iterator[Client]:
    """In-process client of ``server`` for the block, base URL ending with ``location``
    (``get("/hello")`` asks ``/rest/hello``); its modules need names of their own."""
    client = Client(config, server=server)
    client.base_url = str(client.base_url).rstrip("/") + location
    with client:
        yield client


# An OnAuth module (``check``) and an onAdmin (``admin``: ada only) for native routes' tests
ADMIN_AUTH_SOURCE = """
USERS = {"ada": "Ada-Pw-1", "bob": "Bob-Pw-2"}


def check(user, password):
    return USERS.get(user) == password


def admin(user):
    return user == "ada"
"""


@contextmanager
def in_process_ports(
    config: Path, names: Iterable[str], location: str = "/rest"
) -> Iterator[dict[str, Client]]:
    """Server section -> its in-process client (:func:`in_process`), for the ``with`` block."""
    with ExitStack() as stack:
        yield {name: stack.enter_context(in_process(config, name, location)) for name in names}


def auth_service(tmp: Path, name: str = "", auth: str = AUTH_SOURCE, **kw: Any) -> Path:
    """:func:`module_config`'s service with modules ``{name}_app`` and ``{name}_auth`` (``auth``:
    its source); without ``name``, :func:`free_config`'s ``app`` and ``auth`` (for ``fwrest
    serve``). ``kw`` as those take them (``extra``: sections beside ``[ENV]``)."""
    prefix = f"{name}_" if name else ""
    (tmp / f"{prefix}auth.py").write_text(auth)
    kw["extra"] = {"ENV": {"Repository": f"{prefix}app,{prefix}auth"}, **kw.get("extra", {})}
    if name:
        return module_config(tmp, f"{name}_app", **kw)
    return free_config(tmp, **kw)


@contextmanager
def sqlite_client(tmp: Path, name: str) -> Iterator[Client]:
    """The in-process client of tests/conftest.py's service (app ``name``) on sqlite, ``/rest``."""
    config = module_config(tmp, name, extra={"HTTPSERVER": {"StateStore": "sqlite"}})
    with in_process(config, "HTTP_REST") as client:
        yield client


class FileLog:
    """A ``LogFile`` as the in-process client writes it; lines leave at the end of a loop turn, so
    they are waited for (``log()``, ``wait_log()`` as :class:`ServerProcess`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def log(self) -> str:
        return self.path.read_text(errors="replace") if self.path.exists() else ""

    def wait_log(self, needle: str, timeout: float = 10, since: int = 0) -> str:
        """The log from offset ``since`` on, once ``needle`` is in it."""
        found: list[str] = []

        def logged() -> bool:
            found[:] = [self.log()[since:]]
            return needle in found[0]

        try:
            wait_for(logged, timeout, f"{needle!r} in the log")
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{found[0][-3000:]}") from None
        return found[0]


def send(base: Base, method: str, path: str, **kw: Any) -> httpx.Response:
    """``method path`` (under the location) to a real server's base URL or a client."""
    if isinstance(base, httpx.Client):
        return base.request(method, path, **kw)
    return httpx.request(method, f"{base}{path}", **kw)


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


ADA = basic("ada", "Ada-Pw-1")
BOB = basic("bob", "Bob-Pw-2")


def get_settings(base: Base, **kw: Any) -> dict[str, dict[str, Any]]:
    headers = {**JSON_ACCEPT, **kw.pop("headers", {})}
    r = send(base, "GET", "/fw/rest/config", headers=headers, **kw)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    settings: dict[str, dict[str, Any]] = r.json()["settings"]
    return settings


def post_settings(base: Base, changes: Any, **kw: Any) -> httpx.Response:
    headers = {"Content-Type": "application/json", **JSON_ACCEPT, **kw.pop("headers", {})}
    content = json.dumps(changes)
    return send(base, "POST", "/fw/rest/config", content=content, headers=headers, timeout=10, **kw)


def form_token(base: Base, **kw: Any) -> str:
    """The anti-forgery token of the settings page (``/fw/rest/config`` as HTML)."""
    page = send(base, "GET", "/fw/rest/config", **kw)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    m = re.search(r'name="fw_csrf" value="([^"]+)"', page.text)
    assert m, page.text
    return m.group(1)


def post_form(base: Base, fields: dict[str, str], **kw: Any) -> httpx.Response:
    return send(base, "POST", "/fw/rest/config", data=fields, timeout=10, **kw)


def change(base: Base, changes: dict[str, Any], **kw: Any) -> float:
    """POST a change that must succeed; returns the monotonic time of the answer."""
    r = post_settings(base, changes, **kw)
    assert r.status_code == 200, (r.status_code, r.text)
    for name, value in changes.items():
        assert r.json()["settings"][name]["runtime"] == value, r.json()
    return time.monotonic()


def settle(since: float) -> None:
    """Wait until SPEC 5's bound (1 s) has passed since a change was answered."""
    left = since + SETTLE_S - time.monotonic()
    if left > 0:
        time.sleep(left)


# A worker's line when it applies a change: "(run time)" in the answering worker (just before it
# answers), "(sync)" in the others, "(start)".
SETTINGS_LINE = re.compile(
    r"^(\S+)Z \w+ fwrest\.server \[(w\d+)\] settings changed \(([^)]+)\): (.*?)"
    r"(?: request_id=\S+)?$",
    re.M,
)
LOG_TICK_S = 0.001  # a log line's time is whole milliseconds


def _stamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f")


def wait_shown(
    proc: ServerProcess, mark: int, *transitions: str, count: int = 2, timeout: float = 10
) -> dict[str, dict[str, datetime]]:
    """Worker label -> transition -> when applied, once each of ``w1``..``w{count}`` logged after
    ``mark`` its ``settings changed`` line of ``transitions``; ``timeout``: the hang guard."""
    wanted = [f"w{n}" for n in range(1, count + 1)]
    shown: dict[str, dict[str, datetime]] = {}

    def logged() -> bool:
        shown.clear()
        for stamp, label, _why, text in SETTINGS_LINE.findall(proc.log()[mark:]):
            for name in set(text.split(", ")) & set(transitions):
                shown.setdefault(label, {}).setdefault(name, _stamp(stamp))
        return all(len(shown.get(w, {})) == len(transitions) for w in wanted)

    try:
        wait_for(logged, timeout, f"{transitions} applied by workers {wanted}")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; seen {shown}; the log:\n{proc.log()[mark:][-3000:]}"
        ) from None
    return shown


def change_lag(
    proc: ServerProcess, mark: int, *transitions: str, count: int = 2, timeout: float = 10
) -> float:
    """Seconds from a change's answer to every worker showing it (SPEC 5: within 1 s), for the
    change(s) after ``mark`` that made ``transitions``. Both moments are the workers' own log times
    (the answering worker's ``(run time)``, the others' ``(sync)``), so the test's own pace does not
    count; the worst transition of the slowest worker does."""
    shown = wait_shown(proc, mark, *transitions, count=count, timeout=timeout)
    answered: dict[str, datetime] = {}
    for stamp, _label, why, text in SETTINGS_LINE.findall(proc.log()[mark:]):
        for name in set(text.split(", ")) & set(transitions):
            if why == "run time":
                answered.setdefault(name, _stamp(stamp))
    assert set(answered) == set(transitions), f"no (run time) line for some of {transitions}"
    return max(
        (when - answered[name]).total_seconds()
        for applied in shown.values()
        for name, when in applied.items()
    )


def settled(proc: ServerProcess, mark: int, *transitions: str, count: int = 2) -> float:
    """Every worker shows the change(s) after ``mark`` within 1 s (SPEC 5); the slowest's time."""
    lag = change_lag(proc, mark, *transitions, count=count)
    print(f"{', '.join(transitions)}: every worker {lag:.3f} s after the answer")
    # the log's times are whole milliseconds: one tick either way is the clock, not a worker
    assert lag < SETTLE_S + LOG_TICK_S, f"{transitions}: the last worker {lag:.3f} s after"
    return lag


def settled_change(
    proc: ServerProcess, base: str, changes: dict[str, Any], *transitions: str
) -> int:
    """POST ``changes`` (must succeed), :func:`settled` on ``transitions``; the log's length."""
    mark = len(proc.log())
    change(base, changes)
    settled(proc, mark, *transitions)
    return len(proc.log())


def clear_settings(base: str, count: int = 2) -> None:
    """Clear ``base``'s run-time values (``/hello`` answers the pid) and wait until no worker has
    one: at most SPEC 5's 1 s, sooner once each worker, asked on its own connection, says so."""
    r = post_settings(base, dict.fromkeys(SETTING_NAMES))
    answered = time.monotonic()
    assert r.status_code == 200, (r.status_code, r.text)
    target = {name: info["effective"] for name, info in r.json()["settings"].items()}
    assert all(info["runtime"] is None for info in r.json()["settings"].values()), r.text
    try:
        workers = pinned_per_worker(base, count, pid_path="/hello", timeout=SETTLE_S)
    except AssertionError:  # the kernel kept giving one worker the connections: the bound
        settle(answered)
        return

    def cleared(worker: Pinned) -> bool:
        answer = worker.http.get(f"{base}/fw/rest/config", headers=JSON_ACCEPT)
        settings = answer.json()["settings"] if answer.status_code == 200 else {}
        return bool(settings) and all(
            info["runtime"] is None and info["effective"] == target[name]
            for name, info in settings.items()
        )

    def all_cleared() -> bool:
        # each answer from its own worker: the connection was not closed and reopened
        return all(cleared(w) for w in workers) and all(w.still_pinned() for w in workers)

    try:
        while time.monotonic() < answered + SETTLE_S:
            # twice, 0.1 s apart: a worker takes the store's values, then re-reads the file (in a
            # thread) before applying them; an answer between shows them
            if all_cleared():
                time.sleep(0.1)
                if all_cleared():
                    return
            time.sleep(0.02)
    finally:
        for worker in workers:
            worker.close()


def worker_labels(log: str) -> dict[int, str]:
    """pid -> log label (``w1``, ``w2``) from the workers' ``ready`` lines."""
    return {int(pid): f"w{slot}" for slot, pid in READY_LINE.findall(log)}


def wait_worker_labels(proc: ServerProcess, count: int = 2, timeout: float = 15) -> dict[int, str]:
    """pid -> log label once ``w1``..``w{count}`` logged ready (maybe after ``fwrest: ready``)."""
    wait_ready_workers(proc, count, timeout)
    return worker_labels(proc.log())


def labels_of(labels: dict[int, str], pids: Iterable[int]) -> set[str]:
    """The log labels of the workers that answered ``pids`` (each must have a ``ready`` line)."""
    unknown = sorted(set(pids) - set(labels))
    assert not unknown, f"pids {unknown} answered but have no ready line in the log: {labels}"
    return {labels[pid] for pid in pids}


def hit_both_workers(
    base: str, path: str = "/hello", rounds: int = 200, minimum: int = 4
) -> list[int]:
    """GET ``path`` (its pid) on fresh connections until two pids and ``minimum`` requests."""
    pids: list[int] = []
    for _ in range(rounds):
        r = httpx.get(f"{base}{path}", timeout=10)
        assert r.status_code == 200, r.text
        pids.append(r.json()["pid"])
        if len(set(pids)) >= 2 and len(pids) >= minimum:
            return pids
    raise AssertionError(f"{rounds} requests never reached a second worker: {set(pids)}")
