"""Tracing (SPEC 17.4, ``Tracing=otlp``) to an OTLP/HTTP receiver here, or OTLP/gRPC with
``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL=grpc``: spans with their children and no secret, the log's
span ids, and nothing of OpenTelemetry imported without ``Tracing`` (nor left by its check to the
workers a reload forks)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import trustme
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from fwrest.config import load_config
from fwrest.errors import ConfigError
from fwrest.store import StateStore
from tests.auth.oauth2_support import client_context, oauth_section
from tests.conftest import (
    APP_SOURCE,
    FWREST,
    ServerProcess,
    base_sections,
    exchange,
    free_config,
    issue_certs,
    local_port,
    wait_for,
)
from tests.redis_support import RedisServer

MODULES = """
@get("/modules")
def modules():
    return sorted(name for name in sys.modules if name.startswith("opentelemetry"))
"""
PASSWORD = "Trace-Pw-9Qx-secret"
QUERY_VALUE = "qv-7f3a-secret"
APP = (
    APP_SOURCE
    + """

import logging
import sys

from opentelemetry import trace

_log = logging.getLogger("shop.traced")
_tracer = trace.get_tracer("shop")

def check(user, password):
    return password == "Trace-Pw-9Qx-secret"

def params():
    return {"client_id": "web", "client_secret": "Web-Secret-Trace-4k",
            "users": [{"username": "ada", "password": "Trace-Pw-9Qx-secret"}]}

@get("/traced/:id")
def traced(id):
    _log.warning("working on %s", id)
    with _tracer.start_as_current_span("shop.work", attributes={"shop.id": id}):
        _log.warning("inside the application's span")
    return {"id": id}

@get("/atraced/:id")
async def atraced(id):
    _log.warning("async work on %s", id)
    with _tracer.start_as_current_span("shop.awork"):
        _log.warning("inside the application's span")
    return {"id": id}
"""
    + MODULES
)
# what a fwrest.store span's fwrest.store.operation may be (SPEC 17.4): a StateStore method
STORE_OPERATIONS = frozenset(
    name
    for klass in StateStore.__mro__
    if klass.__module__ == "fwrest.store.base"
    for name, value in vars(klass).items()
    if callable(value) and not name.startswith("_")
)
NO_TRACING_APP = APP_SOURCE + "\nimport sys\n" + MODULES


class _Receiver:
    """OTLP/HTTP: each decoded ``ExportTraceServiceRequest`` to ``/v1/traces``, and raw bodies."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                owner.received(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def received(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    ids = {"trace_id": span.trace_id.hex(), "span_id": span.span_id.hex()}
                    found.append(
                        {
                            **ids,
                            "name": span.name,
                            "scope": scope_spans.scope.name,
                            "parent": span.parent_span_id.hex(),
                            "kind": span.kind,
                            "status": span.status.code,
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "resource": resource,
                        }
                    )
        with self.lock:
            self.bodies.append(body)
            self.spans.extend(found)

    def wait_spans(self, trace_ids: set[str], names: set[str], timeout: float = 20) -> list[Any]:
        """The spans of ``trace_ids``, once each name of ``names`` is among them."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = [s for s in self.spans if s["trace_id"] in trace_ids]
            if names <= {s["name"] for s in spans}:
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"spans never received: {names}; got {spans}")
            time.sleep(0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _GrpcReceiver(_Receiver):
    """OTLP/gRPC (``TraceService/Export``), kept as :class:`_Receiver` does."""

    def __init__(self) -> None:
        self.bodies = []
        self.spans = []
        self.lock = threading.Lock()
        owner = self

        class Service(TraceServiceServicer):
            def Export(
                self, request: ExportTraceServiceRequest, context: Any
            ) -> ExportTraceServiceResponse:
                owner.received(request.SerializeToString())
                return ExportTraceServiceResponse()

        self.grpc_server = grpc.server(ThreadPoolExecutor(2))
        add_TraceServiceServicer_to_server(Service(), self.grpc_server)
        self.port = self.grpc_server.add_insecure_port("127.0.0.1:0")
        self.grpc_server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"  # http: without TLS

    def close(self) -> None:
        self.grpc_server.stop(None).wait(10)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    found = _Receiver()
    yield found
    found.close()


def _config(tmp_path: Path, log_format: str = "text") -> Path:
    basic = {"Authorization": {"scheme": "basic", "OnAuth": "app.check"}}
    return free_config(
        tmp_path,
        app=APP,
        servers={"HTTP_REST": local_port(FwData=basic)},
        extra={
            "HTTPSERVER": {"Tracing": "otlp", "StateStore": "sqlite", "LogFormat": log_format},
            "ROOT": {"RateLimit": "RL_API"},
            "RL_API": {"Limit": 1000, "Window": "60s", "Key": "user"},
        },
    )


@contextlib.contextmanager
def _serving(
    config: Path, receiver: _Receiver, variables: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """``fwrest serve`` exporting to ``receiver`` for the block; then it must stop with 0."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": "shop-api",
        **(variables or {}),
    }
    proc = ServerProcess(config, env=env).wait_ready()
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def _traceparent() -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{parent}-01", trace_id, parent


