"""A location's ``CORS`` section (SPEC 10.1) -> :class:`~fwrest.config.model.CorsConfig`.

The origins are checked here, at load: each is ``scheme://host[:port]`` (``http`` or
``https``, no path, no user), a host may be a pattern ``*.domain`` (one or more labels under
``domain``, which has two labels or more: ``*.com`` or ``http://*`` would match every site
of a top-level domain, and are refused, credentials or not; ``*.localhost`` is kept), and
``*`` alone allows any origin, but never with ``AllowCredentials=1`` (a browser refuses credentials for ``*``, and echoing any origin with credentials would hand
every site the user's session). ``AllowOrigins`` may not be empty (no origin could then call),
and each header name of ``AllowHeaders``/``ExposeHeaders`` and each method of ``AllowMethods``
must be a token (RFC 9110 5.1, 9.1): they are sent as written.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from fwrest.config.convert import section_values
from fwrest.config.model import CorsConfig
from fwrest.config.reading import RawConfig, RawSection

__all__ = ["cors_config", "origin_form"]

_FIX_ORIGIN = "write each origin as scheme://host[:port], e.g. https://app.example.com."

# RFC 9110 5.6.2: token = 1*tchar, the form of a header field name (5.1) and a method (9.1)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")

# key -> (attribute, what each entry is, an example list)
_TOKEN_LISTS = {
    "AllowMethods": ("allow_methods", "a method", "GET, POST, PUT, DELETE"),
    "AllowHeaders": ("allow_headers", "a header name", "Authorization, Content-Type"),
    "ExposeHeaders": ("expose_headers", "a header name", "X-Total-Count"),
}


def _check_tokens(raw: RawConfig, sec: RawSection, values: dict[str, Any]) -> None:
    """Refuse an entry of AllowMethods, AllowHeaders or ExposeHeaders that is not a token."""
    for key, (attr, what, example) in _TOKEN_LISTS.items():
        for item in values[attr] or ():
            if _TOKEN.match(item) is None:
                raise raw.error(
                    f"{item!r} is not {what} (letters, digits and the marks of RFC 9110 5.6.2; "
                    "no space, colon or other separator).",
                    sec.name,
                    sec.values.get(key.lower(), (key, None))[0],
                    f"separate the entries by commas, e.g. {key}={example}.",
                )


_FIX_WIDE = (
    "put the wildcard under your own domain (https://*.example.com), or list the origins of "
    "your front-ends; AllowOrigins=* (without AllowCredentials=1) allows any origin."
)


def _whole_web(text: str) -> str:
    """Why the pattern ``text`` is refused, or ``""``: a wildcard over a single label
    (``https://*.com``, ``http://*``) matches every site of a top-level domain, or every
    site. ``*.localhost`` is kept: its names are the user's own machine (RFC 6761 6.3).

    >>> _whole_web("https://*.com:8443")[:40], _whole_web("https://*.example.com")
    ("'https://*.com:8443' allows every site u", '')
    """
    try:
        host = (urlsplit(text).hostname or "").rstrip(".")
    except ValueError:
        return ""  # not an origin: origin_form says so
    if host == "*":
        return f"{text!r} allows every site (a wildcard over the whole host)."
    if host.startswith("*.") and "." not in host[2:] and host[2:] not in ("", "localhost"):
        return (
            f"{text!r} allows every site under the top-level domain {host[2:]!r} (a wildcard "
            "right over a single label matches the whole web there)."
        )
    return ""


def origin_form(text: str) -> str | None:
    """The canonical form of an allowed origin (lower case, no default port spelled out),
    or None when ``text`` is not ``scheme://host[:port]``.

    >>> origin_form("HTTPS://App.Example.com"), origin_form("https://*.example.com:8443")
    ('https://app.example.com', 'https://*.example.com:8443')
    >>> origin_form("https://example.com/"), origin_form("example.com")
    (None, None)
    """
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if scheme not in ("http", "https") or not host or parts.path or parts.query:
        return None
    if parts.fragment or parts.username is not None or text.endswith(("?", "#")):
        return None
    if "*" in host and (not host.startswith("*.") or "*" in host[2:] or len(host) < 3):
        return None
    if any(c in host for c in " /\\@"):
        return None
    if ":" in host:  # an IPv6 address: written in brackets
        host = f"[{host}]"
    if port is not None and port != (443 if scheme == "https" else 80):
        return f"{scheme}://{host}:{port}"
    return f"{scheme}://{host}"


def cors_config(
    raw: RawConfig, name: str, by: tuple[str, str], cache: dict[str, CorsConfig]
) -> CorsConfig:
    """The CORS section ``name``, named by the key ``by`` (section, key)."""
    sec: RawSection = raw.section(name, by)
    folded = sec.name.lower()
    if folded in cache:
        return cache[folded]
    values = section_values(raw, sec, "CORS")
    written = sec.values.get("alloworigins", ("AllowOrigins", None))[0]
    if not values["allow_origins"]:
        # the generic check sees an empty list as given; no origin at all could never call
        raise raw.error(
            "the required key AllowOrigins is empty (no origin could call).",
            sec.name,
            written,
            "list the origins of your front-ends, e.g. AllowOrigins=https://app.example.com.",
        )
    _check_tokens(raw, sec, values)
    origins: list[str] = []
    for item in values["allow_origins"]:
        if item == "*":
            origins.append(item)
            continue
        wide = _whole_web(item)
        if wide:
            raise raw.error(wide, sec.name, written, _FIX_WIDE)
        form = origin_form(item)
        if form is None:
            raise raw.error(
                f"{item!r} is not an origin (scheme://host[:port], http or https, no path).",
                sec.name,
                written,
                _FIX_ORIGIN,
            )
        origins.append(form)
    if "*" in origins and values["allow_credentials"]:
        raise raw.error(
            "AllowOrigins=* cannot be used with AllowCredentials=1 (any site could then act "
            "with the user's credentials).",
            sec.name,
            written,
            "list the origins of your front-ends, or set AllowCredentials=0.",
        )
    config = CorsConfig(
        name=sec.name,
        allow_origins=tuple(dict.fromkeys(origins)),
        allow_methods=tuple(m.upper() for m in values["allow_methods"] or ()),
        allow_headers=tuple(values["allow_headers"]),
        expose_headers=tuple(values["expose_headers"] or ()),
        allow_credentials=bool(values["allow_credentials"]),
        max_age=values["max_age"],
    )
    cache[folded] = config
    return config
