"""The monitor's port (``[APP_MONITOR]``): the HTTP layer and limits of every port, an optional
Basic guard, and :class:`fwrest.monitor.MonitorApp` behind them; the worker's probes (SPEC
13.3) at ``{ApiPath}/health/live|ready|started``, answered without credentials (a probe
reads no metric: docs/decisions.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from fwrest import log
from fwrest.auth import AuthSettings, BasicGuard
from fwrest.auth.throttle import Throttle
from fwrest.config.model import MonitorConfig, ServerConfig, ThreadPoolConfig
from fwrest.context.charsets import UTF8
from fwrest.context.request import NO_AUTH, AuthInfo, RequestContext
from fwrest.context.request_id import request_id_of
from fwrest.errors import HTTPError, is_cancellation
from fwrest.monitor import Collector, MonitorApp
from fwrest.monitor.app import ALLOW
from fwrest.routing import BadPath, normalise_path, split_target
from fwrest.server.app import trace_text
from fwrest.server.hosts import HostCheck, own_authority
from fwrest.server.readiness import PROBES
from fwrest.server.state import tunables
from fwrest.wire import Reply, Request, error_reply

__all__ = ["MonitorPort", "monitor_server_config", "monitor_url"]


def monitor_url(mon: MonitorConfig, port: int) -> str:
    """The index's URL as the operator can open it (as the servers' URLs: a wildcard address
    shown as 127.0.0.1, an IPv6 address in brackets)."""
    scheme = "https" if mon.ssl_certificate else "http"
    host = "127.0.0.1" if mon.host in ("0.0.0.0", "") else mon.host
    host = f"[{host}]" if ":" in host else host
    api = "" if mon.api_path == "/" else mon.api_path
    return f"{scheme}://{host}:{port}{api}/server/metrics"


def monitor_server_config(mon: MonitorConfig, port: int | None = None) -> ServerConfig:
    """The connection settings of the monitor's port (the limits are the defaults)."""
    return ServerConfig(
        name="APP_MONITOR",
        host=mon.host,
        port=mon.port if port is None else port,
        locations=(),
        ssl_certificate=mon.ssl_certificate,
        ssl_certificate_key=mon.ssl_certificate_key,
        tls=mon.tls,
    )


