"""SPEC 7.1: what the throttle counts as one user and one address, both schemes (``maxFailures`` 3,
memory store; each test its own names and addresses). Names are case-folded and NFKC-normalised
(``Alice``, ``ALICE``, fullwidth: one user, locked under any spelling; the validator gets the name
as sent). IPv6 counts per /64 (addresses via ``X-Forwarded-For`` from ``TrustedProxies=127.0.0.1``:
loopback has one IPv6 address). An IPv4 client of a dual-stack port (``::ffff:127.0.0.x``, a real
``fwrest serve``) counts as IPv4, not as the shared ``::/64``."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from fwrest.auth.throttle import address_key, port_keys, user_key
from tests.auth.oauth2_support import TOKEN, LocalService, local_oauth, oauth_section, params_source
from tests.conftest import (
    APP_SOURCE,
    ServerProcess,
    free_config,
    local_port,
    module_config,
    serving,
)

MAX = 3
USERS = {"alice": "Alice-Pw-1", "bob": "Bob-Pw-2", "carol": "Carol-Pw-3",
         **{f"{k}{i}": f"{k.upper()}{i}-Pw" for k in "uv" for i in range(1, 9)}}  # fmt: skip
APP = (
    APP_SOURCE
    + f"""

_USERS = {USERS!r}


def check(user, password):
    return _USERS.get(user) == password
"""
    + params_source(
        client_id="web", users=[{"username": u, "password": p} for u, p in USERS.items()]
    )
)


MODULE = "tauth_throttle_keys_app"
BASIC_AUTH = {"Authorization": {"scheme": "basic", "OnAuth": "app.check", "maxFailures": MAX}}


class Ports:
    """The Basic and the oAuth2 port, in this process, behind the trusted proxy 127.0.0.1."""

    def __init__(self, svc: LocalService) -> None:
        self.svc = svc
        self.http = svc["BASIC"].http
        self.https = svc["OAUTH"].http

    def basic_get(self, user: str, password: str, client: str) -> int:
        """A Basic request of ``client`` (X-Forwarded-For); the name sent as UTF-8."""
        header = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers = {"Authorization": f"Basic {header}", "X-Forwarded-For": client}
        return self.http.get("/rest/hello", headers=headers).status_code

    def grant(self, user: str, password: str, client: str) -> int:
        form = {"grant_type": "password", "username": user, "password": password}
        return self.https.post(
            "/rest" + TOKEN, data=form, headers={"X-Forwarded-For": client}
        ).status_code

    def warnings(self, needle: str) -> list[str]:
        return lockout_warnings(self.svc.log(), needle)


def _write(folder: Path, certs: dict[str, Path]) -> Path:
    oauth = oauth_section(certs, onAuthparams=f"{MODULE}.params", maxFailures=MAX)
    oauth["TrustedProxies"] = "127.0.0.1"
    basic = {"Authorization": {**BASIC_AUTH["Authorization"], "OnAuth": f"{MODULE}.check"}}
    servers = {"BASIC": local_port(TrustedProxies="127.0.0.1", FwData=basic), "OAUTH": oauth}
    return module_config(folder, MODULE, servers=servers, app=APP)


@pytest.fixture(scope="module")
def ports(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    for svc in local_oauth(ca, tmp_path_factory.mktemp("throttle_keys"), _write):
        yield Ports(svc)


@pytest.fixture(scope="module")
def dual(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real ``fwrest serve`` of a dual-stack Basic port (``HostName=::``)."""
    servers = {"DUAL": {"HostName": "::", "Port": 0, "Locations": "ROOT", "FwData": BASIC_AUTH}}
    config = free_config(tmp_path_factory.mktemp("throttle_dual"), servers=servers, app=APP)
    with serving(config) as proc:
        yield proc


def lockout_warnings(log: str, needle: str) -> list[str]:
    return [line for line in log.splitlines() if "WARNING" in line and needle in line]


# -- one user, however spelled ----------------------------------------------------------------


# per scheme: how a request is made (a method of Ports) and its refusal's status
SCHEMES = {"basic-port": ("basic_get", 403), "token-route": ("grant", 400)}
# per scheme: the spellings of one user (the last: fullwidth), the addresses' network, the subject
# the lock-out's warning names
SPELLINGS = {
    "basic-port": (["Alice", "ALICE", "\uff21\uff4c\uff49\uff43\uff45"], "alice", "192.0.2.",
                   "user:alice"),
    "token-route": (["Bob", "BOB", "\uff42\uff4f\uff42"], "bob", "198.51.100.", "user 'bob'"),
}  # fmt: skip


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_spellings_of_one_user_name_count_as_one(ports: Ports, scheme: str) -> None:
    (ask, refused), (names, user, net, subject) = SCHEMES[scheme], SPELLINGS[scheme]
    send = getattr(ports, ask)
    statuses = [send(name, "guess", f"{net}{i + 1}") for i, name in enumerate(names)]
    assert statuses == [refused] * MAX  # three addresses: only the user's count reaches 3
    locked = send(user, USERS[user], f"{net}9")  # the right password
    print(f"{scheme}: {names} wrong from 3 addresses: {statuses}; {user!r} right: {locked}")
    assert locked == 429
    assert send("carol", USERS["carol"], f"{net}1") == 200  # not the addresses
    assert len(ports.warnings(subject)) == 1


