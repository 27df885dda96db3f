"""The audit trail (SPEC 13.5) shared by two hosts on one real ``redis-server`` (A: two workers, B:
one). A settings change through A is listed by B (user, address, port, key, old and new values); B's
reload by SIGHUP is listed by A (actor ``signal``, ``done``, the generation; a broken config:
``failed``); A's file changed on disk: one event, actor ``file``; changes in a row and at once
through both hosts are listed in the store's order, each ``old`` the previous ``new``. No
redis-server: a failure, never a skip."""

from __future__ import annotations

import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ServerProcess, free_config, free_port, wait_for
from tests.e2e.support import hosts_serving, redis_or_none

AUTH = """
USERS = {"ada": "Ada-Pw-6402"}


def check(user, password):
    return USERS.get(user) == password
"""
ADA = ("ada", "Ada-Pw-6402")
HANG_GUARD_S = 10.0


def _host(folder: Path, redis_url: str) -> Path:
    folder.mkdir()
    (folder / "audit_auth.py").write_text(AUTH)
    authorization = {"scheme": "basic", "OnAuth": "audit_auth.check"}
    server = {
        "HostName": "127.0.0.1",
        "Port": free_port(),
        "Locations": "ROOT",
        "FwData": {"Authorization": authorization},
    }
    return free_config(
        folder,
        servers={"HTTP_REST": server},
        extra={"HTTPSERVER": {"StateStore": redis_url}, "ENV": {"Repository": "app,audit_auth"}},
        general={"rest_reload_time": 1},
    )


