"""Environment, health and usage routes."""

from __future__ import annotations

import html
import platform
import subprocess
import time
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import orjson

from fwrest import log
from fwrest._native import selected
from fwrest.context.request import RequestContext, Response, current
from fwrest.errors import NO_STORE, HTTPError, store_unavailable
from fwrest.native.guard import (
    FORM_FIELD,
    FORM_TYPE,
    JSON_TYPE,
    form_token,
    is_admin,
    media_type,
    refuse_foreign,
    token_matches,
)
from fwrest.store import StoreError
from fwrest.store.calls import call_store

__all__ = [
    "fw_environment",
    "healthcheck",
    "healthcheck_datetime",
    "healthcheck_live",
    "healthcheck_ok",
    "healthcheck_ready",
    "healthcheck_started",
    "server_environment",
    "usage_reset",
    "usage_time",
    "vendor_environment",
]


@lru_cache(maxsize=1)
def _git_build() -> str:
    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _split(version: str) -> tuple[str, str]:
    parts = version.split(".")
    return ".".join(parts[:2]), ".".join(parts[2:]) or "0"


@lru_cache(maxsize=1)
def _fw() -> dict[str, str]:
    from fwrest import __version__

    major_minor, patch = _split(__version__)
    return {"version": major_minor, "build": _git_build() or "release", "patch": patch}


@lru_cache(maxsize=1)
def _server() -> dict[str, str]:
    import httptools

    try:
        import uvloop

        loop = f"uvloop {getattr(uvloop, '__version__', '?')}"
    except ImportError:  # pragma: no cover
        loop = "asyncio"
    major_minor, patch = _split(platform.python_version())
    engine = f"httptools {httptools.__version__}, {loop}"
    try:
        native = selected()[0] is not None  # the engine that serves (docs/engine.md)
    except ValueError:  # an unknown FWREST_ENGINE: the pure engine serves
        native = False
    if native:
        from fwrest._native.engine import LLHTTP_VERSION

        engine = f"the native engine (llhttp {LLHTTP_VERSION}), {loop}"
    return {
        "version": major_minor,
        "build": f"{platform.python_implementation()} {platform.python_version()}; {engine}",
        "patch": patch,
    }


async def fw_environment() -> dict[str, str]:
    return _fw()


async def server_environment() -> dict[str, str]:
    return _server()


async def vendor_environment() -> dict[str, str]:
    # SPEC 5: the same three keys as the other two routes, for clients that read one shape
    fw, server = _fw(), _server()
    return {
        "version": f"{fw['version']}/{server['version']}",
        "build": f"fwrest {fw['build']}; {server['build']}",
        "patch": f"{fw['patch']}/{server['patch']}",
    }


async def healthcheck() -> Response:
    ctx = current.get()
    worker = ctx.port.service
    checks: dict[str, Any] = {}
    up = True
    store = worker.store if worker is not None else None
    if store is not None:
        started = time.perf_counter()
        try:
            await call_store(store.ping)
            checks["store"] = {
                "status": "UP",
                "kind": store.kind,
                "ms": round((time.perf_counter() - started) * 1000, 2),
            }
        except Exception as exc:
            up = False
            checks["store"] = {"status": "DOWN", "kind": store.kind, "error": type(exc).__name__}
    if worker is not None:
        alive, count = worker.workers_alive()
        checks["workers"] = {
            "status": "UP" if alive == count else "DOWN",
            "alive": alive,
            "expected": count,
        }
        up = up and alive > 0
        if worker.draining:
            up = False
            checks["shutdown"] = {"status": "DRAINING"}
    body = {"status": "UP" if up else "DOWN", "checks": checks}
    return Response(body, status=200 if up else 503)


async def healthcheck_ok() -> str:
    return "ok"


async def healthcheck_datetime() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


async def _figures(ctx: RequestContext) -> dict[str, Any]:
    service = ctx.port.service
    if service is None:
        raise HTTPError(503, detailed="no usage figures without a worker")
    return await service.usage_figures()


def _table(title: str, rows: list[dict[str, Any]], keys: list[str]) -> str:
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r.get(k, '')))}</td>" for k in keys) + "</tr>"
        for r in rows
    )
    return f"<h2>{html.escape(title)}</h2><table border=1><tr>{head}</tr>{body}</table>"


