"""The authorize route of the authorization code grant (SPEC 16.1, RFC 6749 4.1, RFC 7636,
RFC 9207): ``{base}/fw/oauth2/authorize``, a native route never behind the port's scheme.

Theory of operation::

    GET  ?response_type=code&client_id&redirect_uri&code_challenge&...
      client unknown, redirect_uri not registered     400 HTML page, never a redirect
        (or either given more than once)
      other errors (a parameter given more than once  302 redirect_uri?error&state&iss
        first: invalid_request, no state if it is one)
      else                                            200 the login page (form + CSRF token)
    POST the form (username, password, the hidden fields)
      no CSRF token, or another request's             400 HTML page, no password checked
      a field given more than once                    400 HTML page (not the form fwrest made)
      the request's errors                            as for GET
      a wrong user or password                        200 the page again, one message
      locked out (the password grant's budget)        429 the page, Retry-After
      else                                            302 redirect_uri?code&state&iss

**The CSRF token** is an HMAC (SHA-256) of the authorization request's parameters and the
time the page was made, under a key derived from the service's signing key (shared by every
worker and host: a page one host served may be posted to another), valid
:data:`FORM_TTL_S`. Nothing is stored for a page: serving one writes nothing to the store
(docs/decisions.md, "The authorization code grant").

**The page** is fwrest's own HTML (:data:`DEFAULT_TEMPLATE`) or the ``loginPage`` template:
no script, no outside asset; its ``Content-Security-Policy`` allows only its own ``<style>``
blocks (by hash), posting the form to itself and the redirect to the client (a
``form-action`` without the client's origin makes a browser refuse the redirect after the
form is posted; an IPv6 literal's origin, which CSP cannot name, is its scheme and port on
any host), and no framing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import re
import secrets
import time
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode, urlsplit

from fwrest import log
from fwrest.auth.oauth2.errors import InvalidScope, OAuthError
from fwrest.auth.oauth2.grants.authorization_code import (
    CODE_KEEP_S,
    CODE_TTL_S,
    code_hash,
    code_record,
    well_formed,
)
from fwrest.auth.oauth2.grants.password import REFUSED, check_password
from fwrest.auth.oauth2.params import AuthParams, request_params
from fwrest.auth.oauth2.redirects import registered_form
from fwrest.auth.oauth2.scopes import allowed_scopes, grant, requested
from fwrest.errors import OAUTH_NO_STORE, TooManyRequests
from fwrest.routing.names import AUTHORIZE_PARAMS, AUTHORIZE_ROUTE
from fwrest.store.audit import AuditEvent
from fwrest.wire import Reply

if TYPE_CHECKING:
    from fwrest.auth.oauth2.tokens import TokenService

__all__ = ["CSRF_FIELD", "DEFAULT_TEMPLATE", "FORM_TTL_S", "Authorizer"]

CSRF_FIELD = "fw_csrf"  # the form's hidden field of the CSRF token
FORM_TTL_S = 600  # how long a login page may be posted (10 minutes: Keycloak's login timeout)
GRANT = "authorization_code"
# the authorization request's parameters the form carries back (hidden), in this order
CARRIED = AUTHORIZE_PARAMS
_PLACEHOLDER = re.compile(r"\{\{(client|scopes|error|form)\}\}")
_STYLE = re.compile(r"<style[^>]*>(.*?)</style>", re.DOTALL | re.IGNORECASE)
# an S256 code_challenge: BASE64URL(SHA256(code_verifier)) without padding (RFC 7636 4.2)
_S256 = re.compile(r"[A-Za-z0-9_-]{43}\Z")
# a redirect has no body; its content type is the one an empty Response had
_REDIRECT_TYPE = ("content-type", "application/octet-stream")
_NO_REFERRER = ("referrer-policy", "no-referrer")

DEFAULT_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in</title>
<style>
body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;
font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#f3f4f6;color:#111827}
main{background:#fff;border:1px solid #e5e7eb;border-radius:12px;padding:2rem;width:min(22rem,90vw);
box-shadow:0 10px 25px rgba(0,0,0,.06)}
h1{font-size:1.4rem;margin:0 0 .25rem}
p{margin:.25rem 0 1rem;color:#4b5563}
.scopes{font-size:.9rem}
.error{color:#b91c1c;background:#fef2f2;border:1px solid #fecaca;border-radius:6px;padding:.5rem .75rem}
.error:empty{display:none}
label{display:block;font-size:.9rem;margin:.75rem 0 .25rem;color:#374151}
input[type=text],input[type=password]{box-sizing:border-box;width:100%;padding:.55rem .7rem;
border:1px solid #d1d5db;border-radius:6px;font:inherit}
button{margin-top:1.25rem;width:100%;padding:.6rem;border:0;border-radius:6px;background:#1d4ed8;
color:#fff;font:inherit;font-weight:600;cursor:pointer}
</style>
</head>
<body>
<main>
<h1>Sign in</h1>
<p>to continue to <strong>{{client}}</strong></p>
<p class="scopes">Access asked for: {{scopes}}</p>
<p class="error" role="alert">{{error}}</p>
{{form}}
</main>
</body>
</html>
"""

