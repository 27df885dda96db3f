"""A location's ``CORS`` section (SPEC 10.1) -> :class:`~fwrest.config.model.CorsConfig`.

The origins are checked here, at load: each is ``scheme://host[:port]`` (``http`` or
``https``, no path, no user), a host may be a pattern ``*.domain`` (one or more labels under
``domain``), and ``*`` alone allows any origin, but never with ``AllowCredentials=1`` (a
browser refuses credentials for ``*``, and echoing any origin with credentials would hand
every site the user's session).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fwrest.config.convert import section_values
from fwrest.config.model import CorsConfig
from fwrest.config.reading import RawConfig, RawSection

__all__ = ["cors_config", "origin_form"]

_FIX_ORIGIN = "write each origin as scheme://host[:port], e.g. https://app.example.com."


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
    origins: list[str] = []
    for item in values["allow_origins"]:
        if item == "*":
            origins.append(item)
            continue
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
