"""Route tables per location: one path normaliser, compiled matching, 404 and 405 + ``Allow``.

Calls no handler and checks no credential: a match returns the payload the server attached.
"""

from fwrest.routing.names import TOKEN_BODY_LIMIT, TOKEN_ROUTE, TOKEN_ROUTE_NAME
from fwrest.routing.paths import BadPath, BadSeparator, normalise_path, split_target
from fwrest.routing.router import LocationTable, Match, Router

__all__ = [
    "TOKEN_BODY_LIMIT",
    "TOKEN_ROUTE",
    "TOKEN_ROUTE_NAME",
    "BadPath",
    "BadSeparator",
    "LocationTable",
    "Match",
    "Router",
    "normalise_path",
    "split_target",
]