def render_usage_html(figures: dict[str, Any], reset_form: str = "") -> str:
    """The usage page; ``reset_form``: the HTML of its reset button (none when empty)."""
    nums = ["calls", "total_us", "mean_us", "max_us", "percent"]
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>fwrest usage time</title>"
        "</head><body><h1>Usage time (microseconds)</h1>"
        f"<p>Total: {figures['total_us']} us over all workers</p>"
        + reset_form
        + _table(
            "Per entry point",
            figures["entry_points"],
            ["location", "method", "endpoint", "thread_pool", *nums],
        )
        + _table("Per worker (slave)", figures["workers"], ["worker", *nums])
        + _table("Per thread pool", figures["thread_pools"], ["thread_pool", *nums])
        + "</body></html>"
    )


def render_usage_text(figures: dict[str, Any]) -> str:
    lines = [f"usage time: {figures['total_us']} us in all"]
    for row in figures["entry_points"]:
        lines.append(
            f"  {row['method']:<6} {row['location']}{row['endpoint']} [{row['thread_pool']}] "
            f"calls={row['calls']} total={row['total_us']}us mean={row['mean_us']}us "
            f"max={row['max_us']}us {row['percent']}%"
        )
    for row in figures["workers"]:
        lines.append(f"  worker {row['worker']}: calls={row['calls']} {row['percent']}%")
    for row in figures["thread_pools"]:
        lines.append(f"  pool {row['thread_pool']}: calls={row['calls']} {row['percent']}%")
    return "\n".join(lines)


async def usage_time() -> Response:
    ctx = current.get()
    figures = await _figures(ctx)
    log.server_log.info("%s", render_usage_text(figures))
    accept = ctx.headers.get("accept", "")
    if "application/json" in accept:
        return Response(orjson.dumps(figures), media_type="application/json")
    form = (
        f'<form method="post" action="{html.escape(quote(ctx.path + _RESET))}">'
        f'<input type="hidden" name="{FORM_FIELD}" value="{form_token(ctx, _PURPOSE)}">'
        '<button type="submit" id="reset">Start from zero</button></form>'
    )
    return Response(
        render_usage_html(figures, form),
        media_type="text/html; charset=utf-8",
        headers=_PAGE_HEADERS,
    )


_RESET = "/reset"
_PURPOSE = "usage-reset"  # the reset form's anti-forgery tokens are its own
_PAGE_HEADERS = {
    **dict(NO_STORE),
    "x-frame-options": "DENY",
    "content-security-policy": "default-src 'none'; form-action 'self'; frame-ancestors 'none'",
}


async def usage_reset() -> Response:
    """``POST .../usage/time/reset``: a state change, so it needs what the settings POST
    needs (SPEC 7.1, :mod:`fwrest.native.guard`): a ``Host`` naming the server, no foreign
    ``Origin``, JSON or the usage page's form with its token, and ``onAdmin``'s consent."""
    ctx = current.get()
    refuse_foreign(ctx, "a usage reset")
    service = ctx.port.service
    if service is None:
        raise HTTPError(503, detailed="no usage figures without a worker")
    media = media_type(ctx)
    is_form = media == FORM_TYPE
    if media != JSON_TYPE and not is_form:
        raise HTTPError(
            415, detailed="send Content-Type: application/json (any body), or the usage page's form"
        )
    if is_form:
        try:
            fields = dict(parse_qsl(ctx.body.decode("utf-8"), max_num_fields=32))
        except (UnicodeDecodeError, ValueError):
            raise HTTPError(400, detailed="the form is malformed") from None
        if not token_matches(ctx, _PURPOSE, fields.get(FORM_FIELD, "")):
            raise HTTPError(403, detailed="the form's anti-forgery token is missing or wrong")
    if not await is_admin(ctx):
        raise HTTPError(403, detailed="this user may not reset the usage figures")
    try:
        await service.reset_usage()
    except (StoreError, TimeoutError):
        raise store_unavailable() from None  # fail closed, as a settings change (SPEC 7)
    log.server_log.info(
        "[%s] usage figures reset by %r", ctx.port.name, log.escape(ctx.auth_user or "-")
    )
    if is_form:  # a person at the page: back to it (the figures are zero within a second)
        page = ctx.path.removesuffix(_RESET) or "/"
        return Response(b"", status=303, headers={"Location": quote(page)})
    return Response({"reset": True})


def _probe(name: str) -> Response:
    """SPEC 13.3: the worker's answer to a probe (a port without a worker is up)."""
    service = current.get().port.service
    if service is None:
        return Response({"status": "UP"})
    status, body = service.probe(name)
    return Response(body, status=status)


async def healthcheck_live() -> Response:
    return _probe("live")


async def healthcheck_ready() -> Response:
    return _probe("ready")


async def healthcheck_started() -> Response:
    return _probe("started")
