"""``StateStore``: sqlite, memory or a SPEC 15/17.1 Redis URL redis-py takes (``redis://``,
``rediss://``, ``unix://``, ``redis+sentinel://``, ``redis+cluster://``, ``rediss+cluster://``), and
``StateStoreCA``, ``StateStoreCert``/``Key``, ``StateStorePassword``, checked at load; a password
never shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trustme

from fwrest import ConfigError
from fwrest.config import load_config
from fwrest.store import RedisOptions
from tests.redis_support import redis_tls


def _config(store: str) -> dict[str, Any]:
    return {
        "HTTPSERVER": {"Enable": 1, "Servers": "S", "StateStore": store},
        "S": {"HostName": "127.0.0.1", "Port": 0, "Locations": "R"},
        "R": {"Path": "/rest", "ThreadPool": "P"},
        "P": {"Environment": "E"},
        "E": {"Repository": "app"},
    }


URLS = [
    "redis://127.0.0.1:6379/0", "rediss://:pw@cache.example:6380/2", "redis://127.0.0.1",
    "unix:///run/redis/redis.sock?db=2", "redis+sentinel://10.0.0.5:26379,10.0.0.6/main/1",
    "redis+sentinel://:pw@[::1]:26379/main", "redis+cluster://10.0.0.7:7000,10.0.0.8/3",
    "rediss+cluster://:pw@[::1]:7000",
]  # fmt: skip


@pytest.mark.parametrize(
    ("store", "expected"), [("SQLite", "sqlite"), ("memory", "memory")] + [(u, u) for u in URLS]
)
def test_good_stores_are_taken(store: str, expected: str) -> None:
    assert load_config(_config(store)).state_store == expected


@pytest.mark.parametrize(
    ("store", "words"),
    [
        ("redis://:Sup3rS3cret@127.0.0.1:notaport/0", "is not a Redis URL"),
        ("redis://:Sup3rS3cret@127.0.0.1:99999/0", "is not a Redis URL"),
        ("redis://", "names no host"),
        ("redis://127.0.0.1:6379/sessions", "which is not a number"),
        ("redis://127.0.0.1:6379/0?socket_timeout=soon", "is not a Redis URL"),
        ("postgres://:Sup3rS3cret@db/1", "is not a state store"),
        ("redis://:Sup3r/S3cret@127.0.0.1:6379/0", "a character that ends it early"),
        ("unix://:Sup3rS3cret@", "names no socket"),
        ("unix:///run/redis.sock?db=first", "is not a Redis URL"),
        ("redis+sentinel://:Sup3rS3cret@h1:26379", "names no primary"),
        ("redis+sentinel://:Sup3rS3cret@h1:port/main/0", "not host:port"),
        ("redis+sentinel://:Sup3rS3cret@h1,,h2/main/0", "names an empty sentinel"),
        ("redis+sentinel://:Sup3rS3cret@h1/main/zero", "which is not a number"),
        ("redis+cluster://:Sup3rS3cret@h1:7000,h2:port/0", "not host:port"),
        ("redis+cluster://:Sup3rS3cret@h1,,h2/0", "names an empty cluster node"),
        ("rediss+cluster://:Sup3rS3cret@h1:7000/zero", "which is not a number"),
        ("redis+cluster://:Sup3rS3cret@/0", "names an empty cluster node"),
    ],
)
def test_bad_stores_are_refused_without_showing_a_password(store: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(store))
    text = str(info.value)
    assert words in text and "StateStore" in text
    assert "Sup3rS3cret" not in text


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return redis_tls(trustme.CA(), tmp_path_factory.mktemp("redis-tls"))


def _with(store: str, **keys: Any) -> dict[str, Any]:
    config = _config(store)
    config["HTTPSERVER"].update(keys)
    return config


def _tls_keys(files: Any) -> dict[str, str]:
    """The CA, client certificate and key of SPEC 15's TLS keys."""
    return {"StateStoreCA": str(files.ca), "StateStoreCert": str(files.client_cert),
            "StateStoreKey": str(files.client_key)}  # fmt: skip


def test_a_cluster_store_takes_the_tls_files(tls_files: Any) -> None:
    """SPEC 17.1: rediss+cluster:// takes the TLS keys of SPEC 15, as rediss:// does."""
    config = load_config(_with("rediss+cluster://h1:7000,h2:7000/0", **_tls_keys(tls_files)))
    assert config.redis == RedisOptions(tls_files.ca, tls_files.client_cert, tls_files.client_key)


def test_the_tls_files_and_the_password_are_read_at_load(
    tls_files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_PW", "Sup3rS3cret")
    keys = {**_tls_keys(tls_files), "StateStorePassword": "env:REDIS_PW"}
    config = load_config(_with("rediss://fwrest@cache.example:6380/0", **keys))
    assert config.redis == RedisOptions(
        tls_files.ca, tls_files.client_cert, tls_files.client_key, "Sup3rS3cret"
    )
    assert "Sup3rS3cret" not in repr(config)  # a traceback's locals never show it
    assert load_config(_config("redis://127.0.0.1/0")).redis == RedisOptions()


def test_bad_redis_keys_are_refused_naming_the_key(
    tls_files: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_PW_UNSET", raising=False)
    monkeypatch.setenv("REDIS_PW_EMPTY", "")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    tls = "rediss://127.0.0.1:6380/0"
    cases = [
        (_with("redis://127.0.0.1/0", StateStoreCA=str(tls_files.ca)), "StateStoreCA",
         "StateStore is not a rediss://"),
        (_with(tls, StateStoreCA=str(tmp_path / "none.pem")), "StateStoreCA", "does not exist"),
        (_with(tls, StateStoreCA=str(garbage)), "StateStoreCA", "holds no CA certificate"),
        (_with(tls, StateStoreCert=str(tls_files.client_cert)), "StateStoreKey",
         "is set without StateStoreKey"),
        (_with(tls, StateStoreCert=str(garbage), StateStoreKey=str(tls_files.client_key)),
         "StateStoreCert", "cannot be loaded"),
        (_with(tls, StateStorePassword="env:REDIS_PW_UNSET"), "StateStorePassword",
         "the environment variable REDIS_PW_UNSET is not set"),
        (_with(tls, StateStorePassword="env:REDIS_PW_EMPTY"), "StateStorePassword",
         "the password is empty"),
        (_with("sqlite", StateStorePassword="Sup3rS3cret"), "StateStorePassword",
         "but the state store is sqlite"),
        (_with("redis+cluster://h1:7000/0", StateStoreCA=str(tls_files.ca)), "StateStoreCA",
         "StateStore is not a rediss:// or rediss+cluster://"),
        (_with("rediss+cluster://h1:7000/0", StateStoreCert=str(tls_files.client_cert)),
         "StateStoreKey", "is set without StateStoreKey"),
    ]  # fmt: skip
    for config, key, words in cases:
        with pytest.raises(ConfigError) as info:
            load_config(config)
        text = str(info.value)
        assert f"[HTTPSERVER] {key}: " in text and words in text, text
        assert "Sup3rS3cret" not in text
