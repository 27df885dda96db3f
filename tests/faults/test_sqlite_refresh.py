"""Refresh rotation on sqlite under ``--workers 2`` (SPEC 4.2, 7). 40 families refreshed 10 times
each by 40 threads: all 200 (``BEGIN IMMEDIATE`` and ``busy_timeout`` serialise both workers; no
503). 500 simultaneous refreshes of one token (connections opened first): exactly one new pair, 499
``invalid_grant`` replays revoking the family, the new pair included (no grace period). 1,000
replays (50 families' spent tokens, 20 times each; a 503 on a loaded machine is retried as
``Retry-After`` says): each detected, each family revoked, its access tokens refused by both workers
within 1 s."""

from __future__ import annotations

import asyncio
import functools
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trustme

from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import ServerProcess, wait_for
from tests.faults.support import (
    Pinned,
    all_closed,
    figures,
    oauth_params,
    pinned_per_worker,
    store_config,
)

USERS = [(f"user{i}", f"Pw-{i}-x7") for i in range(8)]
PARAMS = oauth_params(USERS, client_secret="Web-Secret-9q", long_lived=True)
REVOKED_WITHIN_S = 1.0  # SPEC 7: the revocation cache is at most 1 s stale


class Service:
    def __init__(self, proc: ServerProcess, certs: dict[str, Path]) -> None:
        self.proc = proc
        self.ctx = client_context(certs)
        self.base = proc.url("OAUTH")
        self.token_url = self.base + TOKEN
        self.http = httpx.Client(verify=self.ctx, timeout=30)

    def grant(self, i: int, client: httpx.Client | None = None) -> dict[str, Any]:
        user, password = USERS[i % len(USERS)]
        data = {"grant_type": "password", "username": user, "password": password}
        response = (client or self.http).post(self.token_url, data=data)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def refresh(self, token: str, client: httpx.Client | None = None) -> httpx.Response:
        data = {"grant_type": "refresh_token", "refresh_token": token}
        return (client or self.http).post(self.token_url, data=data)


@pytest.fixture(scope="module")
def service(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("sqlite_refresh")
    certs = issue_certs(ca, folder / "certs")
    section = oauth_section(certs, onAuthparams="app.params", onAuthNoCheckUri="app.public")
    section["HeaderTimeout"] = 60000  # 500 connections wait for their one request
    # clients pinned to workers idle through the bulk replays (longer than 5 s when busy)
    section["KeepAliveTimeout"] = 120000
    config = store_config(folder, {"OAUTH": section}, "sqlite", PARAMS, max_threads=8)
    proc = ServerProcess(config, workers=2).wait_ready()
    svc = Service(proc, certs)
    try:
        yield svc
    finally:
        svc.http.close()
        assert proc.stop() == 0


def test_the_store_is_sqlite(service: Service) -> None:
    assert (service.proc.config.parent / ".fwrest" / "state.sqlite3").is_file()


def test_concurrent_refreshes_of_different_families(service: Service) -> None:
    families, rounds = 40, 10
    clients = [httpx.Client(verify=service.ctx, timeout=30) for _ in range(families)]
    barrier = threading.Barrier(families)
    statuses: list[Counter[int]] = [Counter() for _ in range(families)]
    latest: list[str] = [""] * families

    def chain(i: int) -> None:
        tokens = service.grant(i, clients[i])
        barrier.wait(timeout=30)
        for _ in range(rounds):
            response = service.refresh(tokens["refresh_token"], clients[i])
            statuses[i][response.status_code] += 1
            if response.status_code != 200:
                return
            tokens = response.json()
        latest[i] = tokens["access_token"]

    started = time.monotonic()
    with all_closed(clients), ThreadPoolExecutor(families) as pool:
        list(pool.map(chain, range(families)))
    took = time.monotonic() - started
    total = sum(statuses, Counter())
    print(
        f"{families} families x {rounds} refreshes, concurrently on 2 workers: {dict(total)} "
        f"in {took:.2f} s ({families * rounds / took:.0f} refreshes/s)"
    )
    assert total == Counter({200: families * rounds})
    pinned = pinned_per_worker(service.base, verify=service.ctx)
    with all_closed(pinned):
        for client in pinned:
            for token in latest:
                headers = {"Authorization": f"Bearer {token}"}
                assert client.http.get(service.base + "/hello", headers=headers).status_code == 200


async def _simultaneous(url: str, ctx: ssl.SSLContext, body: bytes, count: int) -> list[Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 443
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    gate = asyncio.Semaphore(32)  # handshakes 32 at a time; the requests all go at once

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async with gate:
            return await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx, server_hostname=host), 30
            )

    conns = await asyncio.gather(*(connect() for _ in range(count)))
    for _reader, writer in conns:
        writer.write(head + body)
    await asyncio.gather(*(writer.drain() for _reader, writer in conns))

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Any:
        try:
            raw = await asyncio.wait_for(reader.read(), 60)
        finally:
            writer.close()
        status_line, _, rest = raw.partition(b"\r\n")
        status = int(status_line.split()[1])
        payload = rest.partition(b"\r\n\r\n")[2]
        return status, payload

    return await asyncio.gather(*(answer(r, w) for r, w in conns))


