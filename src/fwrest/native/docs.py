"""``/fw/rest/docs``: Swagger UI over the port's own OpenAPI document (SPEC 14.2).

The page and its files come from fwrest's package (``native/swagger_ui/``: Swagger UI's
release files, unchanged, with their licence), never from another host: the page's
``Content-Security-Policy`` allows nothing but the server itself (and ``data:`` images, which
Swagger UI's style sheet holds). The files are read once, at their first request, and kept
in memory with their ``ETag``; the page links them with that tag in the query, so a browser
keeps them as long as it likes (``immutable``) and a new version is a new URL.

The page reads ``openapi.json`` beside it (the port's ``rest/openapi.json``) with the
browser's own credentials (a Basic port's, which the browser sends to the origin that asked
for them), and points "Try it out" at the origin that served the page, whatever host name the
document's ``servers`` names. On an oAuth2 port, Swagger UI's "Authorize" gets a token from
the port's token route (the document declares the flows of the port's grants; the code flow
with PKCE, which ``fwrest-docs.js`` turns on); the page and the document
must then be ``public`` (``FwData.NativeRoutes``), since a browser has no bearer token to
load them with.
"""

from __future__ import annotations

import hashlib
import html
import threading
from dataclasses import dataclass
from importlib import resources

from fwrest.context.request import Response, current

__all__ = ["DOCS_FILES", "SWAGGER_UI_VERSION", "docs_asset", "docs_page"]

SWAGGER_UI_VERSION = "5.35.0"  # the files of native/swagger_ui/ (their SOURCE.md)

# name -> Content-Type: the files the page links, each a route of its own (a literal path, so
# that NativeRoutes public opens it as it opens the page); the other licence files of the
# folder ship in the package without a route
_TYPES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "fwrest-docs.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
    "LICENSE": "text/plain; charset=utf-8",
}
DOCS_FILES = tuple(_TYPES)

# Nothing but the server itself: Swagger UI's scripts set styles through the DOM (allowed
# without 'unsafe-inline'), its style sheet holds data: images; the page has no inline script
# or style (its own script is fwrest-docs.js).
_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_PAGE_HEADERS = {
    "cache-control": "no-cache",
    "content-security-policy": _POLICY,
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}
_ASSET_CACHE = "private, max-age=31536000, immutable"


@dataclass(frozen=True, slots=True)
class _Asset:
    body: bytes
    media_type: str
    tag: str  # the start of the body's SHA-256, in the page's link and the ETag

    @property
    def etag(self) -> str:
        return f'"{self.tag}"'


_lock = threading.Lock()
_assets: dict[str, _Asset] = {}


def _load() -> dict[str, _Asset]:
    """Every file of the page, read once (a page nobody opens costs no memory)."""
    if _assets:
        return _assets
    with _lock:
        if not _assets:
            folder = resources.files("fwrest.native") / "swagger_ui"
            loaded = {}
            for name, media_type in _TYPES.items():
                body = (folder / name).read_bytes()
                loaded[name] = _Asset(body, media_type, hashlib.sha256(body).hexdigest()[:16])
            _assets.update(loaded)
    return _assets


def _page(path: str, port_name: str, assets: dict[str, _Asset]) -> str:
    """The page served at ``path`` (``/rest/fw/rest/docs``): every URL is under its own
    location, so it works under any ``Path``."""
    here = html.escape(path)
    spec = html.escape(path.rsplit("/", 1)[0] + "/openapi.json")

    def url(name: str) -> str:
        return f"{here}/{name}?v={assets[name].tag}"

    title = html.escape(port_name)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>API documentation [{title}]</title>
<link rel="icon" type="image/png" sizes="32x32" href="{url("favicon-32x32.png")}">
<link rel="stylesheet" href="{url("swagger-ui.css")}">
</head><body>
<p id="fw-docs-source">
OpenAPI document: <a href="{spec}">{spec}</a> &middot;
<a href="{url("LICENSE")}">Swagger UI {SWAGGER_UI_VERSION}</a> (Apache-2.0)</p>
<div id="swagger-ui" data-spec="{spec}"></div>
<script src="{url("swagger-ui-bundle.js")}"></script>
<script src="{url("fwrest-docs.js")}"></script>
</body></html>"""


async def docs_page() -> Response:
    ctx = current.get()
    body = _page(ctx.path, ctx.port.name, _load())
    return Response(body, media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)


async def docs_asset() -> Response:
    ctx = current.get()
    found = _load()[ctx.path.rsplit("/", 1)[1]]  # the route is one of DOCS_FILES
    headers = {"etag": found.etag, "cache-control": _ASSET_CACHE}
    if ctx.headers.get("if-none-match", "") == found.etag:
        return Response(b"", status=304, headers=headers)
    return Response(found.body, media_type=found.media_type, headers=headers)