def _trail(host: ServerProcess, query: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{host.url()}/fw/rest/audit{query}", auth=ADA, timeout=10)
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()
    return events


def _wait(host: ServerProcess, query: str, found: Any, what: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        events = [e for e in _trail(host, query) if found(e)]
        if events:
            return events
        assert time.monotonic() < deadline, f"{what}: not listed within {HANG_GUARD_S} s"
        time.sleep(0.1)


def test_two_hosts_on_one_redis_list_each_other_s_events(tmp_path: Path) -> None:
    with redis_or_none(tmp_path) as redis:
        assert redis is not None
        a_config, b_config = (_host(tmp_path / name, redis.url) for name in ("a", "b"))
        with hosts_serving([(a_config, 2), (b_config, 1)]) as (a, b):
            # a settings change on A, listed by B
            changed = httpx.post(
                f"{a.url()}/fw/rest/config", json={"rest_trace_time": 1}, auth=ADA, timeout=10
            )
            assert changed.status_code == 200, changed.text
            change = _wait(
                b,
                "?event=settings.change",
                lambda e: e["details"]["key"] == "rest_trace_time",
                "host A's settings change on host B",
            )[0]
            assert (change["actor"], change["client"], change["port"]) == (
                "ada",
                "127.0.0.1",
                "HTTP_REST",
            )
            assert (change["details"]["old"], change["details"]["new"]) == (0, 1)
            assert change["details"]["via"] == "api"

            # a reload of B, listed by A
            mark = len(b.stdout_lines)
            b.signal(signal.SIGHUP)
            reload = _wait(a, "?event=reload", lambda e: True, "host B's reload on host A")[0]
            assert any("reloaded: generation 2" in line for line in b.stdout_lines[mark:])
            assert (reload["actor"], reload["client"], reload["port"]) == ("signal", None, None)
            assert reload["details"]["outcome"] == "done" and reload["details"]["generation"] == 2
            assert reload["details"]["workers"] == 1
            # a reload that fails (B's config broken) is an event too; B goes on serving
            good = b_config.read_text()
            b_config.write_text(good.replace('"Servers"', '"Servers": 1, "Broken"', 1)[:-2])
            b.signal(signal.SIGHUP)
            failed = _wait(
                a,
                "?event=reload",
                lambda e: e["details"]["outcome"] == "failed",
                "host B's failed reload on host A",
            )[0]
            assert failed["details"]["reason"] == "configuration error"
            b_config.write_text(good)

            # A's file changed: one event for the host, though both workers read the file
            sections = json.loads(a_config.read_text())
            sections["GENERAL"]["rest_log_stringsize"] = 222
            a_config.write_text(json.dumps(sections))
            _wait(
                b,
                "?event=settings.change",
                lambda e: e["details"].get("via") == "file",
                "host A's file change",
            )
            time.sleep(2.5)  # both workers re-read the file meanwhile (every second)
            from_file = [e for e in _trail(a, "?event=settings.change") if e["actor"] == "file"]
            assert len(from_file) == 1, from_file
            assert from_file[0]["details"]["key"] == "rest_log_stringsize"
            assert (from_file[0]["details"]["old"], from_file[0]["details"]["new"]) == (200, 222)
            assert from_file[0]["details"]["file"] == 222
            # the audit lines of host A's log, whatever worker wrote them
            assert "fwrest.audit" in a.log() and "settings.change actor='ada'" in a.log()
            assert "reload actor='signal'" in b.log()


def test_changes_in_a_row_through_two_hosts_record_the_value_the_store_held(tmp_path: Path) -> None:
    """SPEC 13.5: ``old`` is the value the store holds, never a worker's or host's stale copy:
    changes in a row through A's two workers and B, each faster than a sync (0.5 s), chain 200 ->
    301 -> 302 -> ...; then 30 at once over both hosts are listed in the store's order, the newest
    in force."""
    with redis_or_none(tmp_path) as redis:
        assert redis is not None
        a_config, b_config = (_host(tmp_path / name, redis.url) for name in ("a", "b"))
        with hosts_serving([(a_config, 2), (b_config, 1)]) as (a, b):
            values = list(range(301, 309))
            for i, value in enumerate(values):
                host = (a, b)[i % 2]  # a new connection each: A's two workers take turns too
                changed = httpx.post(
                    f"{host.url()}/fw/rest/config",
                    json={"rest_log_stringsize": value},
                    auth=ADA,
                    timeout=10,
                )
                assert changed.status_code == 200, changed.text
            events = _wait(
                a,
                "?event=settings.change&limit=100",
                lambda e: (
                    e["details"]["key"] == "rest_log_stringsize"
                    and e["details"]["new"] == values[-1]
                ),
                "the last change",
            )
            chain = [
                (e["details"]["old"], e["details"]["new"])
                for e in reversed(_trail(a, "?event=settings.change&limit=100"))
                if e["details"]["key"] == "rest_log_stringsize"
            ]
            assert events and chain == list(zip([200, *values[:-1]], values, strict=True)), chain

            at_once = [1000 + i for i in range(30)]
            _change_at_once([(a, b)[i % 2] for i in range(len(at_once))], at_once)
            listed = _wait_all(b, at_once)
            olds, news = (
                [e["details"]["old"] for e in listed],
                [e["details"]["new"] for e in listed],
            )
            assert sorted(news) == at_once, news
            assert olds[:-1] == news[1:] and olds[-1] == values[-1], list(
                zip(olds, news, strict=True)
            )
            for host in (a, b):  # the newest event names the value in force on every host
                wait_for(
                    lambda h=host: _in_force(h) == news[0],
                    HANG_GUARD_S,
                    f"{host.url()} applies {news[0]}, the newest change listed",
                )


def _change_at_once(hosts: list[ServerProcess], values: list[int]) -> None:
    """``rest_log_stringsize`` set to each value through the host beside it, released at once."""
    barrier = threading.Barrier(len(values), timeout=HANG_GUARD_S)

    def change(i: int) -> int:
        with httpx.Client(timeout=HANG_GUARD_S) as http:
            barrier.wait()
            answer = http.post(
                f"{hosts[i].url()}/fw/rest/config",
                json={"rest_log_stringsize": values[i]},
                auth=ADA,
            )
        assert answer.status_code == 200, answer.text
        return values[i]

    with ThreadPoolExecutor(max_workers=len(values)) as pool:
        assert sorted(pool.map(change, range(len(values)))) == sorted(values)


def _wait_all(host: ServerProcess, values: list[int]) -> list[dict[str, Any]]:
    """The ``settings.change`` events to ``values``, newest first, once all are listed."""
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        listed = [
            e
            for e in _trail(host, "?event=settings.change&limit=200")
            if e["details"]["key"] == "rest_log_stringsize" and e["details"]["new"] in values
        ]
        if len(listed) >= len(values):
            return listed
        assert time.monotonic() < deadline, f"{len(listed)} of {len(values)} changes listed"
        time.sleep(0.1)


def _in_force(host: ServerProcess) -> Any:
    answer = httpx.get(
        f"{host.url()}/fw/rest/config",
        headers={"Accept": "application/json"},
        auth=ADA,
        timeout=HANG_GUARD_S,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["settings"]["rest_log_stringsize"]["effective"]
