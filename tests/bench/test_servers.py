"""Every kind of server the bench starts answers its check request as the runs send it: the
ceiling (fwrest's engine behind a bare PortHandler), nginx (case 11) and fwrest with SPEC 10's
location features (cases 10 and 11). A server that fails its check is a FAILED row in the
results, so this is what keeps ``make bench`` from printing a table of failures. Needs wrk and
Debian's nginx (``.ci/run`` installs both).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.apps import common
from bench.run import Scratch, Settings, Target, ceiling, fw, measure_throughput, nginx

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
