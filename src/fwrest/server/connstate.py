"""The states of one HTTP/1.1 connection and the table of their transitions (docs/engine.md).

A connection is two small machines, as in h11: the *reading* side (the request the client is
sending: ``IDLE``, ``HEAD``, ``BODY``, ``DONE``) and the *answering* side (what the server is
doing about the requests read: ``READY``, ``ADMITTING``, ``HANDLING``, ``STREAMING``); both end
in ``CLOSED`` when the connection is lost. Beside them, three flags that no event of this
table moves: keep-alive (False once the connection must close after its answers), the write
flow (paused while the client does not take its answers, SPEC 7.1) and the worker's drain.

:data:`TRANSITIONS` is the table: ``(state, event) -> next state``. A pair missing from it is
an illegal transition, a bug of the engine: :class:`Machine` raises :class:`IllegalTransition`,
the engine (``server/http.py``, which consults :data:`NEXT`, the same table indexed for speed)
logs it and closes the connection. :data:`DEADLINES` says which deadline may fire in which
reading state (the write deadline is the write flow's, in any state). Nothing here imports
the engine: the table is data, tested on its own (tests/server/test_connstate.py).
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "DEADLINES",
    "NEXT",
    "TRANSITIONS",
    "Deadline",
    "Event",
    "IllegalTransition",
    "Machine",
    "State",
]


class State(enum.IntEnum):
    """A state of the reading side or of the answering side (CLOSED: of both)."""

    # reading: the client's current request
    IDLE = 0  # between requests (before the first one too): nothing of the next one read
    HEAD = 1  # its request line and header fields are being read
    BODY = 2  # its head is read (its fields checked as this state begins); its body, if any
    DONE = 3  # it is read whole: answered now or queued behind the requests before it
    # answering: what the server does with the requests read
    READY = 4  # nothing in progress: the next request read may start
    ADMITTING = 5  # the port is asked to admit a request that expects 100 Continue
    HANDLING = 6  # the port is making an answer (then it is written whole)
    STREAMING = 7  # a streamed answer is being written, piece by piece
    CLOSED = 8  # the connection is lost (both sides)


class Event(enum.IntEnum):
    """What moves a machine. The reading side's come from the parser, the answering side's
    from the engine's tasks; LOST (connection_lost) ends both."""

    MESSAGE_BEGIN = 0  # the first byte of a request (llhttp's on_message_begin)
    HEAD_COMPLETE = 1  # the head is complete within MaxHeaderSize (its fields checked next)
    MESSAGE_COMPLETE = 2  # the body is complete (or there was none)
    READ_ON = 3  # the answers before it are written and nothing read waits: read the next
    ADMIT = 4  # a request expecting 100 Continue is handed to PortHandler.admit
    ADMITTED = 5  # the port admitted it (100 Continue sent) or refused it
    HANDLE = 6  # a request read whole is handed to PortHandler.handle
    STREAM = 7  # its answer is a stream: the head is written, the pieces follow
    ANSWERED = 8  # the answer is written (or dropped, or cut)
    LOST = 9  # the connection is lost


class Deadline(enum.IntEnum):
    """The deadlines of a connection (SPEC 7, 7.1)."""

    HEADER = 0  # HeaderTimeout: from connection_made for the first request, else its first byte
    BODY = 1  # BodyTimeout: from the end of the head, for a request with a body
    KEEP_ALIVE = 2  # KeepAliveTimeout: from the end of the answers, until the next first byte
    WRITE = 3  # BodyTimeout again: while the write flow is paused and the client takes nothing


class IllegalTransition(Exception):
    """An event that the table does not allow in the state where it happened (a bug)."""

    def __init__(self, state: State, event: Event) -> None:
        super().__init__(f"event {event.name} in state {state.name}")
        self.state = state
        self.event = event


_R = (State.IDLE, State.HEAD, State.BODY, State.DONE)
_A = (State.READY, State.ADMITTING, State.HANDLING, State.STREAMING)