ERROR_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Sign-in request refused</title></head>
<body><h1>Sign-in request refused</h1><p>{message}</p>
<p>Go back to the application and start again.</p></body></html>
"""


# the parameters that decide where a redirect goes: given twice, the 400 page
_REDIRECT_NAMES = ("client_id", "redirect_uri")


def _given_twice(names: list[str]) -> str:
    if len(names) == 1:
        return f"the parameter {names[0]!r} is given more than once"
    return f"the parameters {', '.join(repr(n) for n in names)} are each given more than once"


class _Refused(Exception):
    """An authorization request that gets the 400 page: no redirect can be trusted."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Redirected(Exception):
    """An authorization request refused by a redirect to the client (RFC 6749 4.1.2.1)."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.req: _Request | None = None  # the request, its client and redirect checked


class _Request:
    """An authorization request as checked: its client, where to send the answer, and the
    scopes asked."""

    __slots__ = ("action", "asked", "client_id", "params", "redirect", "redirect_given")

    def __init__(self, params: dict[str, str]) -> None:
        self.params = params
        self.action = AUTHORIZE_ROUTE  # where the form posts: the route's absolute path
        self.client_id = ""
        self.redirect = ""
        self.redirect_given = False
        self.asked: tuple[str, ...] = ()


def _styles_policy(template: str) -> str:
    """``style-src`` for the template's ``<style>`` blocks (by hash): nothing else styles it."""
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(block.encode()).digest()).decode() + "'"
        for block in _STYLE.findall(template)
    ]
    return "style-src " + " ".join(hashes) if hashes else "style-src 'none'"


def _form_target(uri: str) -> str:
    """The ``form-action`` source of a redirect URI: its origin, or, for an IPv6 literal
    (``http://[::1]:PORT``, which no CSP host-source can name: Chromium ignores the source,
    then refuses the redirect after the form is posted), its scheme and port on any host, the
    tightest source that lets the browser follow it (docs/decisions.md).

    >>> _form_target("https://app.example.com/cb"), _form_target("http://127.0.0.1:5173/cb")
    ('https://app.example.com', 'http://127.0.0.1:5173')
    >>> _form_target("http://[::1]:5173/cb"), _form_target("https://[2001:db8::1]/cb")
    ('http://*:5173', 'https://*:443')
    """
    parts = urlsplit(uri)
    if not parts.netloc.startswith("["):
        return f"{parts.scheme}://{parts.netloc}"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://*:{port}"


