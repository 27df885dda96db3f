"""The audit trail (SPEC 13.5) in process: ``GET /fw/rest/audit``, its readers, filters and bad
queries, the events of a settings change (API and page) and a lock-out, changes at once through two
workers in the store's order, and the ``fwrest.audit`` line at ``rest_log_level=1`` (none at 0, the
event kept; the changes to 0 and back in it). One sqlite store all clients share (each a worker):
``HTTP_ADMIN`` (``onAdmin`` ada only, ``maxFailures`` 3), ``HTTP_USERS`` (no ``onAdmin``: any user
reads), ``HTTP_PUBLIC`` (opened by ``NativeRoutes.public``), ``HTTP_OPEN`` (no scheme: nobody
reads). Elsewhere: tests/auth/test_revocation.py, tests/e2e/test_audit_hosts.py,
tests/faults/test_canary.py."""

from __future__ import annotations

import json
import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fwrest import log
from fwrest.store.audit import AuditEvent, AuditLog
from fwrest.testing import Client
from tests.conftest import APP_SOURCE, local_port
from tests.docs.blocks import example
from tests.native.support import (
    ADA,
    ADMIN_AUTH_SOURCE,
    BOB,
    FileLog,
    auth_service,
    basic,
    form_token,
    get_settings,
    in_process,
    post_form,
    post_settings,
    wait_for,
)

AUDIT = "/fw/rest/audit"
PORTS = ("HTTP_ADMIN", "HTTP_USERS", "HTTP_PUBLIC", "HTTP_OPEN")
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _basic(**auth: Any) -> dict[str, Any]:
    authorization = {"scheme": "basic", "OnAuth": "audit_route_auth.check", **auth}
    return local_port(FwData={"Authorization": authorization})


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("audit_route")
    public = _basic()
    public["FwData"]["NativeRoutes"] = {"public": ["rest/audit"]}
    servers = {
        "HTTP_ADMIN": _basic(onAdmin="audit_route_auth.admin", maxFailures=3),
        "HTTP_USERS": _basic(),
        "HTTP_PUBLIC": public,
        "HTTP_OPEN": local_port(),
    }
    return auth_service(
        folder,
        "audit_route",
        ADMIN_AUTH_SOURCE,
        servers=servers,
        app=APP_SOURCE,
        extra={"HTTPSERVER": {"StateStore": "sqlite"}},
        general={"rest_log_level": 1},  # errors only: the audit lines are written all the same
    )


@pytest.fixture(scope="module")
def admin(clients: dict[str, Client]) -> Client:
    return clients["HTTP_ADMIN"]