def test_server_span_continues_the_trace_with_its_children_and_no_secret(
    tmp_path: Path, receiver: _Receiver
) -> None:
    sent = {}
    with (
        _serving(_config(tmp_path), receiver) as proc,
        httpx.Client(base_url=proc.url(), auth=("ada", PASSWORD), timeout=15) as http,
    ):
        for path in ("/traced/42", "/atraced/43"):
            header, trace_id, parent = _traceparent()
            r = http.get(
                path,
                params={"token": QUERY_VALUE, "page": "seven-page"},
                headers={"traceparent": header, "User-Agent": "trace-test/1.0"},
            )
            assert r.status_code == 200, r.text
            sent[path] = (trace_id, parent, r.headers["x-request-id"])
        # a refusal: the server span without a handler, its auth child marked with the refusal
        header, refused_trace, refused_parent = _traceparent()
        wrong_auth = ("ada", "Wrong-" + PASSWORD)
        r = httpx.get(f"{proc.url()}/traced/1", auth=wrong_auth, headers={"traceparent": header})
        refusal = r.status_code
        assert refusal in (401, 403), r.text
        # a refused 100-continue request (body unread): a server span of its own
        header, waited_trace, waited_parent = _traceparent()
        wrong = base64.b64encode(f"ada:Wrong-{PASSWORD}".encode()).decode()
        answer = exchange(
            proc.ports["HTTP_REST"],
            (
                f"POST /rest/echo?token={QUERY_VALUE} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Basic {wrong}\r\ntraceparent: {header}\r\n"
                "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n"
            ).encode(),
        )
        assert answer.startswith(f"HTTP/1.1 {refusal} ".encode()), answer[:100]
        trace_ids = {t for t, _, _ in sent.values()} | {refused_trace, waited_trace}
        names = {"fwrest.auth", "fwrest.handler", "fwrest.store", "shop.work", "shop.awork"}
        spans = receiver.wait_spans(trace_ids, names | {"GET", "POST"})
    log = proc.log()

    for path, fn, app_span in (
        ("/traced/42", "app.traced", "shop.work"),
        ("/atraced/43", "app.atraced", "shop.awork"),
    ):
        trace_id, parent, rid = sent[path]
        mine = [s for s in spans if s["trace_id"] == trace_id]
        (server,) = [s for s in mine if s["kind"] == 2]  # SPAN_KIND_SERVER
        route = "/rest" + path.rsplit("/", 1)[0] + "/:id"
        print(f"{path}: {sorted(s['name'] for s in mine)}")
        assert server["name"] == f"GET {route}"
        assert server["parent"] == parent
        assert server["scope"] == "fwrest"
        assert server["resource"]["service.name"] == "shop-api"
        want = {
            "http.request.method": "GET",
            "http.route": route,
            "http.response.status_code": 200,
            "url.path": "/rest" + path,  # without the query
            "url.scheme": "http",
            "client.address": "127.0.0.1",
            "user_agent.original": "trace-test/1.0",
        }
        assert {key: server["attributes"].get(key) for key in want} == want
        children = {s["name"]: s for s in mine if s["parent"] == server["span_id"]}
        assert {"fwrest.auth", "fwrest.handler", "fwrest.store", app_span} <= set(children)
        assert children["fwrest.handler"]["attributes"]["code.function.name"] == fn
        store = children["fwrest.store"]["attributes"]
        assert store["db.system.name"] == "sqlite"
        assert store["fwrest.store.operation"] == "hit_rate"  # the location's rate limit
        assert children["fwrest.auth"]["attributes"]["fwrest.auth.scheme"] == "basic"
        # access line and handler record: the server span's ids; in the app's span, that span's
        lines = [line for line in log.splitlines() if f"request_id={rid}" in line]
        assert len(lines) == 3, lines
        for line in lines:
            span = children[app_span] if "inside the application" in line else server
            ids = f"trace_id={trace_id} span_id={span['span_id']}"
            assert line.endswith(f"request_id={rid} {ids}"), line

    # every store call names the StateStore operation it runs: the Basic logins' counts (the
    # right password's taken back, the wrong one's kept) as well as the rate limit's
    operations = [
        s["attributes"]["fwrest.store.operation"] for s in spans if s["name"] == "fwrest.store"
    ]
    print("store operations:", operations)
    assert set(operations) <= STORE_OPERATIONS, operations
    assert {"hit_rate", "hit_failures", "release_failure"} <= set(operations), operations

    (refused,) = [s for s in spans if s["trace_id"] == refused_trace and s["kind"] == 2]
    assert refused["name"] == "GET" and refused["parent"] == refused_parent
    assert refused["attributes"]["http.response.status_code"] == refusal
    assert "http.route" not in refused["attributes"]
    (auth,) = [s for s in spans if s["trace_id"] == refused_trace and s["name"] == "fwrest.auth"]
    assert auth["attributes"]["error.type"] == str(refusal)
    assert auth["status"] == 0  # STATUS_CODE_UNSET: a refusal is no failure of the server

    waited = [s for s in spans if s["trace_id"] == waited_trace]
    assert [s["kind"] for s in waited] == [2], waited  # the server span alone
    assert waited[0]["name"] == "POST" and waited[0]["parent"] == waited_parent
    assert waited[0]["attributes"]["http.response.status_code"] == refusal
    assert waited[0]["attributes"]["url.path"] == "/rest/echo"

    exported = b"".join(receiver.bodies)
    basic = base64.b64encode(f"ada:{PASSWORD}".encode())
    for secret in (PASSWORD.encode(), basic, QUERY_VALUE.encode(), b"seven-page", b"token="):
        assert secret not in exported, secret


