"""``onAuthparams`` as a start sees it: settings that cannot work stop the start; legal but
probably wrong ones are reported by ``fwrest check`` and logged at start (SPEC 2)."""

from __future__ import annotations

import time
from typing import Any

from fwrest.auth.oauth2.expiry import ExpiryError, access_ms, refresh_deadline
from fwrest.auth.oauth2.params import AuthParams, ParamsError, ParamsSource
from fwrest.auth.settings import AuthSettings
from fwrest.errors import ConfigError
from fwrest.repository import is_async

__all__ = ["oauth2_warnings"]

_DAY_S = 86400
_FIX = (
    "correct what the message names (the forms onAuthparams accepts are in docs/authorization.md)."
)


def _describe_ms(ms: int) -> str:
    return f"{ms} ms is {ms / 1000:g} seconds"


def oauth2_warnings(settings: AuthSettings, section: str) -> list[str]:
    """Call ``onAuthparams`` once (as a token request would) and judge what it gives.

    Raises:
        ConfigError: a file that is not valid JSON or not a valid settings object; a function
            (not the legacy form, which a start calls without a request) that returns such an
            object; a lifetime that no token request could use (every one would be a 500).
    """
    if settings.scheme != "oAuth2":
        return []
    source = ParamsSource(settings.params_func, settings.params_file)
    name = settings.params_name
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
        if source.legacy:
            # called with no request parameters: what it fills may depend on them
            return [f"[{section}] onAuthparams: {exc}"]
        raise ConfigError(
            f"the function {name} returned settings that cannot be used: {exc}",
            section=section,
            key="onAuthparams",
            fix=_FIX,
        ) from None
    except KeyboardInterrupt:
        raise  # Ctrl-C during the start
    except BaseException as exc:  # sys.exit() too: a warning, as for any exception
        return [f"[{section}] onAuthparams raised {type(exc).__name__} when called at start"]
    try:
        return _judge(params, section)
    except ExpiryError as exc:
        where = f"the file {source.file}" if source.file is not None else f"the function {name}"
        raise ConfigError(
            f"{where} gives a lifetime no token request could use: {exc}",
            section=section,
            key="onAuthparams",
            fix=_FIX,
        ) from None


def _judge(params: AuthParams, section: str) -> list[str]:
    out: list[str] = []
    value: Any = params.access_expires
    if value is not None:
        ms = access_ms(value)
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
        left = refresh_deadline(params.refresh_expires) - time.time()
        if left > 90 * _DAY_S:
            out.append(f"[{section}] onAuthparams refresh_expires is more than 90 days away.")
        elif left <= 0:
            out.append(
                f"[{section}] onAuthparams refresh_expires {params.refresh_expires!r} is already "
                "past: every refresh token is expired when issued, so clients must repeat the "
                "password grant."
            )
    for key in params.repeated:
        out.append(
            f"[{section}] onAuthparams gives {key} more than once (single key and expires "
            "entries): the first applies to every token, the others are ignored."
        )
    return out
