"""``FwData.Authorization`` (validated at load, :class:`~fwrest.config.fwdata.AuthorizationData`)
-> :class:`AuthSettings`, its function names resolved against the imported repository (SPEC 2,
4), at start only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwrest.config.fwdata import DEFAULT_ALLOW_GET_TOKEN, AuthorizationData
from fwrest.errors import ConfigError
from fwrest.repository import Environment, Repository, is_async

__all__ = ["AuthSettings", "parse_authorization"]


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """The authorization in force on one port."""

    scheme: str  # "basic" | "oAuth2"
    on_auth_name: str  # as written in FwData ("" when none)
    on_auth: Callable[..., Any] | None
    on_auth_is_async: bool
    on_admin: Callable[..., Any] | None
    max_failures: int
    # basic only: OnAuthCache, seconds an accepted user and password are remembered (0: none)
    cache_s: int = 0
    # oAuth2 only
    params_name: str = ""  # onAuthparams as written, when it names a function
    params_func: Callable[..., Any] | None = None
    params_file: Path | None = None
    nocheck: tuple[str, ...] = ()
    allow_get: bool = DEFAULT_ALLOW_GET_TOKEN
    signing_alg: str = "HS256"  # SPEC 12.1
    issuer: str = ""  # SPEC 12.2: "" for https://{HostName}:{Port}{location}
    login_page: str = ""  # SPEC 16.1: loginPage's template ("": fwrest's own page)
    bound_tokens: str = ""  # SPEC 16.2: "dpop" or "mtls" makes that binding mandatory


def _err(problem: str, section: str, fix: str, source: str | None) -> ConfigError:
    return ConfigError(problem, section=section, key="FwData", fix=fix, source=source)


def parse_authorization(
    data: AuthorizationData | None,
    *,
    section: str,
    repo: Repository,
    envs: list[Environment],
    source: str | None,
) -> AuthSettings | None:
    """Resolve the function names of a port's ``Authorization``; None when there is none.

    Raises:
        ConfigError: a function name missing from the repository or ambiguous; an
            ``onAuthNoCheckUri`` that raises or returns something other than paths.
    """
    if data is None:
        return None

    def function(name: str, key: str) -> Callable[..., Any] | None:
        if not name:
            return None
        _full, func = repo.resolve(name, envs, section=section, key=f"FwData {key}")
        return func

    on_admin = function(data.on_admin, "onAdmin")
    if data.scheme == "basic":
        on_auth = function(data.on_auth, "OnAuth")
        return AuthSettings(
            scheme="basic",
            on_auth_name=data.on_auth,
            on_auth=on_auth,
            on_auth_is_async=is_async(on_auth),
            on_admin=on_admin,
            max_failures=data.max_failures,
            cache_s=data.on_auth_cache_s,
        )
    params_func = function(data.on_auth_params, "onAuthparams")
    custom = function(data.on_auth, "onAuth")
    nocheck: tuple[str, ...] = ()
    nocheck_func = function(data.on_auth_no_check_uri, "onAuthNoCheckUri")
    if nocheck_func is not None:
        nocheck = _call_nocheck(nocheck_func, data.on_auth_no_check_uri, section, source)
    return AuthSettings(
        scheme="oAuth2",
        on_auth_name=data.on_auth,
        on_auth=custom,
        on_auth_is_async=is_async(custom),
        on_admin=on_admin,
        max_failures=data.max_failures,
        params_name=data.on_auth_params,
        params_func=params_func,
        params_file=data.on_auth_params_file,
        nocheck=nocheck,
        allow_get=data.allow_get_token,
        signing_alg=data.signing_alg,
        issuer=data.issuer,
        login_page=data.login_page,
        bound_tokens=data.bound_tokens,
    )


def _call_nocheck(
    func: Callable[..., Any], name: str, section: str, source: str | None
) -> tuple[str, ...]:
    """``onAuthNoCheckUri()`` is called once, at start: a list of paths."""
    try:
        result = func()
    except Exception as exc:
        raise _err(
            f"onAuthNoCheckUri {name} raised {type(exc).__name__}: {exc}",
            section,
            "make it return a list of paths.",
            source,
        ) from None
    if isinstance(result, str):
        result = [result]
    if not isinstance(result, list | tuple) or not all(isinstance(p, str) for p in result):
        raise _err(
            f"onAuthNoCheckUri {name} must return a list of paths, got {result!r}.",
            section,
            'return for example ["/public/*", "/items/:id"].',
            source,
        )
    return tuple(result)
