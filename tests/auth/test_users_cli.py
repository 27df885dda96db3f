"""``fwrest users``, ``clients``, ``lockouts`` (SPEC 13.6): edits of an ``onAuthparams`` file (other
keys kept, atomic, 0600, bad input leaves it byte for byte), a crash before the rename, a
pseudo-terminal run, a running ``fwrest serve`` using each change at its next token request,
lock-outs listed and lifted. Commands run forked; terminal, crash and service are real processes."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import shlex
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import jwt
import pytest
import trustme
from argon2 import PasswordHasher

from fwrest.auth.oauth2.passwords import verify_password
from fwrest.config.loader import load_config
from fwrest.store import open_store
from fwrest.store.redis import RedisStore
from tests.auth.oauth2_support import TOKEN, assert_error, client_context, expect, oauth_section
from tests.conftest import (
    APP_SOURCE,
    FWREST,
    ServerProcess,
    free_config,
    free_port,
    issue_certs,
    local_port,
    run_cli,
    run_forked,
    serving,
    wait_for,
)
from tests.docs.blocks import Block, example
from tests.redis_support import RedisServer, started

HANA_HASH = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash("Hana-Pw-3")
BERT_HASH = bcrypt.hashpw(b"Bert-Pw-4", bcrypt.gensalt(rounds=4)).decode()
SECRETS = ("Ada-Pw-1", "Web-Secret-9q", "$argon2", "$2b$")


def params() -> dict[str, Any]:
    users = [
        {"username": "hana", "password": HANA_HASH, "scopes": ["orders:read"]},
        {"username": "bert", "password": BERT_HASH},
    ]
    return {"client_id": "web", "client_secret": "Web-Secret-9q",
            "Username": "ada",  # keys in any case, as the token route reads them
            "password": "Ada-Pw-1", "users": users, "access_expires": "15m",
            "note": {"kept": ["as", "it", "was"]}}  # fmt: skip


@pytest.fixture(scope="module")
def certs(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return issue_certs(ca, tmp_path_factory.mktemp("users-certs"))


BASIC_APP = """

def basic_check(user, password):
    return user == "bob" and password == "Bob-Pw-2"
