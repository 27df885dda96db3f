"""``/fw/rest/config``: the run-time settings page and its JSON API (SPEC 5).

GET shows one row per setting: the value typed in at run time, the value from the config
file, the default; the value in force has an orange border. POST changes settings in every
worker (and every host sharing a Redis store) within a second. A POST needs what every
state-changing native route needs (:mod:`fwrest.native.guard`): a ``Host`` that names the
server, no foreign ``Origin``, JSON or a form carrying the anti-forgery token of the page,
and ``onAdmin``'s consent.
"""

from __future__ import annotations

import html
import json
import time
from typing import Any
from urllib.parse import parse_qsl

import orjson

from fwrest import log
from fwrest.config.tunables import SETTINGS, SettingsError, given_twice, validate
from fwrest.context.request import RequestContext, Response, current
from fwrest.context.views import ServiceView
from fwrest.errors import NO_STORE, HTTPError, store_unavailable
from fwrest.native.audit import record
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
from fwrest.store.calls import REQUEST_DEADLINE_S

__all__ = ["config_change", "config_page"]

_CSRF_FIELD = FORM_FIELD
_PURPOSE = "config"  # the page's anti-forgery tokens are its own
# a change's store time is what is left of this much from the request's start (SPEC 7: 503
# within 1.5 s, the answer's own writing included), and at least _LEAST_S
_CHANGE_BUDGET_S = 1.2
_LEAST_S = 0.1
# The run-time values the page showed, "name=value;...": a form POST changes only the fields
# the user edited, so that a page loaded before another change does not undo it.
_SHOWN_FIELD = "fw_shown"
# the fields a form may have (the page's has one per setting and two of its own)
_FIELDS_MAX = 32


def _service(ctx: RequestContext) -> ServiceView:
    service = ctx.port.service
    if service is None:  # a bare pipeline (no worker): nothing to show or change
        raise HTTPError(503, detailed="the run-time settings need a running worker")
    return service


def _csrf_token(ctx: RequestContext) -> str:
    _service(ctx)
    return form_token(ctx, _PURPOSE)


def _wants_json(ctx: RequestContext) -> bool:
    return "application/json" in ctx.headers.get("accept", "")


def _render(
    ctx: RequestContext,
    message: str = "",
    error: bool = False,
    typed: dict[str, str] | None = None,
) -> str:
    """The page; ``typed``: the fields as a refused form sent them, shown again to correct."""
    described = _service(ctx).settings.describe()
    rows = []
    allowed = []  # under the table: SPEC 5 gives it three columns (run time, file, default)
    shown = []  # the run-time values this page shows: a field left as it was changes nothing
    for name, info in described.items():
        source = (
            "runtime"
            if info["runtime"] is not None
            else "file"
            if info["file"] is not None
            else "default"
        )

        def cell(kind: str, content: str, source: str = source) -> str:
            in_force = (
                ' class="in-force" style="border: 3px solid orange"' if kind == source else ""
            )
            return f'<td data-kind="{kind}"{in_force}>{content}</td>'

        runtime_value = "" if info["runtime"] is None else str(info["runtime"])
        shown.append(f"{name}={runtime_value}")
        value = runtime_value if typed is None else typed.get(name, runtime_value)
        field = (
            f'<input name="{name}" id="{name}" value="{html.escape(value)}" '
            f'size="8" placeholder="(none)">'
        )
        rows.append(
            f'<tr data-setting="{name}"><th scope="row">{name}</th>'
            + cell("runtime", field)
            + cell("file", html.escape("" if info["file"] is None else str(info["file"])))
            + cell("default", html.escape(str(info["default"])))
            + "</tr>"
        )
        allowed.append(f"<li><code>{name}</code>: {html.escape(info['allowed'])}</li>")
    note = ""
    if message:
        kind = "error" if error else "ok"
        note = f'<p id="message" class="{kind}" role="status">{html.escape(message)}</p>'
    token = _csrf_token(ctx)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fwrest run-time settings</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 0.4em 0.8em; text-align: left; }}