def test_json_log_records_carry_the_span_ids(tmp_path: Path, receiver: _Receiver) -> None:
    with _serving(_config(tmp_path, "json"), receiver) as proc:
        header, trace_id, _parent = _traceparent()
        r = httpx.get(
            f"{proc.url()}/traced/7", auth=("ada", PASSWORD), headers={"traceparent": header}
        )
        assert r.status_code == 200
        rid = r.headers["x-request-id"]
        spans = receiver.wait_spans({trace_id}, {"GET /rest/traced/:id", "shop.work"})
    (server,) = [s for s in spans if s["kind"] == 2]
    records = [json.loads(line) for line in proc.log().splitlines()]
    mine = [r for r in records if r.get("request_id") == rid]
    assert {r["logger"] for r in mine} >= {"fwrest.access", "shop.traced"}, mine
    (work,) = [s for s in spans if s["name"] == "shop.work"]
    for record in mine:
        span = work if "inside the application" in record["message"] else server
        assert (record["trace_id"], record["span_id"]) == (trace_id, span["span_id"]), record
    # records outside a request carry none
    assert not any("trace_id" in r for r in records if "request_id" not in r)


STREAMS_APP = (
    APP
    + """

from fwrest import EventStream

def _steps(name, count, fail=False):
    for n in range(count):
        with _tracer.start_as_current_span(f"shop.{name}-{n}"):
            _log.warning("%s step %d", name, n)
        yield f"{name}{n}\\n"
    if fail:
        raise ValueError("the stream broke")

@get("/gen")
def gen():
    return _steps("gen", 3)

@get("/agen")
async def agen():
    async def steps():
        for n in range(3):
            with _tracer.start_as_current_span(f"shop.agen-{n}"):
                _log.warning("agen step %d", n)
            await asyncio.sleep(0)
            yield f"agen{n}\\n"
    return steps()

@get("/events")
def events():
    return EventStream(_steps("sse", 2))

@get("/failing")
def failing():
    return _steps("fail", 1, fail=True)

@get("/chunked-failing")
def chunked_failing():
    rest.setChunkedResponse("a,")
    raise RuntimeError("the handler broke")

@get("/chunked")
def chunked():
    rest.setChunkedResponse("a,")
    with _tracer.start_as_current_span("shop.after-first"):
        time.sleep(0.2)
    rest.setChunkedResponse("b")
"""
)


