"""``FwData``, the framework's settings of a port (SPEC 2, 4, 5), parsed at load into typed
records: :class:`FwData` holds an :class:`AuthorizationData` and a :class:`NativeRoutesData`.

Everything that can be checked without the application is checked here: the keys, the
scheme, the types, the form of ``onAuthparams``, TLS on an ``oAuth2`` port. Function names
stay names: ``auth/`` resolves them against the imported repository at start, and
``native/`` checks route names against its catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fwrest.config.reading import RawConfig, RawSection, duration_seconds, spelled
from fwrest.errors import ConfigError

__all__ = [
    "DEFAULT_ALLOW_GET_TOKEN",
    "DEFAULT_MAX_FAILURES",
    "FW_DATA_KEYS",
    "LONG_AUTH_CACHE_S",
    "NATIVE_ROUTES_FIX",
    "NATIVE_ROUTE_NAMES",
    "SCHEMES",
    "AuthorizationData",
    "FwData",
    "NativeRoutesData",
    "RouteList",
    "parse_fw_data",
]

FW_DATA_KEYS = {"authorization": "Authorization", "nativeroutes": "NativeRoutes"}

# SPEC 4: exactly these values (case-sensitive); oAuth is the original product's alias
SCHEMES: dict[str, Literal["basic", "oAuth2"]] = {
    "basic": "basic",
    "oAuth2": "oAuth2",
    "oAuth": "oAuth2",
}
_VALID = "basic or oAuth2 (oAuth is accepted as an alias of oAuth2)"

DEFAULT_MAX_FAILURES = 10  # failed attempts in the throttle's window (SPEC 4.2)
DEFAULT_ALLOW_GET_TOKEN = True  # the password grant over GET (SPEC 4.2)
LONG_AUTH_CACHE_S = 3600  # an OnAuthCache longer than this is warned about (SPEC 4.1)
DEFAULT_SIGNING_ALG = "HS256"  # SPEC 7, 12.1
SIGNING_ALGS = ("HS256", "EdDSA", "ES256", "RS256")  # exactly these (as JWA names them)

# Allowed keys of Authorization per scheme, folded -> as the SPEC writes them.
_COMMON = {"scheme": "scheme", "maxfailures": "maxFailures", "onadmin": "onAdmin"}
_BASIC = {**_COMMON, "onauth": "OnAuth", "onauthcache": "OnAuthCache"}
_OAUTH2 = {
    **_COMMON,
    "onauth": "onAuth",
    "onauthparams": "onAuthparams",
    "onauthnocheckuri": "onAuthNoCheckUri",
    "allowgettoken": "allowGetToken",
    "signingalg": "signingAlg",
    "issuer": "issuer",
    "loginpage": "loginPage",
    "boundtokens": "boundTokens",
}
# Authorization keys of the Basic scheme the monitor has no use for (folded)
_MONITOR_UNUSED = ("onadmin",)
# SPEC 16.2: "boundTokens" makes a binding of the access tokens mandatory
BOUND_TOKENS = ("dpop", "mtls")

# The names NativeRoutes may give (SPEC 5: a route's path after /fw/); native/catalog.py
# serves a route under each.
NATIVE_ROUTE_NAMES: tuple[str, ...] = (
    "environment",
    "healthcheck",
    "healthcheck/datetime",
    "healthcheck/live",
    "healthcheck/ok",
    "healthcheck/ready",
    "healthcheck/started",
    "oauth2/authorize",
    "oauth2/introspect",
    "oauth2/jwks",
    "oauth2/metadata",
    "oauth2/resource",
    "oauth2/revoke",
    "oauth2/revoke-user",
    "oauth2/token",
    "rest/audit",
    "rest/config",
    "rest/docs",
    "rest/list/service",
    "rest/openapi.json",
    "rest/usage/time",
    "server/environment",
    "vendor/environment",
)
_ROUTE_LISTS: dict[str, Literal["disable", "hide", "public"]] = {
    "disable": "disable",
    "hide": "hide",
    "public": "public",
}
NATIVE_ROUTES_FIX = (
    f'write "NativeRoutes": {{"disable": [...], "hide": [...], "public": [...]}} with names '
    f'among {", ".join(NATIVE_ROUTE_NAMES)} or "*".'
)


@dataclass(frozen=True, slots=True)
class AuthorizationData:
    """``FwData.Authorization`` as written, validated; function names not yet resolved.

    A name is "" when the key is absent or empty.
    """

    scheme: Literal["basic", "oAuth2"]  # the oAuth alias is oAuth2
    on_auth: str = ""  # OnAuth (basic, required) or onAuth (oAuth2: "" is the native check)
    on_admin: str = ""
    max_failures: int = DEFAULT_MAX_FAILURES
    # basic only: OnAuthCache, seconds an accepted user and password are remembered (0: none)
    on_auth_cache_s: int = 0
    # oAuth2 only: onAuthparams names a function, or a file ("file:NAME.json")
    on_auth_params: str = ""
    on_auth_params_file: Path | None = None  # absolute; it exists at load
    on_auth_no_check_uri: str = ""
    allow_get_token: bool = DEFAULT_ALLOW_GET_TOKEN
    signing_alg: str = DEFAULT_SIGNING_ALG  # SPEC 12.1: one of SIGNING_ALGS
    issuer: str = ""  # SPEC 12.2: the tokens' iss when set (an https URL)
    login_page: str = ""  # SPEC 16.1: the text of loginPage's template ("": fwrest's own)
    bound_tokens: str = ""  # SPEC 16.2: "dpop" or "mtls" (one of BOUND_TOKENS); "": optional


@dataclass(frozen=True, slots=True)
class RouteList:
    """One list of ``FwData.NativeRoutes``: ``"disable": ["healthcheck", ...]``."""

    kind: Literal["disable", "hide", "public"]
    key: str  # as written, for messages
    names: tuple[str, ...]  # as written (checked against the catalog at start)


@dataclass(frozen=True, slots=True)
class NativeRoutesData:
    """``FwData.NativeRoutes``: its lists in the order written."""

    lists: tuple[RouteList, ...] = ()


@dataclass(frozen=True, slots=True)
class FwData:
    """The ``FwData`` of a server section or ``[APP_MONITOR]``."""

    authorization: AuthorizationData | None = None
    native_routes: NativeRoutesData = NativeRoutesData()


def parse_fw_data(
    raw: RawConfig,
    sec: RawSection,
    value: Any,
    *,
    section: str,
    is_tls: bool,
    monitor: bool = False,
) -> FwData:
    """Validate a section's ``FwData`` (the JSON value read by ``convert``).

    Args:
        raw: the configuration being loaded.
        sec: the section holding ``FwData``.
        value: the JSON value; None when absent or empty.
        section: the section that Authorization's messages name.
        is_tls: whether the port speaks TLS (``oAuth2`` needs it).
        monitor: True on ``[APP_MONITOR]``, which serves no native route and calls no
            ``onAdmin``: ``NativeRoutes`` and ``Authorization.onAdmin`` are refused there
            (SPEC 2: a key that would have no effect stops the start).

    Raises:
        ConfigError: not an object, an unknown key, or an ``Authorization`` or
            ``NativeRoutes`` that cannot work.
    """
    if value is None:
        return FwData()
    written = sec.values.get("fwdata", ("FwData", None))[0]
    if not isinstance(value, dict):
        raise raw.error(
            "must be a JSON object.", sec.name, written, 'write {"Authorization": {...}}.'
        )
    items: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, item in value.items():
        known = FW_DATA_KEYS.get(str(key).lower())
        if known is None:
            raise raw.error(
                f"FwData holds the unknown key {key!r}; FwData is reserved for the framework.",
                sec.name,
                written,
                "use only Authorization and NativeRoutes; put application data in UserData.",
            )
        if known.lower() in given_as:
            raise raw.error(
                _twice("FwData", given_as[known.lower()], str(key)),
                sec.name,
                written,
                "keep one of them.",
            )
        if monitor and known == "NativeRoutes":
            raise raw.error(
                f"the key {key!r} has no effect on the monitor (it serves no native route).",
                sec.name,
                written,
                "remove it: the monitor's FwData takes only Authorization (scheme basic, "
                "OnAuth, OnAuthCache, maxFailures).",
            )
        given_as[known.lower()] = str(key)
        items[known.lower()] = item
    # the messages name the resolved file, as the start's do
    source = str(Path(raw.source).resolve()) if raw.source else None
    auth = items.get("authorization")
    if monitor and isinstance(auth, dict):
        for key in auth:
            if str(key).lower() in _MONITOR_UNUSED:
                raise raw.error(
                    f"Authorization's key {key!r} has no effect on the monitor (it serves no "
                    "native route that would call it).",
                    sec.name,
                    written,
                    "remove it: the monitor's Authorization takes scheme (basic), OnAuth, "
                    "OnAuthCache and maxFailures.",
                )
    authorization = _authorization(auth, section, is_tls, raw, source, monitor)
    routes = NativeRoutesData()
    if not monitor:
        routes = _native_routes(items.get("nativeroutes"), sec.name, source)
    return FwData(authorization, routes)


def _err(problem: str, section: str, fix: str, source: str | None) -> ConfigError:
    return ConfigError(problem, section=section, key="FwData", fix=fix, source=source)


def _twice(where: str, first: str, second: str) -> str:
    """The message for one key given twice in one object of FwData, in two spellings."""
    return (
        f"{where} gives the key twice (as {first} and {second}); FwData keys are case-insensitive."
    )


def _authorization(
    auth: Any, section: str, is_tls: bool, raw: RawConfig, source: str | None, monitor: bool
) -> AuthorizationData | None:
    base_dir = raw.base_dir
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
        if str(key).lower() in folded:
            first = folded[str(key).lower()][0]
            raise _err(
                _twice("FwData Authorization", first, str(key)),
                section,
                "keep one of them.",
                source,
            )
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
            f"FwData Authorization scheme {spelled(scheme_written)} is not a scheme fwrest "
            "knows (the value is case-sensitive).",
            section,
            f"write exactly {_VALID}.",
            source,
        )
    if monitor and scheme != "basic":
        # before the oAuth2 scheme's own checks (TLS, onAuthparams): the monitor takes none
        raise _err(
            "the monitor supports Basic authorization only.",
            section,
            'use "scheme": "basic" with an OnAuth function.',
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
    max_failures = folded.get("maxfailures", ("maxFailures", DEFAULT_MAX_FAILURES))[1]
    if isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 1:
        raise _err(
            "FwData Authorization maxFailures must be a whole number >= 1, got "
            f"{spelled(max_failures)}.",
            section,
            'write for example "maxFailures": 10.',
            source,
        )

    def function(key: str, required: bool) -> str:
        """The function name a key gives ("" when absent or empty)."""
        written, value = folded.get(key, (allowed.get(key, key), None))
        if value is None or value == "":
            if required:
                raise _err(
                    f"FwData Authorization needs {written} for the {scheme} scheme.",
                    section,
                    f'add "{allowed[key]}": "module.function".',
                    source,
                )
            return ""
        if not isinstance(value, str):
            raise _err(
                f"FwData Authorization {written} must name a function, got {spelled(value)}.",
                section,
                f'write "{allowed[key]}": "module.function".',
                source,
            )
        return value

    on_admin = function("onadmin", False)
    if scheme == "basic":
        on_auth = function("onauth", True)
        return AuthorizationData(
            "basic",
            on_auth=on_auth,
            on_admin=on_admin,
            max_failures=max_failures,
            on_auth_cache_s=_auth_cache(folded.get("onauthcache"), section, source),
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
    params_name = ""
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
        params_name = function("onauthparams", True)
    on_auth = function("onauth", False)
    no_check_uri = function("onauthnocheckuri", False)
    allow_get = folded.get("allowgettoken", ("allowGetToken", DEFAULT_ALLOW_GET_TOKEN))[1]
    if not isinstance(allow_get, bool):
        raise _err(
            f"FwData Authorization allowGetToken must be true or false, got {spelled(allow_get)}.",
            section,
            'write "allowGetToken": false.',
            source,
        )
    signing_alg = folded.get("signingalg", ("signingAlg", DEFAULT_SIGNING_ALG))[1]
    if signing_alg not in SIGNING_ALGS:
        raise _err(
            f"FwData Authorization signingAlg {spelled(signing_alg)} is not an algorithm fwrest "
            "signs tokens with (the value is case-sensitive).",
            section,
            f"write one of {', '.join(SIGNING_ALGS)} (HS256 when absent).",
            source,
        )
    issuer = _issuer(folded.get("issuer", ("issuer", ""))[1], section, source)
    login_page = _login_page(folded.get("loginpage"), raw, section, source)
    bound = folded.get("boundtokens", ("boundTokens", ""))[1]
    if bound not in ("", *BOUND_TOKENS):
        raise _err(
            f"FwData Authorization boundTokens {spelled(bound)} is not a binding fwrest knows "
            "(the value is case-sensitive).",
            section,
            f"write one of {', '.join(repr(b) for b in BOUND_TOKENS)}, or leave it out.",
            source,
        )
    return AuthorizationData(
        "oAuth2",
        on_auth=on_auth,
        on_admin=on_admin,
        max_failures=max_failures,
        on_auth_params=params_name,
        on_auth_params_file=params_file,
        on_auth_no_check_uri=no_check_uri,
        allow_get_token=allow_get,
        signing_alg=str(signing_alg),
        issuer=issuer,
        login_page=login_page,
        bound_tokens=str(bound),
    )


def _login_page(
    given: tuple[str, Any] | None, raw: RawConfig, section: str, source: str | None
) -> str:
    """``loginPage`` (SPEC 16.1): ``"file:NAME.html"`` (relative to the config), read at load;
    the template must hold ``{{form}}`` (the login form fwrest fills in). "" when absent."""
    if given is None or given[1] is None or given[1] == "":
        return ""
    written, value = given
    fix = (
        'write "loginPage": "file:login.html", an HTML file holding {{form}} (and, as you '
        "like, {{client}}, {{scopes}}, {{error}})."
    )
    if not isinstance(value, str) or not value.strip().lower().startswith("file:"):
        raise _err(
            f"FwData Authorization {written} must name an HTML file as file:NAME.html, "
            f"got {spelled(value)}.",
            section,
            fix,
            source,
        )
    path = Path(value.strip()[5:].strip())
    if not path.is_absolute():
        path = raw.base_dir / path
    raw.files.append(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM, if any, is not JSON
    except (OSError, UnicodeDecodeError) as exc:
        raise _err(
            f"FwData Authorization {written} names {path}, which cannot be read: "
            f"{getattr(exc, 'strerror', None) or exc}.",
            section,
            fix,
            source,
        ) from None
    if "{{form}}" not in text:
        raise _err(
            f"FwData Authorization {written}: the template {path} lacks the form placeholder, "
            "so its page could log no one in.",
            section,
            fix,
            source,
        )
    return text


def _auth_cache(given: tuple[str, Any] | None, section: str, source: str | None) -> int:
    """``OnAuthCache`` (SPEC 4.1): seconds, a duration as the configuration's others are
    written (``300``, ``"300s"``, ``"5m"``, ``"1h"``); absent, empty or 0: no cache."""
    if given is None or given[1] is None or given[1] == "":
        return 0
    written, value = given
    seconds = duration_seconds(value)
    if seconds is None or seconds < 0:
        raise _err(
            f"FwData Authorization {written} must be a duration in whole seconds "
            f"(300, 300s, 5m, 1h), got {spelled(value)}.",
            section,
            'write for example "OnAuthCache": "300s", or leave it out for no cache.',
            source,
        )
    return seconds


def _issuer(value: Any, section: str, source: str | None) -> str:
    """``issuer``: "" when absent; else an https URL without query or fragment (RFC 8414 2)."""
    if value is None or value == "":
        return ""
    from urllib.parse import urlsplit

    parts = urlsplit(value) if isinstance(value, str) else None
    if (
        parts is None
        or parts.scheme != "https"
        or not parts.netloc
        or parts.query
        or parts.fragment
    ):
        raise _err(
            f"FwData Authorization issuer must be an https URL without query or fragment, "
            f"got {spelled(value)}.",
            section,
            'write the public URL of the location, e.g. "issuer": "https://auth.example.com/rest".',
            source,
        )
    # kept as written, a trailing "/" too: iss equals it exactly (SPEC 12.2, RFC 8414 3.3)
    return str(value)


def _native_routes(value: Any, section: str, source: str | None) -> NativeRoutesData:
    if value is None:
        return NativeRoutesData()

    def fail(problem: str) -> ConfigError:
        return ConfigError(
            problem, section=section, key="FwData", source=source, fix=NATIVE_ROUTES_FIX
        )

    if not isinstance(value, dict):
        raise fail("FwData NativeRoutes must be an object.")
    lists: list[RouteList] = []
    given_as: dict[str, str] = {}
    for key, names in value.items():
        kind = _ROUTE_LISTS.get(str(key).lower())
        if kind is None:
            raise fail(f"FwData NativeRoutes has the unknown key {key!r}.")
        if kind in given_as:
            raise fail(_twice("FwData NativeRoutes", given_as[kind], str(key)))
        given_as[kind] = str(key)
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
            raise fail(f"FwData NativeRoutes {key} must be a list of route names.")
        lists.append(RouteList(kind, str(key), tuple(names)))
    return NativeRoutesData(tuple(lists))