"""


def write_config(folder: Path, certs: dict[str, Path], basic: bool = False, **http: Any) -> Path:
    """``TOK`` on ``params.json`` (``basic``: Basic port ``BAS`` too), locking after 3 failures."""
    (folder / "params.json").write_text(json.dumps(params(), indent=4))
    (folder / "params.json").chmod(0o600)
    servers = {"TOK": oauth_section(certs, onAuthparams="file:params.json", maxFailures=3)}
    if basic:
        auth = {"scheme": "basic", "OnAuth": "app.basic_check", "maxFailures": 3}
        servers["BAS"] = local_port(FwData={"Authorization": auth})  # fmt: skip
    app = APP_SOURCE + BASIC_APP
    return free_config(folder, servers=servers, extra={"HTTPSERVER": http}, app=app)


@pytest.fixture
def config(tmp_path: Path, certs: dict[str, Path]) -> Path:
    return write_config(tmp_path, certs)


def fwrest(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    command, *rest = args
    return run_forked(command, str(config), *rest, cwd=config.parent, stdin=stdin)


def done(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """:func:`fwrest` that must succeed."""
    result = fwrest(config, *args, stdin=stdin)
    assert result.returncode == 0, (args, result.stderr)
    return result


def content(config: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((config.parent / "params.json").read_text())
    return data


def assert_no_secret(text: str, *more: str) -> None:
    for secret in (*SECRETS, *more):
        assert secret not in text


def test_users_are_added_changed_and_removed_with_the_rest_of_the_file_kept(config: Path) -> None:
    path = config.parent / "params.json"
    added = done(config, "users", "add", "carol", "--password-stdin", stdin="Carol-Pw-2\n")
    assert "added user 'carol'" in added.stderr and added.stdout == ""
    data = content(config)
    assert list(data) == list(params())  # the keys and their order kept
    data_less, params_less = (
        {k: v for k, v in d.items() if k != "users"} for d in (data, params())
    )
    assert data_less == params_less
    assert data["users"][:2] == params()["users"]
    carol = data["users"][2]
    assert carol["username"] == "carol" and carol["password"].startswith("$argon2id$")
    assert verify_password("Carol-Pw-2", carol["password"])  # what the token route checks
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.glob(".params.json.*")] == []

    listed = done(config, "users", "list")
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows == [["USER", "PASSWORD", "SCOPES"], ["ada", "plain", "text", "default"],
                    ["hana", "argon2id", "orders:read"], ["bert", "bcrypt", "default"],
                    ["carol", "argon2id", "default"]]  # fmt: skip
    assert_no_secret(listed.stdout + listed.stderr, "Carol-Pw-2")

    # the single keys' user: its password (key written "password") becomes a hash
    done(config, "users", "passwd", "ada", "--password-stdin", stdin="Ada-New-3\r\n")
    assert verify_password("Ada-New-3", content(config)["password"])

    done(config, "users", "remove", "ada")
    data = content(config)
    assert "Username" not in data and "password" not in data
    assert data["client_id"] == "web" and data["note"] == params()["note"]
    done(config, "users", "remove", "carol")
    assert [u["username"] for u in content(config)["users"]] == ["hana", "bert"]


def test_a_client_secret_is_printed_once_and_never_listed(config: Path) -> None:
    added = done(config, "clients", "add", "mobile")
    secret = added.stdout.strip()
    assert len(secret) >= 40 and "\n" not in secret  # alone on stdout, for scripts
    # kept as an argon2id hash, as passwords are
    [entry] = content(config)["client"]
    assert entry["client_id"] == "mobile" and entry["client_secret"].startswith("$argon2id$")
    assert secret not in json.dumps(content(config))
    assert verify_password(secret, entry["client_secret"])
    rotated = done(config, "clients", "rotate-secret", "mobile")
    new = rotated.stdout.strip()
    stored = content(config)["client"][0]["client_secret"]
    assert new != secret and verify_password(new, stored) and not verify_password(secret, stored)
    listed = fwrest(config, "clients", "list")
    assert listed.stdout.split() == ["CLIENT", "SECRET", "SCOPES", "web", "plain", "text",
                                     "default", "mobile", "argon2id", "default"]  # fmt: skip
    assert_no_secret(listed.stdout, secret, new)
    done(config, "clients", "remove", "mobile")
    assert content(config)["client"] == []


BAD = [
    (("users", "add", ""), None, "must not be empty"),
    (("users", "add", "car\x07ol"), None, "control characters"),
    (("users", "add", "hana"), None, "is already in the file"),
    (("users", "passwd", "nobody"), None, "is not in the file"),
    (("users", "remove", "nobody"), None, "is not in the file"),
    (("users", "add", "dora", "--password-stdin"), "\n", "password must not be empty"),
    (("users", "add", "dora", "--password-stdin"), "", "password must not be empty"),
    (("clients", "add", "web"), None, "is already in the file"),
    (("clients", "rotate-secret", "nobody"), None, "is not in the file"),
    (("users", "add", "\x1b[2J"), None, "control characters"),
    (("users", "add", "eve\u2028admin"), None, "line separators"),  # a line end to a log viewer
    # names folding together: two spellings of one account, or a user and client the trail and
    # onAdmin cannot tell apart (issue 34)
    (("users", "add", "HANA"), None, "would be the user 'hana'"),
    (("users", "add", "\uff48\uff41\uff4e\uff41"), None, "would be the user 'hana'"),
    (("users", "add", "Web"), None, "would be the client 'web'"),
    (("users", "add", "web", "--password-stdin"), "Web-Pw-1\n", "would be the client 'web'"),
    (("clients", "add", "ADA"), None, "would be the user 'ada'"),
    (("clients", "add", "bert"), None, "would be the user 'bert'"),
    (("users", "add", "client:web"), None, "must not begin with 'client:'"),
    (("users", "add", "Client:ops"), None, "must not begin with 'client:'"),
]


def test_bad_input_exits_2_and_leaves_the_file_byte_for_byte(config: Path) -> None:
    path = config.parent / "params.json"
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    for args, stdin, message in BAD:
        result = fwrest(config, *args, stdin=stdin)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime, args
    # a key given twice is refused as at start (an edit wrote back only the last "users")
    for broken, said in (
        (b'{"users": [{"username": "hana", "password": "x"},', "is not valid JSON"),
        (b'{"users": [{"username": "hana", "password": "x"}], "users": []}', "given twice"),
    ):
        path.write_bytes(broken)
        mtime = path.stat().st_mtime_ns
        for args in (("users", "add", "dora", "--password-stdin"), ("users", "list")):
            result = fwrest(config, *args, stdin="Dora-Pw-4\n")
            assert result.returncode == 2 and said in result.stderr, result.stderr
            assert path.read_bytes() == broken and path.stat().st_mtime_ns == mtime
        checked = run_cli("check", str(config), cwd=config.parent)
        assert checked.returncode == 2 and said in checked.stdout + checked.stderr
    assert list(path.parent.glob(".params.json.*")) == []


def test_several_files_need_server(tmp_path: Path, certs: dict[str, Path]) -> None:
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(params()))
    servers = {
        "ONE": oauth_section(certs, onAuthparams="file:a.json"),
        "TWO": oauth_section(certs, onAuthparams="file:b.json"),
    }
    config = free_config(tmp_path, servers=servers)
    result = fwrest(config, "clients", "add", "mobile")
    assert result.returncode == 2 and "ONE, TWO" in result.stderr and "--server" in result.stderr
    done(config, "clients", "add", "mobile", "--server", "two")
    assert "client" not in json.loads((tmp_path / "a.json").read_text())
    assert json.loads((tmp_path / "b.json").read_text())["client"][0]["client_id"] == "mobile"


CRASH = """
import os, signal, sys
import fwrest.cli