def test_a_streams_steps_and_end_run_in_its_server_span(
    tmp_path: Path, receiver: _Receiver
) -> None:
    """SPEC 17.4 with streams (SPEC 10.5): the spans an iterator opens in its steps, the first
    and every later one (a ``def`` generator's in the pool, an async one's, an event
    stream's), are children of the request's server span, and the log records of its steps,
    of its failure and its access line (written at its end) carry the span's ids; a failing
    stream's ``error.type`` is what its iterator (or chunked handler) raised."""
    config = free_config(tmp_path, app=STREAMS_APP, extra={"HTTPSERVER": {"Tracing": "otlp"}})
    sent: dict[str, tuple[str, str]] = {}
    with _serving(config, receiver) as proc:
        for path in ("/gen", "/agen", "/events", "/failing", "/chunked-failing", "/chunked"):
            header, trace_id, _ = _traceparent()
            with contextlib.suppress(httpx.HTTPError):  # the failing ones are cut
                r = httpx.get(f"{proc.url()}{path}", headers={"traceparent": header}, timeout=15)
                assert r.status_code == 200, (path, r.text)
            sent[path] = (trace_id, "")
        steps = {f"shop.{name}-{n}" for name in ("gen", "agen") for n in range(3)}
        steps |= {"shop.sse-0", "shop.sse-1", "shop.fail-0", "shop.after-first"}
        servers_named = {f"GET /rest{path}" for path in sent}
        # the server spans too: each ends with its stream, after the steps' spans
        spans = receiver.wait_spans({t for t, _ in sent.values()}, steps | servers_named)
        wait_for(lambda: proc.log().count(" fwrest.access ") >= len(sent), 10, "access lines")
    log = proc.log()
    servers = {s["trace_id"]: s for s in spans if s["kind"] == 2}
    for name in sorted(steps):
        (span,) = [s for s in spans if s["name"] == name]
        server = servers.get(span["trace_id"])
        assert server is not None and span["parent"] == server["span_id"], (name, span)
    for path, (trace_id, _) in sent.items():
        server = servers[trace_id]
        assert server["attributes"]["http.route"] == "/rest" + path, server
        ids = f"trace_id={trace_id} span_id={server['span_id']}"
        (access,) = [
            line
            for line in log.splitlines()
            if " fwrest.access " in line and f" /rest{path} " in line
        ]
        assert access.endswith(ids), access
    failed = {path: servers[sent[path][0]]["attributes"].get("error.type") for path in
              ("/failing", "/chunked-failing")}  # fmt: skip
    assert failed == {"/failing": "builtins.ValueError",
                      "/chunked-failing": "builtins.RuntimeError"}, failed  # fmt: skip
    # a chunked handler's span lasts until it returns (not its first piece), marked when it fails
    handlers = {
        s["trace_id"]: s for s in spans if s["name"] == "fwrest.handler"
    }  # fmt: skip
    (after,) = [s for s in spans if s["name"] == "shop.after-first"]
    assert handlers[after["trace_id"]]["end"] >= after["end"], (handlers, after)
    broke = handlers[sent["/chunked-failing"][0]]
    assert broke["attributes"].get("error.type") == "builtins.RuntimeError", broke
    # the steps' records: the span of the step (its application span), the failure's the server's
    for line in log.splitlines():
        if " step " in line and " shop.traced " in line:
            assert " trace_id=" in line, line
    (broke,) = [line for line in log.splitlines() if "the stream broke" in line and "ERROR" in line]
    assert (
        f"trace_id={sent['/failing'][0]} span_id={servers[sent['/failing'][0]]['span_id']}" in broke
    )


