"""``FwData.Authorization`` -> validated :class:`AuthSettings` (SPEC 2, 4), at start only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwrest.errors import ConfigError
from fwrest.repository import Environment, Repository, is_async

__all__ = ["AuthSettings", "parse_authorization"]

SCHEMES = {"basic": "basic", "oAuth2": "oAuth2", "oAuth": "oAuth2"}
_VALID = "basic or oAuth2 (oAuth is accepted as an alias of oAuth2)"

# Allowed keys per scheme, folded -> as the SPEC writes them.
_COMMON = {"scheme": "scheme", "maxfailures": "maxFailures", "onadmin": "onAdmin"}
_BASIC = {**_COMMON, "onauth": "OnAuth"}
_OAUTH2 = {
    **_COMMON,
    "onauth": "onAuth",
    "onauthparams": "onAuthparams",
    "onauthnocheckuri": "onAuthNoCheckUri",
    "allowgettoken": "allowGetToken",
}


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """The authorization in force on one port."""

    scheme: str  # "basic" | "oAuth2"
    on_auth_name: str  # as written in FwData ("" when none)
    on_auth: Callable[..., Any] | None
    on_auth_is_async: bool
    on_admin: Callable[..., Any] | None
    max_failures: int
    options: dict[str, Any]  # every key, folded
    # oAuth2 only
    params_func: Callable[..., Any] | None = None
    params_file: Path | None = None
    nocheck: tuple[str, ...] = ()
    allow_get: bool = True
    warnings: list[str] = field(default_factory=list)


def _err(problem: str, section: str, fix: str, source: str | None) -> ConfigError:
    return ConfigError(problem, section=section, key="FwData", fix=fix, source=source)


def parse_authorization(
    fw_data: dict[str, Any],
    *,
    section: str,
    is_tls: bool,
    repo: Repository,
    envs: list[Environment],
    source: str | None,
    base_dir: Path = Path(),
) -> AuthSettings | None:
    """Validate the ``Authorization`` object of a server's ``FwData``; None when absent.

    Raises:
        ConfigError: not an object, an unknown key, a scheme other than exactly ``basic`` or
            ``oAuth2``, a missing or unknown ``OnAuth``, ``oAuth2`` without TLS.
    """
    auth = fw_data.get("authorization")
    if auth is None:
        return None
    if not isinstance(auth, dict):
        raise _err(
            "FwData Authorization must be a JSON object.",
            section,
            'write {"Authorization": {"scheme": "basic", "OnAuth": "module.function"}}.',
            source,
        )
    folded: dict[str, tuple[str, Any]] = {}
    for key, value in auth.items():
        folded[str(key).lower()] = (str(key), value)
    scheme_written = folded.get("scheme", ("scheme", None))[1]
    if scheme_written is None:
        raise _err(
            "FwData Authorization has no scheme.",
            section,
            f'add "scheme": one of {_VALID}.',
            source,
        )
    scheme = SCHEMES.get(scheme_written) if isinstance(scheme_written, str) else None
    if scheme is None:
        raise _err(
            f"FwData Authorization scheme {scheme_written!r} is not a scheme fwrest "
            "knows (the value is case-sensitive).",
            section,
            f"write exactly {_VALID}.",
            source,
        )
    allowed = _BASIC if scheme == "basic" else _OAUTH2
    for key, (written, _value) in folded.items():
        if key not in allowed:
            raise _err(
                f"FwData Authorization has the unknown key {written!r} for the {scheme} scheme.",
                section,
                f"use only {', '.join(allowed.values())}.",
                source,
            )
    max_failures = folded.get("maxfailures", ("maxFailures", 10))[1]
    if isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 1:
        raise _err(
            f"FwData Authorization maxFailures must be a whole number >= 1, got {max_failures!r}.",
            section,
            'write for example "maxFailures": 10.',
            source,
        )

    def function(key: str, required: bool) -> tuple[str, Callable[..., Any] | None]:
        written, value = folded.get(key, (allowed.get(key, key), None))
        if value is None or value == "":
            if required:
                raise _err(
                    f"FwData Authorization needs {written} for the {scheme} scheme.",
                    section,
                    f'add "{allowed[key]}": "module.function".',
                    source,
                )
            return "", None
        if not isinstance(value, str):
            raise _err(
                f"FwData Authorization {written} must name a function, got {value!r}.",
                section,
                f'write "{allowed[key]}": "module.function".',
                source,
            )
        _full, func = repo.resolve(value, envs, section=section, key=f"FwData {allowed[key]}")
        return value, func

    on_admin_name, on_admin = function("onadmin", False)
    del on_admin_name
    if scheme == "basic":
        name, on_auth = function("onauth", True)
        return AuthSettings(
            scheme="basic",
            on_auth_name=name,
            on_auth=on_auth,
            on_auth_is_async=is_async(on_auth),
            on_admin=on_admin,
            max_failures=max_failures,
            options={k: v for k, (_w, v) in folded.items()},
        )
    if not is_tls:
        raise _err(
            "the oAuth2 scheme needs TLS on the port: tokens and passwords must not "
            "cross the network in clear text.",
            section,
            "add SslCertificate and SslCertificateKey to this server.",
            source,
        )
    _pw, params_value = folded.get("onauthparams", ("onAuthparams", None))
    params_func = None
    params_file = None
    if isinstance(params_value, str) and params_value.strip().lower().startswith("file:"):
        params_file = Path(params_value.strip()[5:].strip())
        if not params_file.is_absolute():
            params_file = base_dir / params_file
        if not params_file.is_file():
            raise _err(
                f"onAuthparams names the file {params_file}, which does not exist.",
                section,
                "create it, or name a function as module.function.",
                source,
            )
    else:
        _n, params_func = function("onauthparams", True)
    on_auth_name, custom = function("onauth", False)
    nocheck: tuple[str, ...] = ()
    nocheck_name, nocheck_func = function("onauthnocheckuri", False)
    if nocheck_func is not None:
        nocheck = _call_nocheck(nocheck_func, nocheck_name, section, source)
    allow_get = folded.get("allowgettoken", ("allowGetToken", True))[1]
    if not isinstance(allow_get, bool):
        raise _err(
            f"FwData Authorization allowGetToken must be true or false, got {allow_get!r}.",
            section,
            'write "allowGetToken": false.',
            source,
        )
    warnings = []
    if allow_get:
        warnings.append(
            f"[{section}] the token route accepts the password grant over GET (the password "
            'travels in the URL); set "allowGetToken": false in FwData Authorization.'
        )
    return AuthSettings(
        scheme="oAuth2",
        on_auth_name=on_auth_name,
        on_auth=custom,
        on_auth_is_async=is_async(custom),
        on_admin=on_admin,
        max_failures=max_failures,
        options={k: v for k, (_w, v) in folded.items()},
        params_func=params_func,
        params_file=params_file,
        nocheck=nocheck,
        allow_get=allow_get,
        warnings=warnings,
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
