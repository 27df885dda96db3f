"""CORS (SPEC 10.1): a location's ``CORS`` section, as an early and an outgoing stage.

* **Preflight** (early, before authorization: a browser sends no credentials on it): an
  ``OPTIONS`` request with ``Origin`` and ``Access-Control-Request-Method`` to a location with
  CORS. Granted (204 with the ``Access-Control-*`` headers) when the origin is allowed, the
  method has a route on the path (one of ``AllowMethods`` when given), or is a read the
  location's static files answer (GET or HEAD where no route has the path, under a
  ``RootPath``), and every header asked for is in ``AllowHeaders``; anything else is 403 with
  the error body, ``Vary: Origin`` and no ``Access-Control-*`` header. Only application
  routes and the token route are granted; the other native routes never are (the settings
  change relies on it, SPEC 5). A plain ``OPTIONS`` (without those headers) goes on as before.
* **Every other answer** (outgoing) to a request from an allowed origin, errors included,
  carries ``Access-Control-Allow-Origin`` (the request's origin) and, as configured,
  ``-Allow-Credentials`` and ``-Expose-Headers``, so the front-end can read it; again never on
  the native routes other than the token route. Every answer of those routes carries
  ``Vary: Origin``, whatever the ``Origin`` (allowed, another, none): the answer depends on it,
  so a shared cache must not give one origin's answer to another.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

from fwrest.config.model import CorsConfig
from fwrest.context.request import RequestContext
from fwrest.errors import HTTPError
from fwrest.repository import Endpoint
from fwrest.routing import TOKEN_ROUTE, LocationTable, Router
from fwrest.routing.names import METADATA_ROUTE, REVOKE_ROUTE
from fwrest.wire import Reply, Request, error_reply

__all__ = ["CorsHeaders", "CorsPolicy", "CorsStages", "DocumentCors"]

_VARY = ("vary", "Origin")
_READS = ("GET", "HEAD")  # the methods static files answer (SPEC 10.3), a document's too
_CORS_NATIVE = (TOKEN_ROUTE, REVOKE_ROUTE, METADATA_ROUTE)  # the native routes CORS applies to
_ORIGINS_REMEMBERED = 256  # verdicts per origin remembered per location
_LABEL_MAX, _NAME_MAX = 63, 253  # DNS: a label, a whole name


class _Routed(Protocol):
    @property
    def endpoint(self) -> Endpoint: ...


R = TypeVar("R", bound=_Routed)


def granted(endpoint: Endpoint) -> bool:
    """Whether CORS applies to a route: application routes, the token route and revocation
    (a browser client revokes its tokens at logout: RFC 7009 5) and the metadata (a
    single-page app discovers the endpoints: SPEC 16.1) only."""
    return endpoint.source != "native" or endpoint.path in _CORS_NATIVE


class CorsPolicy:
    """One CORS section, compiled: the origin check and the header values, made once."""

    def __init__(self, config: CorsConfig) -> None:
        origins = config.allow_origins
        self.any_origin = "*" in origins
        self._exact = frozenset(o for o in origins if "*" not in o)
        # "https://*.example.com:8443" -> ("https://", ".example.com:8443")
        self._patterns = tuple(
            (o[: o.index("*")], o[o.index("*") + 1 :]) for o in origins if "*" in o and o != "*"
        )
        self.methods = config.allow_methods
        self.allow_headers = frozenset(h.lower() for h in config.allow_headers)
        self.allow_headers_text = ", ".join(config.allow_headers)
        self.expose_text = ", ".join(config.expose_headers)
        self.credentials = config.allow_credentials
        self.max_age = str(config.max_age)
        self._verdicts: dict[str, bool] = {}

    def allows(self, origin: str) -> bool:
        """Whether a request's ``Origin`` may read the answers. A pattern ``*.domain``
        matches one or more labels under ``domain``, over the scheme and port it is written
        with; never ``domain`` itself.

        >>> policy = CorsPolicy(CorsConfig("C", ("https://*.example.com",)))
        >>> [policy.allows(o) for o in ("https://a.b.example.com", "https://example.com",
        ...  "http://a.example.com", "https://a.example.com:8443", "https://A.example.com:443")]
        [True, False, False, False, True]
        """
        verdict = self._verdicts.get(origin)
        if verdict is None:
            verdict = self._decide(origin)
            if len(self._verdicts) >= _ORIGINS_REMEMBERED:
                self._verdicts.clear()
            self._verdicts[origin] = verdict
        return verdict

    def _decide(self, origin: str) -> bool:
        if self.any_origin:
            return origin != "null"
        # the canonical form the configured origins have (config/cors.py's origin_form): lower
        # case, without the scheme's default port (https://a.example.com:443 is
        # https://a.example.com)
        folded = origin.lower()
        if folded.startswith("https://") and folded.endswith(":443"):
            folded = folded[:-4]
        elif folded.startswith("http://") and folded.endswith(":80"):
            folded = folded[:-3]
        if folded in self._exact:
            return True
        for start, end in self._patterns:
            if folded.startswith(start) and folded.endswith(end):
                labels = folded[len(start) : len(folded) - len(end)]
                if 0 < len(labels) <= _NAME_MAX and all(
                    0 < len(label) <= _LABEL_MAX
                    and all(c.isascii() and (c.isalnum() or c == "-") for c in label)
                    and label[0] != "-"
                    and label[-1] != "-"  # a DNS label neither starts nor ends with one
                    for label in labels.split(".")
                ):
                    return True
        return False


class _Place(Generic[R]):
    """A location of the port, with its CORS policy (None: no CORS on it) and whether it
    serves static files (a ``RootPath``: a GET or HEAD no route takes goes to them)."""

    __slots__ = ("files", "policy", "router")

    def __init__(self, policy: CorsPolicy | None, router: Router[R], files: bool) -> None:
        self.policy = policy
        self.router = router
        self.files = files


def _closed(router: Router[R], rel: str) -> bool:
    """Whether a route of the path is one CORS never applies to (a native route other than
    the token route), for an answer made before routing."""
    return any(not granted(router.match(m, rel).payload.endpoint) for m in router.methods(rel))


def _asked(req: Request) -> tuple[str | None, str | None, str | None]:
    """A preflight's ``Origin``, ``Access-Control-Request-Method`` and -Headers (their lines
    joined); None for each one the request lacks."""
    origin = method = asked = None
    for name, value in req.headers:
        if name == "origin":
            origin = value
        elif name == "access-control-request-method":
            method = value.strip()
        elif name == "access-control-request-headers":
            asked = value if asked is None else f"{asked},{value}"
    return origin, method, asked


def _refused(why: str) -> Reply:
    """A refused preflight: 403, no ``Access-Control-*`` header, and the ``Vary: Origin`` a
    granted one carries (the answer depends on the origin: a cache keeps them apart)."""
    reply = error_reply(HTTPError(403, detailed=f"CORS preflight refused: {why}"))
    reply.headers.append(_VARY)
    return reply


class CorsStages(Generic[R]):
    """The CORS stages of one port: :meth:`preflight` (early, ``OPTIONS`` only) and one
    outgoing stage per location with a CORS section (:meth:`outgoing_of`).

    Args:
        locations: every location of the port as ``(prefix, CORS section or None, router,
            whether it serves static files)`` (all of them, so that the longest prefix is the
            request's own location).
    """

    def __init__(self, locations: Iterable[tuple[str, CorsConfig | None, Router[R], bool]]) -> None:
        policies: dict[int, CorsPolicy] = {}
        places: list[tuple[str, _Place[R]]] = []
        for prefix, config, router, files in locations:
            policy = None
            if config is not None:
                policy = policies.setdefault(id(config), CorsPolicy(config))
            places.append((prefix, _Place(policy, router, files)))
        self._places = dict(places)
        self._table: LocationTable[_Place[R]] = LocationTable(places)

    def outgoing_of(self, prefix: str) -> CorsHeaders[R] | None:
        """The outgoing stage of the location at ``prefix`` (None: no CORS there)."""
        place = self._places[prefix]
        if place.policy is None:
            return None
        return CorsHeaders(place.policy, place.router, prefix)

    async def preflight(self, req: Request, ctx: RequestContext) -> Reply | None:
        """The early stage: a preflight's answer, or None for any other request."""
        if req.method != "OPTIONS":
            return None
        origin, method, asked = _asked(req)
        if origin is None or method is None:
            return None  # a plain OPTIONS: what it was
        found = self._table.find(ctx.path)
        if found is None or found[0].policy is None:
            return None  # no CORS here: a plain OPTIONS
        place, rel = found
        policy = place.policy
        assert policy is not None
        if not policy.allows(origin):
            return _refused("the origin is not allowed")
        unrouted = 0
        try:
            match = place.router.match(method, rel)
        except HTTPError as exc:
            unrouted = exc.status
        methods: tuple[str, ...]
        if unrouted == 404 and place.files and method in _READS:
            # no route has the path: a read goes to the static files (SPEC 10.3), which
            # answer it with the CORS headers, the file or its 404 (docs/decisions.md: any
            # path, whether a file is there or not, never looked up before authorization)
            methods = policy.methods or _READS
        elif unrouted:
            # no route takes it: granted for a method AllowMethods lists (the request then
            # gets its 404 or 405 with the CORS headers, which the front-end can read, SPEC
            # 10.1), unless a route of the path is closed to other origins; without
            # AllowMethods the methods are the route's, and there are none
            if method not in policy.methods or _closed(place.router, rel):
                return _refused(f"no route takes {method} here")
            methods = policy.methods
        elif not granted(match.payload.endpoint):
            return _refused("this route is not open to other origins")
        else:
            methods = policy.methods or tuple(place.router.methods(rel))
        if method not in methods:
            return _refused(f"{method} is not an allowed method")
        return _granted(policy, origin, methods, asked)


def _granted(policy: CorsPolicy, origin: str, methods: Iterable[str], asked: str | None) -> Reply:
    """A preflight's 204 for an allowed origin and method, or its 403 for a header the
    policy does not allow."""
    if asked is not None:
        for header in asked.split(","):
            header = header.strip().lower()
            if header and header not in policy.allow_headers:
                return _refused(f"the header {header} is not allowed")
    headers = [
        ("access-control-allow-origin", origin),
        ("access-control-allow-methods", ", ".join(methods)),
        ("access-control-allow-headers", policy.allow_headers_text),
        ("access-control-max-age", policy.max_age),
        ("vary", "Origin"),
    ]
    if policy.credentials:
        headers.append(("access-control-allow-credentials", "true"))
    return Reply(204, headers, b"")


class DocumentCors:
    """CORS for a discovery document at a well-known path of the port's root (the RFC 8414
    metadata of a location with a CORS section: a single-page app discovers the endpoints
    there, SPEC 16.1), as the location's own metadata route has it: the preflight granted
    for GET and HEAD to the origins the section allows, the headers on the answer."""

    __slots__ = ("policy",)

    def __init__(self, config: CorsConfig) -> None:
        self.policy = CorsPolicy(config)

    def preflight(self, req: Request) -> Reply | None:
        """The answer to a preflight; None for an ``OPTIONS`` that is no preflight."""
        origin, method, asked = _asked(req)
        if origin is None or method is None:
            return None
        policy = self.policy
        if not policy.allows(origin):
            return _refused("the origin is not allowed")
        if method not in _READS:
            return _refused(f"no route takes {method} here")
        return _granted(policy, origin, _READS, asked)

    def headers(self, req: Request, headers: list[tuple[str, str]]) -> None:
        """The CORS headers of the document's answer (as :class:`CorsHeaders` adds them)."""
        headers.append(_VARY)
        policy = self.policy
        for name, origin in req.headers:
            if name == "origin":
                if policy.allows(origin):
                    headers.append(("access-control-allow-origin", origin))
                    if policy.credentials:
                        headers.append(("access-control-allow-credentials", "true"))
                    if policy.expose_text:
                        headers.append(("access-control-expose-headers", policy.expose_text))
                return


# the answer headers the CORS stage writes, in place of any a handler set
_OWN = frozenset(
    (
        "access-control-allow-origin",
        "access-control-allow-credentials",
        "access-control-expose-headers",
    )
)


class CorsHeaders(Generic[R]):
    """The outgoing stage of one location with CORS: its headers on any answer to an allowed
    origin (errors too), and ``Vary: Origin`` on every answer whatever the origin; never on a
    native route other than the token route."""

    __slots__ = ("policy", "prefix", "router")

    def __init__(self, policy: CorsPolicy, router: Router[R], prefix: str) -> None:
        self.policy = policy
        self.router = router
        self.prefix = prefix

    def _relative(self, path: str) -> str:
        """The request's path relative to the location (as ``LocationTable.find`` gives)."""
        if self.prefix == "/":
            return path
        return path[len(self.prefix) :] or "/"

    def __call__(self, req: Request, ctx: RequestContext, reply: Reply) -> Reply:
        origin = None
        for name, value in req.headers:
            if name == "origin":
                origin = value
        if (
            origin is not None
            and req.method == "OPTIONS"
            and any(name == "access-control-request-method" for name, _ in req.headers)
        ):
            return reply  # a preflight: answered (or refused) as it is
        handler = ctx.handler
        if handler is not None:
            if not granted(handler.endpoint):
                return reply
        elif _closed(self.router, self._relative(ctx.path)):
            return reply  # answered before routing (401, 405): a native route's path
        headers = reply.headers
        # the answer depends on Origin whatever it is (allowed, another, none): a shared
        # cache keeps one answer per Origin (RFC 9110 12.5.5)
        for i, (name, value) in enumerate(headers):
            if name == "vary":
                folded = value.lower()
                if "origin" not in folded and value.strip() != "*":
                    headers[i] = ("vary", f"{value}, Origin")
                break
        else:
            headers.append(_VARY)
        if origin is None:
            return reply
        policy = self.policy
        if not policy.allows(origin):
            return reply
        if any(name in _OWN for name, _ in headers):
            # the location's CORS section decides them: a handler's own (a "*" beside the
            # origin with credentials) would make the browser refuse the answer
            headers[:] = [(name, value) for name, value in headers if name not in _OWN]
        headers.append(("access-control-allow-origin", origin))
        if policy.credentials:
            headers.append(("access-control-allow-credentials", "true"))
        if policy.expose_text:
            headers.append(("access-control-expose-headers", policy.expose_text))
        return reply