def test_a_memory_stores_lock_out_write_is_a_store_span(
    tmp_path: Path, receiver: _Receiver
) -> None:
    """SPEC 17.4's span for each state-store call: the lock-out a memory store keeps in the
    worker (written on the loop, no store thread) too."""
    basic = {"Authorization": {"scheme": "basic", "OnAuth": "app.check", "maxFailures": 2}}
    config = free_config(
        tmp_path,
        app=APP,
        servers={"HTTP_REST": local_port(FwData=basic)},
        extra={"HTTPSERVER": {"Tracing": "otlp", "StateStore": "memory"}},
    )
    traces = []
    with _serving(config, receiver) as proc:
        for n in range(3):
            header, trace_id, _ = _traceparent()
            traces.append(trace_id)
            r = httpx.get(
                f"{proc.url()}/traced/{n}",
                auth=("ada", f"Wrong-{n}"),
                headers={"traceparent": header},
            )
            assert r.status_code in (401, 403, 429), r.text
        # the third: refused (locked), its lock-out written by the second's
        spans = receiver.wait_spans(set(traces), {"GET", "fwrest.store"})
    locks = [
        s for s in spans
        if s["name"] == "fwrest.store" and s["attributes"]["fwrest.store.operation"] == "add_lock"
    ]  # fmt: skip
    assert locks and {s["attributes"]["db.system.name"] for s in locks} == {"memory"}, locks
    servers = {s["span_id"] for s in spans if s["kind"] == 2}
    assert all(s["parent"] in servers for s in locks), locks


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_token_route_spans_the_stores_calls_and_exports_no_token(
    tmp_path: Path, receiver: _Receiver, ca: trustme.CA, store: str
) -> None:
    """oAuth2 over TLS, a memory store (inline on the loop) or sqlite (on the store's threads):
    the store calls of a password grant and a refresh are ``fwrest.store`` spans of the token
    route's span, each naming the StateStore operation it runs; no password, secret or token is
    exported."""
    certs = issue_certs(ca, tmp_path / "certs")
    config = free_config(
        tmp_path,
        app=APP,
        servers={"OAUTH": oauth_section(certs, onAuthparams="app.params")},
        extra={"HTTPSERVER": {"Tracing": "otlp", "StateStore": store}},
    )
    with _serving(config, receiver) as proc:
        header, trace_id, parent = _traceparent()
        with httpx.Client(verify=client_context(certs), timeout=15) as http:
            form = {"grant_type": "password", "username": "ada", "password": PASSWORD}
            form |= {"client_id": "web", "client_secret": "Web-Secret-Trace-4k"}
            token_url = f"{proc.url('OAUTH')}/fw/oauth2/token"
            r = http.post(token_url, data=form, headers={"traceparent": header})
            assert r.status_code == 200, r.text
            issued = r.json()
            access = issued["access_token"]
            header2, trace2, _ = _traceparent()
            r = http.get(
                f"{proc.url('OAUTH')}/traced/5",
                headers={"Authorization": f"Bearer {access}", "traceparent": header2},
            )
            assert r.status_code == 200, r.text
            refresh = {"grant_type": "refresh_token", "refresh_token": issued["refresh_token"]}
            refresh |= {"client_id": "web", "client_secret": "Web-Secret-Trace-4k"}
            header3, trace3, _ = _traceparent()
            r = http.post(token_url, data=refresh, headers={"traceparent": header3})
            assert r.status_code == 200, r.text
            refreshed = r.json()
        token_span = "POST /rest/fw/oauth2/token"  # ends after its store spans
        spans = receiver.wait_spans({trace_id, trace2}, {token_span, "shop.work"})
        spans += receiver.wait_spans({trace3}, {token_span})
    (server,) = [s for s in spans if s["trace_id"] == trace_id and s["kind"] == 2]
    assert server["name"] == "POST /rest/fw/oauth2/token" and server["parent"] == parent
    assert server["attributes"]["url.scheme"] == "https"
    grant = [s for s in spans if s["trace_id"] == trace_id and s["name"] == "fwrest.store"]
    assert grant and all(s["parent"] == server["span_id"] for s in grant)
    (auth,) = [s for s in spans if s["trace_id"] == trace2 and s["name"] == "fwrest.auth"]
    assert auth["attributes"]["fwrest.auth.scheme"] == "oAuth2"
    # every store call names the StateStore operation it runs (the password grant's attempt
    # counted and taken back, its refresh token written; the refresh's spend)
    calls = [s for s in spans if s["name"] == "fwrest.store"]
    assert {s["attributes"]["db.system.name"] for s in calls} == {store}
    operations = {
        trace: [s["attributes"]["fwrest.store.operation"] for s in calls if s["trace_id"] == trace]
        for trace in (trace_id, trace3)
    }
    print("store operations:", operations)
    assert {o for found in operations.values() for o in found} <= STORE_OPERATIONS, operations
    # (a memory store's attempt counts are kept on the loop, no store call)
    counted = {"hit_failures", "release_failure"} if store != "memory" else set()
    assert counted | {"add_refresh"} <= set(operations[trace_id]), operations
    assert {"spend_refresh", "add_refresh"} <= set(operations[trace3]), operations
    exported = b"".join(receiver.bodies)
    for secret in (
        PASSWORD,
        "Web-Secret-Trace-4k",
        access,
        issued["refresh_token"],
        refreshed["access_token"],
        refreshed["refresh_token"],
    ):
        assert secret.encode() not in exported, secret
        # the tokens' signatures alone neither
        assert secret.rsplit(".", 1)[-1].encode() not in exported, secret


