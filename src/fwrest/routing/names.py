"""Names of routes that more than one part of fwrest must recognise, spelled once."""

from __future__ import annotations

__all__ = [
    "AUTHORIZE_PARAMS",
    "AUTHORIZE_ROUTE",
    "AUTHORIZE_ROUTE_NAME",
    "INTROSPECT_ROUTE",
    "INTROSPECT_ROUTE_NAME",
    "JWKS_ROUTE",
    "METADATA_ROUTE",
    "NATIVE_PREFIX",
    "OPEN_OAUTH2_ROUTES",
    "RESOURCE_ROUTE",
    "RESOURCE_ROUTE_NAME",
    "REVOKE_ROUTE",
    "REVOKE_ROUTE_NAME",
    "REVOKE_USER_ROUTE",
    "REVOKE_USER_ROUTE_NAME",
    "TOKEN_BODY_LIMIT",
    "TOKEN_BODY_ROUTES",
    "TOKEN_ROUTE",
    "TOKEN_ROUTE_NAME",
]

NATIVE_PREFIX = "/fw/"  # the native routes' paths, relative to their location (SPEC 5)
TOKEN_ROUTE_NAME = "oauth2/token"  # noqa: S105 - its name in NativeRoutes (the path after /fw/)
TOKEN_ROUTE = f"/fw/{TOKEN_ROUTE_NAME}"  # relative to its location
TOKEN_BODY_LIMIT = 16384  # SPEC 7: the token route's body limit, whatever MaxBodySize says
# SPEC 12.3: revocation (RFC 7009) and introspection (RFC 7662)
REVOKE_ROUTE_NAME = "oauth2/revoke"
REVOKE_ROUTE = f"/fw/{REVOKE_ROUTE_NAME}"
INTROSPECT_ROUTE_NAME = "oauth2/introspect"
INTROSPECT_ROUTE = f"/fw/{INTROSPECT_ROUTE_NAME}"
REVOKE_USER_ROUTE_NAME = "oauth2/revoke-user"  # behind the port's scheme and onAdmin
REVOKE_USER_ROUTE = f"/fw/{REVOKE_USER_ROUTE_NAME}"
# SPEC 12.2: discovery
JWKS_ROUTE = "/fw/oauth2/jwks"
METADATA_ROUTE = "/fw/oauth2/metadata"
# SPEC 16.3: protected resource metadata (RFC 9728)
RESOURCE_ROUTE_NAME = "oauth2/resource"
RESOURCE_ROUTE = f"/fw/{RESOURCE_ROUTE_NAME}"
# SPEC 16.1: the authorization code grant's authorize route and login page
AUTHORIZE_ROUTE_NAME = "oauth2/authorize"
AUTHORIZE_ROUTE = f"/fw/{AUTHORIZE_ROUTE_NAME}"
# the authorization request's parameters (RFC 6749 4.1.1, RFC 7636 4.3), in the order the
# login page's form carries them back (auth/oauth2/authorize.py) and the OpenAPI lists them
AUTHORIZE_PARAMS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "code_challenge",
    "code_challenge_method",
    "scope",
    "state",
)
# The routes whose queries and bodies carry passwords and tokens: never logged, and held to
# the token route's body limit (SPEC 7, 12.3); each a path relative to its location.
TOKEN_BODY_ROUTES = frozenset({TOKEN_ROUTE, REVOKE_ROUTE, INTROSPECT_ROUTE, AUTHORIZE_ROUTE})
# The routes of an oAuth2 location that are never behind the port's scheme (SPEC 4.2,
# 12.2-12.3, 16.1, 16.3): they authenticate their callers themselves, or publish only public
# data.
OPEN_OAUTH2_ROUTES = TOKEN_BODY_ROUTES | {JWKS_ROUTE, METADATA_ROUTE, RESOURCE_ROUTE}
