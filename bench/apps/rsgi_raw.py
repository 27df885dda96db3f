"""Raw RSGI apps on granian (granian's own protocol, no ASGI messages): no framework, each
case's job inline, answering the same bytes as ``asgi_raw``'s apps.

granian is started with ``--interface rsgi --factory bench.apps.rsgi_raw:JOB_app``.
"""

from __future__ import annotations

import orjson
from granian.rsgi import HTTPProtocol, Scope

from bench.apps import common

HEADERS = [("content-type", "application/json")]
UNAUTHORIZED = orjson.dumps({"error": "unauthorized"})


class OpenApp:
    """Case 1: the hello JSON, built and encoded per request as the other raw apps do."""

    async def __rsgi__(self, scope: Scope, proto: HTTPProtocol) -> None:
        proto.response_bytes(200, HEADERS, orjson.dumps(common.hello()))


class BasicApp:
    """Case 2: the hello JSON behind the trivial Basic check, inline on the loop."""

    async def __rsgi__(self, scope: Scope, proto: HTTPProtocol) -> None:
        if common.check_basic_header(scope.headers.get("authorization")) is None:
            proto.response_bytes(401, HEADERS, UNAUTHORIZED)
            return
        proto.response_bytes(200, HEADERS, orjson.dumps(common.hello()))


def open_app() -> OpenApp:
    return OpenApp()


def basic_app() -> BasicApp:
    return BasicApp()
