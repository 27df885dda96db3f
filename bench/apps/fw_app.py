"""fwrest's side of the benchmark: the endpoints and the functions its configs name.

Imported by fwrest from the ``Repository`` of the generated config; the routes are served
under the location ``/rest``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bench.apps import common
from fwrest import get, post, rest


@get("/hello", description="case 1, 2, 3, 7, 8, 9: an async JSON endpoint")
async def hello() -> dict[str, Any]:
    return common.hello()


@get("/hello-sync", description="case 5: a def endpoint, run in the location's thread pool")
def hello_sync() -> dict[str, Any]:
    return common.blocking_work()


async def stamp() -> None:
    """An ``async def`` ``OnSend`` (SPEC 11.1) that sets one header (``bench.pipeline``'s
    ``on-send`` job)."""
    rest.setKeyHeaderResponse("X-Served-By", "bench")


def check_user(user: str, password: str) -> bool:
    """The trivial Basic validator of case 2 (a def, as in examples/app/auth.py)."""
    return common.same(user, common.USER) & common.same(password, common.PASSWORD)


_argon2: tuple[Any, str] | None = None  # (hasher, hash of the password), made on first use


def check_user_argon2(user: str, password: str) -> bool:
    """Case 2's argon2id validator, as examples/app/auth.py's (a def; the hash is made on
    first use, so that the servers of other cases do not pay for it)."""
    global _argon2
    from argon2 import PasswordHasher
    from argon2.exceptions import InvalidHashError, VerificationError

    if _argon2 is None:
        hasher = PasswordHasher()  # the example's parameters (the library's defaults)
        _argon2 = (hasher, hasher.hash(common.PASSWORD))
    hasher, stored = _argon2
    try:  # an unknown user is checked against the hash too, as in the example
        return bool(hasher.verify(stored, password)) and user == common.USER
    except (VerificationError, InvalidHashError):
        return False


async def acheck_user(user: str, password: str) -> bool:
    """The same validator as an ``async def`` (fwrest awaits it on the loop)."""
    return common.same(user, common.USER) & common.same(password, common.PASSWORD)


def oauth_params() -> dict[str, Any]:
    """``onAuthparams`` of the oAuth2 ports: one client, one user, a plain-text password."""
    return {
        "client_id": common.CLIENT_ID,
        "client_secret": common.CLIENT_SECRET,
        "users": [{"username": common.USER, "password": common.PASSWORD}],
        "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"}],
        "access_expires": "1h",
        "refresh_expires": "Date()+1",
    }


async def aoauth_params() -> dict[str, Any]:
    """The same ``onAuthparams`` as an ``async def`` (fwrest awaits it on the loop)."""
    return oauth_params()


@get("/big", description="case 11: a 64 KiB JSON answer (compressed when the server is told)")
async def big() -> dict[str, Any]:
    return common.BIG


class Line(msgspec.Struct):
    """A line of case 16's order (FastAPI's twin: a pydantic model, bench/apps/fastapi_app.py)."""

    sku: str
    qty: int
    unit_cents: int
    note: str = ""


class Order(msgspec.Struct):
    customer: str
    lines: list[Line]
    note: str = ""


@post("/orders", description="case 16: a 1 KiB JSON body decoded and validated into a struct")
async def orders(order: Order) -> dict[str, Any]:
    return common.order_summary(order.customer, [(li.qty, li.unit_cents) for li in order.lines])


@get("/items/:id", description="case 16: case 1's endpoint with a typed int path parameter")
async def item(id: int) -> dict[str, Any]:
    return {"message": "Hello, world!", "id": id}


@get("/items-text/:id", description="case 16: the same with an untyped path parameter")
async def item_text(id):  # no hint: the text, as an untyped handler takes it
    return {"message": "Hello, world!", "id": id}
