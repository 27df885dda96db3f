"""Token state shared through the state store (SPEC 4.2, 7 "Tokens", "Store faults").

* ``--workers 2`` with the default sqlite store: a token issued by one worker is accepted by
  the other and a refresh works across workers (replays, simultaneous refreshes and failed
  grants across workers: tests/faults/test_sqlite_refresh.py and test_brute_force.py).
* Two services (two configs, two ``fwrest serve``) sharing one real ``redis-server``: the
  signing key is created once in Redis, tokens and refreshes cross services; with Redis
  stopped (or frozen) the token route fails closed with 503 and ``Retry-After`` while the
  bearer check of an issued token still passes, and it recovers when Redis is back.

Where a key or a stored record, not the processes, is under test (a shared SigningKeyFile, a
service with its own key, a record of an earlier release), the services run in this process
(``fwrest.testing.Client``) over the same real store.

Which worker answers is learnt from the keep-alive connection itself: a client with a single
connection asks the public ``/pid`` route, then sends its token requests on that connection.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import redis
import trustme

from fwrest.auth.oauth2.grants import refresh_hash
from fwrest.auth.oauth2.portkeys import POLL_S
from fwrest.auth.oauth2.tokens import KEY_CHECK_S
from fwrest.store import RefreshRecord
from fwrest.store.redis import RedisStore
from tests.auth.conftest import check
from tests.auth.oauth2_support import ADA as ADA_USER
from tests.auth.oauth2_support import (
    TOKEN,
    WEB,
    LocalOAuth,
    OAuth,
    OAuthService,
    assert_error,
    bearer,
    client_context,
    error_of,
    expect,
    fresh_claims,
    issue_certs,
    issuer_of,
    oauth_section,
    params_source,
    served_service,
    sign,
    wait_for,
)
from tests.conftest import (
    APP_SOURCE,
    ServerProcess,
    free_config,
    module_config,
    run_cli,
    run_forked,
    serving,
)
from tests.faults import support as faults
from tests.redis_support import RedisCluster, RedisServer, SentinelGroup, started

ADA = ("ada", "Ada-Pw-7731")
HANG_GUARD_503 = 2.5  # seconds; SPEC 7: 503 within 1.5 s while the store is unreachable

BOB_EVE = [
    {"username": "bob", "password": "Bob-Pw-2207"},
    {"username": "eve", "password": "Eve-Pw-3141"},
]
STORE_APP = (
    params_source(**WEB, **ADA_USER, users=BOB_EVE, access_expires="1h", refresh_expires="Date()+1")
    + """


def public():
    return ["/pid"]


@get("/pid")
def pid():
    return {"pid": os.getpid()}