# a dead collector's URL carrying secrets: its userinfo and a secret-like query value
DEAD_PASSWORD = "Otel-Url-Pw-5rT"
DEAD_TOKEN = "Otel-Q-Secret-8zK"
DEAD_ENDPOINT = (
    f"http://otel-user:{DEAD_PASSWORD}@127.0.0.1:1/v1/traces?token={DEAD_TOKEN}&tenant=shop"
)


@pytest.mark.parametrize(
    ("protocol", "shown"),
    [
        # urllib3's error names the path and query: "url: /v1/traces?token=..."
        ("http/protobuf", "/v1/traces?token=***&tenant=shop"),
        # the gRPC exporter names the endpoint's authority: "to otel-user:PASSWORD@127.0.0.1:1"
        ("grpc", "to ***@127.0.0.1:1"),
    ],
)
def test_the_exporters_records_of_a_dead_collector_show_no_secret_of_its_url(
    tmp_path: Path, protocol: str, shown: str
) -> None:
    """SPEC 7: a third party's records (OpenTelemetry's exporter, retrying a collector out of
    reach) go through fwrest's handlers redacted as fwrest's own: no userinfo, no secret-like
    query value, on standard error nor in ``LogFile``."""
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": DEAD_ENDPOINT,
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    proc = ServerProcess(_config(tmp_path), env=env).wait_ready()
    try:
        for _ in range(3):
            r = httpx.get(f"{proc.url()}/traced/3", auth=("ada", PASSWORD), timeout=15)
            assert r.status_code == 200, r.text
        proc.wait_log("Transient error", timeout=20)
        wait_for(lambda: "Transient error" in proc.file_log(), 10, "the warning in LogFile")
    finally:
        assert proc.stop() == 0
    for where, text in (("stderr", proc.log()), ("LogFile", proc.file_log())):
        lines = [line for line in text.splitlines() if "Transient error" in line]
        print(f"{where}: {lines[0]}")
        assert " WARNING opentelemetry.exporter.otlp.proto." in lines[0], lines[0]
        assert any(shown in line for line in lines), lines
        for secret in (DEAD_PASSWORD, DEAD_TOKEN):
            assert secret not in text, (where, secret)