def crash(src, dst):  # the moment between the write of the new file and its rename
    assert os.path.getsize(src) > 0
    os.kill(os.getpid(), signal.SIGKILL)

os.replace = crash
sys.exit(fwrest.cli.main(sys.argv[1:]))
"""


def test_a_crash_before_the_rename_leaves_the_file_whole(config: Path) -> None:
    path = config.parent / "params.json"
    before = path.read_bytes()
    (config.parent / "crash.py").write_text(CRASH)
    result = subprocess.run(
        [sys.executable, "crash.py", "users", str(config), "add", "dora", "--password-stdin"],
        input="Dora-Pw-4\n", capture_output=True, text=True, cwd=config.parent, timeout=60,
    )  # fmt: skip
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert path.read_bytes() == before
    # the new file written in full beside it, never readable by others
    (left,) = path.parent.glob(".params.json.*.tmp")
    assert stat.S_IMODE(left.stat().st_mode) == 0o600
    users = json.loads(left.read_text())["users"]
    assert [u["username"] for u in users] == ["hana", "bert", "dora"]


def _read_until(fd: int, marker: bytes, seen: bytearray, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], max(end - time.monotonic(), 0))
        if not ready:
            raise AssertionError(f"{marker!r} never came: {bytes(seen)!r}")
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        if not chunk:
            raise AssertionError(f"{marker!r} never came: {bytes(seen)!r}")
        seen += chunk


@pytest.mark.parametrize(
    ("repeat", "code", "last"),
    [("Typed-Pw-55", 0, b"added user 'dora'"), ("Typed-Pw-56", 2, b"passwords differ")],
)
def test_an_interactive_run_asks_for_the_password_without_echo(
    config: Path, repeat: str, code: int, last: bytes
) -> None:
    before = (config.parent / "params.json").read_bytes()
    pid, fd = pty.fork()
    if pid == 0:  # the child: fwrest on the pseudo-terminal, its controlling terminal
        os.chdir(config.parent)
        os.execv(sys.executable, [*FWREST, "users", str(config), "add", "dora"])
    seen = bytearray()
    try:
        _read_until(fd, b"Password: ", seen)
        os.write(fd, b"Typed-Pw-55\n")
        _read_until(fd, b"Repeat it: ", seen)
        os.write(fd, repeat.encode() + b"\n")
        _read_until(fd, last, seen)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == code, bytes(seen)
    assert b"Typed-Pw-5" not in seen  # the terminal never showed either
    if code:
        assert (config.parent / "params.json").read_bytes() == before
        return
    dora = content(config)["users"][-1]
    assert dora["username"] == "dora" and verify_password("Typed-Pw-55", dora["password"])


def test_without_a_terminal_the_password_must_come_from_stdin(config: Path) -> None:
    path = config.parent / "params.json"
    before = path.read_bytes()
    result = subprocess.run(
        [*FWREST, "users", str(config), "add", "dora"],
        input="Dora-Pw-4\n",  # never read: only --password-stdin reads stdin
        capture_output=True, text=True, cwd=config.parent, timeout=60,
        start_new_session=True,  # no controlling terminal
    )  # fmt: skip
    assert result.returncode == 2 and "--password-stdin" in result.stderr, result.stderr
    assert "Dora-Pw-4" not in result.stderr + result.stdout
    assert path.read_bytes() == before


def test_memory_store_lockouts_say_why_not(config: Path) -> None:
    result = fwrest(config, "lockouts", "list")
    assert result.returncode == 2 and "state store is memory" in result.stderr


def test_lockouts_in_a_redis_store(tmp_path: Path, certs: dict[str, Path]) -> None:
    with (
        started(RedisServer(tmp_path)) as server,
        contextlib.closing(RedisStore(server.url)) as store,
    ):
        config = write_config(tmp_path, certs, StateStore=server.url)
        for key in ("tok|user:ada", "tok|user:bob"):
            store.hit_failure(key, 300)
            store.add_lock(key, time.time() + 300)
        listed = done(config, "lockouts", "list")
        assert [line.split()[2] for line in listed.stdout.splitlines()[1:]] == ["ada", "bob"]
        cleared = fwrest(config, "lockouts", "clear", "bob")
        assert cleared.stdout.strip() == "fwrest lockouts: lifted [TOK] user bob"
        assert list(store.locks()) == ["tok|user:ada"]
        assert store.failures("tok|user:bob", 300)[0] == 0


# -- a running service ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(
    certs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, Path]]:
    folder = tmp_path_factory.mktemp("users-served")
    config = write_config(folder, certs, basic=True, StateStore="sqlite")
    with serving(config, workers=2) as proc:  # a lift reaches every worker
        yield proc, config


def grant(proc: ServerProcess, certs: dict[str, Path], user: str, password: str,
          source: str = "127.0.0.1") -> httpx.Response:  # fmt: skip
    transport = httpx.HTTPTransport(verify=client_context(certs), local_address=source)
    with httpx.Client(transport=transport, timeout=15) as http:
        form = {"grant_type": "password", "username": user, "password": password}
        return http.post(proc.url("TOK") + TOKEN, data=form, auth=("web", "Web-Secret-9q"))


def test_a_running_service_grants_an_added_user_at_once_and_refuses_a_removed_one(
    served: tuple[ServerProcess, Path], certs: dict[str, Path]
) -> None:
    proc, config = served
    assert grant(proc, certs, "erin", "Erin-Pw-6").status_code == 400
    done(config, "users", "add", "erin", "--password-stdin", stdin="Erin-Pw-6\n")
    first = grant(proc, certs, "erin", "Erin-Pw-6")  # no restart, no wait
    assert first.status_code == 200, first.text
    done(config, "users", "remove", "erin")
    assert_error(grant(proc, certs, "erin", "Erin-Pw-6"), "invalid_grant")
    # nor may the removed user's refresh token renew the session
    form = {"grant_type": "refresh_token", "refresh_token": first.json()["refresh_token"]}
    with httpx.Client(verify=client_context(certs), timeout=15) as http:
        renewed = http.post(proc.url("TOK") + TOKEN, data=form, auth=("web", "Web-Secret-9q"))
    assert renewed.status_code == 400 and renewed.json()["error"] == "invalid_grant", renewed.text


def test_a_running_service_takes_the_secret_of_a_client_added_with_its_hash(
    served: tuple[ServerProcess, Path], certs: dict[str, Path]
) -> None:
    proc, config = served
    added = done(config, "clients", "add", "kiosk")
    secret = added.stdout.strip()
    assert secret not in (config.parent / "params.json").read_text()
    form = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-1"}
    try:
        with httpx.Client(verify=client_context(certs), timeout=15) as http:
            url = proc.url("TOK") + TOKEN
            good = expect(http.post(url, data=form, auth=("kiosk", secret)))
            claims = jwt.decode(good.json()["access_token"], options={"verify_signature": False})
            assert claims["client_id"] == "kiosk"
            wrong = http.post(url, data=form, auth=("kiosk", secret[:-1]))
            assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
            # the hash itself is no secret to present
            stored = content(config)["client"][-1]["client_secret"]
            expect(http.post(url, data=form, auth=("kiosk", stored)), 401)
            # the plain secret written by hand still works beside it
            expect(http.post(url, data=form, auth=("web", "Web-Secret-9q")))
    finally:
        done(config, "clients", "remove", "kiosk")


def test_a_command_on_a_reloaded_service_s_sqlite_store_keeps_its_journal(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    """SPEC 7 (SQLite in WAL mode), 13.1, 13.6: a command on the store of a service that
    reloaded must not take itself for the store's last user and delete the -wal and -shm
    files the workers still write through: the lock-outs made after it were then never
    listed by ``fwrest lockouts``, nor lifted (a review saw revocations lost so too)."""
    config = write_config(tmp_path, certs, StateStore="sqlite")
    data = load_config(config).data_path
    with serving(config, workers=1) as proc:
        assert grant(proc, certs, "ada", "Ada-Pw-1").status_code == 200  # the store in use
        proc.signal(signal.SIGHUP)
        wait_for(lambda: any("reloaded: generation 2" in line for line in proc.stdout_lines),
                 30, "the reload")  # fmt: skip
        for _ in range(2):
            assert done(config, "lockouts", "list").stdout.strip() == "no lock-out in force"
            assert (data / "state.sqlite3-wal").exists(), sorted(p.name for p in data.iterdir())
        codes = [grant(proc, certs, "ada", "wrong").status_code for _ in range(4)]
        assert codes == [400, 400, 400, 429], codes
        wait_for(lambda: "ada" in done(config, "lockouts", "list").stdout, 10, "ada listed")
        assert "lifted [TOK] user ada" in done(config, "lockouts", "clear", "ada").stdout
        wait_for(lambda: grant(proc, certs, "ada", "Ada-Pw-1").status_code == 200, 10, "lifted")


def test_a_lock_out_is_listed_and_lifted(
    served: tuple[ServerProcess, Path], certs: dict[str, Path]
) -> None:
    proc, config = served
    # wrong passwords from another loopback address lock the user and that address
    codes = [grant(proc, certs, "ada", "wrong", source="127.0.0.2").status_code for _ in range(4)]
    assert codes == [400, 400, 400, 429], codes
    assert grant(proc, certs, "ada", "Ada-Pw-1").status_code == 429  # the user is locked
    # the store's copy is written behind the 429
    wait_for(lambda: len(done(config, "lockouts", "list").stdout.splitlines()) == 3, 10, "the list")
    listed = done(config, "lockouts", "list")
    rows = [line.split()[:4] for line in listed.stdout.splitlines()]
    assert rows[0] == ["PORT", "KIND", "SUBJECT", "FAILURES"]
    assert sorted(rows[1:]) == [["TOK", "ip", "127.0.0.2", "3"], ["TOK", "user", "ada", "3"]]

    cleared = fwrest(config, "lockouts", "clear", "ADA")  # counted case-folded
    assert cleared.returncode == 0, cleared.stderr
    # ada's address lock-out goes with her user's, else she is still refused there
    assert cleared.stdout.splitlines() == lifted("[TOK] ip 127.0.0.2", "[TOK] user ada")
    assert fwrest(config, "lockouts", "list").stdout.strip() == "no lock-out in force"

    # every worker sees the list without it within its refresh (0.5 s)
    def ada_served() -> bool:
        return grant(proc, certs, "ada", "Ada-Pw-1", source="127.0.0.2").status_code == 200

    wait_for(ada_served, 10, "the lock-out lifted", interval=0.2)
    # an address locked by other users' failures stays, and the command says so
    for user in ("carl", "dan", "eve"):
        assert grant(proc, certs, user, "wrong", source="127.0.0.3").status_code == 400
    time.sleep(1.5)
    codes = [grant(proc, certs, "bob", "wrong", source="127.0.0.4").status_code for _ in range(3)]
    assert codes == [400, 400, 400], codes
    partial = fwrest(config, "lockouts", "clear", "bob")
    assert partial.stdout.splitlines() == [
        *lifted("[TOK] ip 127.0.0.4", "[TOK] user bob"),
        "fwrest lockouts: still in force: [TOK] ip 127.0.0.3",
    ], partial.stdout
    assert fwrest(config, "lockouts", "clear").stdout.splitlines() == lifted("[TOK] ip 127.0.0.3")
    # SPEC 13.5: the lock-out and each lift are in the audit trail the store keeps
    events = audit_events(config)
    lockout = next(e for e in events if e["event"] == "lockout" and e["actor"] == "ada")
    # the port as the config names it, in the service's events and the command's alike
    assert (lockout["actor"], lockout["client"], lockout["port"]) == ("ada", "127.0.0.2", "TOK")
    assert lockout["details"]["locked"] == ["user", "address"]
    lifts = [e for e in events if e["event"] == "lockout.clear"]
    assert sorted(
        (e["actor"], e["port"], e["details"]["kind"], e["details"]["subject"]) for e in lifts
    ) == [("cli", "TOK", kind, subject) for kind, subject in (
        ("ip", "127.0.0.2"), ("ip", "127.0.0.3"), ("ip", "127.0.0.4"), ("user", "ada"), ("user", "bob"))]  # fmt: skip
    assert all(e["details"]["via"] == "fwrest lockouts clear" for e in lifts)


def test_the_monitors_lock_outs_name_its_port_as_its_own_events_do(
    tmp_path: Path, serve: Any
) -> None:
    # one name in the trail: guard, list and lifts all say APP_MONITOR (it said app_monitor)
    port = free_port()
    fw = {"Authorization": {"scheme": "basic", "OnAuth": "app.basic_check", "maxFailures": 3}}
    monitor = {"Enable": 1, "HostName": "127.0.0.1", "Port": port, "FwData": fw}
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}, "APP_MONITOR": monitor}
    config = free_config(tmp_path, app=APP_SOURCE + BASIC_APP, extra=extra)
    serve(config)
    url = f"http://127.0.0.1:{port}/api/server/metrics"
    codes = [httpx.get(url, auth=("bob", "wrong"), timeout=15).status_code for _ in range(4)]
    assert codes == [403, 403, 403, 429], codes
    listed = done(config, "lockouts", "list")
    rows = sorted(line.split()[:3] for line in listed.stdout.splitlines()[1:])
    assert rows == [["APP_MONITOR", "ip", "127.0.0.1"], ["APP_MONITOR", "user", "bob"]], listed
    # lifted by the user's name too (the monitor is a port of the service)
    cleared = done(config, "lockouts", "clear", "bob")
    assert cleared.stdout.splitlines() == lifted(
        "[APP_MONITOR] ip 127.0.0.1", "[APP_MONITOR] user bob"
    ), cleared.stdout
    assert done(config, "lockouts", "list").stdout.strip() == "no lock-out in force"
    found: list[dict[str, Any]] = []

    def kept() -> bool:  # the service writes its event off the request's way
        found[:] = [e for e in audit_events(config) if e["event"] == "lockout"]
        return bool(found)

    wait_for(kept, 15, "the monitor's lockout event in the store")
    assert [e["port"] for e in found] == ["APP_MONITOR"], found
    lifts = [e for e in audit_events(config) if e["event"] == "lockout.clear"]
    assert sorted((e["port"], e["details"]["kind"]) for e in lifts) == [
        ("APP_MONITOR", "ip"),
        ("APP_MONITOR", "user"),
    ], lifts


def lifted(*what: str) -> list[str]:
    """The lines ``fwrest lockouts clear`` prints for the lock-outs it lifted."""
    return [f"fwrest lockouts: lifted {w}" for w in what]


def audit_events(config: Path) -> list[dict[str, Any]]:
    """The audit trail as the service's state store keeps it, newest first."""
    loaded = load_config(config)
    with contextlib.closing(open_store(loaded.state_store, loaded.data_path)) as store:
        return [json.loads(row) for row in store.audit_events(0.0, None, 100)]


