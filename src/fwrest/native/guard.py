"""What every state-changing native route needs (SPEC 5, 7.1): the settings POST, the usage
reset, and any such route to come.

* its ``Host`` names the server (``HostName``, the bound address, ``localhost`` on loopback,
  ``AllowedHosts``): a page of a name the attacker owns, rebound by DNS to the server's
  address, is same-origin to the browser, and only its ``Host`` gives it away;
* no foreign ``Origin`` (nor ``Sec-Fetch-Site: cross-site``);
* ``Content-Type: application/json`` (a browser cannot send it cross-site without a CORS
  preflight, which fwrest never grants on a native route), or a form carrying the
  anti-forgery token of the page that shows it;
* ``onAdmin``, when the port names it, says ``True`` for the user (an exception in it is a
  500, logged: SPEC 7.1).

A refusal is 403 (the decision and why not 421: docs/decisions.md).
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from fwrest import log
from fwrest.auth.blocking import off_loop, settled
from fwrest.context.request import RequestContext
from fwrest.errors import CallbackRaised, HTTPError, is_cancellation
from fwrest.repository import is_async

__all__ = [
    "FORM_FIELD",
    "FORM_TYPE",
    "JSON_TYPE",
    "form_token",
    "is_admin",
    "media_type",
    "refuse_foreign",
    "same_origin",
    "token_matches",
]

FORM_FIELD = "fw_csrf"  # the form field of the anti-forgery token
JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"


def media_type(ctx: RequestContext) -> str:
    """The request's media type, lower case, without parameters."""
    return str(ctx.headers.get("content-type", "")).split(";", 1)[0].strip().lower()


def form_token(ctx: RequestContext, purpose: str) -> str:
    """The anti-forgery token of a form for ``purpose`` (one per page), this port and user:
    an HMAC under the key every worker and host of the service shares."""
    service = ctx.port.service
    if service is None:  # a bare pipeline (no worker): nothing to protect
        raise HTTPError(503, detailed="this route needs a running worker")
    label = f"fwrest-{purpose}-form|{ctx.port.name}|{ctx.auth_user}".encode()
    return hmac.new(service.service_secret(), label, hashlib.sha256).hexdigest()


def token_matches(ctx: RequestContext, purpose: str, token: str) -> bool:
    """Whether a form's token is the one :func:`form_token` gives (constant time)."""
    return hmac.compare_digest(token.encode(), form_token(ctx, purpose).encode())


def same_origin(ctx: RequestContext) -> bool:
    """No foreign ``Origin``: none, or the scheme, host and port the request was sent to."""
    origin = ctx.headers.get("origin")
    if ctx.headers.get("sec-fetch-site", "") in ("cross-site",):
        return False
    if origin is None:
        return True
    if origin == "null":
        return False
    host = str(ctx.headers.get("host", ""))
    parts = urlsplit(origin)
    # An origin is scheme + host + port: https://h:8080 is not the plain-HTTP port's origin.
    # Behind a proxy that ends TLS, its X-Forwarded-Proto names the scheme the browser used
    # (a cross-site page cannot send that header: it would need a CORS preflight).
    forwarded = str(ctx.headers.get("x-forwarded-proto", "")).split(",")[0].strip().lower()
    scheme = forwarded or ctx.port.scheme
    return bool(parts.scheme == scheme and parts.netloc.lower() == host.lower())


def refuse_foreign(ctx: RequestContext, what: str) -> None:
    """403 unless the request's ``Host`` names the server and its ``Origin`` is not foreign.

    Args:
        what: the change, for the answer and the log (``"a settings change"``).
    """
    host = str(ctx.headers.get("host", ""))
    if not ctx.port.names_host(host):
        log.server_log.warning(
            "[%s] %s refused: the Host %r does not name this server (DNS rebinding?); "
            "add the name to AllowedHosts if clients really use it",
            ctx.port.name,
            what,
            log.escape(host[:100]),
        )
        raise HTTPError(
            403,
            detailed=f"{what} must be sent to a name of this server (the Host header); "
            "names other than HostName, the server's address and localhost are listed in "
            "AllowedHosts",
        )
    if not same_origin(ctx):
        raise HTTPError(403, detailed=f"{what} from another origin is refused")


async def is_admin(ctx: RequestContext) -> bool:
    """Whether the port's ``onAdmin`` lets the user change state (True when it names none):
    a returned value other than ``True`` is a refusal (the caller's 403). An exception in it,
    ``SystemExit`` and the like included, is no value: it travels on as
    :class:`~fwrest.errors.CallbackRaised`, a 500 the pipeline logs as a handler's failure
    (SPEC 7.1); only a cancellation of the request itself travels on as it is."""
    on_admin = ctx.port.on_admin
    if on_admin is None:
        return True
    try:
        allowed = (
            await on_admin(ctx.auth_user)
            if is_async(on_admin)
            else await settled(off_loop(None, on_admin, ctx.auth_user))  # its traceback kept
        )
    except BaseException as exc:
        if is_cancellation(exc):
            raise
        raise CallbackRaised("onAdmin", exc) from None
    return allowed is True
