"""The REST object ``rest``: the current request's context, over a per-request ContextVar.

Owns the request/response state a handler reads and writes. No I/O. (Named ``context`` and
not ``rest`` because ``fwrest.rest`` is the object itself.)
"""

from fwrest.context.events import Event, EventStream
from fwrest.context.request import (
    AuthInfo,
    Headers,
    RequestContext,
    Response,
    current,
)
from fwrest.context.rest import RestObject, rest

__all__ = [
    "AuthInfo",
    "Event",
    "EventStream",
    "Headers",
    "RequestContext",
    "Response",
    "RestObject",
    "current",
    "rest",
]
