"""Request ids (SPEC 13.4): the id a request carries in ``X-Request-ID`` when it is acceptable,
else a new random one.

One definition of "acceptable" for everything that reads the header (``rest.getRequestId()``,
the echo header and the log records of the request): 1-128 characters of ``[A-Za-z0-9._:-]``,
so that an id a client chose can never split a header line or a log line, nor pass for
another field in either.

A new id is made for every request that carries none (it goes on the answer and on every log
record of the request), so it is made cheaply: 127 random bits drawn in batches from the
system's random source, 32 hexadecimal digits. It names a request; it is no secret and guards
nothing (docs/decisions.md), but no id tells another.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "carried_request_id",
    "id_text",
    "is_request_id",
    "new_request_id",
    "new_request_number",
    "request_id_of",
]

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


# This process's ids: 127 random bits each (the top bit set, so that the hexadecimal form always
# has 32 digits), drawn from the system's random source 256 at a time (one ``os.urandom`` a
# request cost six times what the rest of the id did) and handed out from a list; a forked child
# empties the list it inherited, so two workers never share an id, nor do two runs. An id
# predicts no other: a counter behind a prefix (0.1.0) let anyone who saw one id work out
# the ids of other clients' requests.
_POOL = 256
_TOP = 1 << 127
_pool: list[int] = []


def _refill() -> None:
    block = os.urandom(16 * _POOL)
    top = _TOP
    _pool.extend([int.from_bytes(block[i : i + 16], "big") | top for i in range(0, len(block), 16)])


os.register_at_fork(after_in_child=_pool.clear)


def new_request_id() -> str:
    """A new id: 32 random hexadecimal digits, acceptable as a carried one, so a service can
    pass it on to the next.

    >>> a, b = new_request_id(), new_request_id()
    >>> len(a), len(b), a != b, int(a, 16) >> 127
    (32, 32, True, 1)
    """
    return hex(new_request_number())[2:]


def new_request_number() -> int:
    """A new id as its integer (:func:`new_request_id` is its text): the port keeps it so
    on the request, and it is formatted only where it is read or written (the answer's
    ``X-Request-ID`` line in the encoder, a log record, ``getRequestId()``), most requests
    writing it once, as bytes.

    >>> len(id_text(new_request_number()))
    32
    """
    try:
        return _pool.pop()
    except IndexError:  # empty: the next 256 (another thread may have taken the last one)
        _refill()
        return _pool.pop()


def id_text(rid: str | int) -> str:
    """A request id as text: a carried one as it is, a new one's integer in its 32 digits.

    >>> id_text("abc-1"), len(id_text(new_request_number()))
    ('abc-1', 32)
    """
    return rid if isinstance(rid, str) else hex(rid)[2:]


def request_id_of(raw_headers: list[tuple[str, str]]) -> str:
    """The id of a request: its own (:func:`carried_request_id`) or a new one."""
    return carried_request_id(raw_headers) or new_request_id()
