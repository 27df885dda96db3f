"""``OnAuthCache`` (SPEC 4.1): an accepted pair is remembered (a keyed hash, at most 10,000) and let
through without ``OnAuth``; a refusal is never remembered. In process, with a validator counting its
calls; the bound is taken through the guard in one loop."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fwrest.auth import BasicGuard
from fwrest.auth.basic import CACHE_MAX, AcceptedPairs
from fwrest.errors import HTTPError
from fwrest.testing import Client
from tests.auth.test_basic_guard import Ctx, guard_with, header, request
from tests.conftest import APP_SOURCE, local_port, module_config

AUTH_SOURCE = """
CALLS = []
USERS = {"ada": "Cache-Pw-Ada-7Qx", "bob": "Cache-Pw-Bob-3Zk"}


def check(user, password):
    CALLS.append(user)
    return USERS.get(user) == password
"""

WHOAMI = """

@get("/whoami")
def whoami():
    return {"user": rest.getAuthUser()}
"""

ADA = ("ada", "Cache-Pw-Ada-7Qx")


class Service:
    """A Basic port whose ``OnAuth`` counts its calls, in this process."""

    def __init__(self, tmp: Path, **auth: Any) -> None:
        tag = uuid.uuid4().hex[:10]
        self.auth_module = f"tcache_auth_{tag}"
        (tmp / f"{self.auth_module}.py").write_text(AUTH_SOURCE)
        authorization = {"scheme": "basic", "OnAuth": f"{self.auth_module}.check", **auth}
        server = local_port(FwData={"Authorization": authorization})
        app = f"tcache_app_{tag}"
        extra = {"ENV": {"Repository": f"{app},{self.auth_module}"}}
        self.log_file = tmp / "server.log"
        self.config = module_config(tmp, app, servers={"HTTP_BASIC": server}, extra=extra,
                                    app=APP_SOURCE + WHOAMI, general={"rest_log_level": 5})  # fmt: skip
        self.client = Client(self.config)

    @property
    def calls(self) -> list[str]:
        calls: list[str] = sys.modules[self.auth_module].CALLS
        return calls

    def status(self, user: str, password: str) -> int:
        return self.client.get("/rest/whoami", auth=(user, password)).status_code

    def cache(self) -> AcceptedPairs:
        guard = self.client._runtime.open().guard
        assert isinstance(guard, BasicGuard)
        assert guard._cache is not None
        return guard._cache


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    made: list[Service] = []
    path = list(sys.path)

    def factory(**auth: Any) -> Service:
        service = Service(tmp_path, **auth)
        made.append(service)
        return service

    yield factory
    for service in made:
        service.client.close()
    sys.path[:] = path


def test_a_pair_accepted_passes_without_on_auth_until_the_period_ends(make: Any) -> None:
    svc = make(OnAuthCache="1s")
    before = time.monotonic()  # the acceptance comes after this: its period lasts past +1 s
    answer = svc.client.get("/rest/whoami", auth=ADA)
    started = time.monotonic()  # and before this: its period ends within 1 s of it
    assert answer.status_code == 200, answer.text
    assert svc.calls == ["ada"]
    for _ in range(5):
        again = svc.client.get("/rest/whoami", auth=ADA)
        assert again.json() == {"user": "ada"}  # the REST object knows the user all the same
    if time.monotonic() - before < 0.9:  # a loaded machine may take the whole second
        assert svc.calls == ["ada"]
    time.sleep(max(0.0, started + 1.2 - time.monotonic()))
    assert svc.status(*ADA) == 200
    assert svc.calls.count("ada") >= 2  # the period has passed: OnAuth again
    calls = len(svc.calls)
    assert svc.status(*ADA) == 200
    assert len(svc.calls) == calls  # and remembered again from that acceptance


def test_without_on_auth_cache_every_request_asks_on_auth(make: Any) -> None:
    svc = make()
    for _ in range(3):
        assert svc.status(*ADA) == 200
    assert svc.calls == ["ada"] * 3
    guard = svc.client._runtime.open().guard
    assert isinstance(guard, BasicGuard) and guard._cache is None  # nothing on the request path


def test_another_password_of_a_remembered_user_asks_on_auth(make: Any) -> None:
    svc = make(OnAuthCache="300s")
    assert svc.status(*ADA) == 200
    assert svc.status("ada", "Cache-Pw-Other-1") == 403
    assert svc.status("ada", "Cache-Pw-Other-1") == 403
    assert svc.calls == ["ada"] * 3  # a refusal is never remembered
    assert svc.status(*ADA) == 200  # the accepted pair still is
    assert svc.status("bob", "Cache-Pw-Bob-3Zk") == 200  # another user: its own check
    assert svc.calls == ["ada"] * 3 + ["bob"]
    assert len(svc.cache()) == 2


def test_failures_count_for_the_throttle_and_its_lock_out_stands(make: Any) -> None:
    svc = make(OnAuthCache="300s", maxFailures=3)
    assert svc.status(*ADA) == 200
    assert svc.calls == ["ada"]
    for guess in ("Guess-1", "Guess-2", "Guess-3"):
        assert svc.status("ada", guess) == 403
    assert svc.calls == ["ada"] * 4  # each failure asked OnAuth
    locked = svc.client.get("/rest/whoami", auth=ADA)
    assert locked.status_code == 429, locked.text  # the remembered pair is locked out too
    assert int(locked.headers["retry-after"]) >= 1
    assert svc.status("ada", "Guess-4") == 429
    assert svc.status("bob", "Cache-Pw-Bob-3Zk") == 429  # and so is the address
    assert svc.calls == ["ada"] * 4


def test_the_table_holds_keyed_hashes_only(make: Any) -> None:
    svc = make(OnAuthCache="300s")
    user, password = ADA
    assert svc.status(user, password) == 200
    assert svc.status(user, password) == 200
    assert svc.status(user, "Cache-Pw-Wrong-9") == 403
    cache = svc.cache()
    assert len(cache) == 1
    pair = f"{user}:{password}".encode()
    plain = [password, password.encode(), base64.b64encode(pair).decode(), pair]
    for algorithm in ("md5", "sha1", "sha256", "sha512", "blake2b", "blake2s"):
        for data in (password.encode(), pair):
            digest = hashlib.new(algorithm, data)
            plain += [digest.hexdigest(), digest.digest()]
    plain.append(hashlib.blake2b(pair, digest_size=16).digest())  # the unkeyed form
    texts = [repr(cache), repr(cache._table), str(list(cache._table)), str(cache)]
    texts.append(svc.log_file.read_text())
    for text in texts:
        for secret in plain:
            assert str(secret) not in text
    for key in cache._table:
        assert key not in plain
        assert password.encode() not in key
    # a second worker (here: a second guard) keys its hashes with its own key
    other = AcceptedPairs(300)
    assert other.digest(user, password) not in cache._table
    assert "OnAuth accepted user 'ada' (OnAuthCache)" in svc.log_file.read_text()


@pytest.mark.anyio
async def test_the_table_keeps_the_latest_ten_thousand_pairs() -> None:
    calls: list[str] = []

    async def on_auth(user: str, password: str) -> bool:
        calls.append(user)
        return True

    guard = guard_with(on_auth, cache_s=300)
    cache = guard._cache
    assert cache is not None and CACHE_MAX == 10_000
    for i in range(CACHE_MAX + 1):
        await guard(request(header(f"u{i}", f"p{i}")), Ctx())  # type: ignore[arg-type]
    assert len(cache) == CACHE_MAX
    assert len(calls) == CACHE_MAX + 1
    await guard(request(header(f"u{CACHE_MAX}", f"p{CACHE_MAX}")), Ctx())  # type: ignore[arg-type]
    await guard(request(header("u1", "p1")), Ctx())  # type: ignore[arg-type]
    assert len(calls) == CACHE_MAX + 1  # the newest pairs are held
    await guard(request(header("u0", "p0")), Ctx())  # type: ignore[arg-type]
    assert calls[-1] == "u0"  # the oldest was dropped: asked again
    assert len(cache) == CACHE_MAX


@pytest.mark.anyio
@pytest.mark.parametrize("verdict", [True, False])
async def test_requests_with_a_pair_being_checked_wait_for_that_check(verdict: bool) -> None:
    """Twenty at once: one asks OnAuth, the others wait for its verdict; a refusal is not shared."""
    release = asyncio.Event()
    calls: list[str] = []

    async def on_auth(user: str, password: str) -> bool:
        calls.append(user)
        await release.wait()
        return verdict

    guard = guard_with(on_auth, cache_s=300)

    async def one() -> int:
        ctx = Ctx()
        try:
            await guard(request(header("ada", "pw")), ctx)  # type: ignore[arg-type]
        except HTTPError as exc:
            return exc.status
        assert ctx.auth_user == "ada"
        return 200

    futures = [asyncio.ensure_future(one()) for _ in range(20)]
    await asyncio.sleep(0.05)
    assert calls == ["ada"]  # the others wait
    release.set()
    answers = list(await asyncio.gather(*futures))
    assert answers == ([200] * 20 if verdict else [403] * 20)
    assert len(calls) == (1 if verdict else 20)
    assert guard._cache is not None and not guard._cache._checking


@pytest.mark.anyio
async def test_a_refusal_forgets_a_pair_held() -> None:
    """Refused while another request's acceptance of the pair is held: the refusal stands."""

    async def on_auth(user: str, password: str) -> bool:
        return False

    guard = guard_with(on_auth, cache_s=300)
    cache = guard._cache
    assert cache is not None
    digest = cache.digest("ada", "pw")
    cache.remember(digest)
    with pytest.raises(HTTPError) as refused:
        await guard._ask(request(header("ada", "pw")), Ctx(), None, "ada", "pw", digest)  # type: ignore[arg-type]
    assert refused.value.status == 403
    assert not cache.holds(digest)


def test_an_entry_expires_and_is_dropped() -> None:
    cache = AcceptedPairs(0.05, limit=3)
    first = cache.digest("a", "x")
    cache.remember(first)
    assert cache.holds(first)
    assert cache.digest("a", "x") == first  # one key per table
    assert cache.digest("a", "y") != first
    time.sleep(0.08)
    assert not cache.holds(first)
    assert len(cache) == 0
