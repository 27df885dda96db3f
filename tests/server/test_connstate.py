"""The connection's state machine (server/connstate.py, docs/engine.md): every state is reachable
and reaches CLOSED, an unlisted event is refused without a move; over HTTP (deadlines shortened,
SPEC 9) each reading deadline fires only in its states, never while a request is handled, and the
log has no ``engine state error``."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fwrest.server.connstate import (
    DEADLINES,
    NEXT,
    TRANSITIONS,
    Deadline,
    Event,
    IllegalTransition,
    Machine,
    State,
    step,
)
from tests.conftest import ServerProcess, free_config, local_port, serving
from tests.server.rawhttp import RawConnection, request_bytes
from tests.server.support import port_of

READING = (State.IDLE, State.HEAD, State.BODY, State.DONE)
ANSWERING = (State.READY, State.ADMITTING, State.HANDLING, State.STREAMING)
READING_EVENTS = (Event.MESSAGE_BEGIN, Event.HEAD_COMPLETE, Event.MESSAGE_COMPLETE, Event.READ_ON)
ANSWERING_EVENTS = (Event.ADMIT, Event.ADMITTED, Event.HANDLE, Event.STREAM, Event.ANSWERED)


def reachable(start: State) -> set[State]:
    seen, todo = {start}, deque([start])
    while todo:
        state = todo.popleft()
        for (source, _), target in TRANSITIONS.items():
            if source is state and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


# -- the table ----------------------------------------------------------------------------------
def test_every_state_is_reachable_from_a_new_connection() -> None:
    assert reachable(State.IDLE) == {*READING, State.CLOSED}
    assert reachable(State.READY) == {*ANSWERING, State.CLOSED}


def test_every_state_can_close_and_closed_is_final() -> None:
    for state in State:
        assert TRANSITIONS[(state, Event.LOST)] is State.CLOSED
    assert reachable(State.CLOSED) == {State.CLOSED}


def test_the_two_sides_never_mix() -> None:
    """Each event moves its own side only (CLOSED aside: a task may end after the loss)."""
    for (state, event), target in TRANSITIONS.items():
        if event in READING_EVENTS:
            assert state in READING and target in READING, (state, event)
        elif event in ANSWERING_EVENTS and state is not State.CLOSED:
            assert state in ANSWERING and target in ANSWERING, (state, event)


def test_the_indexed_table_is_the_table() -> None:
    for state in State:
        for event in Event:
            assert NEXT[state][event] is TRANSITIONS.get((state, event))


def test_each_deadline_has_its_states() -> None:
    assert set(DEADLINES) == set(State)
    where = {d: {s for s, ds in DEADLINES.items() if d in ds} for d in Deadline}
    assert where[Deadline.HEADER] == {State.IDLE, State.HEAD}
    assert where[Deadline.BODY] == {State.BODY}
    assert where[Deadline.KEEP_ALIVE] == {State.IDLE}
    # the write deadline is the write flow's: any state of a connection that is not lost
    assert where[Deadline.WRITE] == set(State) - {State.CLOSED}


def test_a_request_cycle_comes_back_to_where_it_began() -> None:
    machine = Machine()
    for event in (Event.MESSAGE_BEGIN, Event.HEAD_COMPLETE, Event.MESSAGE_COMPLETE):
        machine.read(event)
    for event in (Event.HANDLE, Event.STREAM, Event.ANSWERED):
        machine.answer(event)
    machine.read(Event.READ_ON)
    assert (machine.reading, machine.answering) == (State.IDLE, State.READY)
    machine.lose()
    assert (machine.reading, machine.answering) == (State.CLOSED, State.CLOSED)


def test_an_event_out_of_its_state_is_refused() -> None:
    machine = Machine()
    with pytest.raises(IllegalTransition, match="MESSAGE_COMPLETE in state IDLE"):
        machine.read(Event.MESSAGE_COMPLETE)
    with pytest.raises(IllegalTransition, match="HANDLE in state IDLE"):
        machine.read(Event.HANDLE)  # an answering event on the reading side
    with pytest.raises(IllegalTransition, match="ANSWERED in state READY"):
        machine.answer(Event.ANSWERED)
    assert (machine.reading, machine.answering) == (State.IDLE, State.READY)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(list(Event))), max_size=60))
def test_random_event_sequences_follow_the_table(moves: list[tuple[bool, Event]]) -> None:
    """Each event moves its side as the table says or is refused; nothing leaves CLOSED."""
    machine = Machine()
    for reading_side, event in moves:
        before = (machine.reading, machine.answering)
        state = before[0] if reading_side else before[1]
        expected = TRANSITIONS.get((state, event))
        try:
            got = machine.read(event) if reading_side else machine.answer(event)
        except IllegalTransition as exc:
            assert expected is None
            assert (exc.state, exc.event) == (state, event)
            assert (machine.reading, machine.answering) == before
            continue
        assert got is expected
        assert machine.reading in (*READING, State.CLOSED)
        assert machine.answering in (*ANSWERING, State.CLOSED)
        if state is State.CLOSED:
            assert got is State.CLOSED


@given(st.sampled_from(list(State)), st.sampled_from(list(Event)))
def test_step_is_the_table(state: State, event: Event) -> None:
    expected = TRANSITIONS.get((state, event))
    if expected is None:
        with pytest.raises(IllegalTransition):
            step(state, event)
    else:
        assert step(state, event) is expected


# -- over HTTP: each deadline in its states -----------------------------------------------------
HEADER_MS = 600
BODY_MS = 1500
KEEP_ALIVE_MS = 800
SLOW_HANDLER_MS = 2000  # longer than every reading deadline


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("connstate")
    port = local_port(HeaderTimeout=HEADER_MS, BodyTimeout=BODY_MS, KeepAliveTimeout=KEEP_ALIVE_MS)
    print(f"HeaderTimeout {HEADER_MS} ms, BodyTimeout {BODY_MS} ms, KeepAlive {KEEP_ALIVE_MS} ms")
    with serving(free_config(tmp, servers={"HTTP_REST": port})) as proc:
        yield proc
    assert "engine state error" not in proc.log()


port = port_of("HTTP_REST")


def test_the_header_deadline_fires_while_the_head_is_read(port: int) -> None:
    with RawConnection(port) as conn:
        conn.send(b"GET /rest/hello HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        began = time.monotonic()
        response = conn.read_response()
        waited = time.monotonic() - began
        assert response.status == 408
        assert conn.closed_by_server()
    print(f"408 after {waited:.2f} s (HeaderTimeout {HEADER_MS} ms)")
    assert HEADER_MS / 1000 * 0.8 <= waited < BODY_MS / 1000


def test_the_header_deadline_does_not_fire_while_the_body_is_read(port: int) -> None:
    body = b'{"a": 1}'
    with RawConnection(port) as conn:
        head = request_bytes("POST", "/rest/echo", [("Content-Type", "application/json")], body)
        conn.send(head[: -len(body)])
        time.sleep(HEADER_MS / 1000 * 1.5)  # past HeaderTimeout, within BodyTimeout
        conn.send(body)
        response = conn.read_response()
        assert response.status == 200
        assert response.json()["body"] == body.decode()


def test_the_body_deadline_fires_while_the_body_is_read(port: int) -> None:
    with RawConnection(port) as conn:
        conn.send(request_bytes("POST", "/rest/echo", [("Content-Length", "10")]) + b"12345")
        began = time.monotonic()
        response = conn.read_response()
        waited = time.monotonic() - began
        assert response.status == 408
        assert b"body" in response.body
    print(f"408 after {waited:.2f} s (BodyTimeout {BODY_MS} ms)")
    assert waited >= BODY_MS / 1000 * 0.8


def test_no_reading_deadline_fires_while_the_request_is_handled(port: int) -> None:
    """A handler slower than every reading deadline is answered, and the connection serves on."""
    with RawConnection(port, timeout=SLOW_HANDLER_MS / 1000 + 5) as conn:
        response = conn.request("GET", f"/rest/asleep/{SLOW_HANDLER_MS}")
        assert response.status == 200
        assert response.json() == {"slept": SLOW_HANDLER_MS}
        assert conn.request("GET", "/rest/hello").status == 200


def test_the_keep_alive_deadline_fires_between_requests(port: int) -> None:
    with RawConnection(port) as conn:
        assert conn.request("GET", "/rest/hello").status == 200
        began = time.monotonic()
        assert conn.closed_by_server()  # silently: no answer between requests
        waited = time.monotonic() - began
    print(f"closed after {waited:.2f} s idle (KeepAliveTimeout {KEEP_ALIVE_MS} ms)")
    assert KEEP_ALIVE_MS / 1000 * 0.8 <= waited < HEADER_MS / 1000 + KEEP_ALIVE_MS / 1000


def test_pipelined_requests_pass_every_state_in_order(port: int) -> None:
    """The second head begins in the bytes that ended the first (DONE -> HEAD); in order."""
    data = (
        request_bytes("GET", "/rest/items/1")
        + request_bytes("POST", "/rest/echo", [("Content-Type", "application/json")], b"[2]")
        + request_bytes("GET", "/rest/items/3", [("Connection", "close")])
    )
    with RawConnection(port) as conn:
        conn.send(data)
        first, second, third = (conn.read_response() for _ in range(3))
        assert first.json() == {"id": "1"}
        assert second.json()["body"] == "[2]"
        assert third.json() == {"id": "3"}
        assert conn.closed_by_server()