# grpc by the general variable or the traces' own, which wins (the SDK's order)
GRPC_ASKED = pytest.mark.parametrize(
    "variables",
    [
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        {
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        },
    ],
    ids=["protocol", "traces-protocol"],
)


@GRPC_ASKED
def test_grpc_protocol_exports_over_otlp_grpc(tmp_path: Path, variables: dict[str, str]) -> None:
    receiver = _GrpcReceiver()
    try:
        with _serving(_config(tmp_path), receiver, variables) as proc:
            header, trace_id, parent = _traceparent()
            r = httpx.get(
                f"{proc.url()}/traced/9",
                auth=("ada", PASSWORD),
                headers={"traceparent": header},
                timeout=15,
            )
            assert r.status_code == 200, r.text
            spans = receiver.wait_spans({trace_id}, {"GET /rest/traced/:id", "shop.work"})
    finally:
        receiver.close()
    (server,) = [s for s in spans if s["kind"] == 2]  # SPAN_KIND_SERVER
    assert server["name"] == "GET /rest/traced/:id" and server["parent"] == parent
    assert server["resource"]["service.name"] == "shop-api"
    assert server["attributes"]["http.response.status_code"] == 200


# what a supervisor that checked Tracing=otlp holds, inherited by a reload's workers without Tracing
CHECKED_MODULES = """
import os, sys
from fwrest.config import load_config
held = []
for protocol in ("", "grpc"):
    os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
    assert load_config(sys.argv[1]).tracing == "otlp"
    held.append(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
print(held)
"""