td.in-force {{ border: 3px solid orange; }}
p.error {{ color: #b00; font-weight: bold; }} p.ok {{ color: #070; }}
</style></head><body>
<h1>Run-time settings [{html.escape(ctx.port.name)}]</h1>
<p>The value with the orange border is in force. Empty a run-time field to fall back to the
file's value or the default. Changes reach every worker within a second.</p>
{note}
<form method="post" action="{html.escape(ctx.path)}">
<input type="hidden" name="{_CSRF_FIELD}" value="{token}">
<input type="hidden" name="{_SHOWN_FIELD}" value="{html.escape(";".join(shown))}">
<table>
<thead><tr><th>setting</th><th>run time</th><th>config file</th><th>default</th></tr></thead>
<tbody>
{"".join(rows)}
</tbody></table>
<p><button type="submit" id="save">Save</button></p>
</form>
<p>Allowed values (whole numbers):</p>
<ul id="allowed">{"".join(allowed)}</ul>
</body></html>"""


_PAGE_HEADERS = {
    **dict(NO_STORE),
    "x-frame-options": "DENY",
    "content-security-policy": "default-src 'none'; style-src "
    "'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
}


async def config_page() -> Response:
    ctx = current.get()
    if _wants_json(ctx):
        body = {"settings": _service(ctx).settings.describe()}
        return Response(orjson.dumps(body), media_type="application/json")
    return Response(_render(ctx), media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)


async def config_change() -> Response:
    ctx = current.get()
    refuse_foreign(ctx, "a settings change")
    worker = _service(ctx)
    media = media_type(ctx)
    is_json = media == JSON_TYPE
    is_form = media == FORM_TYPE
    if not is_json and not is_form:
        raise HTTPError(415, detailed="send application/json or a form")
    if not await is_admin(ctx):
        refusal = "this user may not change settings"
        if is_form:  # a person at the page: the answer is the page, saying why
            return _form_error(ctx, refusal, 403)
        raise HTTPError(403, detailed=refusal)
    typed: dict[str, str] | None = None
    if is_json:
        if not ctx.body.strip():
            raise HTTPError(
                400, detailed='the body is empty: send an object such as {"rest_log_level": 5}'
            )
        try:
            changes = orjson.loads(ctx.body)
        except orjson.JSONDecodeError as exc:
            raise HTTPError(400, detailed=f"the body is not valid JSON ({exc})") from None
        if not isinstance(changes, dict):
            raise HTTPError(400, detailed='send an object such as {"rest_log_level": 5}')
        repeated = _repeated_key(ctx.body)  # orjson keeps the last: which was meant?
        if repeated is not None:
            raise HTTPError(400, detailed=given_twice(repeated))
    else:
        # a person at the page: a form it cannot read is the page saying why, as every
        # other refusal of a form (it was the JSON error body)
        try:
            text = ctx.body.decode("utf-8")
        except UnicodeDecodeError:
            return _form_error(ctx, "the form is not UTF-8 text")
        try:
            pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=_FIELDS_MAX)
        except ValueError:  # past max_num_fields (the only error of a lenient parse)
            return _form_error(ctx, f"the form has more than {_FIELDS_MAX} fields")
        fields: dict[str, str] = {}
        for given, value in pairs:
            # settings are case-insensitive (SPEC 9); the page's own fields are not
            name = given if given in (_CSRF_FIELD, _SHOWN_FIELD) else given.lower()
            if name in fields:
                return _form_error(ctx, given_twice(name))
            fields[name] = value
        token = fields.pop(_CSRF_FIELD, "")
        if not token_matches(ctx, _PURPOSE, token):
            return _form_error(
                ctx,
                "the form's anti-forgery token is missing or wrong; the page is reloaded "
                "below: enter the values again",
                403,
            )
        shown = _parse_shown(fields.pop(_SHOWN_FIELD, None))
        typed = fields
        unknown = [k for k in fields if k not in SETTINGS]
        if unknown:
            return _form_error(ctx, f"{unknown[0][:40]!r} is not a run-time setting", typed=typed)
        # a field left as the page showed it changes nothing (another change may be newer)
        changes = {k: v for k, v in fields.items() if shown is None or shown.get(k) != v.strip()}
    try:
        valid = validate(changes, form=not is_json)
    except SettingsError as exc:
        if is_json:
            raise HTTPError(400, detailed=str(exc)) from None
        return _form_error(ctx, str(exc), typed=typed)
    if valid:
        # SPEC 7: the 503 within 1.5 s of the request's start, whatever its authorization
        # waited on the store first (a Basic attempt counted in a store that hangs)
        started = getattr(ctx, "started", 0)
        left = REQUEST_DEADLINE_S
        if started:
            left = min(left, _CHANGE_BUDGET_S - (time.perf_counter_ns() - started) / 1e9)
        if left < _LEAST_S:
            raise store_unavailable()  # the store did not answer this request in time
        try:
            changed, stamp = await worker.settings.change(valid, left)
        except (StoreError, TimeoutError):
            raise store_unavailable() from None
        if changed:  # a value set to what it was changes nothing: no line, no event
            log.server_log.warning(
                "run-time settings changed by %r: %s",
                log.escape(ctx.auth_user or "-"),
                {name: valid[name] for name in changed},
            )
        # SPEC 13.5: a change that turns the log off (or on) is in it, as its level before
        # (or after) is above 0; the new level is in force by now
        logged = max(changed.get("rest_log_level", (0, 0))) > 0
        for name, (old, new) in changed.items():  # SPEC 13.5: key, old and new value
            details = {"key": name, "old": old, "new": new, "runtime": valid[name]}
            details |= {"via": "api" if is_json else "page"}
            record(ctx, "settings.change", details, ts=stamp, logged=logged)  # the store's order
    else:
        changed = {}
    if is_json:
        answer = {"settings": worker.settings.describe(), "changed": sorted(changed)}
        return Response(orjson.dumps(answer), media_type="application/json")
    if changed:
        saved = "Saved: the new values are in force."
    elif valid:
        saved = "Nothing changed: the values sent were those already set."
    else:
        saved = "Nothing to change."
    return Response(
        _render(ctx, saved),
        media_type="text/html; charset=utf-8",
        headers=_PAGE_HEADERS,
    )


def _repeated_key(body: bytes) -> str | None:
    """The first key the JSON object ``body`` (valid: orjson read it) gives twice at its top
    level, else None. The top-level object is the last one the hook sees (objects end
    inside out); its values are not kept."""
    last: list[str | None] = [None]

    def pairs(items: list[tuple[str, Any]]) -> None:
        seen: set[str] = set()
        last[0] = None
        for name, _ in items:
            if name in seen:
                last[0] = name
                return
            seen.add(name)

    try:
        json.loads(body, object_pairs_hook=pairs)
    except (ValueError, RecursionError):  # nested deeper than the stdlib reads: no check
        return None
    return last[0]


def _parse_shown(value: str | None) -> dict[str, str] | None:
    """The run-time values a page showed (``name=value;...``); None for a form without them."""
    if value is None:
        return None
    shown = {}
    for part in value.split(";"):
        name, sep, text = part.partition("=")
        if sep:
            shown[name] = text
    return shown


def _form_error(
    ctx: RequestContext, message: str, status: int = 400, typed: dict[str, str] | None = None
) -> Response:
    return Response(
        _render(ctx, f"Refused, nothing changed: {message}", error=True, typed=typed),
        status=status,
        media_type="text/html; charset=utf-8",
        headers=_PAGE_HEADERS,
    )
