"""Server-Sent Events (SPEC 10.5): ``fwrest.EventStream(iterator)`` and ``fwrest.Event``.

A handler returns ``EventStream(items)``: the answer is ``text/event-stream``, never buffered
nor compressed, each item one event as it comes. A ``str`` item is the event's ``data`` (split
over ``data:`` lines at its newlines); an :class:`Event` sets the other fields too. While no
item comes for :data:`IDLE_S` seconds, a comment line keeps proxies from closing the
connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["IDLE_S", "Event", "EventStream", "encode_event"]

IDLE_S = 15.0
KEEP_ALIVE = b": keep-alive\n\n"


@dataclass(frozen=True, slots=True)
class Event:
    """One event: ``data`` and, as wanted, its ``event`` type, ``id`` and ``retry`` (ms)."""

    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None


def _field(name: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError(f"an event's {name} cannot hold a line break: {value!r}")
    return f"{name}: {value}\n"


def encode_event(item: Any) -> bytes:
    """One event on the wire.

    >>> encode_event("a\\nb")
    b'data: a\\ndata: b\\n\\n'
    >>> encode_event(Event("x", event="tick", id="7", retry=500))
    b'event: tick\\nid: 7\\nretry: 500\\ndata: x\\n\\n'

    Raises:
        TypeError: an item that is neither ``str`` nor :class:`Event`.
        ValueError: a line break in ``event`` or ``id``.
    """
    if isinstance(item, str):
        event = Event(item)
    elif isinstance(item, Event):
        event = item
    else:
        raise TypeError(f"an event stream's item is a {type(item).__name__}, not str or Event")
    out = []
    if event.event is not None:
        out.append(_field("event", event.event))
    if event.id is not None:
        out.append(_field("id", event.id))
    if event.retry is not None:
        out.append(f"retry: {int(event.retry)}\n")
    lines = event.data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out.extend(f"data: {line}\n" for line in lines)
    out.append("\n")
    return "".join(out).encode("utf-8")


class EventStream:
    """What a handler returns to send Server-Sent Events.

    Args:
        items: an iterator (a ``def`` generator: advanced in the location's thread pool) or
            async iterator of ``str`` or :class:`Event`.
        headers: extra headers of the answer.
    """

    __slots__ = ("headers", "items")

    def __init__(
        self,
        items: Iterator[Any] | AsyncIterator[Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.items = items
        self.headers = dict(headers or {})