def trail(client: Client, query: str = "", headers: dict[str, str] = ADA) -> list[dict[str, Any]]:
    answer = client.get(f"{AUDIT}{query}", headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-store"
    events: list[dict[str, Any]] = answer.json()
    return events


def wait_event(client: Client, query: str, found: Any, what: str) -> dict[str, Any]:
    """The newest ``query`` event where ``found`` holds, waited for (written off the request)."""
    seen: list[dict[str, Any]] = []

    def kept() -> bool:
        seen[:] = [e for e in trail(client, query) if found(e)]
        return bool(seen)

    wait_for(kept, 15, what)
    return seen[0]


def wait_change(admin: Client, key: str, query: str = "", **details: Any) -> dict[str, Any]:
    """The newest ``settings.change`` event of ``key`` whose details hold ``details``."""

    def found(event: dict[str, Any]) -> bool:
        got = event["details"]
        return got["key"] == key and all(got[name] == value for name, value in details.items())

    what = f"the change of {key} ({details}) in the trail"
    return wait_event(admin, f"?event=settings.change{query}", found, what)


def test_a_settings_change_through_the_json_api_is_an_event(admin: Client) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    assert post_settings(admin, {"rest_trace_time": 2}, headers=ADA).status_code == 200
    event = wait_change(admin, "rest_trace_time", new=2)
    assert set(event) == {"ts", "event", "actor", "client", "port", "details"}
    assert event["event"] == "settings.change"
    assert (event["actor"], event["client"], event["port"]) == ("ada", "127.0.0.1", "HTTP_ADMIN")
    assert event["details"] == dict(key="rest_trace_time", old=0, new=2, runtime=2, via="api")
    assert ISO.fullmatch(event["ts"]), event["ts"]
    when = datetime.fromisoformat(event["ts"])
    assert before <= when <= datetime.now(UTC), event["ts"]
    # null clears the run-time value: the value in force is the file's (here the default)
    assert post_settings(admin, {"rest_trace_time": None}, headers=ADA).status_code == 200
    cleared = wait_change(admin, "rest_trace_time", runtime=None)
    assert (cleared["details"]["old"], cleared["details"]["new"]) == (2, 0)


def test_a_change_on_the_page_is_an_event_of_the_page(admin: Client) -> None:
    fields = {"fw_csrf": form_token(admin, headers=ADA), "rest_log_stringsize": "321"}
    answer = post_form(admin, fields, headers=ADA)
    assert answer.status_code == 200 and "Saved" in answer.text, answer.text[:500]
    event = wait_change(admin, "rest_log_stringsize")
    assert event["details"] == dict(
        key="rest_log_stringsize", old=200, new=321, runtime=321, via="page"
    )
    assert event["actor"] == "ada"


def test_a_value_set_to_what_it_was_is_no_event(admin: Client) -> None:
    """SPEC 13.5 audits changes: a key set to the value it had (4 -> 4), or cleared when it
    had no run-time value, writes no event (it wrote one). A key given in capitals is named
    in lower case (SPEC 9)."""
    before = datetime.now(UTC) - timedelta(seconds=1)
    first = post_settings(admin, {"REST_LOG_STRINGSIZE": 333}, headers=ADA)
    assert first.status_code == 200 and first.json()["changed"] == ["rest_log_stringsize"]
    wait_change(admin, "rest_log_stringsize", new=333)
    again = post_settings(admin, {"rest_log_stringsize": 333, "rest_error_full": None}, headers=ADA)
    assert again.status_code == 200, again.text
    assert again.json()["changed"] == []
    assert again.json()["settings"]["rest_log_stringsize"]["runtime"] == 333
    fields = {"fw_csrf": form_token(admin, headers=ADA), "rest_log_stringsize": "333"}
    page = post_form(admin, fields, headers=ADA)
    assert page.status_code == 200 and "Nothing changed" in page.text, page.text[:500]
    # a change after them, its event waited for: the events are written in order
    assert post_settings(admin, {"rest_reload_time": 62}, headers=ADA).status_code == 200
    wait_change(admin, "rest_reload_time", new=62)
    events = [
        e
        for e in trail(admin, "?event=settings.change&limit=50")
        if datetime.fromisoformat(e["ts"]) >= before
    ]
    keys = [(e["details"]["key"], e["details"]["new"]) for e in events]
    assert keys.count(("rest_log_stringsize", 333)) == 1, keys
    assert not [k for k in keys if k[0] == "rest_error_full"], keys
    for cleared in ("rest_log_stringsize", "rest_reload_time"):
        assert post_settings(admin, {cleared: None}, headers=ADA).status_code == 200


def test_the_documented_answer_and_line_are_what_the_service_gives(
    admin: Client, file_log: FileLog
) -> None:
    """docs/operations.md's answer and log line of a settings change, against real ones."""
    mark = len(file_log.log())
    assert post_settings(admin, {"rest_log_level": 5}, headers=ADA).status_code == 200
    assert post_settings(admin, {"rest_log_level": None}, headers=ADA).status_code == 200
    found = wait_change(admin, "rest_log_level", "&limit=2", new=5)
    documented = json.loads(example("operations-audit-answer").text)[0]
    assert set(documented) == set(found)
    assert set(documented["details"]) == set(found["details"])
    shape = {k: type(v) for k, v in documented["details"].items()}
    assert shape == {k: type(v) for k, v in found["details"].items()}
    assert (documented["event"], documented["details"]["via"]) == ("settings.change", "api")
    assert ISO.fullmatch(documented["ts"])

    def line_shape(line: str) -> str:
        line = re.sub(r"^\S+Z", "TS", line)
        line = re.sub(r"\[\w+\]", "[W]", line)
        line = re.sub(r"client=\S+ port=\S+", "client=C port=P", line)
        line = re.sub(r"request_id=\S+", "request_id=R", line)
        return re.sub(r"\d+", "N", line)

    text = file_log.wait_log('"key":"rest_log_level","old":1,"new":5', since=mark)
    written = next(x for x in text.splitlines() if '"old":1,"new":5' in x)
    documented_line = example("operations-audit-line").text.strip()
    assert (
        line_shape(documented_line).replace("request_id=R", "").rstrip()
        == line_shape(written).replace("request_id=R", "").rstrip()
    )


def test_the_audit_line_is_written_at_every_level_above_0(admin: Client, file_log: FileLog) -> None:
    mark = len(file_log.log())
    assert admin.get("/hello", headers=ADA).status_code == 200  # an INFO access line: not at 1
    assert post_settings(admin, {"rest_reload_time": 61}, headers=ADA).status_code == 200
    text = file_log.wait_log("settings.change actor='ada'", since=mark)
    line = next(x for x in text.splitlines() if "rest_reload_time" in x and "fwrest.audit" in x)
    assert " INFO fwrest.audit " in line
    assert "client=127.0.0.1 port=HTTP_ADMIN" in line
    assert '"key":"rest_reload_time","old":60,"new":61' in line
    assert "GET /rest/hello" not in text
    # the change that turns the log off is in it (at the level before it), as is the one that
    # turns it on (at the level after it); at 0 the log is off, the audit line too, the event
    # kept all the same
    assert post_settings(admin, {"rest_log_level": 0}, headers=ADA).status_code == 200
    wait_change(admin, "rest_log_level", new=0)
    assert post_settings(admin, {"rest_reload_time": 63}, headers=ADA).status_code == 200
    wait_change(admin, "rest_reload_time", new=63)
    cleared = {"rest_log_level": None, "rest_reload_time": None}
    assert post_settings(admin, cleared, headers=ADA).status_code == 200
    text = file_log.wait_log('"key":"rest_log_level","old":0,"new":1', since=mark)
    assert '"key":"rest_log_level","old":1,"new":0,"runtime":0' in text
    assert '"new":63' not in text and '"key":"rest_reload_time","old":63,"new":60' in text


def test_only_users_onadmin_allows_read_the_trail(clients: dict[str, Client]) -> None:
    admin = clients["HTTP_ADMIN"]
    assert admin.get(AUDIT, headers=ADA).status_code == 200
    refused = admin.get(AUDIT, headers=BOB)
    assert refused.status_code == 403, refused.text
    assert "onAdmin" in refused.json()["detailedMessage"]
    assert admin.get(AUDIT).status_code == 401  # behind the port's scheme
    # no onAdmin: every authenticated user
    users = clients["HTTP_USERS"]
    assert users.get(AUDIT, headers=BOB).status_code == 200
    assert users.get(AUDIT, headers=basic("bob", "wrong")).status_code == 403  # OnAuth says no
    # a port without a scheme: no one
    opened = clients["HTTP_OPEN"].get(AUDIT)
    assert opened.status_code == 403, opened.text
    assert "without an authorization scheme" in opened.json()["detailedMessage"]
    # opened by NativeRoutes.public: no user, no one to allow
    public = clients["HTTP_PUBLIC"].get(AUDIT)
    assert public.status_code == 403, public.text
    assert "authenticated user" in public.json()["detailedMessage"]


def test_the_trail_is_newest_first_and_filtered(admin: Client) -> None:
    for size in (401, 402, 403):
        assert post_settings(admin, {"rest_log_stringsize": size}, headers=ADA).status_code == 200
    # each event is written by a task of its own: all three, in whatever order they arrive
    wait_for(
        lambda: (
            {401, 402, 403} <= {e["details"]["new"] for e in trail(admin, "?event=settings.change")}
        ),
        15,
        "the three changes in the trail",
    )
    changes = trail(admin, "?event=settings.change&limit=3")
    assert [e["details"]["new"] for e in changes] == [403, 402, 401]
    assert [e["details"]["new"] for e in trail(admin, "?event=settings.change&limit=1")] == [403]
    stamps = [e["ts"] for e in trail(admin)]
    assert stamps == sorted(stamps, reverse=True) and len(stamps) >= 3
    since = changes[1]["ts"]  # an event's own time: it and the newer ones
    newer = trail(admin, f"?since={since}&event=settings.change")
    assert [e["details"]["new"] for e in newer] == [403, 402]
    # an offset, its "+" sent raw (a query's blank) or encoded; a date alone; no offset: UTC
    later = (datetime.now(UTC) + timedelta(hours=1)).astimezone(timezone(timedelta(hours=1)))
    for form in (later.isoformat(), later.isoformat().replace("+", "%2B")):
        assert trail(admin, f"?since={form}") == []
    assert trail(admin, "?since=2000-01-01&limit=1") == trail(admin, "?limit=1")
    naive = (datetime.now(UTC) + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%S")
    assert trail(admin, f"?since={naive}") == []
    assert trail(admin, "?event=keys.rotate") == []  # a known event none made


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?since=yesterday", "since must be an ISO 8601 date or date-time"),
        ("?since=1700000000", "since must be an ISO 8601 date or date-time"),
        ("?limit=0", "limit must be a whole number in 1-10000"),
        ("?limit=10001", "limit must be a whole number in 1-10000"),
        ("?limit=-5", "limit must be a whole number in 1-10000"),
        ("?limit=ten", "limit must be a whole number in 1-10000"),
        ("?limit=", "limit must be a whole number in 1-10000"),
        ("?event=settings", "event must be one of settings.change, reload, lockout"),
        ("?evnt=reload", "'evnt' is not a parameter of the audit trail"),
        ("?limit=1&limit=2", "limit is given twice"),
    ],
)
def test_a_bad_query_is_400_saying_what_is_expected(
    admin: Client, query: str, message: str
) -> None:
    answer = admin.get(f"{AUDIT}{query}", headers=ADA)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["detailedMessage"], answer.json()


