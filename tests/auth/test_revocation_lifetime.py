"""SPEC 4.2, 7: a replayed family stays revoked while any of its tokens can be valid. The revocation
once lasted 24 h, while ``"Date()+1"`` gives refresh tokens up to ~48 h and access tokens may
outlive a day: the family worked again a day after the replay. The real :class:`TokenService` on
memory, sqlite and Redis, the clock faked where read (``time.time``; PyJWT's and
``refresh_expires``'s ``datetime.now``): 25 h after the replay both tokens are still refused by the
worker that saw it and by one that learnt it from the store, which forgets it only once every token
expired."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import datetime, timedelta, tzinfo
from typing import Any
from urllib.parse import urlencode

import jwt
import orjson
import pytest

from fwrest.auth.oauth2 import expiry
from fwrest.auth.oauth2.params import ParamsSource
from fwrest.auth.oauth2.tokens import InvalidToken, TokenService
from fwrest.store import StateStore
from fwrest.store.sqlite import SqliteStore

FORM = {"content-type": "application/x-www-form-urlencoded"}
HOUR = 3600.0
ACCESS_H = 30  # access_expires over a day
# refresh_expires "Date()+1": the end of tomorrow, up to ~48 h
PARAMS = {"client_id": "web", "username": "ada", "password": "Ada-Pw-1",
          "access_expires": f"{ACCESS_H}h", "refresh_expires": "Date()+1"}  # fmt: skip


class Clock:
    """The one clock of the test: ``time.time`` and ``datetime.now`` read it."""

    def __init__(self, start: float) -> None:
        self.now = start

    def time(self) -> float:
        return self.now

    def advance(self, hours: float) -> None:
        self.now += hours * HOUR


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    # 10:00 local time: "Date()+1" is then 38 h away, and a rotation 20 h later gets 24 h more
    fake = Clock(datetime(2026, 11, 20, 10, 0).astimezone().timestamp())

    class FakeDatetime(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Any:
            return datetime.fromtimestamp(fake.now, tz)

    monkeypatch.setattr(time, "time", fake.time)
    monkeypatch.setattr(jwt.api_jwt, "datetime", FakeDatetime)
    monkeypatch.setattr(expiry, "datetime", FakeDatetime)
    return fake


def worker(store: StateStore) -> TokenService:
    source = ParamsSource(lambda: PARAMS, None)
    return TokenService(port_name="OAUTH", key=b"k" * 32, store=store, source=source,
                        max_failures=10, allow_get=False)  # fmt: skip


async def post(service: TokenService, **form: str) -> tuple[int, dict[str, Any]]:
    reply = await service.token_endpoint("POST", "", urlencode(form).encode(), FORM, "127.0.0.1")
    return reply.status, orjson.loads(reply.body)


async def refresh(service: TokenService, token: str) -> tuple[int, dict[str, Any]]:
    return await post(service, grant_type="refresh_token", refresh_token=token)


async def learn(service: TokenService) -> None:
    """What a worker's revocation cache does every 0.5 s: read the store's revocations."""
    service.revoked = await asyncio.to_thread(service.store.revoked_families)


def refused(service: TokenService, access: str) -> str:
    with pytest.raises(InvalidToken) as info:
        service.verify(access)
    return str(info.value)


@pytest.mark.anyio
async def test_a_replayed_family_stays_revoked_until_every_token_of_it_has_expired(
    store: StateStore, clock: Clock
) -> None:
    replaying, other = worker(store), worker(store)
    try:
        status, first = await post(
            replaying, grant_type="password", username="ada", password="Ada-Pw-1"
        )
        assert status == 200, first
        r1 = first["refresh_token"]
        clock.advance(20)  # the next morning: the rotated token gets a later deadline
        status, second = await refresh(replaying, r1)
        assert status == 200, second
        r2, a2 = second["refresh_token"], second["access_token"]
        a2_claims = jwt.decode(a2, options={"verify_signature": False})
        family, a2_exp = a2_claims["fam"], a2_claims["exp"]
        r2_exp = expiry.refresh_deadline("Date()+1")  # what the rotation gave R2
        assert r2_exp > clock.now + 24 * HOUR  # R2 outlives the former 24 h bound
        assert other.verify(a2)["sub"] == "ada"  # A2 is good on either worker

        clock.advance(1)
        status, body = await refresh(replaying, r1)  # the replay (an attacker's copy)
        assert status == 400 and body["error"] == "invalid_grant", body
        replayed_at = clock.now
        until = (await asyncio.to_thread(store.revoked_families))[family]
        print(
            f"{store.kind}: replay at +21 h revokes the family for "
            f"{(until - replayed_at) / HOUR:.1f} h (R2 expires in "
            f"{(r2_exp - replayed_at) / HOUR:.1f} h, A2 in {(a2_exp - replayed_at) / HOUR:.1f} h)"
        )
        assert until >= max(r2_exp, a2_exp)

        clock.advance(25)  # past the former bound (24 h); R2 and A2 not yet expired
        assert clock.now < min(r2_exp, a2_exp)
        await learn(other)
        await learn(replaying)
        assert "revoked" in refused(other, a2)
        assert "revoked" in refused(replaying, a2)
        status, body = await refresh(other, r2)
        assert status == 400 and body["error"] == "invalid_grant", body
        assert "revoked" in body["error_description"], body
        status, body = await refresh(replaying, r2)  # again: now a replay of R2
        assert status == 400 and body["error"] == "invalid_grant", body

        # every token expired: the store forgets the revocation (kept while tokens are valid)
        until = (await asyncio.to_thread(store.revoked_families))[family]
        clock.now = until + 1
        await learn(other)
        await learn(replaying)
        assert family not in other.revoked and family not in replaying.revoked
        assert "expired" in refused(other, a2)
        if isinstance(store, SqliteStore):  # ended rows go at the next replay's write
            store.revoke_family("another", clock.now + HOUR)
            with sqlite3.connect(store.path) as db:
                rows = db.execute("SELECT family FROM revoked").fetchall()
            assert rows == [("another",)], rows
        status, body = await refresh(other, r2)  # spent and expired: refused all the same
        assert status == 400 and body["error"] == "invalid_grant", body
    finally:
        replaying.stop()
        other.stop()


def test_the_bound_covers_the_latest_refresh_deadline_and_an_access_lifetime(clock: Clock) -> None:
    """The later of the replayed token's deadline and a rotation's now, plus the access lifetime
    (the last access token can be issued just before the last refresh token expires)."""
    from fwrest.auth.oauth2.tokens import revoked_until
    from fwrest.store import RefreshRecord

    now = clock.now
    old = RefreshRecord("h", "fam", "web", "ada", now + 2 * HOUR)
    later = now + 40 * HOUR
    assert revoked_until(old, ACCESS_H * 3_600_000, later) == later + ACCESS_H * HOUR
    # a deadline in the past (a fixed date) still leaves the replayed token's own
    far = RefreshRecord("h", "fam", "web", "ada", now + 90 * 86400)
    got = revoked_until(far, 60_000, now - HOUR)
    assert got == now + 90 * 86400 + 60
    assert got < now + timedelta(days=91).total_seconds()
