"""``LogFormat=json`` on ``fwrest serve --workers 2`` (SPEC 13.4): after a thousand mixed requests
(200, 404, 405, 500 with a traceback, ``logging`` from a handler, acceptable and hostile
``X-Request-ID``, secret-like queries), every line on stderr and in ``LogFile`` is one JSON object;
access records have the listed fields and the answer's id, as do the records a request caused; the
engine's refusals carry an id too."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import APP_SOURCE, ServerProcess, free_config
from tests.server.rawhttp import ENGINE_REFUSALS, refusal_head

APP = (
    APP_SOURCE
    + """

import logging

_log = logging.getLogger("shop.orders")


@get("/logs/:n")
def logs(n):
    _log.warning("order %s looked at", n)
    return {"n": n}


@get("/alogs/:n")
async def alogs(n):
    _log.info("async order %s", n)
    return {"n": n}
"""
)
# the requests, in turn: (method, path under /rest, {i} the request's number)
MIX = [
    ("GET", "/hello?page={i}&password=pw-{i}"),
    ("GET", "/items/{i}"),
    ("GET", "/nowhere/{i}"),
    ("DELETE", "/hello"),
    ("GET", "/boom"),
    ("GET", "/logs/{i}"),
    ("GET", "/alogs/{i}"),
    ("POST", "/echo"),
    ("GET", "/hello?page={i}&password=pw-{i}"),
    ("GET", "/text"),
]
FIELDS = {"port", "method", "route", "path", "status", "duration_us", "user", "client"}
BASE = {"ts", "level", "logger", "worker", "message"}
HOSTILE = [b"bad id", b"x" * 200, "caf\u00e9-id".encode(), b"a\tb", b"semi;colon"]


def test_every_line_is_json_and_request_records_carry_their_fields(tmp_path: Path) -> None:
    config = free_config(
        tmp_path,
        app=APP,
        general={"rest_error_full": 1},
        extra={"HTTPSERVER": {"LogFormat": "json", "StateStore": "sqlite"}},
    )
    proc = ServerProcess(config, workers=2).wait_ready()
    sent: list[tuple[str, str, int, str, str | None]] = []  # method, path, status, id, carried
    try:
        base = proc.url()
        with httpx.Client(base_url=base, timeout=15) as http:
            for i in range(1000):
                headers: dict[str, str | bytes] = {}
                carried = None
                if i % 7 == 0:
                    carried = f"client-{i}:try.1_x"
                    headers["X-Request-ID"] = carried
                elif i % 11 == 0:
                    headers["X-Request-ID"] = HOSTILE[i % len(HOSTILE)]
                method, path = MIX[i % len(MIX)]
                path = path.format(i=i)
                r = http.request(method, f"{base}{path}", headers=headers, json={"i": i})
                rid = r.headers["x-request-id"]
                if carried is not None:
                    assert rid == carried
                else:
                    assert re.fullmatch(r"[0-9a-f]{32}", rid), rid
                sent.append((method, "/rest" + path.split("?", 1)[0], r.status_code, rid, carried))
        refused = []  # (status, id) of what the engine answers itself
        for name, request, status, carried in ENGINE_REFUSALS:
            got, headers = refusal_head(proc.ports["HTTP_REST"], request)
            assert got == status, name
            rid = headers["x-request-id"]
            assert rid == carried if carried is not None else re.fullmatch(r"[0-9a-f]{32}", rid)
            refused.append((status, rid))
    finally:
        assert proc.stop() == 0
    statuses = Counter(status for _m, _p, status, _r, _c in sent)
    print(f"sent {len(sent)} requests: {dict(statuses)}")
    assert {200, 404, 405, 500} <= set(statuses)

    records: list[dict[str, Any]] = []
    for where, text in (("stderr", proc.log()), ("LogFile", proc.file_log())):
        lines = text.splitlines()
        assert len(lines) > 1000, (where, len(lines))
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                raise AssertionError(f"{where}: not a JSON line: {line[:300]!r}") from None
            assert isinstance(record, dict) and set(record) >= BASE, (where, line)
            if where == "LogFile":
                records.append(record)
    print(f"{len(records)} records in LogFile: {dict(Counter(r['logger'] for r in records))}")

    access = {r["request_id"]: r for r in records if r["logger"] == "fwrest.access" and "port" in r}
    for status, rid in refused:  # the engine's record: its id, no request fields
        (record,) = [r for r in records if r.get("request_id") == rid]
        assert record["logger"] == "fwrest.access" and not FIELDS & set(record)
        assert f" {status} protocol error (" in record["message"], record
    by_id: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if "request_id" in record:
            by_id.setdefault(record["request_id"], []).append(record)
    for method, path, status, rid, _carried in sent:
        record = access[rid]
        assert FIELDS | BASE | {"request_id"} == set(record), record
        assert (record["method"], record["path"], record["status"]) == (method, path, status)
        assert isinstance(record["duration_us"], int) and record["duration_us"] >= 0
        assert isinstance(record["port"], int) and record["client"] == "127.0.0.1"
        assert record["user"] is None
        assert record["level"] == ("ERROR" if status >= 500 else "INFO")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["ts"])
        if status == 404:
            assert record["route"] is None
        elif path.startswith("/rest/items/"):
            assert record["route"] == "/rest/items/:id"
        own = [r for r in by_id[rid] if r is not record]
        if path.startswith("/rest/logs/"):
            assert [r["message"] for r in own] == [f"order {path.rsplit('/', 1)[1]} looked at"]
            assert own[0]["logger"] == "shop.orders" and not FIELDS & set(own[0])
        if path.startswith("/rest/alogs/"):  # an async handler's, on the loop
            assert [r["message"] for r in own] == [f"async order {path.rsplit('/', 1)[1]}"]
        if path == "/rest/boom":
            (failure,) = own
            assert "unhandled exception in the handler" in failure["message"]
            assert "Traceback (most recent call last)" in failure["exception"]
            assert "RuntimeError: kaboom-secret-detail" in failure["exception"]
    # the query's secrets are redacted in the message as in the text lines
    text = "\n".join(json.dumps(r) for r in records)
    assert "pw-1" not in text and "password=***" in text
    for hostile in HOSTILE:
        assert hostile.decode("latin-1") not in text and hostile.decode() not in text
    assert len(access) == len(sent)