# -- IPv6 per /64 ---------------------------------------------------------------------------


# per scheme: three addresses of one /64, another of it, one of the next /64, the subject the
# lock-out's warning names
SAME_64 = {
    "basic-port": (["2001:db8:1:2::a", "2001:db8:1:2::b", "2001:db8:1:2:ffff:ffff:ffff:ffff"],
                   "2001:db8:1:2::1234", "2001:db8:1:3::1", "ip:2001:db8:1:2::/64"),
    "token-route": (["2001:db8:5:6::a", "2001:db8:5:6::b", "2001:db8:5:6:ffff:ffff:ffff:ffff"],
                    "2001:db8:5:6::1234", "2001:db8:5:7::1", "client 2001:db8:5:6::/64"),
}  # fmt: skip


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_ipv6_clients_count_per_64(ports: Ports, scheme: str) -> None:
    (ask, refused), (addresses, other, next_one, subject) = SCHEMES[scheme], SAME_64[scheme]
    send = getattr(ports, ask)
    statuses = [send(f"u{i + 1}", "guess", address) for i, address in enumerate(addresses)]
    assert statuses == [refused] * MAX  # three users: only the /64's count reaches 3
    in_64 = send("u4", USERS["u4"], other)
    next_64 = send("u5", USERS["u5"], next_one)
    print(f"{scheme}: 3 failures from {addresses}: another of its /64 {in_64}, next {next_64}")
    assert (in_64, next_64) == (429, 200)
    assert len(ports.warnings(subject)) == 1


def test_ipv4_clients_of_a_dual_stack_port_count_apart(dual: ServerProcess) -> None:
    def get(local: str, user: str, password: str) -> int:
        transport = httpx.HTTPTransport(local_address=local)
        with httpx.Client(transport=transport, timeout=15) as client:
            url = f"http://127.0.0.1:{dual.ports['DUAL']}/rest/hello"
            return client.get(url, auth=(user, password)).status_code

    statuses = [get("127.0.0.71", f"v{i}", "guess") for i in range(1, MAX + 1)]
    assert statuses == [403] * MAX
    assert get("127.0.0.71", "v4", USERS["v4"]) == 429  # that address is locked
    other = get("127.0.0.72", "v5", USERS["v5"])
    print(f"dual-stack port: 127.0.0.71 locked after {statuses}; 127.0.0.72: {other}")
    assert other == 200  # ::ffff:127.0.0.72 is not ::ffff:127.0.0.71's /64
    assert len(lockout_warnings(dual.log(), "ip:127.0.0.71")) == 1


# -- the keys themselves ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "key"),
    [
        (["Alice", "ALICE", "alice", "\uff21\uff4c\uff49\uff43\uff45"], "alice"),
        (["Stra\u00dfe", "STRASSE", "strasse"], "strasse"),  # full case folding
        (["\u01c5", "\u01c4", "d\u017e"], "d\u017e"),  # the titlecase digraph
        (["\ufb01le", "FILE"], "file"),  # a compatibility ligature
        (["Zo\u00eb", "ZOE\u0308"], "zo\u00eb"),  # composed or not
    ],
)
def test_user_keys_fold_case_and_compatibility_forms(names: list[str], key: str) -> None:
    assert {user_key(name) for name in names} == {key}


@pytest.mark.parametrize(
    ("address", "key"),
    [("192.0.2.7", "192.0.2.7"), ("2001:db8:1:2::a", "2001:db8:1:2::/64"),
     ("2001:DB8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"), ("2001:db8:1:3::", "2001:db8:1:3::/64"),
     ("::1", "::/64"), ("::ffff:127.0.0.71", "127.0.0.71"), ("fe80::1%eth0", "fe80::/64"),
     ("not an address", "not an address")],
)  # fmt: skip
def test_address_keys_are_ipv4_or_an_ipv6_64(address: str, key: str) -> None:
    assert address_key(address) == key


def test_keys_are_per_port() -> None:
    assert port_keys("OAuth") == ("oauth|user:", "oauth|ip:")
