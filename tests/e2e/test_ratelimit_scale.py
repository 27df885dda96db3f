"""Rate limits (SPEC 13.7) on real processes and Redis: two hosts of two workers on one Redis let
exactly 100 of a limit of 100 through, the rest 429, each host answering some of both; Redis
stopped, ``FailOpen=1`` serves with one warning for the outage, ``FailOpen=0`` answers 503 with the
standard body. No redis-server: a failure, never a skip."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.auth.oauth2_support import PID_APP
from tests.conftest import free_config
from tests.e2e.support import hosts_serving, redis_or_none

LIMIT = 100
REQUESTS = 260
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


def _get(url: str) -> httpx.Response:
    # a new connection per request: the host's workers take turns accepting them
    with httpx.Client(timeout=10) as client:
        return client.get(url, headers={"Connection": "close"})


def test_two_hosts_of_two_workers_share_one_count(tmp_path: Path) -> None:
    limits = {"RL_OPEN": {"Limit": LIMIT, "Key": "address"}, "RL_CLOSED": {"Limit": 1}}
    with redis_or_none(tmp_path) as redis:
        assert redis is not None
        configs = [(_host(tmp_path / name, redis.url, **limits), 2) for name in ("a", "b")]
        with hosts_serving(configs) as hosts:
            urls = [f"http://127.0.0.1:{host.ports['HTTP_REST']}/rest/hello" for host in hosts]
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda i: (i % 2, _get(urls[i % 2])), range(REQUESTS)))
            codes = sorted(a.status_code for _, a in answers)
            assert codes == [200] * LIMIT + [429] * (REQUESTS - LIMIT), codes
            for side in (0, 1):
                mine = {a.status_code for host, a in answers if host == side}
                assert mine == {200, 429}, (side, mine)
            refused = next(a for _, a in answers if a.status_code == 429)
            assert 0 < int(refused.headers["retry-after"]) <= 60
            assert refused.headers["ratelimit"].startswith('"RL_OPEN";r=0;t=')
            # the workers that served: more than one process on the hosts' side
            pids = {a.json()["pid"] for _, a in answers if a.status_code == 200}
            assert len(pids) >= 2, pids


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
