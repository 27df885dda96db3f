"""The JSON text of a handler's data (a returned dict or list, ``setResponse``).

orjson first: it is fast and turns what Python's ``json`` would also accept into the same
JSON. What orjson refuses but ``json`` takes — keys that are numbers, booleans or ``None``,
integers beyond 64 bits — goes through the standard library instead, so that a handler's
ordinary Python data is sent, not answered with a 500; data holding ``msgspec.Struct``s
(SPEC 14.1's typed values, which neither knows) goes through msgspec's encoder. The read-only
views the REST object hands out (path parameters, query, headers: SPEC 3) are objects to each
of them, through the hook an encoder calls only for a type it does not know (no cost for the
rest). What none of them can encode is refused.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import msgspec
import orjson

from fwrest.context.request import Headers

__all__ = ["VIEWS", "NotJSON", "to_json"]

# the read-only mappings the REST object hands out: getPathParamsRequest and getQueryRequest
# (MappingProxyType), getHeaderRequest (Headers)
VIEWS = (MappingProxyType, Headers)


class NotJSON(TypeError):
    """The data cannot be written as JSON (the message says why)."""


def _view(value: Any) -> dict[Any, Any]:
    """The encoders' hook for a type they do not know: a view of :data:`VIEWS` as the dict
    it shows; anything else refused as orjson words it."""
    if isinstance(value, VIEWS):
        return dict(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def to_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON.

    >>> to_json({"a": [1, 2]}), to_json({1: "x", None: 2**70})
    (b'{"a":[1,2]}', b'{"1":"x","null":1180591620717411303424}')
    >>> to_json({"p": MappingProxyType({"id": "7"}), 2**70: Headers([("a", "1")])})
    b'{"p":{"id":"7"},"1180591620717411303424":{"a":"1"}}'

    Raises:
        NotJSON: neither encoder can write it.
    """
    try:
        return orjson.dumps(value, default=_view)
    except orjson.JSONEncodeError as first:
        try:
            text = json.dumps(
                value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_view
            )
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            return text.encode("utf-8")
        try:
            return msgspec.json.encode(value, enc_hook=_view)
        except (TypeError, ValueError, OverflowError, RecursionError):
            raise NotJSON(str(first)) from None
