"""Rate limits (SPEC 13.7) on a real process and Redis: Redis stopped, ``FailOpen=1`` serves with one
warning for the outage, ``FailOpen=0`` answers 503 with the standard body (one count across hosts
and workers: tests/e2e/test_hosts_state.py). No redis-server: a failure, never a skip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.auth.oauth2_support import PID_APP
from tests.conftest import free_config
from tests.e2e.support import hosts_serving, redis_or_none

WARNING = "rate limit [RL_OPEN]: state store unavailable"


def _host(folder: Path, redis_url: str, **sections: dict[str, Any]) -> Path:
    folder.mkdir()
    return free_config(
        folder,
        app=PID_APP,  # /hello answers the worker's pid
        servers={"HTTP_REST": {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT, CLOSED"}},
        extra={
            "HTTPSERVER": {"StateStore": redis_url},
            "ROOT": {"RateLimit": "RL_OPEN"},
            "CLOSED": {"Path": "/closed", "ThreadPool": "POOL", "RateLimit": "RL_CLOSED"},
            **sections,
        },
    )


def test_redis_stopped_fails_open_with_one_warning_or_closed_with_503(tmp_path: Path) -> None:
    limits = {"RL_OPEN": {"Limit": 1000}, "RL_CLOSED": {"Limit": 1000, "FailOpen": 0}}
    with redis_or_none(tmp_path) as redis:
        assert redis is not None
        with hosts_serving([(_host(tmp_path / "a", redis.url, **limits), 1)]) as (host,):
            base = f"http://127.0.0.1:{host.ports['HTTP_REST']}"
            with httpx.Client(base_url=base, timeout=10) as client:
                counted = client.get("/rest/hello")
                assert counted.status_code == 200
                assert counted.headers["ratelimit"].startswith('"RL_OPEN";r=999;t=')
                assert client.get("/closed/hello").status_code == 200
                redis.stop()
                served = [client.get("/rest/hello") for _ in range(20)]
                assert [a.status_code for a in served] == [200] * 20
                assert all(a.headers["ratelimit-policy"] == '"RL_OPEN";q=1000;w=60' for a in served)
                # not counted: the whole quota (SPEC 13.7, both headers on every answer)
                assert all(a.headers["ratelimit"] == '"RL_OPEN";r=1000;t=60' for a in served)
                closed = [client.get("/closed/hello") for _ in range(3)]
                assert [a.status_code for a in closed] == [503] * 3
                assert closed[0].json() == {
                    "code": 503,
                    "detailedMessage": "the state store is unavailable",
                    "message": "Service Unavailable",
                }
                assert closed[0].headers["retry-after"] == "1"
            log = host.log()
            assert log.count(WARNING) == 1, log
            assert "rate limit [RL_CLOSED]: state store unavailable" in log
