"""A Redis Sentinel failover under load (SPEC 15, and SPEC 7's rules for a store out of reach).

A real primary, a replica and three sentinels (``redis-sentinel``, quorum 2, the primary taken
for down after 500 ms); two fwrest hosts (``fwrest serve``, one worker each, two configs in two
folders) on ``StateStore=redis+sentinel://...``, each with an oAuth2 port (one issuer for both)
and a Basic port; their ``[HTTPSERVER]`` lines are docs/deploy.md's (``deploy-redis-sentinel``),
the primary's password given by ``StateStorePassword=env:NAME``. A bounded load: password grants and refreshes alternating between the
hosts, bearer calls with a token issued before the fault, Basic calls. Mid-run the primary is
killed (SIGKILL, a crashed host); the sentinels promote the replica.

* while the primary changes, what needs the store (grants, refreshes) answers 503 with
  ``Retry-After`` within 1.5 s, never a hang or a 500; bearer and Basic calls answer 200
  throughout;
* once the sentinels name the new primary, grants and refreshes work again on both hosts,
  without a restart (the same processes);
* no refresh token is spent twice: a refresh client retries its token after a 503 and takes
  the new one after a 200; every refresh token answered 200 more than once is a double spend
  (counted: 0), and after the run each token that was answered 200 is presented again: none is
  answered 200 (a spend the old primary confirmed but did not pass on would be).

And before any failover: a refresh whose spend the replica does not confirm (frozen) answers
503 with ``Retry-After`` and leaves the token valid (an in-process port on the same group); so
do a revocation and a DPoP proof's use with the replica cut off, and what the client's retries
revoke after the primary dies holds on the promoted replica. After a ``SENTINEL FAILOVER`` the
store's writes go to the new primary at once, not to the old one (a master for seconds more).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
import trustme

from fwrest.store import RedisOptions, UnconfirmedWrite
from fwrest.store.redis import RedisStore
from fwrest.testing import Client
from tests.auth.dpop_support import DpopKey, dpop_headers
from tests.auth.oauth2_support import issue_certs
from tests.conftest import run_cli, wait_for
from tests.docs.blocks import ini_example
from tests.faults.failover import RESUMED_S, TwoHosts, host_configs
from tests.redis_support import SentinelGroup, started
from tests.store.support import TOKEN, oauth_service, unconfirmed_spend_is_undone

USERS = [("ada", "Ada-Pw-7731"), ("bob", "Bob-Pw-2207")]
REDIS_PASSWORD = "Sentinel-Pw-3141"
PASSWORD_ENV = "FWREST_TEST_SENTINEL_PASSWORD"


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    with started(SentinelGroup(tmp_path / "redis", down_ms=500, password=REDIS_PASSWORD)) as group:
        yield group


def test_a_failover_under_load(ca: trustme.CA, tmp_path: Path, sentinels: SentinelGroup) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    addresses = ",".join(f"127.0.0.1:{port}" for port in sentinels.ports)
    nodes = {"10.0.0.21:26379,10.0.0.22:26379,10.0.0.23:26379": addresses}
    configs, url = host_configs(
        tmp_path, certs, ini_example("deploy-redis-sentinel", replacements=nodes), USERS
    )
    assert url.endswith(f"/{sentinels.name}/0")
    hosts = TwoHosts(configs, certs, REDIS_PASSWORD, USERS)
    try:
        hosts.start_load()
        old_port = sentinels.primary.port
        try:
            time.sleep(1.5)
            fault = time.monotonic()  # before the signal: a 503 may precede kill()'s return
            sentinels.primary.kill()
            deadline = fault + 30
            while sentinels.primary_port() == old_port:
                assert time.monotonic() < deadline, "the sentinels never promoted the replica"
                time.sleep(0.05)
            switched = time.monotonic()
            time.sleep(RESUMED_S)
        finally:
            outcomes = hosts.load.stop()
        hosts.check_load(
            outcomes, fault, switched, "primary killed; the sentinels named the new one"
        )
        hosts.check_no_double_spend()
    finally:
        codes = hosts.stop()
    assert codes == {"A": 0, "B": 0}


def test_a_refresh_the_replica_does_not_confirm_answers_503_and_the_token_stays_valid(
    ca: trustme.CA, tmp_path: Path, sentinels: SentinelGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spend the primary did but the replica did not confirm within the ``WAIT`` would be
    lost if the primary died now (the promoted replica holding the token unspent: two pairs
    from one token): 503, the spend undone, and the retry after the thaw gets the one pair."""
    monkeypatch.setenv(PASSWORD_ENV, REDIS_PASSWORD)
    keys = {"StateStore": sentinels.url, "StateStorePassword": f"env:{PASSWORD_ENV}"}
    with Client(oauth_service(tmp_path, ca, "sentinel_unconfirmed", keys)) as client:
        unconfirmed_spend_is_undone(client, [sentinels.replica])


