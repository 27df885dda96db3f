"""The JSON text of a handler's data (a returned dict or list, ``setResponse``).

orjson first: it is fast and turns what Python's ``json`` would also accept into the same
JSON. What orjson refuses but ``json`` takes — keys that are numbers, booleans or ``None``,
integers beyond 64 bits — goes through the standard library instead, so that a handler's
ordinary Python data is sent, not answered with a 500; data holding ``msgspec.Struct``s
(SPEC 14.1's typed values, which neither knows) goes through msgspec's encoder. What none of
them can encode is refused.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson

__all__ = ["NotJSON", "to_json"]


class NotJSON(TypeError):
    """The data cannot be written as JSON (the message says why)."""


def to_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON.

    >>> to_json({"a": [1, 2]}), to_json({1: "x", None: 2**70})
    (b'{"a":[1,2]}', b'{"1":"x","null":1180591620717411303424}')

    Raises:
        NotJSON: neither encoder can write it.
    """
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as first:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            return text.encode("utf-8")
        try:
            return msgspec.json.encode(value)
        except (TypeError, ValueError, OverflowError, RecursionError):
            raise NotJSON(str(first)) from None
