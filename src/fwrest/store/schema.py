"""The schema version of what fwrest writes to a state store (SPEC 17.2).

A store carries one marker: a sqlite file the row ``schema`` of its ``meta`` table, a Redis
the key ``fwrest:schema`` (``fwrest:<db>:schema`` on a cluster). It holds, as JSON, the newest
schema written to the store (``schema``), the oldest schema whose releases still read and write
it correctly (``compatible``), and the release that wrote the marker (``release``). A store
without a marker is schema 1, what fwrest 0.1.0 wrote (it wrote no marker).

A release writes :data:`SCHEMA` and reads every schema from :data:`COMPATIBLE` on. It refuses
a store whose ``compatible`` is above its own :data:`SCHEMA` (a newer release changed the
format in a way this one cannot follow), naming both versions. A store of an older schema is
brought up to :data:`SCHEMA` by additive steps only (new tables, columns, indexes, keys that
the older release ignores): the start takes them itself, so that hosts of the previous
release and of this one share the store during a rolling upgrade; ``fwrest store migrate``
takes them offline, with a backup first. docs/decisions.md, "Store schema versions".

The marker is read once per start (and per command that opens the store), never per request.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from fwrest import __version__
from fwrest.store.base import SchemaStore, StoreError

__all__ = [
    "COMPATIBLE",
    "SCHEMA",
    "UNMARKED",
    "Marker",
    "SchemaError",
    "current",
    "ensure",
    "marker_of",
    "refuse_newer",
]

# what this release writes: 1 = fwrest 0.1.0's; 2 = 0.2.0's (sqlite: the audit trail's index
# by event and the refresh records' alias column; Redis: the audit budgets' own sets, the
# settings' stamp, the refresh records' alias keys, the marker itself)
SCHEMA = 2
# the oldest schema whose releases read and write what this release writes (N-1: 0.1.0's)
COMPATIBLE = 1


class SchemaError(StoreError):
    """A store this release cannot use: written by a newer release in a format it cannot
    read, or a marker that is not one. A start error, never a 503: ``problem`` says what is
    wrong, ``fix`` what to do (the ``ConfigError``'s parts); the text is both."""

    def __init__(self, problem: str, fix: str) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} Fix: {fix}")


# what to do about a marker fwrest did not write (troubleshooting.md says the same)
_UNREADABLE_FIX = (
    "restore the store's backup: fwrest did not write this marker (the sqlite meta row "
    "schema, the Redis key fwrest:schema)."
)


@dataclass(frozen=True, slots=True)
class Marker:
    """What a store's marker says (:func:`marker_of`)."""

    schema: int  # the newest schema written to the store
    compatible: int  # the oldest schema whose releases can still use it
    release: str  # the fwrest release that wrote the marker

    def encode(self) -> bytes:
        return orjson.dumps(
            {"schema": self.schema, "compatible": self.compatible, "release": self.release}
        )


# a store without a marker: what fwrest 0.1.0 wrote
UNMARKED = Marker(1, 1, "0.1.0")


def current() -> Marker:
    """The marker this release writes."""
    return Marker(SCHEMA, COMPATIBLE, __version__)


def marker_of(raw: bytes | None, where: str) -> Marker:
    """The marker stored as ``raw`` (None: no marker, schema 1).

    Raises:
        SchemaError: ``raw`` is no marker fwrest wrote.
    """
    if raw is None:
        return UNMARKED
    try:
        data = orjson.loads(raw)
        marker = Marker(int(data["schema"]), int(data["compatible"]), str(data["release"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise SchemaError(
            f"the state store {where} holds a schema marker fwrest cannot read "
            f"({bytes(raw)[:60]!r}).",
            _UNREADABLE_FIX,
        ) from None
    if marker.schema < 1 or not 1 <= marker.compatible <= marker.schema:
        raise SchemaError(
            f"the state store {where} holds a schema marker fwrest cannot read "
            f"(schema {marker.schema}, compatible {marker.compatible}).",
            _UNREADABLE_FIX,
        )
    return marker


def refuse_newer(marker: Marker, where: str, *, redis: bool = False) -> None:
    """Raise when this release cannot use a store of ``marker``; ``redis``: the store is a
    Redis (``fwrest store migrate`` copies a sqlite file only, so the fix differs).

    Raises:
        SchemaError: the store was written by a newer release in a format this one cannot
            read; the message names both versions.
    """
    if marker.compatible > SCHEMA:
        older = (
            f"a Redis of schema {SCHEMA} or older, e.g. one restored from a Redis backup (an RDB "
            "or AOF file) taken before the newer release started"
            if redis
            else f"a store of schema {SCHEMA} or older, e.g. the copy fwrest store migrate made"
        )
        raise SchemaError(
            f"the state store {where} holds schema {marker.schema}, written by fwrest "
            f"{marker.release}, which fwrest {__version__} (schema {SCHEMA}) cannot read.",
            f"run fwrest {marker.release} or newer on it, or point StateStore at {older} "
            "(docs/deploy.md, Upgrading).",
        )


def ensure(store: SchemaStore, where: str) -> Marker:
    """At start, on a Redis store (a sqlite file checks and marks itself as it opens): its
    marker read once; a store this release cannot use refused; an older one marked as this
    release's schema (its steps are additive: a Redis needs none). Returns the marker now in
    force.

    Raises:
        SchemaError: the store was written by a newer release this one cannot follow.
        StoreError: the store did not answer.
    """
    raw = store.schema_marker()
    marker = marker_of(raw, where)
    refuse_newer(marker, where, redis=True)
    if marker.schema >= SCHEMA:
        return marker
    new = Marker(SCHEMA, max(marker.compatible, COMPATIBLE), __version__)
    now = store.swap_schema_marker(raw, new.encode())
    marker = marker_of(now, where)  # another host's, when it wrote first
    refuse_newer(marker, where, redis=True)
    return marker
