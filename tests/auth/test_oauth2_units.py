"""Units of OAuth2 (SPEC 4.2, 7): ``expiry``, ``params``, ``NoCheckPaths``, ``passwords``."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from argon2 import PasswordHasher

from fwrest.auth.oauth2.expiry import ExpiryError, access_ms, refresh_deadline
from fwrest.auth.oauth2.guard import NoCheckPaths
from fwrest.auth.oauth2.params import (
    OAuthError,
    ParamsError,
    ParamsSource,
    client_credentials,
    normalise,
    request_params,
)
from fwrest.auth.oauth2.passwords import dummy_check, same_secret, verify_password

FORM = "application/x-www-form-urlencoded"
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)

# -- access_expires ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ms"),
    [(3600000, 3600000), (3600, 3600),  # milliseconds, as written (the check warns about it)
     (90000.0, 90000), ("1h", 3_600_000), ("90s", 90_000), ("15m", 900_000), ("2d", 172_800_000),
     ("500ms", 500), ("1H", 3_600_000), (" 30 s ", 30_000), ("3600000", 3_600_000)],
)  # fmt: skip
def test_access_ms(value: Any, ms: int) -> None:
    assert access_ms(value) == ms


@pytest.mark.parametrize(
    "value",
    [True, None, 0, -5, "0s", "1y", "one hour", "1.5h", 1.5, [1], "9" * 5000, 10**30, "40000d"],
)
def test_access_ms_refuses(value: Any) -> None:
    with pytest.raises(ExpiryError):
        access_ms(value)


# -- refresh_expires ---------------------------------------------------------------------------


def _local_end_of(day: date) -> float:
    return datetime(day.year, day.month, day.day, 23, 59, 59).astimezone().timestamp()


def test_refresh_date_plus_n_is_the_end_of_that_day() -> None:
    now = datetime.now().astimezone()
    assert refresh_deadline("Date()+1", now) == _local_end_of(now.date() + timedelta(days=1))
    assert refresh_deadline("date() + 3", now) == _local_end_of(now.date() + timedelta(days=3))
    assert refresh_deadline("Date()", now) == _local_end_of(now.date())


def test_refresh_month_day_year() -> None:
    assert refresh_deadline("12/31/2099", NOW) == _local_end_of(date(2099, 12, 31))
    assert refresh_deadline("1/2/2030", NOW) == _local_end_of(date(2030, 1, 2))  # January 2nd
    assert refresh_deadline("01/01/2020", NOW) < NOW.timestamp()  # in the past: expired


def test_refresh_iso_8601() -> None:
    noon = datetime(2099, 6, 30, 12, tzinfo=UTC).timestamp()
    assert refresh_deadline("2099-06-30T12:00:00+00:00", NOW) == noon
    new_year = datetime(2020, 1, 1, tzinfo=UTC).timestamp()
    assert refresh_deadline("2020-01-01T00:00:00Z", NOW) == new_year
    assert refresh_deadline("2099-06-30", NOW) == _local_end_of(date(2099, 6, 30))


def test_refresh_python_values() -> None:
    assert refresh_deadline(timedelta(hours=2), NOW) == (NOW + timedelta(hours=2)).timestamp()
    assert refresh_deadline(date(2099, 1, 1), NOW) == _local_end_of(date(2099, 1, 1))
    aware = datetime(2099, 1, 1, 8, tzinfo=UTC)
    assert refresh_deadline(aware, NOW) == aware.timestamp()
    assert refresh_deadline("7d", NOW) == (NOW + timedelta(days=7)).timestamp()


@pytest.mark.parametrize(
    "value",
    ["13/45/2030", "tomorrow", "Date()+x", True, None, [1],
     # out of range: an ExpiryError too, never an overflow
     10**20, -(10**20), "Date()+99999999", "Date()+" + "9" * 30, timedelta(days=10**8), "9" * 40],
)  # fmt: skip
def test_refresh_refuses(value: Any) -> None:
    with pytest.raises(ExpiryError):
        refresh_deadline(value, NOW)


# -- request parameters ------------------------------------------------------------------------


def test_params_from_query_and_form_body() -> None:
    got = request_params("grant_type=password", b"username=ada&password=p%26w", FORM, "POST")
    assert got == {"grant_type": "password", "username": "ada", "password": "p&w"}


def test_a_parameter_without_a_value_counts_as_omitted() -> None:
    # RFC 6749 3.1
    assert request_params("a=1&b=", b"", None, "GET") == {"a": "1"}
    assert request_params("", b"scope=&c=2", FORM, "POST") == {"c": "2"}
    with pytest.raises(OAuthError):
        request_params("b=", b"b=x", FORM, "POST")  # still given twice


# through the token route: a body not a form, invalid UTF-8 (the hostile corpus's tr-* and
# u8-token-* cases), the caps on fields and values (test_oauth2.py, the corpus's *-4097 cases)


def test_client_credentials() -> None:
    assert client_credentials({}, None) is None
    assert client_credentials({"client_id": "c", "client_secret": "s"}, None) == ("c", "s", None)
    # decoded (RFC 6749 2.3.1), and as sent for a client that did not encode them
    decoded = client_credentials({}, "Basic d2ViOnNlYyUzQXJldA==")
    assert decoded == ("web", "sec:ret", ("web", "sec%3Aret"))
    assert client_credentials({}, "Basic d2ViOnM=") == ("web", "s", None)
    assert client_credentials({}, "Bearer abc") is None
    with pytest.raises(OAuthError) as info:
        client_credentials({}, "Basic !!!not-base64")
    assert info.value.status == 401 and info.value.error == "invalid_client"
    with pytest.raises(OAuthError) as both:
        client_credentials({"client_id": "c"}, "Basic d2ViOnM=")
    assert both.value.error == "invalid_request"


# -- onAuthparams normalisation -----------------------------------------------------------------


def test_single_keys() -> None:
    got = normalise({"client_id": "web", "client_secret": "s", "username": "ada", "password": "p",
                     "grant_type": "password", "access_expires": 3600000,
                     "refresh_expires": "Date()+1"})  # fmt: skip
    assert got.clients == (("web", "s"),)
    assert got.users == (("ada", "p"),)
    assert got.access_expires == 3600000 and got.refresh_expires == "Date()+1"
    assert got.types is None  # the single grant_type alone restricts nothing


def test_arrays_mixed_with_single_keys() -> None:
    got = normalise({
        "Client_Id": "web", "client_secret": "s", "username": "ada", "password": "p",
        "grant_type": "password", "client": [{"client_id": "mob", "CLIENT_SECRET": "m"}],
        "users": [{"username": "bob", "password": "b"}, {"UserName": "cy", "Password": "c"}],
        "expires": [{"access_expires": "90s", "refresh_expires": "12/31/2099"}],
        "types": [{"grant_type": "refresh_token"}],
    })  # fmt: skip
    assert got.clients == (("web", "s"), ("mob", "m"))
    assert got.users == (("ada", "p"), ("bob", "b"), ("cy", "c"))
    assert (got.access_expires, got.refresh_expires) == ("90s", "12/31/2099")
    assert got.types == ("password", "refresh_token")


def test_arrays_instead_of_single_keys() -> None:
    bob = [{"username": "bob", "password": "b"}]
    got = normalise({"users": bob, "types": {"grant_type": "password"}})
    assert (got.clients, got.users, got.types) == ((), (("bob", "b"),), ("password",))
    assert got.access_expires is None


@pytest.mark.parametrize(
    "raw",
    [None, [], "text", {"users": "bob"}, {"users": ["bob"]},
     {"username": "ada"},  # no password
     {"username": "ada", "password": 5}, {"client_id": ""}, {"client": [{"client_secret": "s"}]}],
)  # fmt: skip
def test_unusable_on_auth_params_are_params_errors(raw: Any) -> None:
    with pytest.raises(ParamsError):
        normalise(raw)


def test_legacy_form_is_detected_and_filled_by_reference() -> None:
    received: list[dict[str, str]] = []

    def legacy(params: dict[str, Any]) -> None:
        received.append(dict(params))
        params.update(username="ada", password="p", client_id="web", client_secret="s")

    def modern() -> dict[str, Any]:
        return {"username": "ada", "password": "q"}

    def with_default(extra: int = 1) -> dict[str, Any]:
        return {"username": "ada", "password": "r"}

    source = ParamsSource(legacy, None)
    assert source.legacy
    got = source.call_sync({"grant_type": "password", "username": "ada", "password": "secret",
                            "client_secret": "cs", "refresh_token": "rt"})  # fmt: skip
    assert got.users == (("ada", "p"),) and got.clients == (("web", "s"),)
    assert received == [{"grant_type": "password", "username": "ada"}]  # no secrets handed over
    assert not ParamsSource(modern, None).legacy
    assert ParamsSource(modern, None).call_sync({}).users == (("ada", "q"),)
    assert not ParamsSource(with_default, None).legacy


def test_params_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "params.json"
    path.write_text(json.dumps({"username": "ada", "password": "one"}))
    source = ParamsSource(None, path)
    assert source.read_file().users == (("ada", "one"),)
    path.write_text(json.dumps({"username": "ada", "password": "two", "x": 1}))
    assert source.read_file().users == (("ada", "two"),)
    # broken while serving, the last valid content stays (test_oauth2_clients); at a start, an error
    path.write_text("{not json")
    assert source.read_file().users == (("ada", "two"),)
    with pytest.raises(ParamsError, match="not valid JSON"):
        ParamsSource(None, path).read_file()
    path.unlink()
    assert source.read_file().users == (("ada", "two"),)
    with pytest.raises(ParamsError, match="cannot be read"):
        ParamsSource(None, path).read_file()


# -- onAuthNoCheckUri ---------------------------------------------------------------------------

PATTERNS = ["/public", "items/:id", "/open/*", "/rest/prefixed", "/slash/", "/files*"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/public", True), ("/Public", False), ("/public/x", False), ("/items/7", True),
     ("/items/7/8", False), ("/items/", False), ("/open", True), ("/open/a", True),
     ("/open/a/b/c", True), ("/opened", False), ("/rest/prefixed", True),
     ("/prefixed", False),  # the matcher sees what it is given; the guard tries both forms
     ("/slash", True), ("/files", True), ("/files.txt", True), ("/hello", False), ("/", False)],
)  # fmt: skip
def test_no_check_paths(path: str, expected: bool) -> None:
    assert NoCheckPaths(PATTERNS).matches(path) is expected


def test_no_check_paths_escape_regex_characters() -> None:
    paths = NoCheckPaths(["/a.b/:id", "/c+d/*"])
    assert paths.matches("/a.b/1") and not paths.matches("/aXb/1")
    assert paths.matches("/c+d/x") and not paths.matches("/ccd/x")


def test_no_check_paths_empty() -> None:
    assert not NoCheckPaths([]).matches("/anything")
    assert not NoCheckPaths(["", "  "]).matches("/")


# -- passwords ---------------------------------------------------------------------------------

ARGON = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1)


def test_plain_passwords_compare_as_utf8_bytes() -> None:
    assert verify_password("pässword", "pässword")
    assert not verify_password("passwörd", "pässword")
    assert not verify_password("", "x")
    assert same_secret("ü", "ü") and not same_secret("ü", "u")


def test_argon2id_hash() -> None:
    stored = ARGON.hash("Hana-Pw")
    assert stored.startswith("$argon2id$")
    assert verify_password("Hana-Pw", stored)
    assert not verify_password("hana-pw", stored)


def test_bcrypt_hash_and_the_72_byte_limit() -> None:
    exactly = "x" * 72
    stored = bcrypt.hashpw(exactly.encode(), bcrypt.gensalt(rounds=4)).decode()
    assert stored.startswith("$2b$")
    assert verify_password(exactly, stored)
    assert not verify_password(exactly + "y", stored)  # never a truncated match, never raises
    assert not verify_password("é" * 40, stored)  # 80 bytes
    assert not verify_password("x" * 71, stored)


@pytest.mark.parametrize("stored", ["$argon2id$garbage", "$2b$12$short", "$2b$"])
def test_broken_hashes_never_raise(stored: str) -> None:
    assert verify_password("anything", stored) is False


@pytest.mark.parametrize("like", ["plain", "$2b$04$" + "a" * 53, "$argon2id$v=19$m=8,t=1,p=1$x$y"])
def test_dummy_check_runs_for_every_kind(like: str) -> None:
    dummy_check("whatever", like)  # an unknown user costs one check of the same kind
    dummy_check("w" * 100, like)