TRANSITIONS: Final[dict[tuple[State, Event], State]] = {
    # reading
    (State.IDLE, Event.MESSAGE_BEGIN): State.HEAD,
    (State.HEAD, Event.HEAD_COMPLETE): State.BODY,
    (State.BODY, Event.MESSAGE_COMPLETE): State.DONE,
    # a pipelined request begins in the bytes that ended the one before it
    (State.DONE, Event.MESSAGE_BEGIN): State.HEAD,
    (State.DONE, Event.READ_ON): State.IDLE,
    # answering
    (State.READY, Event.ADMIT): State.ADMITTING,
    (State.ADMITTING, Event.ADMITTED): State.READY,
    (State.READY, Event.HANDLE): State.HANDLING,
    (State.HANDLING, Event.STREAM): State.STREAMING,
    (State.HANDLING, Event.ANSWERED): State.READY,
    (State.STREAMING, Event.ANSWERED): State.READY,
    # the connection is lost in any state; a task that was answering ends after it
    **{(state, Event.LOST): State.CLOSED for state in (*_R, *_A, State.CLOSED)},
    (State.CLOSED, Event.ADMITTED): State.CLOSED,
    (State.CLOSED, Event.STREAM): State.CLOSED,
    (State.CLOSED, Event.ANSWERED): State.CLOSED,
}

# Which deadline may fire in which state. The reading states: HeaderTimeout while IDLE (the
# first request's, from connection_made) and HEAD; BodyTimeout while BODY; KeepAliveTimeout
# while IDLE after an answer. DONE has none: the request is the server's now. A reading
# deadline that falls due while the answering side is busy waits for the answer (the engine
# fires it then, if the request is still incomplete). The write deadline belongs to the
# write flow, not to a state: it runs while the flow is paused, whatever the states.
DEADLINES: Final[dict[State, frozenset[Deadline]]] = {
    State.IDLE: frozenset((Deadline.HEADER, Deadline.KEEP_ALIVE, Deadline.WRITE)),
    State.HEAD: frozenset((Deadline.HEADER, Deadline.WRITE)),
    State.BODY: frozenset((Deadline.BODY, Deadline.WRITE)),
    State.DONE: frozenset((Deadline.WRITE,)),
    State.READY: frozenset((Deadline.WRITE,)),
    State.ADMITTING: frozenset((Deadline.WRITE,)),
    State.HANDLING: frozenset((Deadline.WRITE,)),
    State.STREAMING: frozenset((Deadline.WRITE,)),
    State.CLOSED: frozenset(),
}

# TRANSITIONS indexed by state then event (None: illegal), for the engine's few lookups per
# request: two tuple indexes instead of hashing a pair of enum members.
NEXT: Final[tuple[tuple[State | None, ...], ...]] = tuple(
    tuple(TRANSITIONS.get((state, event)) for event in Event) for state in State
)


class Machine:
    """The two sides of a connection, stepped through :data:`TRANSITIONS`: what the engine
    does, as an object for tests and for reading (the engine holds the two states itself)."""

    __slots__ = ("answering", "reading")

    def __init__(self) -> None:
        self.reading = State.IDLE
        self.answering = State.READY

    def read(self, event: Event) -> State:
        """Step the reading side; IllegalTransition if the table does not allow it."""
        self.reading = step(self.reading, event)
        return self.reading

    def answer(self, event: Event) -> State:
        """Step the answering side; IllegalTransition if the table does not allow it."""
        self.answering = step(self.answering, event)
        return self.answering

    def lose(self) -> None:
        """The connection is lost: both sides close."""
        self.read(Event.LOST)
        self.answer(Event.LOST)


def step(state: State, event: Event) -> State:
    """The state after ``event`` in ``state``; IllegalTransition when the table has none."""
    nxt = NEXT[state][event]
    if nxt is None:
        raise IllegalTransition(state, event)
    return nxt
