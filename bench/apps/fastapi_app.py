"""FastAPI peers (on uvicorn with httptools + uvloop), written the way its docs show:
an ``HTTPBasic`` dependency (case 2), ``HTTPBearer`` + PyJWT (case 3), an
``OAuth2PasswordRequestForm`` endpoint issuing an HS256 JWT and a random refresh token
(case 4), sync ``def`` endpoints (case 5), and path parameters among N routes (case 6).

uvicorn starts them with ``--factory bench.apps.fastapi_app:JOB_app``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, status
from fastapi.responses import JSONResponse
from fastapi.security import (
    HTTPAuthorizationCredentials,
    HTTPBasic,
    HTTPBasicCredentials,
    HTTPBearer,
    OAuth2PasswordRequestForm,
)
from pydantic import BaseModel

from bench.apps import common

_basic = HTTPBasic()
_bearer = HTTPBearer()


def _basic_check(credentials: HTTPBasicCredentials) -> str:
    ok = common.same(credentials.username, common.USER) & common.same(
        credentials.password, common.PASSWORD
    )
    if not ok:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, headers={"WWW-Authenticate": "Basic"})
    return credentials.username


async def basic_user(credentials: Annotated[HTTPBasicCredentials, Depends(_basic)]) -> str:
    return _basic_check(credentials)


def basic_user_sync(credentials: Annotated[HTTPBasicCredentials, Depends(_basic)]) -> str:
    """The same check as a ``def`` dependency, which FastAPI runs in its thread pool (the
    same job as fwrest's ``def`` OnAuth)."""
    return _basic_check(credentials)


async def bearer_user(
    credentials: Annotated[HTTPAuthorizationCredentials, Depends(_bearer)],
) -> str:
    user = common.check_bearer_header(f"Bearer {credentials.credentials}")
    if user is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
    return user


def _bearer_alg(alg: str) -> Callable[..., Any]:
    """Case 19: ``bearer_user`` with tokens signed with ``alg`` (ES256, RS256)."""

    async def user(credentials: Annotated[HTTPAuthorizationCredentials, Depends(_bearer)]) -> str:
        found = common.check_bearer_header(f"Bearer {credentials.credentials}", alg)
        if found is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"}
            )
        return found

    return user


# module names: the endpoints' annotations are strings (from __future__), resolved here
bearer_user_es256 = _bearer_alg("ES256")
bearer_user_rs256 = _bearer_alg("RS256")


def _app() -> FastAPI:
    # no docs routes: only the benchmarked route is registered
    return FastAPI(openapi_url=None, docs_url=None, redoc_url=None)


def open_app() -> FastAPI:
    app = _app()

    @app.get("/rest/hello")
    async def hello() -> dict[str, Any]:
        return common.hello()

    return app


def basic_app() -> FastAPI:
    app = _app()

    @app.get("/rest/hello")
    async def hello(user: Annotated[str, Depends(basic_user)]) -> dict[str, Any]:
        return common.hello()

    return app


def basic_sync_app() -> FastAPI:
    app = _app()

    @app.get("/rest/hello")
    async def hello(user: Annotated[str, Depends(basic_user_sync)]) -> dict[str, Any]:
        return common.hello()

    return app


def bearer_app() -> FastAPI:
    app = _app()

    @app.get("/rest/hello")
    async def hello(user: Annotated[str, Depends(bearer_user)]) -> dict[str, Any]:
        return common.hello()

    return app


def bearer_es256_app() -> FastAPI:
    app = _app()

    @app.get("/rest/hello")
    async def hello(user: Annotated[str, Depends(bearer_user_es256)]) -> dict[str, Any]:
        return common.hello()

    return app


def bearer_rs256_app() -> FastAPI:
    app = _app()

    @app.get("/rest/hello")
    async def hello(user: Annotated[str, Depends(bearer_user_rs256)]) -> dict[str, Any]:
        return common.hello()

    return app


def _grant(form: OAuth2PasswordRequestForm, store: common.RefreshStore) -> JSONResponse:
    fields = {
        "grant_type": form.grant_type or "",
        "username": form.username,
        "password": form.password,
        "client_id": form.client_id or "",
        "client_secret": form.client_secret or "",
    }
    code, body = common.password_grant(fields, store)
    return JSONResponse(body, status_code=code, headers={"cache-control": "no-store"})


def token_app() -> FastAPI:
    app = _app()
    store = common.RefreshStore()

    @app.post("/rest/fw/oauth2/token")
    async def token(form: Annotated[OAuth2PasswordRequestForm, Depends()]) -> JSONResponse:
        return _grant(form, store)

    return app


def token_sync_app() -> FastAPI:
    """The same grant as a ``def`` endpoint, which FastAPI runs in its thread pool (the same
    job as fwrest's ``def`` onAuthparams)."""
    app = _app()
    store = common.RefreshStore()

    @app.post("/rest/fw/oauth2/token")
    def token(form: Annotated[OAuth2PasswordRequestForm, Depends()]) -> JSONResponse:
        return _grant(form, store)

    return app


def sync_app() -> FastAPI:
    app = _app()

    @app.get("/rest/hello-sync")
    def hello_sync() -> dict[str, Any]:
        return common.blocking_work()

    return app


class Line(BaseModel):
    """A line of case 16's order (fwrest's twin: a msgspec struct, bench/apps/fw_app.py)."""

    sku: str
    qty: int
    unit_cents: int
    note: str = ""


class Order(BaseModel):
    customer: str
    lines: list[Line]
    note: str = ""


def order_app() -> FastAPI:
    """Case 16: the 1 KiB order decoded and validated into the pydantic model."""
    app = _app()

    @app.post("/rest/orders")
    async def orders(order: Order) -> dict[str, Any]:
        return common.order_summary(order.customer, [(li.qty, li.unit_cents) for li in order.lines])

    return app


def _routes(count: int) -> FastAPI:
    app = _app()

    def make(i: int) -> Callable[..., Any]:
        async def order(uid: str, oid: str) -> dict[str, Any]:
            return {"route": i, "uid": uid, "oid": oid}

        order.__name__ = f"order_{i}"
        return order

    for i in range(count):
        app.add_api_route(f"/rest/api{i}/users/{{uid}}/orders/{{oid}}", make(i), methods=["GET"])
    return app


def routes_10_app() -> FastAPI:
    return _routes(common.ROUTE_COUNT_SMALL)


def routes_1000_app() -> FastAPI:
    return _routes(common.ROUTE_COUNT_LARGE)
