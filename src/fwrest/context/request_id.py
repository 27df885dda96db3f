"""Request ids (SPEC 13.4): the id a request carries in ``X-Request-ID`` when it is acceptable,
else a new random one.

One definition of "acceptable" for everything that reads the header (``rest.getRequestId()``,
the echo header and the log records of the request): 1-128 characters of ``[A-Za-z0-9._:-]``,
so that an id a client chose can never split a header line or a log line, nor pass for
another field in either.
"""

from __future__ import annotations

import re
import secrets

__all__ = ["carried_request_id", "is_request_id", "new_request_id"]

_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_NAME = "x-request-id"


def is_request_id(value: str) -> bool:
    """Whether ``value`` is acceptable as a request id as it is.

    >>> is_request_id("req-42.a:b_c"), is_request_id(""), is_request_id("a b")
    (True, False, False)
    >>> is_request_id("x" * 128), is_request_id("x" * 129), is_request_id("id\\n")
    (True, False, False)
    """
    return _ID.fullmatch(value) is not None


def carried_request_id(raw_headers: list[tuple[str, str]]) -> str | None:
    """The request's own id: its one ``X-Request-ID`` field when the value is acceptable
    (:func:`is_request_id`), else None. Two fields are none: which one would the client
    mean?

    >>> carried_request_id([("host", "a"), ("x-request-id", "abc-1")])
    'abc-1'
    >>> carried_request_id([("x-request-id", "abc-1"), ("x-request-id", "abc-2")]) is None
    True

    Args:
        raw_headers: the request's headers as received, names in lower case.
    """
    found = None
    for name, value in raw_headers:
        if name == _NAME:
            if found is not None:
                return None
            found = value
    return found if found is not None and is_request_id(found) else None


def new_request_id() -> str:
    """A new random id: 32 hexadecimal digits (128 bits), acceptable as a carried one, so a
    service can pass it on to the next."""
    return secrets.token_hex(16)