class Authorizer:
    """The authorize route of one oAuth2 port, one per token service (per port and worker),
    built at start with the port's login page."""

    def __init__(self, service: TokenService, template: str = "") -> None:
        self.service = service
        self.template = template or DEFAULT_TEMPLATE
        self._styles = _styles_policy(self.template)
        self._form_key: tuple[bytes, bytes] | None = None  # (signing key, form key): _key

    @property
    def _key(self) -> bytes:
        """A key of its own, derived from the service's signing key (shared by every worker
        and host): a login form's token is no token of another use. Derived at first use: the
        signing key may be read after the start (a store down then: 503 until it is), and
        may change (a store that lost its data: the worker takes the store's key, and its
        forms the key every other host's forms use)."""
        secret = self.service.signing_secret()
        known = self._form_key
        if known is None or known[0] is not secret:
            known = self._form_key = (
                secret,
                hmac.new(secret, b"fwrest authorize form", "sha256").digest(),
            )
        return known[1]

    # -- the answers --------------------------------------------------------------------------
    def _headers(self, form_to: str | None) -> list[tuple[str, str]]:
        action = "'none'" if form_to is None else f"'self' {form_to}"
        policy = (
            f"default-src 'none'; {self._styles}; img-src 'self' data:; form-action {action}; "
            "frame-ancestors 'none'; base-uri 'none'"
        )
        return [
            ("content-type", "text/html; charset=utf-8"),
            ("content-security-policy", policy),
            ("x-frame-options", "DENY"),
            _NO_REFERRER,
            *OAUTH_NO_STORE,
        ]

    def _error_page(self, message: str, status: int = 400) -> Reply:
        body = ERROR_PAGE.format(message=html.escape(message)).encode()
        return Reply(status, self._headers(None), body)

    def _redirect(self, redirect: str, values: dict[str, str]) -> Reply:
        glue = "&" if urlsplit(redirect).query else "?"
        location = redirect + glue + urlencode(values)
        headers = [_REDIRECT_TYPE, ("location", location), *OAUTH_NO_STORE, _NO_REFERRER]
        return Reply(302, headers, b"")

    def _error_redirect(self, req: _Request, exc: _Redirected, issuer: str) -> Reply:
        values = {"error": exc.error, "error_description": exc.description}
        state = req.params.get("state")
        if state is not None:
            values["state"] = state
        values["iss"] = issuer
        return self._redirect(req.redirect, values)

    def _page(self, req: _Request, status: int = 200, error: str = "", username: str = "") -> Reply:
        hidden = "".join(
            f'<input type="hidden" name="{name}" value="{html.escape(req.params[name])}">'
            for name in CARRIED
            if name in req.params
        )
        token = self.form_token(req.params)
        form = (
            f'<form method="post" action="{html.escape(req.action)}">'
            f'<input type="hidden" name="{CSRF_FIELD}" value="{token}">{hidden}'
            '<label for="fw-username">User name</label>'
            '<input type="text" id="fw-username" name="username" autocomplete="username" '
            f'required autofocus value="{html.escape(username)}">'
            '<label for="fw-password">Password</label>'
            '<input type="password" id="fw-password" name="password" '
            'autocomplete="current-password" required>'
            '<button type="submit">Sign in</button></form>'
        )
        values = {
            "client": html.escape(req.client_id),
            "scopes": html.escape(", ".join(req.asked)),
            "error": html.escape(error),
            "form": form,
        }
        body = _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.template).encode()
        return Reply(status, self._headers(_form_target(req.redirect)), body)

    # -- the CSRF token -----------------------------------------------------------------------
    def form_token(self, params: dict[str, str], at: int | None = None) -> str:
        """The CSRF token of a login form for the authorization request ``params``, made at
        ``at`` (now): the time and an HMAC of it, the port and the request's parameters."""
        made = int(time.time()) if at is None else at
        text = "\n".join(
            [self.service.section, str(made), *(f"{n}={params.get(n, '')}" for n in CARRIED)]
        )
        mac = hmac.new(self._key, text.encode(), hashlib.sha256).digest()
        return f"{made}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"

    def _token_valid(self, params: dict[str, str]) -> bool:
        token = params.get(CSRF_FIELD, "")
        made, _, _ = token.partition(".")
        if not made.isdigit() or len(made) > 12:
            return False
        age = time.time() - int(made)
        if not -60 <= age <= FORM_TTL_S:
            return False
        return hmac.compare_digest(token.encode(), self.form_token(params, int(made)).encode())

    # -- the checks ---------------------------------------------------------------------------
    def _check(
        self, params: dict[str, str], allowed: AuthParams, repeated: list[str] | None = None
    ) -> _Request:
        """The request checked in RFC 6749 4.1.2.1's order: first what makes a redirect
        trustworthy (:class:`_Refused`), then the rest (:class:`_Redirected`), a parameter
        given more than once (``repeated``, left out of ``params``) first among them."""
        req = _Request(params)
        client_id = params.get("client_id")
        if not client_id:
            raise _Refused("The request names no client (client_id is missing).")
        if client_id not in allowed.client_ids:
            raise _Refused("The request names a client this service does not know.")
        req.client_id = client_id
        registered = allowed.redirect_uris.get(client_id, frozenset())
        given = params.get("redirect_uri")
        if given is not None:
            if registered_form(given) not in registered:
                raise _Refused("The redirect_uri is not one the client registered.")
            req.redirect, req.redirect_given = given, True
        elif len(registered) == 1:
            req.redirect = next(iter(registered))
        else:
            raise _Refused(
                "The request names no redirect_uri, and the client has not exactly one."
                if registered
                else "The client has no redirect URI: it cannot use this sign-in."
            )
        try:
            if repeated:
                raise _Redirected("invalid_request", _given_twice(repeated))
            self._check_rest(req, allowed)
        except _Redirected as exc:
            exc.req = req
            raise
        return req

    def _check_rest(self, req: _Request, allowed: AuthParams) -> None:
        """What is refused by a redirect to the client (RFC 6749 4.1.2.1, SPEC 16.1)."""
        params, client_id = req.params, req.client_id
        response_type = params.get("response_type")
        if response_type is None:
            raise _Redirected("invalid_request", "response_type is missing")
        if response_type != "code":
            raise _Redirected("unsupported_response_type", "only response_type=code is supported")
        if allowed.types is None or GRANT not in allowed.types:
            raise _Redirected("unauthorized_client", "the client may not use this grant")
        challenge = params.get("code_challenge")
        if challenge is None:
            raise _Redirected("invalid_request", "code_challenge is required (PKCE, RFC 7636)")
        if params.get("code_challenge_method") != "S256":
            raise _Redirected("invalid_request", "code_challenge_method must be S256")
        if not well_formed(challenge) or _S256.match(challenge) is None:
            raise _Redirected(
                "invalid_request",
                "code_challenge is malformed (S256: 43 base64url characters, RFC 7636 4.2)",
            )
        try:
            req.asked = requested(params.get("scope"))
            if client_id in allowed.client_scopes:
                # the client's own list bounds every grant to it; without one, the user's
                # decides, known once they log in (SPEC 12.4, as for the password grant)
                grant(req.asked, allowed_scopes(allowed, client_id, None))
        except InvalidScope as exc:
            raise _Redirected("invalid_scope", exc.description) from None

    # -- the route ----------------------------------------------------------------------------
    async def answer(
        self,
        method: str,
        query: str,
        body: bytes,
        content_type: str | None,
        client_ip: str,
        location: str,
    ) -> Reply:
        """Answer one request of the authorize route of the location ``location`` (its
        prefix)."""
        service = self.service
        issuer = service.issuers.get(location, "")
        # a parameter given twice is told by a redirect once the client and its redirect_uri
        # are known good (RFC 6749 4.1.2.1); in the posted form, which fwrest made with each
        # field once, it is the 400 page, as a form not made for the request is
        repeated: list[str] | None = None if method == "POST" else []
        # the login POST reads its form alone (SPEC 16.1: the body's fields): a user name or
        # password in its query string, where logs and history keep it, signs nobody in
        try:
            params = request_params(
                "" if method == "POST" else query, body, content_type, method, repeated
            )
        except OAuthError as exc:
            return self._error_page(f"The request is malformed: {exc.description}.", exc.status)
        untrusted = [name for name in repeated or () if name in _REDIRECT_NAMES]
        if untrusted:  # no redirect can be trusted: the 400 page, as for an unknown client
            return self._error_page(f"The request is malformed: {_given_twice(untrusted)}.")
        if method == "POST":
            shown = tuple(params[k] for k in ("password", CSRF_FIELD) if params.get(k))
            log.request_secrets.set(log.secret_forms(*shown))
            if not self._token_valid(params):
                # before anything else: no password is checked for a forged or stale form
                return self._error_page(
                    "The sign-in form is stale or was not made for this request."
                )
        view = {"grant_type": GRANT, **{k: v for k, v in params.items() if k in CARRIED}}
        if method == "POST" and params.get("username"):
            view["username"] = params["username"]
        allowed = await service.auth_params(view)
        try:
            req = self._check(params, allowed, repeated)
        except _Refused as exc:
            return self._error_page(exc.message)
        except _Redirected as exc:
            assert exc.req is not None
            return self._error_redirect(exc.req, exc, issuer)
        # absolute: the page may be served at .../authorize/ (the router ignores the slash),
        # where a relative action would post to .../authorize/authorize
        req.action = quote(location.rstrip("/")) + AUTHORIZE_ROUTE
        if method != "POST":
            return self._page(req)
        return await self._login(req, allowed, client_ip, issuer)

    async def _login(
        self, req: _Request, allowed: AuthParams, client_ip: str, issuer: str
    ) -> Reply:
        from fwrest.auth.oauth2.tokens import StoreDeadline

        service = self.service
        username = req.params.get("username", "")
        password = req.params.get("password")
        if not username or password is None:
            return self._page(req, error="Enter your user name and password.", username=username)
        deadline = StoreDeadline()
        try:
            ok = await check_password(
                service, deadline, allowed, username, password, client_ip, "login"
            )
        except TooManyRequests as exc:
            page = self._page(req, 429, "Too many failed sign-ins: try again later.", username)
            page.headers.append(("retry-after", exc.retry_after))
            return page
        if not ok:
            self._audit("login.failure", username, client_ip, req.client_id)
            return self._page(req, error=_REFUSED_TEXT, username=username)
        try:
            scope = grant(req.asked, allowed_scopes(allowed, req.client_id, username))
        except InvalidScope as exc:
            return self._error_redirect(req, _Redirected("invalid_scope", exc.description), issuer)
        code = secrets.token_urlsafe(32)
        log.request_secrets.set((*log.request_secrets.get(), *log.secret_forms(code)))
        record = code_record(
            req.client_id,
            req.redirect,
            req.redirect_given,
            req.params["code_challenge"],
            username,
            scope,
            time.time() + CODE_TTL_S,
        )
        await service.store_call(
            deadline, service.store.add_code, code_hash(code, service.section), record, CODE_KEEP_S
        )
        self._audit("login", username, client_ip, req.client_id)
        log.auth_log.info(
            "[%s] %r logged in for the client %r", service.port_name, username, req.client_id
        )
        values = {"code": code}
        if "state" in req.params:
            values["state"] = req.params["state"]
        values["iss"] = issuer
        return self._redirect(req.redirect, values)

    def _audit(self, event: str, username: str, client_ip: str, client_id: str) -> None:
        audit = self.service.audit
        if audit is not None:
            audit.record(
                AuditEvent(
                    event, username, client_ip, self.service.port_name, {"client_id": client_id}
                )
            )


# the one message of a wrong user or password (the password grant's, as a sentence)
_REFUSED_TEXT = REFUSED[0].upper() + REFUSED[1:] + "."