# -- docs/administration.md ----------------------------------------------------------------------

DOC_PATH = "/srv/shop/params.json"


def transcript(block: Block, config: Path) -> None:
    """Each ``$ fwrest ...`` line run in the config's folder (``< FILE``: its first line as input),
    its output compared with the lines below (``...``: any text)."""
    text = block.text.replace(DOC_PATH, str(config.parent / "params.json"))
    commands: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            commands[-1][1].append(line)
    for command, expected in commands:
        words = shlex.split(command)
        stdin = None
        if "<" in words:
            stdin = "Doc-Pw-" + words[-1] + "\n"
            words = words[: words.index("<")]
        assert words[:2] == ["fwrest", words[1]] and words[2] == "service.ini", command
        result = run_forked(*words[1:], cwd=config.parent, stdin=stdin)
        assert result.returncode == 0, (command, result.stderr)
        got = (result.stderr + result.stdout).splitlines()
        assert len(got) == len(expected), (command, got)
        for want, line in zip(expected, got, strict=True):
            pattern = ".*".join(re.escape(part) for part in want.split("..."))
            assert re.fullmatch(pattern, line), (command, want, line)


def test_the_administration_pages_transcripts(tmp_path: Path, certs: dict[str, Path]) -> None:
    ada = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash("Ada-Pw-1")
    users = [{"username": "ada", "password": ada, "scopes": ["orders:read"]}]
    shop = {"client_id": "web", "client_secret": "Web-Secret-9q", "users": users}
    (tmp_path / "params.json").write_text(json.dumps(shop))
    servers = {"SHOP": oauth_section(certs, onAuthparams="file:params.json")}
    config = free_config(tmp_path, servers=servers, extra={"HTTPSERVER": {"StateStore": "sqlite"}},
                         fmt="ini")  # fmt: skip
    transcript(example("administration-users"), config)
    transcript(example("administration-clients"), config)
    store = open_store("sqlite", load_config(config).data_path)
    for key in ("shop|user:grace", "shop|ip:203.0.113.9"):
        for _ in range(5):
            store.hit_failure(key, 300)
        store.add_lock(key, time.time() + 300)
    store.close()
    (tmp_path / "server.log").touch()  # the service's LogFile, where the audit lines go
    transcript(example("administration-lockouts"), config)
    assert "lockout.clear actor='cli' client=- port=SHOP" in (tmp_path / "server.log").read_text()
    # at the level in force for the service: its run-time value in the store (0: no line)
    with contextlib.closing(open_store("sqlite", load_config(config).data_path)) as store:
        store.set_settings({"rest_log_level": 0})
        store.add_lock("shop|user:grace", time.time() + 300)
    before = (tmp_path / "server.log").read_text()
    assert run_forked("lockouts", str(config), "clear", cwd=tmp_path).returncode == 0
    assert (tmp_path / "server.log").read_text() == before


def test_a_basic_lock_out_is_lifted_on_every_worker(served: tuple[ServerProcess, Path]) -> None:
    proc, config = served
    url = proc.url("BAS") + "/hello"

    def status(password: str, source: str = "127.0.0.1") -> int:
        transport = httpx.HTTPTransport(local_address=source)  # a new connection each time
        with httpx.Client(transport=transport, timeout=15) as http:
            return http.get(url, auth=("bob", password)).status_code

    assert [status("wrong", "127.0.0.3") for _ in range(4)][-1] == 429
    assert status("Bob-Pw-2") == 429

    def listed() -> bool:  # the store's copy is written behind the 429 (CI saw it not yet there)
        return len(done(config, "lockouts", "list").stdout.splitlines()) == 3

    wait_for(listed, 10, "both lock-outs in the store's list")
    cleared = fwrest(config, "lockouts", "clear", "bob")
    assert cleared.stdout.splitlines() == lifted("[BAS] ip 127.0.0.3", "[BAS] user bob")
    wait_for(lambda: status("Bob-Pw-2") != 429, 10, "the lock-out lifted", interval=0.2)
    time.sleep(1)  # every worker's refresh has passed: none refuses any more
    assert [status("Bob-Pw-2") for _ in range(8)] == [200] * 8
