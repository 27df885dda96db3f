"""Legal but probably wrong token settings, reported by ``fwrest check`` and at start."""

from __future__ import annotations

import time
from typing import Any

from fwrest.auth.oauth2.expiry import ExpiryError, access_ms, refresh_deadline
from fwrest.auth.oauth2.params import ParamsError, ParamsSource
from fwrest.auth.settings import AuthSettings
from fwrest.errors import ConfigError
from fwrest.repository import is_async

__all__ = ["oauth2_warnings"]

_DAY_S = 86400


def _describe_ms(ms: int) -> str:
    return f"{ms} ms is {ms / 1000:g} seconds"


def oauth2_warnings(settings: AuthSettings, section: str) -> list[str]:
    """Call ``onAuthparams`` once (as a token request would) and judge the lifetimes."""
    if settings.scheme != "oAuth2":
        return []
    source = ParamsSource(settings.params_func, settings.params_file)
    try:
        if source.file is not None:
            params = source.read_file()
        elif source.func is not None and not is_async(source.func):
            params = source.call_sync({})
        else:
            return []
    except ParamsError as exc:
        if source.file is not None:
            # SPEC 2: invalid JSON aborts the start, never a failure at request time (every
            # token request would read this file and fail)
            text = str(exc)
            raise ConfigError(
                f"the file {text}"
                if text.startswith(str(source.file))
                else f"the file {source.file} cannot be used: {text}",
                section=section,
                key="onAuthparams",
                fix="correct the file (it is read again when it changes, for every token request).",
            ) from None
        return [f"[{section}] onAuthparams: {exc}"]
    except Exception as exc:
        return [f"[{section}] onAuthparams raised {type(exc).__name__} when called at start"]
    out: list[str] = []
    value: Any = params.access_expires
    if value is not None:
        try:
            ms = access_ms(value)
        except ExpiryError as exc:
            out.append(f"[{section}] onAuthparams: {exc}")
        else:
            if ms < 60000:
                # SPEC 2's wording: "3600 ms is 3.6 seconds; write 3600000 or "1h""
                unit = f"{ms // 3600}h" if ms >= 3600 and ms % 3600 == 0 else f"{ms}s"
                out.append(
                    f"[{section}] onAuthparams access_expires: {_describe_ms(ms)}; write "
                    f'{ms * 1000} or "{unit}" (access_expires is in milliseconds)'
                )
            elif ms > _DAY_S * 1000:
                out.append(
                    f"[{section}] onAuthparams access_expires is over a day: a stolen "
                    "access token stays valid that long."
                )
    if params.refresh_expires is not None:
        try:
            deadline = refresh_deadline(params.refresh_expires)
        except ExpiryError as exc:
            out.append(f"[{section}] onAuthparams: {exc}")
        else:
            if deadline - time.time() > 90 * _DAY_S:
                out.append(f"[{section}] onAuthparams refresh_expires is more than 90 days away.")
    return out