"""
)


SHARED_ISSUER = "https://api.example.test/rest"


def service_config(
    folder: Path,
    certs: dict[str, Path],
    store: str,
    max_failures: int = 1_000_000,
    issuer: str | None = None,
    oauth: str = "OAUTH",
    module: str = "app",
    app: str = STORE_APP,
    signing_alg: str = "HS256",
    **httpserver: Any,
) -> Path:
    """One oAuth2 port ``OAUTH`` (spelled ``oauth``); with ``max_failures`` under the default, a second port
    ``THROTTLED`` has that threshold and ``OAUTH`` none (the per-address count is shared by
    the ports of a service, so one port can lock out 127.0.0.1 without hindering the other).
    Without ``issuer`` (the default configuration) each host derives its own,
    https://127.0.0.1:{its own port}/rest, and the hosts still accept each other's tokens
    (SPEC 12.2). ``module``: the app module's name (unique in the test session for a service
    in this process); ``app``: its ``onAuthparams`` and routes beside ``APP_SOURCE``'s;
    ``httpserver``: more keys of its ``[HTTPSERVER]``."""
    servers = {}
    for name, limit in ((oauth, 1_000_000), ("THROTTLED", max_failures)):
        auth: dict[str, Any] = {"maxFailures": limit, "signingAlg": signing_alg}
        if issuer is not None:
            auth["issuer"] = issuer  # one issuer for the hosts behind a balancer
        servers[name] = oauth_section(
            certs, onAuthparams=f"{module}.params", onAuthNoCheckUri=f"{module}.public", **auth
        )
    return module_config(
        folder,
        module,
        servers=servers,
        app=APP_SOURCE + app,
        extra={"HTTPSERVER": {"StateStore": store, **httpserver}, "POOL": {"MaxThreads": 8}},
    )


class Pinned(faults.Pinned):
    """A client of one worker (tests/faults/support.py) of an oAuth2 port ``port``."""

    def __init__(self, port: OAuth) -> None:
        super().__init__(port.base, verify=port.ctx)

    def post(self, data: dict[str, str]) -> httpx.Response:
        return self.http.post(self.base + TOKEN, data=data)

    def refresh(self, token: str) -> httpx.Response:
        return self.post({"grant_type": "refresh_token", "refresh_token": token})

    def get(self, path: str, token: str) -> httpx.Response:
        return self.http.get(self.base + path, headers=bearer(token))


@contextlib.contextmanager
def pinned_pair(port: OAuth, timeout: float = 15) -> Iterator[tuple[Pinned, Pinned]]:
    """Two single-connection clients served by two different workers, closed after the block."""
    with contextlib.ExitStack() as clients:
        first = clients.enter_context(contextlib.closing(Pinned(port)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            other = clients.enter_context(contextlib.closing(Pinned(port)))
            if other.pid != first.pid:
                yield first, other
                return
            other.close()
        raise AssertionError("no connection ever reached a second worker")


# -- two workers, the default sqlite store ------------------------------------------------------


def _sqlite_service(folder: Path, certs: dict[str, Path]) -> Path:
    return service_config(folder, certs, "sqlite", max_failures=3)


# ``fwrest serve --workers 2`` with the sqlite store; ``THROTTLED``'s maxFailures is 3
workers = served_service(_sqlite_service, "oauth2_sqlite", "workers", workers=2)


def test_sqlite_is_the_store_and_the_key_is_a_file(workers: OAuthService) -> None:
    folder = workers.proc.config.parent
    assert (folder / ".fwrest" / "signing.key").is_file()
    assert (folder / ".fwrest" / "state.sqlite3").is_file()


def test_tokens_and_refresh_cross_workers(workers: OAuthService) -> None:
    with pinned_pair(workers["OAUTH"]) as (a, b):
        print(f"worker pids: {a.pid}, {b.pid}")
        issued = expect(a.post({"grant_type": "password", "username": ADA[0], "password": ADA[1]}))
        tokens = issued.json()
        assert a.get("/hello", tokens["access_token"]).json()["pid"] == a.pid
        on_b = b.get("/hello", tokens["access_token"])  # issued by a, checked by b
        assert on_b.status_code == 200 and on_b.json()["pid"] == b.pid
        renewed = expect(b.refresh(tokens["refresh_token"]))  # refresh of a's token on b
        again = expect(a.refresh(renewed.json()["refresh_token"]))  # and back on a
        latest = again.json()["access_token"]
        assert a.still_pinned() and b.still_pinned()
        # 20 requests on fresh connections: every one accepted, both workers among them
        seen: Counter[int] = Counter()
        headers = {"Authorization": f"Bearer {latest}", "Connection": "close"}
        with httpx.Client(verify=workers["OAUTH"].ctx, timeout=15) as fresh:
            deadline, asked = time.monotonic() + 30, 0
            # 20 requests, then more until both workers answered (or the deadline)
            while asked < 20 or (len(seen) < 2 and time.monotonic() < deadline):
                response = expect(fresh.get(workers["OAUTH"].base + "/hello", headers=headers))
                seen[response.json()["pid"]] += 1
                asked += 1
        print(f"requests per worker pid: {dict(seen)}")
        assert set(seen) == {a.pid, b.pid}


# -- two services sharing one Redis -------------------------------------------------------------


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with started(RedisServer(tmp_path)) as server:
        yield server


class TwoServices(contextlib.ExitStack):
    def __init__(
        self,
        ca: trustme.CA,
        root: Path,
        store: str,
        max_failures: int,
        issuer: str | None,
        spelled: tuple[str, str] | None = None,
        app: str = STORE_APP,
    ) -> None:
        """Hosts A and B of one service (``app``: :func:`service_config`'s); with ``spelled``,
        ``ports`` are their ``OAUTH`` sections, each host spelling its name as ``spelled``
        says, else their ``THROTTLED``; both stopped at the end of the ``with`` block."""
        super().__init__()
        self.procs: list[ServerProcess] = []
        self.ports: list[OAuth] = []
        self.issuer = issuer
        for name, oauth in zip(("a", "b"), spelled or ("OAUTH", "OAUTH"), strict=True):
            folder = root / name
            folder.mkdir()
            certs = issue_certs(ca, folder / "certs")
            config = service_config(folder, certs, store, max_failures, issuer, oauth, app=app)
            proc = self.enter_context(serving(config))
            self.procs.append(proc)
            self.ports.append(
                self.enter_context(OAuth(proc, oauth if spelled else "THROTTLED", certs))
            )


@pytest.fixture(params=[None, SHARED_ISSUER], ids=["default-issuer", "configured-issuer"])
def two_services(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer, request: pytest.FixtureRequest
) -> Iterator[TwoServices]:
    with TwoServices(ca, tmp_path, redis_server.url, 3, request.param) as both:
        yield both


def test_two_services_share_tokens_through_redis(
    two_services: TwoServices, redis_server: RedisServer
) -> None:
    a, b = two_services.ports
    for proc in two_services.procs:  # no SigningKeyFile: the key lives in Redis, not in a file
        assert not (proc.config.parent / ".fwrest" / "signing.key").exists()
    with contextlib.closing(redis_server.client()) as store:
        assert store.get("fwrest:signing_key"), store.keys("*")
    assert a.base != b.base
    tokens = a.tokens(*ADA)
    claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    assert claims["iss"] == (two_services.issuer or a.base)  # A's own, unless configured
    assert b.get("/hello", tokens["access_token"]).status_code == 200  # issued by A
    # introspection on B of A's access token (RFC 7662), as B's own client
    seen = b.http.post(b.base + "/fw/oauth2/introspect", data={"token": tokens["access_token"]},
                       auth=("web", "Web-Secret-9q"))  # fmt: skip
    assert seen.status_code == 200 and seen.json()["active"] is True, seen.text
    assert seen.json()["iss"] == claims["iss"]
    # `fwrest check` warns about a shared store without "issuer" (SPEC 12.2), only then
    config = two_services.procs[0].config
    checked = run_forked("check", str(config), cwd=config.parent)
    assert checked.returncode == 0, checked.stderr
    warned = 'sets no "issuer"' in checked.stdout + checked.stderr
    assert warned == (two_services.issuer is None), checked.stdout + checked.stderr
    renewed = b.refresh(tokens["refresh_token"])  # A's refresh token, on B
    assert renewed.status_code == 200, renewed.text
    assert a.get("/hello", renewed.json()["access_token"]).status_code == 200
    # a replay on A revokes the family everywhere, B included
    assert_error(a.refresh(tokens["refresh_token"]), "invalid_grant")
    newest = renewed.json()["access_token"]
    took = wait_for(lambda: b.get("/hello", newest).status_code == 401, 10, "B refuses the family")
    print(f"service B refused the revoked family {took:.3f} s after the replay on A")
    # failed grants are counted in Redis: two on A and one on B lock the user out on both
    wrong = ("bob", "guess")
    for port in (a, a, b):
        assert error_of(port.grant(*wrong)) == "invalid_grant"
    assert a.grant("bob", "Bob-Pw-2207").status_code == 429
    assert b.grant(*wrong).status_code == 429


REFRESH_LIFE_S = 2.0  # EXPIRING_APP's refresh tokens
EXPIRING_APP = "\nimport datetime\n" + STORE_APP.replace(
    "'Date()+1'", f"datetime.timedelta(seconds={REFRESH_LIFE_S})"
)


def test_an_expired_refresh_token_is_refused_every_time_and_revokes_nothing(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer
) -> None:
    """SPEC 4.2: an expired refresh token is ``invalid_grant`` (the client repeats the
    password grant); it was never spent, so showing it again, on either host, is no replay:
    its family's access token stays valid on both hosts, and no replay is logged."""
    with TwoServices(ca, tmp_path, redis_server.url, 1_000_000, None, ("OAUTH", "OAUTH"),
                     app=EXPIRING_APP) as both:  # fmt: skip
        a, b = both.ports
        tokens = a.tokens(*ADA)
        expired_by = time.time() + REFRESH_LIFE_S  # issued before now: expired by then
        assert b.get("/hello", tokens["access_token"]).status_code == 200
        while time.time() <= expired_by:  # bounded: REFRESH_LIFE_S
            time.sleep(0.05)
        for port in (a, b, a):
            refused = assert_error(port.refresh(tokens["refresh_token"]), "invalid_grant")
            description = refused.json()["error_description"]
            assert description == "the refresh token has expired; repeat the password grant"
        # a revocation reaches every worker within 1 s (SPEC 7): none has come after 2
        time.sleep(2.0)
        for port in (a, b):
            assert port.get("/hello", tokens["access_token"]).status_code == 200
        for proc in both.procs:
            assert "presented again" not in proc.log()
        assert a.tokens(*ADA)["token_type"] == "Bearer"  # the password grant, as told


def test_hosts_spelling_the_section_in_another_case_share_its_tokens(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer
) -> None:
    """SPEC 9: section names are case-insensitive, so host A's ``[OAUTH]`` and host B's
    ``[oauth]`` are one server section of one service (SPEC 7.1's aud, 12.2): each host
    accepts, refreshes, revokes and describes the other's tokens (default configuration)."""
    with TwoServices(ca, tmp_path, redis_server.url, 1_000_000, None, ("OAUTH", "oauth")) as both:
        a, b = both.ports
        tokens = a.tokens(*ADA)
        claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
        assert claims["aud"] == "OAUTH"  # written as the issuing host spells it
        assert b.get("/hello", tokens["access_token"]).status_code == 200
        for kind in ("access_token", "refresh_token"):
            seen = b.http.post(b.base + "/fw/oauth2/introspect", auth=("web", "Web-Secret-9q"),
                               data={"token": tokens[kind]})  # fmt: skip
            assert seen.status_code == 200 and seen.json()["active"] is True, (kind, seen.text)
        renewed = b.refresh(tokens["refresh_token"])  # A's refresh token, on B
        assert renewed.status_code == 200, renewed.text
        newest = renewed.json()["access_token"]
        assert a.get("/hello", newest).status_code == 200  # B's token (aud "oauth") on A
        again = a.refresh(renewed.json()["refresh_token"])  # B's refresh token, on A
        assert again.status_code == 200, again.text
        # a replay on A of a token B spent revokes the family on B
        replay = assert_error(a.refresh(tokens["refresh_token"]), "invalid_grant")
        assert "already used" in replay.json()["error_description"]
        latest = again.json()["access_token"]
        wait_for(lambda: b.get("/hello", latest).status_code == 401, 10, "B refuses the family")


def test_a_refresh_record_stored_under_the_spelled_section_name_still_refreshes(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Records stored before section names were folded are keyed by the name as the host
    spelled it: after the upgrade they refresh (once: the new record is under the folded
    name), are described and revoked as before (the host in this process, its store the
    real Redis)."""
    with contextlib.ExitStack() as stack:
        a = local_host(stack, ca, tmp_path / "a", redis_server.url)
        store = stack.enter_context(contextlib.closing(RedisStore(redis_server.url)))
        now = time.time()
        old, revoked = "earlier-release-refresh-token-1", "earlier-release-refresh-token-2"
        for token, family in ((old, "fam-earlier-1"), (revoked, "fam-earlier-2")):
            store.add_refresh(RefreshRecord(refresh_hash(token, "OAUTH"), family, "web", "ada",
                                            now + 3600, "default", now))  # fmt: skip
        seen = a.http.post(a.base + "/fw/oauth2/introspect", auth=("web", "Web-Secret-9q"),
                           data={"token": old})  # fmt: skip
        assert seen.status_code == 200 and seen.json()["active"] is True, seen.text
        renewed = expect(a.refresh(old))
        assert a.refresh(old).status_code == 400  # spent: a replay, as before
        assert store.refresh_record(refresh_hash(old, "OAUTH")) is not None
        fresh = renewed.json()["refresh_token"]
        # stored under the name as the host spells it (what fwrest 0.1.0 finds: SPEC 17.2),
        # the folded name's hash its alias
        assert store.refresh_record(refresh_hash(fresh, "OAUTH")) is not None
        assert store.refresh_record(refresh_hash(fresh, "oauth")) is None
        assert store.refresh_alias(refresh_hash(fresh, "oauth")) == refresh_hash(fresh, "OAUTH")
        gone = a.http.post(a.base + "/fw/oauth2/revoke", auth=("web", "Web-Secret-9q"),
                           data={"token": revoked})  # fmt: skip
        assert gone.status_code == 200, gone.text
        assert "fam-earlier-2" in store.revoked_families()


def test_a_token_signed_by_a_service_with_its_own_key_is_refused(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer
) -> None:
    """The contrast: a service that does not share the Redis key does not accept the tokens
    (both services in this process: the key they sign with, not the process, is under test)."""
    with contextlib.ExitStack() as stack:
        shared = local_host(stack, ca, tmp_path / "shared", redis_server.url)
        alone = local_host(stack, ca, tmp_path / "alone", "memory")
        foreign = alone.tokens(*ADA)["access_token"]
        assert shared.get("/hello", foreign).status_code == 401
        assert alone.get("/hello", foreign).status_code == 200
        assert shared.get("/hello", shared.tokens(*ADA)["access_token"]).status_code == 200


def local_host(
    stack: contextlib.ExitStack[Any], ca: trustme.CA, folder: Path, store: str, **kw: Any
) -> LocalOAuth:
    """A host of the service in this process in ``folder`` (certificates and an app module of
    its own; ``kw``: more of :func:`service_config`), a client of its ``OAUTH`` port."""
    folder.mkdir()
    module = f"tauth_store_{uuid.uuid4().hex[:12]}"
    config = service_config(folder, issue_certs(ca, folder / "certs"), store, module=module, **kw)
    return stack.enter_context(LocalOAuth(config, kw.get("oauth", "OAUTH")))


def test_hosts_keep_one_signing_key_when_redis_loses_its_data(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer
) -> None:
    """SPEC 7: with a Redis store the signing key is created once there, so every host
    shares it. Redis restarted without its data while hosts run: they put their key back
    (set-if-absent), so a host started since reads it; a host that made a new one first
    wins, and the others take it (each worker checks every KEY_CHECK_S). Before, a host
    started after the loss signed with a key of its own for good (each refused the other's
    tokens until a restart)."""
    redis = redis_server.client()
    with contextlib.ExitStack() as stack:
        a = local_host(stack, ca, tmp_path / "a", redis_server.url)
        b = local_host(stack, ca, tmp_path / "b", redis_server.url)
        token = a.tokens(*ADA)["access_token"]
        assert b.get("/hello", token).status_code == 200
        redis.flushall()  # the data lost
        guard = 3 * KEY_CHECK_S
        wait_for(lambda: bool(redis.keys("*signing_key*")), guard, "the key put back")
        c = local_host(stack, ca, tmp_path / "c", redis_server.url)  # started after the loss
        assert c.get("/hello", token).status_code == 200
        redis.flushall()
        d = local_host(stack, ca, tmp_path / "d", redis_server.url)  # likely a new key first
        fresh = d.tokens(*ADA)["access_token"]
        for host in (a, b, c):
            wait_for(lambda h=host: h.get("/hello", fresh).status_code == 200, guard, "one key")
        assert d.get("/hello", a.tokens(*ADA)["access_token"]).status_code == 200
    redis.close()


def test_hosts_keep_every_key_of_the_set_when_redis_loses_its_data(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer
) -> None:
    """SPEC 12.1 on a Redis that lost its data while hosts run: the hosts put their key set
    back, or add their keys to the set a host started since made first (retired: every host
    signs with its key), so that the tokens signed before still verify on every host, those
    of the new host too. Before, the hosts took the new host's set: every token signed before
    the loss was refused everywhere."""
    redis = redis_server.client()
    guard = 20 * POLL_S
    with contextlib.ExitStack() as stack:
        a, b = (local_host(stack, ca, tmp_path / n, redis_server.url, signing_alg="ES256")
                for n in "ab")  # fmt: skip
        before = a.tokens(*ADA)["access_token"]
        assert b.get("/hello", before).status_code == 200
        redis.flushall()  # the data lost
        c = local_host(stack, ca, tmp_path / "c", redis_server.url, signing_alg="ES256")
        after = c.tokens(*ADA)["access_token"]
        for host in (a, b, c):
            for token in (before, after):
                wait_for(lambda h=host, t=token: h.get("/hello", t).status_code == 200, guard,
                         "every token verifies on every host")  # fmt: skip
        # one current key: what any host signs now verifies on the others
        for signer in (a, b, c):
            wait_for(lambda s=signer: all(h.get("/hello", s.tokens(*ADA)["access_token"])
                                          .status_code == 200 for h in (a, b, c)), guard,
                     "one current key")  # fmt: skip
        kids = {jwt.get_unverified_header(h.tokens(*ADA)["access_token"])["kid"] for h in (a, b, c)}
        assert len(kids) == 1, kids
        # and one next key: the ones put back are retired where the set has one (they signed
        # nothing), so that the next rotation makes current the key every verifier holds
        keys = json.loads(redis.hget("fwrest:blobs", "fwrest-keyset"))["keys"]
        upcoming = [k["kid"] for k in keys if not k["current"] and k["retired"] is None]
        assert len(upcoming) == 1, keys
    redis.close()


def timed(call: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


@pytest.mark.parametrize("fault", ["stopped", "frozen"])
def test_redis_fault_fails_closed_and_recovers(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer, fault: str
) -> None:
    folder = tmp_path / "svc"
    folder.mkdir()
    certs = issue_certs(ca, folder / "certs")
    config = service_config(folder, certs, redis_server.url)
    with serving(config) as proc, OAuth(proc, "OAUTH", certs) as port:
        tokens = port.tokens(*ADA)
        assert port.get("/hello", tokens["access_token"]).status_code == 200
        assert redis_server.proc is not None
        if fault == "stopped":
            redis_server.stop()
        else:
            redis_server.proc.send_signal(signal.SIGSTOP)

        # the token route fails closed, quickly (the client's timeout is the hang guard)
        figures = []
        for call in (
            lambda: port.grant(*ADA),
            lambda: port.refresh(tokens["refresh_token"]),
            lambda: port.grant(ADA[0], "wrong password"),
        ):
            response, took = timed(call)
            figures.append(round(took, 3))
            assert response.status_code == 503, response.text
            assert int(response.headers["retry-after"]) >= 1
        print(f"Redis {fault}: token route answered 503 after {figures} s (SPEC: within 1.5 s)")
        # a hang guard with room for a loaded machine, yet far below a store's own
        # timeouts and retries (about 3 s per call, more when calls queue behind each other)
        assert max(figures) < HANG_GUARD_503, figures

        # the bearer check of a valid, already issued token does not wait on the store
        response, took = timed(lambda: port.get("/hello", tokens["access_token"]))
        print(f"Redis {fault}: bearer check answered {response.status_code} in {took:.3f} s")
        assert response.status_code == 200, response.text
        assert port.get("/hello", "not-a-token").status_code == 401

        # the store comes back on the same port: the token route recovers without a restart
        if fault == "stopped":
            redis_server.start()
        else:
            redis_server.proc.send_signal(signal.SIGCONT)
        back = time.monotonic()
        took = wait_for(lambda: port.grant(*ADA).status_code == 200, 15, "the token route recovers")
        print(f"Redis {fault}: token route works again {took:.3f} s after Redis came back")
        assert time.monotonic() - back < 15
        fresh = port.tokens(*ADA)
        assert port.get("/hello", fresh["access_token"]).status_code == 200
        assert port.refresh(fresh["refresh_token"]).status_code == 200
        assert proc.proc.poll() is None  # no restart
    assert "503" in proc.log()


def test_services_sharing_a_signing_key_file_accept_each_others_tokens(
    ca: trustme.CA, tmp_path: Path
) -> None:
    """``[HTTPSERVER] SigningKeyFile``: the key given by config, created once, mode 0600
    (the services in this process: the key file, not the process, is under test)."""
    key_file = tmp_path / "shared" / "signing.key"
    with contextlib.ExitStack() as stack:  # each started: the key made or read
        ports = [local_host(stack, ca, tmp_path / name, "memory", SigningKeyFile=str(key_file))
                 for name in ("a", "b")]  # fmt: skip
        assert key_file.stat().st_mode & 0o777 == 0o600
        for name in ("a", "b"):
            assert not (tmp_path / name / ".fwrest" / "signing.key").exists()
        token = ports[0].tokens(*ADA)["access_token"]
        assert ports[1].get("/hello", token).status_code == 200


@pytest.mark.parametrize("content", [b"", b"c2hvcnQ", b"!!! not base64 at all !!!"])
def test_a_corrupt_or_short_signing_key_aborts_the_start(
    ca: trustme.CA, tmp_path: Path, content: bytes
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    config = service_config(tmp_path, certs, "sqlite")
    (tmp_path / ".fwrest").mkdir()
    (tmp_path / ".fwrest" / "signing.key").write_bytes(content)
    # forked (run_forked); the start refused for real: the Redis key's test below
    result = run_forked("serve", str(config), cwd=tmp_path, timeout=30)
    print(result.stdout, result.stderr)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "signing key" in result.stderr and "ready" not in result.stdout


def test_the_client_context_helper_trusts_only_the_test_ca(ca: trustme.CA, tmp_path: Path) -> None:
    """Real TLS: a client without the test CA cannot talk to an oAuth2 port."""
    certs = issue_certs(ca, tmp_path / "certs")
    with serving(service_config(tmp_path, certs, "memory")) as proc:
        with pytest.raises(httpx.ConnectError):
            httpx.get(proc.url("OAUTH") + "/pid", verify=True, timeout=10)
        with httpx.Client(verify=client_context(certs), timeout=10) as client:
            assert client.get(proc.url("OAUTH") + "/pid").status_code == 200


# -- the signing key file: made by one, read whole by the others (SPEC 7) --------------------


def _load_key_at_once(path: str, start: Any, out: Any) -> None:
    """(in a child process) The signing key of ``path``, loaded when every sibling is ready."""
    from fwrest.auth.oauth2.keys import load_signing_key
    from fwrest.errors import ConfigError

    start.wait()
    try:
        key = load_signing_key(Path(path), Path(path).parent, None)
        out.put(key.hex() if key else "")
    except ConfigError as exc:
        out.put(f"error: {exc}")


def test_hosts_creating_the_signing_key_at_the_same_moment_agree(tmp_path: Path) -> None:
    """Four processes (workers or hosts starting together) create one key file at once, 40
    times: every one gets the same key. With an exclusive create that wrote the key in place,
    a process that found the file between its creation and its write read it empty and
    aborted its start, the key being "corrupt" (about 4 rounds in 10 here)."""
    import multiprocessing

    spawn = multiprocessing.get_context("fork")
    for round_no in range(40):
        path = tmp_path / f"round{round_no}" / "signing.key"
        start, out = spawn.Barrier(4), spawn.Queue()
        procs = [
            spawn.Process(target=_load_key_at_once, args=(str(path), start, out)) for _ in range(4)
        ]
        for proc in procs:
            proc.start()
        keys = [out.get(timeout=30) for _ in procs]
        for proc in procs:
            proc.join(30)
        assert len(set(keys)) == 1 and not keys[0].startswith("error"), (round_no, keys)
        assert path.stat().st_mode & 0o777 == 0o600
        assert [p.name for p in path.parent.iterdir()] == ["signing.key"]  # no temporary left


def watch_open(path: Path) -> threading.Event:
    """An event set when a process opens ``path`` (Linux inotify, through ctypes)."""
    import ctypes
    import select

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, str(path).encode(), 0x20) >= 0  # IN_OPEN
    opened = threading.Event()

    def wait() -> None:
        try:
            if select.select([fd], [], [], 60)[0]:
                opened.set()
        finally:
            os.close(fd)

    threading.Thread(target=wait, daemon=True).start()
    return opened


def test_a_start_waits_for_a_signing_key_another_host_is_still_writing(
    ca: trustme.CA, tmp_path: Path
) -> None:
    """A key file that exists but is still empty is being written (by a host whose file system
    cannot link, or an earlier fwrest): ``fwrest serve`` waits for the key, then serves with
    it, rather than aborting over a "corrupt" key (which it did, at once)."""
    certs = issue_certs(ca, tmp_path / "certs")
    config = service_config(tmp_path, certs, "sqlite")
    key_file = tmp_path / ".fwrest" / "signing.key"
    key_file.parent.mkdir()
    key_file.touch(mode=0o600)
    opened = watch_open(key_file)
    proc = ServerProcess(config)
    try:
        # once the start has opened the empty key file (an earlier fwrest exited 2 then)
        assert opened.wait(30), "the start never opened the key file"
        time.sleep(0.3)
        key = b"k" * 40
        key_file.write_text(base64.urlsafe_b64encode(key).decode().rstrip("=") + "\n")
        proc.wait_ready()  # (its port's URL is known once it serves)
        with OAuth(proc, "OAUTH", certs) as port:
            forged = sign(fresh_claims("ada", iss=issuer_of(port)), key)
            assert port.get("/hello", forged).status_code == 200
    finally:
        proc.stop()


def _key_is_a_folder(folder: Path) -> dict[str, Any]:
    (folder / ".fwrest" / "signing.key").mkdir(parents=True)
    return {}


def _key_folder_is_a_file(folder: Path) -> dict[str, Any]:
    (folder / "blocker").write_text("a file, not a folder")
    return {"SigningKeyFile": "blocker/signing.key"}


def _memory_store_data_path_is_a_file(folder: Path) -> dict[str, Any]:
    (folder / "blocker").write_text("a file, not a folder")
    return {"StateStore": "memory", "DataPath": "blocker/data"}


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_key_is_a_folder, "signing.key cannot be read: Is a directory"),
        (_key_folder_is_a_file, "signing.key cannot be created in"),
        (_memory_store_data_path_is_a_file, "blocker is not a folder"),
    ],
)
def test_a_signing_key_file_that_cannot_be_read_or_made_is_a_clear_error(
    ca: trustme.CA, tmp_path: Path, make: Any, expected: str
) -> None:
    """``fwrest check`` and ``fwrest serve`` exit 2 with one line naming the file (they
    crashed with a traceback, exit 1; `check` even passed when the file could not be made)."""
    certs = issue_certs(ca, tmp_path / "certs")
    config = service_config(tmp_path, certs, "sqlite", **make(tmp_path))
    for command in ("check", "serve"):
        result = run_forked(command, str(config), cwd=tmp_path, timeout=30)
        print(command, result.returncode, result.stderr)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and "ready" not in result.stdout
        assert "[HTTPSERVER] SigningKeyFile: the signing key file" in result.stderr
        assert expected in result.stderr


def unique_module() -> str:
    """A module name of its own: ``check(real=False)`` imports the config's module here."""
    return f"tauth_store_{uuid.uuid4().hex[:12]}"


def _refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a command that exited 2 (``check``'s or ``serve``'s)."""
    print(result.stdout, result.stderr)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "configuration error:" in x]
    return line


def test_check_refuses_a_corrupt_signing_key_in_redis_in_the_words_of_the_start(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer
) -> None:
    """HS256 on database 3 (no SigningKeyFile): ``fwrest check`` passed a key ``serve``
    refuses. It reads the key without making one (none yet: OK) and shows none of it."""
    certs = issue_certs(ca, tmp_path / "certs")
    url = redis_server.url.rsplit("/", 1)[0] + "/3"
    config = service_config(tmp_path, certs, url, module=unique_module())
    direct = redis.Redis(db=3, socket_timeout=2, **redis_server.client_kwargs())
    with contextlib.closing(direct):
        done = check(config, real=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert direct.keys() == []  # a start makes the key; `check` did not
        direct.set("fwrest:signing_key", b"tooShortKey7")
        line = _refusal(check(config, real=True))
        assert "[HTTPSERVER] StateStore: the signing key in the Redis state store (key " in line
        assert "fwrest:signing_key) is corrupt or shorter than 32 bytes" in line
        assert "tooShortKey7" not in line and "remove the file" not in line  # none to remove
        assert direct.keys() == [b"fwrest:signing_key"]
        assert direct.get("fwrest:signing_key") == b"tooShortKey7"
        assert line == _refusal(run_cli("serve", str(config), cwd=tmp_path, timeout=30))


def test_check_refuses_a_key_set_in_redis_that_is_not_json_in_the_words_of_the_start(
    ca: trustme.CA, tmp_path: Path, redis_server: RedisServer
) -> None:
    """ES256 with the key set in Redis: ``fwrest check`` passed a set ``serve`` refuses. It
    reads the set and the signing key without making either (none yet: OK)."""
    certs = issue_certs(ca, tmp_path / "certs")
    config = service_config(
        tmp_path, certs, redis_server.url, signing_alg="ES256", module=unique_module()
    )
    direct = redis_server.client()
    with contextlib.closing(direct):
        done = check(config, real=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert direct.keys() == []  # a start makes the key and the set; `check` did not
        direct.hset("fwrest:blobs", "fwrest-keyset", b'{"garbage":1')
        line = _refusal(check(config, real=True))
        assert (
            "[HTTPSERVER] StateStore: the key set in the redis state store (blob fwrest-keyset) "
            "is not JSON" in line
        )
        assert "garbage" not in line
        assert direct.keys() == [b"fwrest:blobs"]
        assert direct.hgetall("fwrest:blobs") == {b"fwrest-keyset": b'{"garbage":1'}
        assert line == _refusal(run_cli("serve", str(config), cwd=tmp_path, timeout=30))


@pytest.mark.parametrize("form", ["sentinel", "cluster"])
def test_check_refuses_the_damaged_keys_in_redis_behind_sentinel_and_on_a_cluster(
    form: str, ca: trustme.CA, tmp_path: Path
) -> None:
    """The store's other forms (SPEC 15, 17.1), a cluster's keys under its database's prefix:
    ``fwrest check`` refuses a damaged key set, then a short signing key, writing nothing."""
    certs = issue_certs(ca, tmp_path / "certs")
    with contextlib.ExitStack() as stack:
        direct: Any
        if form == "sentinel":
            group = stack.enter_context(started(SentinelGroup(tmp_path / "redis", down_ms=5000)))
            url, direct = group.url, group.primary.client()
            key, blobs = "fwrest:signing_key", "fwrest:blobs"
        else:
            nodes = RedisCluster(tmp_path / "redis", replicas=0, db=2)
            cluster = stack.enter_context(started(nodes))
            url, direct = cluster.url, cluster.client()
            key, blobs = "fwrest:2:signing_key", "fwrest:2:blobs"
        stack.callback(direct.close)
        config = service_config(tmp_path, certs, url, signing_alg="ES256", module=unique_module())
        direct.hset(blobs, "fwrest-keyset", b'{"keys": 3}')
        line = _refusal(check(config, real=False))
        assert (
            "[HTTPSERVER] StateStore: the key set in the redis state store (blob fwrest-keyset) "
            'has no "keys" list' in line
        )
        assert direct.get(key) is None  # no signing key made either
        direct.hdel(blobs, "fwrest-keyset")
        direct.set(key, b"tooShortKey7")
        line = _refusal(check(config, real=False))
        assert (
            f"StateStore: the signing key in the Redis state store (key {key}) is corrupt" in line
        )
        assert "tooShortKey7" not in line
        assert direct.get(key) == b"tooShortKey7" and direct.hgetall(blobs) == {}


def test_memory_store_with_several_workers_is_warned_about(ca: trustme.CA, tmp_path: Path) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    config = service_config(tmp_path, certs, "memory")
    for workers, warned in ((2, True), (1, False)):
        with serving(config, workers=workers) as proc:
            text = proc.log()
        lines = [line for line in text.splitlines() if "StateStore=memory with --workers" in line]
        print(workers, lines)
        assert bool(lines) is warned, text
        if warned:
            assert " WARNING " in lines[0] and "--workers 2" in lines[0] and "OAUTH" in lines[0]


def test_check_names_what_the_memory_store_keeps_in_each_worker(
    ca: trustme.CA, tmp_path: Path
) -> None:
    """``fwrest check`` does not know ``--workers``: with ``StateStore=memory`` it warns once,
    naming what each worker would keep alone (the refresh tokens of the oAuth2 ports, the
    audit trail of a port with a scheme, the rate-limit counts) and where to read more."""
    certs = issue_certs(ca, tmp_path / "certs")

    def warnings(config: Path) -> list[str]:
        done = run_forked("check", str(config), cwd=config.parent)
        assert done.returncode == 0, done.stderr
        text = done.stdout + done.stderr
        return [line for line in text.splitlines() if "StateStore=memory" in line]

    for name in ("oauth", "sqlite"):
        (tmp_path / name).mkdir()
    (line,) = warnings(service_config(tmp_path / "oauth", certs, "memory"))
    print(line)
    assert (
        "): the refresh tokens, authorization codes and revocations of OAUTH, THROTTLED; the "
        "audit trail." in line
    )
    assert "rate-limit" not in line
    assert "each worker its own; lost at a reload or restart" in line
    assert "sqlite (the default) for several workers on one host" in line
    assert "docs/deploy.md#choosing-a-state-store" in line
    assert warnings(service_config(tmp_path / "sqlite", certs, "sqlite")) == []

    def basic(folder: Path, *, scheme: bool, limit: bool) -> Path:
        folder.mkdir()
        server: dict[str, Any] = {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT"}
        if scheme:
            auth = {"scheme": "basic", "OnAuth": "app.check"}
            server["FwData"] = {"Authorization": auth}
        extra: dict[str, Any] = {}
        if limit:
            extra = {"ROOT": {"RateLimit": "RL_API"}, "RL_API": {"Limit": 5, "Window": "1m"}}
        app = APP_SOURCE + "\n\ndef check(user, password):\n    return False\n"
        return free_config(folder, servers={"HTTP_REST": server}, app=app, extra=extra)

    (line,) = warnings(basic(tmp_path / "basic", scheme=True, limit=True))
    print(line)
    assert "): the audit trail; the rate-limit counts of ROOT." in line
    assert "refresh tokens" not in line
    (line,) = warnings(basic(tmp_path / "limit", scheme=False, limit=True))
    assert "): the rate-limit counts of ROOT." in line
    assert "audit" not in line
    # a port without a scheme and without a rate limit keeps nothing of note in the store
    assert warnings(basic(tmp_path / "plain", scheme=False, limit=False)) == []
