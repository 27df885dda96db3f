"""Every server the bench starts answers its check request: the ceiling (a bare PortHandler), nginx
(case 11), granian's RSGI apps (1, 2), fwrest with SPEC 10's features (10, 11). A failed check is a
FAILED row: this keeps ``make bench`` from a table of failures. Needs wrk and nginx (``.ci/run``).
"""

from __future__ import annotations

import contextlib
import http.client
from pathlib import Path

import orjson
import pytest

from bench import servers
from bench.apps import common
from bench.run import Scratch, Settings, Target, ceiling, fw, granian, measure_throughput, nginx

GZ = {"Accept-Encoding": "gzip"}


def test_ceiling_nginx_and_a_featured_fwrest_answer_their_checks(tmp_path: Path) -> None:
    sc = Scratch(tmp_path)
    s = Settings(warmup_s=1.0, duration_s=1.0, runs=1, quick=True)
    file_path = f"/rest/{common.STATIC_NAME}"
    targets = [
        Target("ceiling", "ceiling", ceiling(sc, "open")),
        Target("featured", "fwrest", fw(sc, features=True)),
        Target("fw gzip", "fwrest", fw(sc, features=True), path="/rest/big", headers=GZ,
               expect="gzip", expect_key="items"),
        Target("nginx gzip", "peer", nginx(sc), path="/rest/big.json", headers=GZ,
               expect="gzip", expect_key="items"),
        Target("fw file", "fwrest", fw(sc, features=True), path=file_path, expect="static"),
        Target("nginx file", "peer", nginx(sc), path=file_path, expect="static"),
        Target("rsgi", "peer", granian(sc, "rsgi_raw:open_app", interface="rsgi")),
        Target("rsgi basic", "peer", granian(sc, "rsgi_raw:basic_app", interface="rsgi"),
               auth="basic"),
    ]  # fmt: skip
    rows, _ = measure_throughput(targets, s, sc)
    failed = {row["server"]: row["error"] for row in rows if row.get("error")}
    assert failed == {}
    for row in rows:
        assert row["rps"] > 0, row["server"]
        assert row["errors"] == 0, row["server"]


@pytest.mark.parametrize("wrong", ["gzip", "static"])
def test_a_check_that_does_not_hold_fails_the_row(tmp_path: Path, wrong: str) -> None:
    sc = Scratch(tmp_path)
    s = Settings(warmup_s=1.0, duration_s=1.0, runs=1, quick=True)
    # the hello answer is neither gzip nor case 11's file
    rows, _ = measure_throughput([Target("plain", "fwrest", fw(sc), expect=wrong)], s, sc)
    assert "check request got 200" in rows[0]["error"]


def test_the_rsgi_apps_answer_the_raw_asgi_apps_bytes(tmp_path: Path) -> None:
    """The raw ASGI rows' bytes and type, to compare; Basic refuses without credentials."""
    hello = orjson.dumps(common.hello())
    for job, answers in [
        ("open", [({}, 200, hello)]),
        ("basic", [({}, 401, b'{"error":"unauthorized"}'),
                   ({"Authorization": common.BASIC_HEADER}, 200, hello)]),
    ]:  # fmt: skip
        running = servers.start_granian(
            tmp_path / job, f"bench.apps.rsgi_raw:{job}_app", interface="rsgi", cpus=None
        )
        try:
            for headers, status, body in answers:
                host, port = running.base_url.removeprefix("http://").split(":")
                with contextlib.closing(
                    http.client.HTTPConnection(host, int(port), timeout=10)
                ) as conn:
                    conn.request("GET", "/rest/hello", headers=headers)
                    resp = conn.getresponse()
                    got = (resp.status, resp.getheader("content-type"), resp.read())
                assert got == (status, "application/json", body), (job, headers)
        finally:
            running.stop()
