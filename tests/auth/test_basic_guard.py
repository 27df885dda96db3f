"""``BasicGuard`` in process: what it remembers, and never does (SPEC 4.1: ``OnAuth`` decides)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, cast

import pytest

from fwrest.auth import BasicGuard
from fwrest.auth.basic import _DECODED_MAX
from fwrest.auth.settings import AuthSettings
from fwrest.context.request import RequestContext
from fwrest.errors import HTTPError
from fwrest.server.app import Request


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def Ctx() -> RequestContext:
    """A real request context (the compiled guard takes no stand-in)."""
    return RequestContext(cast(Any, None), "GET", "/rest/x", "", [], b"", "127.0.0.1")


def guard_with(on_auth: Any, cache_s: int = 0) -> BasicGuard:
    """A Basic guard of ``on_auth`` (``cache_s``: its ``OnAuthCache``, SPEC 4.1)."""
    settings = AuthSettings(scheme="basic", on_auth_name="check", on_auth=on_auth, on_admin=None,
                            on_auth_is_async=asyncio.iscoroutinefunction(on_auth), max_failures=10,
                            cache_s=cache_s)  # fmt: skip
    return BasicGuard(settings, "TEST")


def request(value: str | None, *, from_http_layer: bool = True) -> Request:
    headers = [("host", "x")] + ([("authorization", value)] if value is not None else [])
    auth = value if from_http_layer else None
    return Request("GET", b"/rest/x", headers, b"", "127.0.0.1", 80, auth)


def check(guard: BasicGuard, req: Request) -> str:
    ctx = Ctx()
    asyncio.run(guard(req, ctx))  # type: ignore[arg-type]
    return ctx.auth_user


def test_on_auth_runs_for_every_request_with_the_same_header() -> None:
    calls: list[tuple[str, str]] = []
    allowed = {"ann"}

    async def on_auth(user: str, password: str) -> bool:
        calls.append((user, password))
        return user in allowed

    guard = guard_with(on_auth)
    value = header("ann", "pw:1")
    assert check(guard, request(value)) == "ann"
    assert check(guard, request(value)) == "ann"
    assert calls == [("ann", "pw:1"), ("ann", "pw:1")]
    allowed.clear()  # the application revokes ann: the very next request is refused
    with pytest.raises(HTTPError) as refused:
        check(guard, request(value))
    assert refused.value.status == 403
    assert len(calls) == 3


def test_a_header_found_only_in_the_list_is_read_too() -> None:
    async def on_auth(user: str, password: str) -> bool:
        return (user, password) == ("bob", "s3cret")

    guard = guard_with(on_auth)
    assert check(guard, request(header("bob", "s3cret"), from_http_layer=False)) == "bob"
    with pytest.raises(HTTPError) as missing:
        check(guard, request(None))
    assert missing.value.status == 401


def test_bad_headers_are_401_and_not_remembered() -> None:
    async def on_auth(user: str, password: str) -> bool:
        return True

    guard = guard_with(on_auth)
    for bad in ("Basic !!!", "Bearer abc", "Basic " + base64.b64encode(b"nocolon").decode()):
        with pytest.raises(HTTPError) as info:
            check(guard, request(bad))
        assert info.value.status == 401
    assert guard._decoded == {}


def test_remembered_headers_are_bounded() -> None:
    def on_auth(user: str, password: str) -> bool:
        return True

    guard = guard_with(on_auth)
    for i in range(_DECODED_MAX * 2 + 10):
        assert check(guard, request(header(f"user{i}", "pw"))) == f"user{i}"
        assert len(guard._decoded) <= _DECODED_MAX
