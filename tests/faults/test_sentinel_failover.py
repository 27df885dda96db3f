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
503 with ``Retry-After`` and leaves the token valid (an in-process port on the same group).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from fwrest.testing import Client
from tests.auth.oauth2_support import issue_certs
from tests.docs.blocks import ini_example
from tests.faults.failover import RESUMED_S, TwoHosts, host_configs
from tests.redis_support import SentinelGroup, started
from tests.store.support import oauth_service, unconfirmed_spend_is_undone

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