def test_the_check_of_tracing_imports_nothing_of_opentelemetry(tmp_path: Path) -> None:
    """Workers of a reload removing ``Tracing`` fork from a supervisor that checked it: nothing of
    OpenTelemetry may be left in ``sys.modules``."""
    config = _config(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", CHECKED_MODULES, str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[], []]", done.stdout


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_without_tracing_a_worker_imports_nothing_of_opentelemetry(
    serve: Any, tmp_path: Path, store: str
) -> None:
    """Nor via redis-py, whose ``import redis`` imports the SDK when installed (``quiet_redis``)."""
    url = "memory"
    redis_server = None
    if store == "redis":
        (tmp_path / "redis").mkdir()
        redis_server = RedisServer(tmp_path / "redis").start()
        url = redis_server.url
    try:
        config = free_config(
            tmp_path, app=NO_TRACING_APP, extra={"HTTPSERVER": {"StateStore": url}}
        )
        proc: ServerProcess = serve(config)
        r = httpx.get(f"{proc.url()}/modules", timeout=10)
        assert r.status_code == 200
        assert r.json() == []
        assert not re.search(r"trace_id=", proc.log())
    finally:
        if redis_server is not None:
            redis_server.stop()


def test_bad_tracing_values_are_start_errors() -> None:
    sections = base_sections(0)
    sections["HTTPSERVER"]["Tracing"] = "jaeger"
    with pytest.raises(ConfigError) as caught:
        load_config(sections)
    text = str(caught.value)
    assert "[HTTPSERVER] Tracing" in text and "allowed: otlp" in text
    sections["HTTPSERVER"]["Tracing"] = "OTLP"
    assert load_config(sections).tracing == "otlp"
    sections["HTTPSERVER"]["Tracing"] = ""
    assert load_config(sections).tracing is None


def test_otlp_without_the_extra_is_a_start_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sections = base_sections(0)
    sections["HTTPSERVER"]["Tracing"] = "otlp"
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http", None)
    with pytest.raises(ConfigError) as caught:
        load_config(sections)
    text = str(caught.value)
    assert "[HTTPSERVER] Tracing" in text and "pip install fwrest[otel]" in text, text


# `fwrest check` with the OTLP/gRPC exporter's package hidden from the process
WITHOUT_GRPC = """
import sys
sys.modules["opentelemetry.exporter.otlp.proto.grpc"] = None
"""


def _check(tmp_path: Path, variables: dict[str, str], blocked: bool = False) -> str:
    """``fwrest check``'s exit 2 and output with ``variables`` (``blocked``: no gRPC exporter)."""
    config = _config(tmp_path)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    }
    env |= variables
    if blocked:
        (tmp_path / "blocker").mkdir()
        (tmp_path / "blocker" / "sitecustomize.py").write_text(WITHOUT_GRPC)
        env["PYTHONPATH"] = str(tmp_path / "blocker")
    done = subprocess.run(
        [*FWREST, "check", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Traceback" not in out
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("fwrest:")]
    return line


@GRPC_ASKED
def test_grpc_without_its_exporter_is_a_check_error_naming_the_variable_and_the_extra(
    tmp_path: Path, variables: dict[str, str]
) -> None:
    line = _check(tmp_path, variables, blocked=True)
    (variable,) = [name for name, value in variables.items() if value == "grpc"]
    assert "[HTTPSERVER] Tracing: " in line, line
    assert (
        f"the environment variable {variable}=grpc needs OpenTelemetry's OTLP exporter for grpc, which is not installed (opentelemetry.exporter.otlp.proto.grpc is missing)"
        in line
    ), line
    assert "pip install fwrest[otel-grpc]" in line, line


@pytest.mark.parametrize("value", ["http/json", "HTTP/2"])
def test_a_protocol_without_an_exporter_is_a_check_error(tmp_path: Path, value: str) -> None:
    line = _check(tmp_path, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": value})
    want = (
        f"[HTTPSERVER] Tracing: the environment variable OTEL_EXPORTER_OTLP_TRACES_PROTOCOL={value} "
        "names no OTLP protocol fwrest exports spans with (supported: http/protobuf, grpc)"
    )
    assert want in line, line
    if value == "http/json":
        assert "OpenTelemetry's Python SDK has no exporter for it" in line, line
    assert (
        "Fix: set OTEL_EXPORTER_OTLP_TRACES_PROTOCOL to http/protobuf (the default) or grpc" in line
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url::"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel-col:4318"),  # no scheme: no host either
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://user:Otlp-Secret-7@:4318"),  # no host
    ],
)
def test_an_endpoint_that_is_no_http_url_is_a_check_error(
    tmp_path: Path, variable: str, value: str
) -> None:
    """An OTLP/HTTP endpoint the SDK took, every export then failing at run time ("No
    connection adapters"): the check names the variable, never its value (credentials)."""
    line = _check(tmp_path, {variable: value})
    assert f"[HTTPSERVER] Tracing: the environment variable {variable} is not an" in line, line
    assert value not in line and "Otlp-Secret-7" not in line, line