class MonitorPort:
    """The monitor's :class:`~fwrest.wire.PortHandler`, and the
    :class:`~fwrest.context.views.PortView` its Basic guard sees (no routes, no service)."""

    scheme = "http"
    service = None
    token_service = None
    on_admin = None
    engine_headers: tuple[tuple[str, str], ...] = ()  # no location: no HSTS (SPEC 10.2)

    def __init__(
        self,
        cfg: ServerConfig,
        api_path: str,
        collector: Collector,
        settings: AuthSettings | None,
        throttle: Throttle | None = None,
        *,
        probe: Callable[[str], tuple[int, dict[str, Any]]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.probe = probe
        api = "" if api_path == "/" else api_path
        # the probes' paths -> their names (none without a worker to ask)
        self._probes = {f"{api}/health/{name}": name for name in PROBES} if probe else {}
        self.name = "APP_MONITOR"  # what a request context reports as its server
        self.user_data: Any = None
        self.app = MonitorApp(api_path, collector)
        self.scheme = cfg.scheme
        self.port_number = cfg.port
        self.authority = own_authority(cfg.host, cfg.port, cfg.scheme)
        self.charset = UTF8
        self.guard = BasicGuard(settings, "APP_MONITOR", throttle) if settings is not None else None
        self.auth: AuthInfo = (
            AuthInfo(settings.scheme, settings.on_auth_name) if settings is not None else NO_AUTH
        )
        self._hosts = HostCheck(cfg.host, cfg.allowed_hosts)
        self.in_flight = 0
        self.total = 0
        self._max_failures = settings.max_failures if settings is not None else 10

    def names_host(self, host: str) -> bool:
        return self._hosts(host)

    def thread_pool(self, path: str, selected: str | None = None) -> ThreadPoolConfig | None:
        return None  # the monitor answers on the event loop, in no location

    def listing(self) -> list[dict[str, Any]]:
        return []  # no native routes on the monitor's port

    def openapi(self, version: str, grants: Sequence[str] | None = None) -> dict[str, Any]:
        return {}

    def body_limit(self, target: bytes, length: int, chunked: bool) -> int:
        return self.cfg.max_body_size

    def refused(self, head: Request, reply: Reply) -> Reply:
        """The engine's own answers as they are: the monitor has no location features."""
        return reply

    async def admit(self, head: Request) -> Reply | None:
        """``100 Continue`` only after the Basic guard passed (SPEC 7.1); None without one."""
        if self.guard is None:
            return None
        started = time.perf_counter_ns()
        try:
            raw, query = split_target(head.target)
            path = normalise_path(raw)
        except BadPath:
            return None  # handle answers its 400
        if path in self._probes:
            return None
        rid = request_id_of(head.headers)
        rid_token = log.request_id.set(rid)
        try:
            reply = await self._refusal(head, path, query, rid)
            if reply is not None:
                reply.headers.append(("x-request-id", rid))
                self._log_access(head, path, reply, started)
            return reply
        finally:
            log.request_id.reset(rid_token)

    async def _refusal(self, req: Request, path: str, query: str, rid: str) -> Reply | None:
        """The Basic guard's answer when it refuses the request (a 500 when ``OnAuth`` raised,
        its ``SystemExit`` too: SPEC 7.1); None when it lets it through or there is none."""
        if self.guard is None:
            return None
        ctx = RequestContext(self, req.method, path, query, req.headers, req.body, req.client)
        ctx.request_id = rid
        try:
            await self.guard(req, ctx)
            return None
        except HTTPError as exc:
            return error_reply(exc)
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            log.server_log.exception("monitor request failed")
            return error_reply(HTTPError(500))

    async def handle(self, req: Request) -> Reply:
        started = time.perf_counter_ns()
        rid = request_id_of(req.headers)  # SPEC 13.4, as on every port
        rid_token = log.request_id.set(rid)
        path = "?"
        try:
            try:
                if req.target == b"*" and req.method == "OPTIONS":
                    # RFC 9110 9.3.7: the server in general, before authorization
                    path = "*"
                    reply = Reply(200, [("allow", ALLOW)], b"")
                else:
                    try:
                        raw, query = split_target(req.target)
                        path = normalise_path(raw)
                    except BadPath as exc:
                        raise HTTPError(400, detailed=str(exc)) from None
                    probe = self._probes.get(path)
                    if probe is not None:
                        reply = self._probe(req.method, probe)
                    else:
                        refused = await self._refusal(req, path, query, rid)
                        if refused is not None:
                            reply = refused
                        else:
                            accept = next((v for n, v in req.headers if n == "accept"), "")
                            status, headers, body = self.app.respond(
                                req.method, path, query, accept
                            )
                            reply = Reply(status, headers, body)
            except HTTPError as exc:
                reply = error_reply(exc)
            except Exception:
                log.server_log.exception("monitor request failed")
                reply = error_reply(HTTPError(500))
            if req.method == "HEAD":
                reply.headers.append(("content-length", str(len(reply.body))))
                reply.body = b""
            reply.headers.append(("x-request-id", rid))
            self._log_access(req, path, reply, started)
            return reply
        finally:
            log.request_id.reset(rid_token)

    def _probe(self, method: str, name: str) -> Reply:
        """A probe's answer (SPEC 13.3): the worker's, as ``/fw/healthcheck/...`` gives it."""
        if method == "OPTIONS":  # RFC 9110 9.3.7
            return Reply(200, [("allow", ALLOW)], b"")
        if method not in ("GET", "HEAD"):
            raise HTTPError(405, headers=(("allow", ALLOW),))
        assert self.probe is not None
        status, body = self.probe(name)
        return Reply(status, [("content-type", "application/json")], orjson.dumps(body))

    @staticmethod
    def _log_access(req: Request, path: str, reply: Reply, started: int) -> None:
        ended = time.perf_counter_ns()
        trace = tunables.current.rest_trace_time
        timing = f" {trace_text(1, started, 0, 0, ended)}" if trace else ""
        if not log.access_log.isEnabledFor(logging.INFO):
            return
        fields = (
            req.port,
            req.method,
            "",
            path,
            reply.status,
            (ended - started) // 1000,
            "",
            req.client,
        )
        log.write(
            log.access_log,
            logging.INFO,
            f"{req.method} {log.escape(path)} {reply.status}{timing} port={req.port} "
            f"client={req.client} (monitor)",
            request=fields,
        )
