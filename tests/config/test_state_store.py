"""``StateStore``: sqlite, memory or a Redis URL that redis-py takes; a password never shown."""

from __future__ import annotations

from typing import Any

import pytest

from fwrest import ConfigError
from fwrest.config import load_config


def _config(store: str) -> dict[str, Any]:
    return {
        "HTTPSERVER": {"Enable": 1, "Servers": "S", "StateStore": store},
        "S": {"HostName": "127.0.0.1", "Port": 0, "Locations": "R"},
        "R": {"Path": "/rest", "ThreadPool": "P"},
        "P": {"Environment": "E"},
        "E": {"Repository": "app"},
    }


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        ("SQLite", "sqlite"),
        ("memory", "memory"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("rediss://:pw@cache.example:6380/2", "rediss://:pw@cache.example:6380/2"),
        ("redis://127.0.0.1", "redis://127.0.0.1"),
    ],
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
    ],
)
def test_bad_stores_are_refused_without_showing_a_password(store: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(store))
    text = str(info.value)
    assert words in text and "StateStore" in text
    assert "Sup3rS3cret" not in text