def test_500_simultaneous_refreshes_of_one_token_give_exactly_one_pair(service: Service) -> None:
    import json

    count = 500
    tokens = service.grant(0)
    body = f"grant_type=refresh_token&refresh_token={tokens['refresh_token']}".encode()
    started = time.monotonic()
    answers = asyncio.run(_simultaneous(service.token_url, service.ctx, body, count))
    took = time.monotonic() - started
    outcome: Counter[tuple[int, str]] = Counter()
    why: Counter[str] = Counter()
    pairs = []
    for status, payload in answers:
        data = json.loads(payload)
        outcome[(status, data.get("error", "new pair"))] += 1
        why[data.get("error_description", "new pair")] += 1
        if status == 200:
            pairs.append(data)
    print(f"{count} simultaneous refreshes of one token ({took:.2f} s): {dict(why)}")
    assert len(pairs) == 1, outcome
    assert outcome[(400, "invalid_grant")] == count - 1, outcome
    assert pairs[0]["refresh_token"] != tokens["refresh_token"]
    # no grace period (SPEC 7): the 499 losers were replays, so the new pair is revoked too
    workers = pinned_per_worker(service.base, verify=service.ctx)
    with all_closed(workers):
        for client in workers:
            revoked = functools.partial(_refused, client, service.base, pairs[0]["access_token"])
            wait_for(revoked, 10, "the new pair revoked", 0.01)
    again = service.refresh(pairs[0]["refresh_token"])
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


def _refused(client: Pinned, base: str, token: str) -> bool:
    headers = {"Authorization": f"Bearer {token}"}
    return client.http.get(base + "/hello", headers=headers).status_code == 401


def test_1000_refresh_replays_are_detected_and_revoke_every_family(service: Service) -> None:
    family_count, replays_each, precise = 50, 20, 10
    families = []
    for i in range(family_count):
        first = service.grant(i)
        second = service.refresh(first["refresh_token"])
        assert second.status_code == 200, second.text
        families.append((first, second.json()))
    workers = pinned_per_worker(service.base, verify=service.ctx)
    with all_closed(workers):
        for first, second in families:  # every access token works before the replays
            for client in workers:
                for access in (first["access_token"], second["access_token"]):
                    assert not _refused(client, service.base, access)

        # precise: one replay, then both workers polled until they refuse the family
        delays = []
        for first, second in families[:precise]:
            replay = service.refresh(first["refresh_token"])
            answered = time.monotonic()
            assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
            for client in workers:
                revoked = functools.partial(_refused, client, service.base, second["access_token"])
                wait_for(revoked, answered + 10 - time.monotonic(), "the family revoked", 0.01)
            # the time the slower worker's refusal was observed
            delays.append(time.monotonic() - answered)
        print(f"replay -> both workers refuse the family's access token: {figures(delays)}")
        assert max(delays) <= REVOKED_WITHIN_S

        # bulk: the remaining replays, concurrently (the precise families get more too)
        jobs = [(f, r) for f in range(family_count) for r in range(replays_each)][precise:]
        clients = [httpx.Client(verify=service.ctx, timeout=30) for _ in range(16)]
        first_answer: dict[int, float] = {}
        lock = threading.Lock()

        unavailable = Counter[str]()

        def replay(job: tuple[int, int]) -> tuple[int, str]:
            """A replay, resent after a 503 as ``Retry-After`` says (SPEC 7: a store held past its
            deadline when loaded); its final answer."""
            f, r = job
            for _attempt in range(5):
                response = service.refresh(families[f][0]["refresh_token"], clients[(f + r) % 16])
                if response.status_code != 503:
                    break
                with lock:
                    unavailable[response.headers.get("retry-after", "missing")] += 1
                time.sleep(float(response.headers.get("retry-after", "1")))
            with lock:
                first_answer.setdefault(f, time.monotonic())
            return response.status_code, str(response.json().get("error"))

        started = time.monotonic()
        with all_closed(clients), ThreadPoolExecutor(16) as pool:
            results = Counter(pool.map(replay, jobs))
        done = time.monotonic()
        total = len(jobs) + precise
        results[(400, "invalid_grant")] += precise
        print(
            f"{total} replays of {family_count} families' spent refresh tokens in "
            f"{done - started:.2f} s: {dict(results)}; 503 first (then sent again), by "
            f"Retry-After: {dict(unavailable)}"
        )
        assert "missing" not in unavailable
        assert total == 1000
        assert results == Counter({(400, "invalid_grant"): 1000})

        # a sweep sent 1 s after the last replay's answer: every family refused by both workers
        time.sleep(max(0.0, first_answer and max(first_answer.values()) + 1.0 - time.monotonic()))
        sweep_started = time.monotonic()
        accepted = [
            (f, which, client.pid)
            for f, (first, second) in enumerate(families)
            for which, access in (
                ("first", first["access_token"]),
                ("latest", second["access_token"]),
            )
            for client in workers
            if not _refused(client, service.base, access)
        ]
        print(
            f"sweep {sweep_started - done:.2f} s after the replays: "
            f"{family_count * 2 * len(workers) - len(accepted)} access-token checks refused, "
            f"{len(accepted)} accepted"
        )
        assert accepted == []
        assert all(client.still_pinned() for client in workers)
        # the latest refresh token of a revoked family is refused too
        for _first, second in families:
            again = service.refresh(second["refresh_token"])
            assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert service.proc.log().count("its whole token family is revoked") >= 1000