def test_a_lockout_is_an_event(config: Path, admin: Client) -> None:
    """Three wrong passwords of ``Eve`` from 10.9.8.7 lock user and address; ada reads the event."""
    with Client(config, server="HTTP_ADMIN", client_address="10.9.8.7") as attacker:
        answers = [
            attacker.get("/rest/hello", headers=basic("Eve", f"guess-{i}")).status_code
            for i in range(4)
        ]
    assert answers == [403, 403, 403, 429], answers
    event = wait_event(
        admin, "?event=lockout", lambda e: e["client"] == "10.9.8.7", "the lock-out in the trail"
    )
    assert (event["actor"], event["port"]) == ("eve", "HTTP_ADMIN")
    assert event["details"]["locked"] == ["user", "address"]
    assert event["details"]["user"] == "eve" and event["details"]["address"] == "10.9.8.7"
    assert event["details"]["failures"] == 3 and 0 < event["details"]["seconds"] <= 300
    assert "guess-" not in json.dumps(trail(admin))  # never a password


def test_an_audit_record_in_json_lines_has_the_event_s_fields() -> None:
    """``LogFormat=json`` (SPEC 13.4): the event's fields beside the log's own."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(log.JsonFormatter().format(record))

    handler = Keep()
    log.audit_log.addHandler(handler)
    level = log.audit_log.level
    log.audit_log.setLevel(logging.INFO)
    try:
        event = AuditEvent("reload", "signal", details={"outcome": "done", "generation": 2})
        AuditLog(None).record(event)
    finally:
        log.audit_log.removeHandler(handler)
        log.audit_log.setLevel(level)
    line = json.loads(records[0])
    assert line["logger"] == "fwrest.audit" and line["level"] == "INFO"
    assert line["event"] == "reload" and line["actor"] == "signal"
    assert line["client"] is None and line["port"] is None
    assert line["details"] == {"outcome": "done", "generation": 2}
    assert line["message"].startswith("reload actor='signal' client=- port=-")


def test_the_route_is_listed_and_named(admin: Client) -> None:
    listing = admin.get("/fw/rest/list/service", headers=ADA).json()
    entry = next(e for e in listing if e["endpoint"] == AUDIT)
    assert entry["type"] == "fw" and [m["method"] for m in entry["methods"]] == ["GET"]
    assert "onAdmin" in entry["methods"][0]["description"]


def test_disable_takes_the_route_away(tmp_path: Path) -> None:
    server = _basic()
    server["FwData"]["NativeRoutes"] = {"disable": ["rest/audit"]}
    servers = {"HTTP_REST": server}
    config = auth_service(
        tmp_path, "audit_disabled", ADMIN_AUTH_SOURCE, servers=servers, app=APP_SOURCE
    )
    text = config.read_text().replace("audit_route_auth.check", "audit_disabled_auth.check")
    config.write_text(text)
    with in_process(config, "HTTP_REST") as client:
        assert client.get(AUDIT, headers=ADA).status_code == 404


def test_changes_at_once_through_two_workers_list_in_the_order_the_store_applied_them(
    config: Path, admin: Client
) -> None:
    """SPEC 13.5: 20 changes of one key at once through two workers are listed in the store's order,
    each ``old`` the previous ``new``, the newest in force on both."""
    values = [2000 + i for i in range(20)]
    with in_process(config, "HTTP_ADMIN") as second:
        workers = (admin, second)
        barrier = threading.Barrier(len(values), timeout=15)

        def change(i: int) -> int:
            barrier.wait()
            changes = {"rest_log_stringsize": values[i]}
            return post_settings(workers[i % 2], changes, headers=ADA).status_code

        with ThreadPoolExecutor(max_workers=len(values)) as pool:
            assert list(pool.map(change, range(len(values)))) == [200] * len(values)
        listed: list[dict[str, Any]] = []

        def all_kept() -> bool:
            listed[:] = [
                e
                for e in trail(admin, "?event=settings.change&limit=200")
                if e["details"]["key"] == "rest_log_stringsize" and e["details"]["new"] in values
            ]
            return len(listed) == len(values)

        wait_for(all_kept, 15, "every change in the trail")
        olds, news = [e["details"]["old"] for e in listed], [e["details"]["new"] for e in listed]
        assert sorted(news) == values and olds[:-1] == news[1:], list(zip(olds, news, strict=True))
        for worker in workers:
            wait_for(
                lambda w=worker: (
                    get_settings(w, headers=ADA)["rest_log_stringsize"]["effective"] == news[0]
                ),
                15,
                f"the newest change listed ({news[0]}) in force",
            )
        assert post_settings(admin, {"rest_log_stringsize": None}, headers=ADA).status_code == 200