def _retried(ask: Callable[[], httpx.Response]) -> httpx.Response:
    """``ask()`` again after each 503 (as ``Retry-After`` says) for up to 30 s: a failover."""
    answer = ask()
    give_up = time.monotonic() + 30
    while answer.status_code == 503 and time.monotonic() < give_up:
        time.sleep(float(answer.headers.get("retry-after") or 1))
        answer = ask()
    return answer


def test_a_revocation_the_replica_does_not_confirm_is_503_and_holds_after_the_failover(
    ca: trustme.CA, tmp_path: Path, sentinels: SentinelGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC 12.3, 7 and 16.2 across a failover (SPEC 17.1): with the replica cut off (frozen,
    its link killed) the primary alone would keep a revocation (RFC 7009's, ``fwrest tokens
    revoke``'s, a replay's) or a proof's use, and a failover would lose it (a review saw
    revoked tokens work again on the promoted replica): each answers 503 (the command exits 1).
    The primary killed and the replica promoted, the client's retries revoke, and nothing
    revoked works again; the proof answered 503 is used once, then is a replay."""
    monkeypatch.setenv(PASSWORD_ENV, REDIS_PASSWORD)
    keys = {"StateStore": sentinels.url, "StateStorePassword": f"env:{PASSWORD_ENV}"}
    config = oauth_service(tmp_path, ca, "sentinel_revoked", keys)
    grant = {"grant_type": "password", "username": "ada", "password": "Ada-Pw-7731"}

    def command(awaited: str) -> subprocess.CompletedProcess[str]:
        """The command, run again (as it says) while it fails otherwise than ``awaited`` says
        (no sentinel answering in time on a loaded machine)."""
        for _ in range(5):
            done = run_cli("tokens", "revoke", str(config), "--user", "ada", cwd=tmp_path)
            if awaited in done.stdout + done.stderr:
                break
            time.sleep(1)
        return done

    with Client(config) as client:
        dpop = DpopKey()
        hello = f"{client.base_url}/rest/hello"
        token_url = f"{client.base_url}{TOKEN}"
        bound = _retried(  # a proof's use no replica confirmed: 503
            lambda: client.post(TOKEN, data=grant, headers={"DPoP": dpop.proof("POST", token_url)})
        )
        logout, replayed = (client.post(TOKEN, data=grant).json() for _ in range(2))
        old = {"grant_type": "refresh_token", "refresh_token": replayed["refresh_token"]}
        renewed = _retried(lambda: client.post(TOKEN, data=old)).json()
        revoke = {"token": logout["refresh_token"], "client_id": "web"}
        proof = dpop.proof("GET", hello, bound.json()["access_token"])
        used = dpop_headers(bound.json()["access_token"], proof)
        asks: dict[str, Callable[[], httpx.Response]] = {
            "RFC 7009": lambda: client.post("/rest/fw/oauth2/revoke", data=revoke),
            "replay": lambda: client.post(TOKEN, data=old),
            "DPoP proof": lambda: client.get("/rest/hello", headers=used),
        }
        with contextlib.closing(sentinels.primary.client()) as primary:
            sentinels.replica.freeze()
            try:
                primary.client_kill_filter(_type="replica")
                wait_for(lambda: primary.info("replication")["connected_slaves"] == 0, 10, "cut")
                for name, ask in asks.items():
                    answer = ask()
                    assert answer.status_code == 503, (name, answer.text)
                    assert answer.headers.get("retry-after") == "1", name
                cli = command("may not be kept")
                assert cli.returncode == 1, cli.stdout + cli.stderr
                assert "may not be kept; run the command again" in cli.stderr, cli.stderr
                sentinels.primary.kill()
            finally:
                sentinels.replica.thaw()
        wait_for(lambda: sentinels.primary_port() == sentinels.replica.port, 30, "promoted")
        assert _retried(asks["RFC 7009"]).status_code == 200
        assert _retried(asks["replay"]).json()["error"] == "invalid_grant"
        # answered 503: not used (401 while the worker's view still holds a revocation of the
        # command that the old primary took with it: a second at most, the proof not noted)
        wait_for(lambda: asks["DPoP proof"]().status_code == 200, 10, "the proof used once")
        assert asks["DPoP proof"]().status_code == 401  # used now
        for name, token in (("revoked", logout), ("replayed", renewed)):
            again = {"grant_type": "refresh_token", "refresh_token": token["refresh_token"]}
            refused = _retried(lambda: client.post(TOKEN, data=again))  # noqa: B023
            assert refused.json()["error"] == "invalid_grant", (name, refused.text)
            bearer = {"Authorization": f"Bearer {token['access_token']}"}
            wait_for(lambda: client.get("/rest/hello", headers=bearer).status_code == 401,  # noqa: B023
                     5, f"the {name} family's access token refused")  # fmt: skip
        cli = command("revoked")
        assert cli.returncode == 0, cli.stdout + cli.stderr


def test_the_store_leaves_a_primary_the_sentinels_replaced(sentinels: SentinelGroup) -> None:
    """After a ``SENTINEL FAILOVER`` the old primary stays a master until the sentinels next
    look at it (up to 10 s), and redis-py's pool asks the sentinels only as it connects: its
    connections kept writing there, writes the new primary never got (a review lost
    revocations so, and saw a host answer 503 for 16 s). A write no replica confirmed asks
    the sentinels again: the next one goes to the new primary."""
    old, new = sentinels.primary, sentinels.replica
    for node in (old, new):  # a replica attaching syncs at once (no 5 s wait to confirm)
        with contextlib.closing(node.client()) as direct:
            direct.config_set("repl-diskless-sync-delay", 0)
    store = RedisStore(sentinels.url, RedisOptions(password=REDIS_PASSWORD))
    sentinel = redis.Redis(port=sentinels.ports[0], socket_timeout=2)
    try:

        def revoked(family: str) -> bool:
            try:
                store.revoke_family(family, time.time() + 60)
            except UnconfirmedWrite:
                return False
            return True

        wait_for(lambda: revoked("before"), 10, "a revocation the replica confirms")
        sentinel.execute_command("SENTINEL", "FAILOVER", sentinels.name)
        wait_for(lambda: sentinels.primary_port() == new.port, 30, "the new primary named")
        with contextlib.closing(old.client()) as direct:
            direct.config_resetstat()
            wait_for(lambda: revoked("after"), 10, "a revocation on the new primary")
            stats = direct.info("commandstats")
        # the one write that found the old primary without its replica, if any: unconfirmed
        assert int(stats.get("cmdstat_zadd", {}).get("calls", 0)) <= 1, stats
        with contextlib.closing(new.client()) as direct:
            assert direct.zscore("fwrest:revoked", "after") is not None
    finally:
        sentinel.close()
        store.close()
