"""SPEC 11.1: a hook key missing, ambiguous, or naming a function that cannot be called as the hook
stops ``fwrest check`` (exit 2, one message naming section and key)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_config, run_cli, run_forked

APP = """
from fwrest import get

def boot():
    pass

def stamp(extra=None):  # more parameters are fine with defaults
    pass

def recover(exc):
    return None

def choose():
    return None

def needs_two(a, b):
    pass

@get("/hello")
def hello():
    return {}
"""

OTHER = """
def boot():  # the same bare name as app.boot
    pass


def only_here():
    pass
"""


def check(tmp_path: Path, forked: bool = True, **extra: dict[str, Any]) -> tuple[int, str]:
    """``fwrest check`` with ``extra``: forked (:func:`run_forked`) or as a user runs it."""
    (tmp_path / "other.py").write_text(OTHER)
    config = free_config(tmp_path, app=APP, extra=extra)
    run = run_forked if forked else run_cli
    done = run("check", str(config), cwd=tmp_path)
    return done.returncode, done.stdout + done.stderr


def test_check_accepts_every_hook(tmp_path: Path) -> None:
    code, out = check(
        tmp_path,
        False,
        HTTP_REST={"OnSelect": "app.choose"},
        POOL={"OnStart": "app.boot", "OnStop": "boot", "OnSend": "stamp", "OnError": "recover"},
    )
    assert code == 0, out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"POOL": {"OnStart": "nope"}},
            "[POOL] OnStart: the function 'nope' is not in the repository",
        ),
        (
            {"POOL": {"OnStop": "boot"}, "ENV": {"Repository": "app, other"}},
            "[POOL] OnStop: the function name 'boot' is ambiguous: it matches app.boot, other.boot",
        ),
        (
            {"HTTP_REST": {"OnSelect": "boot"}, "ENV": {"Repository": "app, other"}},
            "[HTTP_REST] OnSelect: the function name 'boot' is ambiguous",
        ),
        (
            {"POOL": {"OnSend": "needs_two"}},
            "[POOL] OnSend: the function app.needs_two(a, b) cannot be called as OnSend(): "
            "missing a required argument: 'a'",
        ),
        (
            {"POOL": {"OnError": "boot"}},
            "[POOL] OnError: the function app.boot() cannot be called as OnError(exc): too many "
            "positional arguments",
        ),
        (
            {"HTTP_REST": {"OnSelect": "recover"}},
            "[HTTP_REST] OnSelect: the function app.recover(exc) cannot be called as OnSelect()",
        ),
        (
            # a pool's hooks come from the pool's own environment, not the server's others
            {
                "HTTP_REST": {"Locations": "ROOT, OTHER_ROOT"},
                "OTHER_ROOT": {"Path": "/other", "ThreadPool": "OTHER_POOL"},
                "OTHER_POOL": {"Environment": "OTHER_ENV"},
                "OTHER_ENV": {"Repository": "other"},
                "POOL": {"OnStart": "only_here"},
            },
            "[POOL] OnStart: the function 'only_here' is not in the repository",
        ),
    ],
)
def test_check_stops_on_a_hook_it_cannot_resolve(
    tmp_path: Path, extra: dict[str, dict[str, Any]], message: str
) -> None:
    code, out = check(tmp_path, **extra)
    print(out)
    assert code == 2
    assert "fwrest: configuration error:" in out and message in out
    assert "Traceback" not in out
