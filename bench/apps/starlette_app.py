"""Starlette peers (on uvicorn with httptools + uvloop), written the way its docs show:
``AuthenticationMiddleware`` with a backend for Basic and Bearer, ``request.form()`` for the
token route, a plain ``def`` endpoint (Starlette runs it in its thread pool) for case 5.

uvicorn starts them with ``--factory bench.apps.starlette_app:JOB_app``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    SimpleUser,
    requires,
)
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench.apps import common


async def hello(request: Request) -> JSONResponse:
    return JSONResponse(common.hello())


@requires("authenticated")
async def protected_hello(request: Request) -> JSONResponse:
    return JSONResponse(common.hello())


def hello_sync(request: Request) -> JSONResponse:
    return JSONResponse(common.blocking_work())


class BasicBackend(AuthenticationBackend):
    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        user = common.check_basic_header(conn.headers.get("authorization"))
        if user is None:
            return None
        return AuthCredentials(["authenticated"]), SimpleUser(user)


class BearerBackend(AuthenticationBackend):
    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        user = common.check_bearer_header(conn.headers.get("authorization"))
        if user is None:
            return None
        return AuthCredentials(["authenticated"]), SimpleUser(user)


def open_app() -> Starlette:
    return Starlette(routes=[Route("/rest/hello", hello)])


def basic_app() -> Starlette:
    return Starlette(
        routes=[Route("/rest/hello", protected_hello)],
        middleware=[Middleware(AuthenticationMiddleware, backend=BasicBackend())],
    )


def bearer_app() -> Starlette:
    return Starlette(
        routes=[Route("/rest/hello", protected_hello)],
        middleware=[Middleware(AuthenticationMiddleware, backend=BearerBackend())],
    )


def token_app() -> Starlette:
    store = common.RefreshStore()

    async def token(request: Request) -> JSONResponse:
        async with request.form(max_fields=32) as form:
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
        status, body = common.password_grant(fields, store)
        return JSONResponse(body, status_code=status, headers={"cache-control": "no-store"})

    return Starlette(routes=[Route("/rest/fw/oauth2/token", token, methods=["POST"])])


def sync_app() -> Starlette:
    return Starlette(routes=[Route("/rest/hello-sync", hello_sync)])


def _routes(count: int) -> Starlette:
    def make(i: int) -> Callable[..., Any]:
        async def order(request: Request) -> JSONResponse:
            params = request.path_params
            return JSONResponse({"route": i, "uid": params["uid"], "oid": params["oid"]})

        return order

    return Starlette(
        routes=[Route(f"/rest/api{i}/users/{{uid}}/orders/{{oid}}", make(i)) for i in range(count)]
    )


def routes_10_app() -> Starlette:
    return _routes(common.ROUTE_COUNT_SMALL)


def routes_1000_app() -> Starlette:
    return _routes(common.ROUTE_COUNT_LARGE)
