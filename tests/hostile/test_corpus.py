"""The hostile corpus (``corpus.py``) as raw bytes to each port kind of ``service.py``'s ``fwrest
serve --workers 2`` at ``rest_log_level=5``, ``rest_error_full=1`` (every line written). ``slow``
cases go to a service with deadlines of ``DEADLINE_MS``, others to the defaults (which a starved
worker does not reach). Per case and kind: the exact answers, the close (or that it still serves),
the error's reason phrase and JSON body (a 400's says what is wrong), a 401's challenge, nothing
smuggled executed, no worker died, no hang (5 s per read, 30 s per test). After: the same
workers, no traceback, none of the secrets in the logs."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections import Counter
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
import trustme

import tests.hostile.service as hostile_service
from tests.auth.oauth2_support import MISSING_CHALLENGE
from tests.hostile.corpus import BAD, CONTINUE, VALID, Case, Ctx, render
from tests.hostile.service import WIRE_TIMEOUT, Answer, HostileService, Wire, start_service

BASIC_CHALLENGE = 'Basic realm="Access to REST", charset="ISO-8859-1"'
BEARER_REALM = 'Bearer realm="Access to REST"'
TOKEN_ROUTE = "/fw/oauth2/token"
RFC9110_PHRASES = {413: "Content Too Large", 414: "URI Too Long", 422: "Unprocessable Content"}
# 5xx allowed: 500 from a raising app function (the validator case) and ALLOWED_5XX
ALLOWED_5XX = hostile_service.ALLOWED_5XX
PROBES = {
    "basic": (b"GET /rest/fw/healthcheck/ok HTTP/1.1\r\nHost: h\r\n\r\n", b"ok"),
    "oauth": (b"GET /rest/fw/healthcheck HTTP/1.1\r\nHost: h\r\n\r\n", b'"status":"UP"'),
    "monitor": (b"GET /api/server/metrics?uptime HTTP/1.1\r\nHost: h\r\n\r\n", b'"uptime"'),
}


def _service(
    factory: pytest.TempPathFactory, ca: trustme.CA, deadline_ms: int | None
) -> Iterator[HostileService]:
    folder: Path = factory.mktemp("hostile")
    general = {"rest_log_level": 5, "rest_error_full": 1}
    svc = start_service(folder, ca, general=general, deadline_ms=deadline_ms)
    yield svc
    assert svc.proc.stop() == 0, "the service did not stop cleanly"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA) -> Iterator[HostileService]:
    """Default deadlines, for cases waiting on none (a starved worker ends no whole request)."""
    yield from _service(tmp_path_factory, ca, None)


@pytest.fixture(scope="module")
def quick_service(
    tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA
) -> Iterator[HostileService]:
    """Header, body and TLS handshake deadlines of DEADLINE_MS: the cases marked ``slow``."""
    yield from _service(tmp_path_factory, ca, hostile_service.DEADLINE_MS)


def _params(cases: list[Case]) -> list[Any]:
    return [
        pytest.param(case, kind, id=f"{case.family}:{case.name}[{kind}]")
        for case in cases
        for kind in case.kinds
    ]


# -- sending and reading ---------------------------------------------------------------------------


def _send(wire: Wire, data: bytes, split: int) -> None:
    if not split:
        wire.send(data)
        return
    for start in range(0, len(data), split):
        if not wire.send(data[start : start + split]):
            return
        time.sleep(0.0005)


def _raw_exchange(svc: HostileService, kind: str, data: bytes) -> bytes:
    """TCP without TLS, even to the TLS port: everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", svc.port(kind)), timeout=WIRE_TIMEOUT) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(data)
        received = b""
        started = time.monotonic()
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                raise AssertionError(
                    f"the server kept the connection open for {WIRE_TIMEOUT} s (hang guard)"
                ) from None
            if not chunk:
                break
            received += chunk
            assert time.monotonic() - started < WIRE_TIMEOUT + 1, "hang guard"
        return received


def run_case(svc: HostileService, case: Case, kind: str) -> list[Answer | None]:
    """Send the case, read the answers it expects, check the connection's fate."""
    case_id = f"{case.name}--{kind}"
    tokens = (svc.access_token, svc.refresh_token, svc.signing_key)
    ctx = Ctx(kind, case_id, *tokens, svc.fresh_refresh)
    steps = case.raw if isinstance(case.raw, tuple) else (case.raw,)
    expected = case.expected(kind)
    if case.transport == "raw" and kind == "oauth":
        data = b"".join(render(s(ctx) if callable(s) else s, ctx) for s in steps)
        received = _raw_exchange(svc, kind, data)
        assert b"HTTP/" not in received, f"an HTTP answer without TLS: {received[:200]!r}"
        assert expected == (None,), expected
        return [None]
    answers: list[Answer | None] = []
    with svc.wire(kind) as wire:
        for step in steps:
            if step is CONTINUE:
                interim = wire.read_one(head_only=False)
                assert interim is not None and interim.status == 100, interim
                continue
            text = step(ctx) if callable(step) else step
            _send(wire, render(text, ctx), case.split)
        for index in range(len(expected)):
            head = case.head[index] if isinstance(case.head, tuple) else case.head
            answer = wire.read(head_only=head)
            answers.append(answer)
            if answer is None:
                break
        got = [a.status if a is not None else None for a in answers]
        assert got == list(expected), _explain(got, expected, answers)
        if case.interim is not None:
            assert tuple(wire.interim) == case.interim, wire.interim
        if case.closes(kind):
            assert wire.closed(), "the server kept the connection open"
        else:
            probe, marker = PROBES[kind]
            assert wire.send(probe), "the server closed a connection it should keep"
            answer = wire.read()
            assert answer is not None, "the server closed a connection it should keep"
            assert answer.status == 200 and marker in answer.body, (answer.status, answer.body)
    return answers


def _explain(got: list[Any], expected: tuple[Any, ...], answers: list[Answer | None]) -> str:
    bodies = [a.body[:300] if a is not None else None for a in answers]
    return f"expected {list(expected)}, got {got}: {bodies}"


def check_answers(svc: HostileService, case: Case, kind: str, answers: list[Answer | None]) -> None:
    present = [a for a in answers if a is not None]
    for answer in present:
        lengths = [v for k, v in answer.headers if k.lower() == "content-length"]
        assert len(lengths) <= 1, f"content-length repeated: {answer.headers}"
        if answer.status >= 500:
            allowed = answer.status in ALLOWED_5XX or case.raises
            assert allowed, f"a framework {answer.status}: {answer.body[:300]!r}"
        content_type = answer.header("content-type") or ""
        if answer.status >= 400:
            assert answer.reason == _phrase(answer.status), (answer.status, answer.reason)
        if answer.status >= 400 and answer.body:
            assert content_type == "application/json", (answer.status, content_type)
            body = json.loads(answer.body)
            if "error" in body:
                assert set(body) == {"error", "error_description"}, body
                assert answer.header("cache-control") == "no-store", answer.headers
            else:
                assert set(body) == {"code", "detailedMessage", "message"}, body
                assert (body["code"], body["message"]) == (answer.status, answer.reason), body
                # a malformed request is told what is wrong, a refused token why
                if answer.status == 400 or case.challenge == "invalid_token":
                    assert isinstance(body["detailedMessage"], str) and body["detailedMessage"]
        if answer.status == 401 and case.error is None:
            challenge = answer.header("www-authenticate")
            if kind == "basic":
                assert challenge == BASIC_CHALLENGE, challenge
            elif kind == "oauth":
                assert challenge is not None and challenge.startswith(BEARER_REALM), challenge
                if case.challenge == "missing":
                    assert MISSING_CHALLENGE.fullmatch(challenge), challenge
                elif case.challenge == "invalid_token":
                    assert 'error="invalid_token"' in challenge, challenge
        if b'"access_token"' in answer.body:
            issued = json.loads(answer.body)
            svc.issued += [issued["access_token"], issued["refresh_token"]]
    if present and case.closes(kind):
        last = present[-1]
        assert (last.header("connection") or "").lower() == "close", last.headers
    if case.error is not None:
        assert present, "no answer"
        assert json.loads(present[-1].body)["error"] == case.error, present[-1].body
        if case.error == "invalid_client":
            assert (present[-1].header("www-authenticate") or "").startswith("Basic"), present[-1]
    expected_body = case.body_for(kind)
    if expected_body is not None:
        assert present, "no answer"
        assert expected_body in present[-1].body, (expected_body, present[-1].body[:400])
    if case.extra is not None:
        case.extra(present)


def _phrase(status: int) -> str:
    """RFC 9110's reason phrase (Python 3.11 still has older names for a few)."""
    return RFC9110_PHRASES.get(status) or HTTPStatus(status).phrase


def check_service(svc: HostileService, case: Case, kind: str) -> None:
    assert svc.alive(), "the supervisor died"
    assert svc.worker_pids() == svc.workers, "a worker died or was replaced"
    assert f"{case.name}--{kind}" not in svc.smuggled(), "the smuggled request was executed"


# -- the tests -------------------------------------------------------------------------------------


def test_corpus_size() -> None:
    families = Counter(case.family for case in BAD)
    print(f"\nhostile corpus: {len(BAD)} bad cases, {len(VALID)} valid ones; by family:")
    for family, count in sorted(families.items()):
        print(f"  {family:14} {count}")
    print(
        f"  sent as {sum(len(c.kinds) for c in BAD)} + {sum(len(c.kinds) for c in VALID)} "
        "requests (cases x port kinds)"
    )
    assert len(BAD) >= 300
    assert families["smuggling"] >= 30
    assert len(VALID) >= 50
    for kind in ("basic", "oauth", "monitor"):
        assert any(kind in case.kinds for case in BAD), kind


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("case", "kind"), _params(BAD))
def test_bad_request(request: pytest.FixtureRequest, case: Case, kind: str) -> None:
    svc = _served_by(request, case)
    answers = run_case(svc, case, kind)
    check_answers(svc, case, kind, answers)
    check_service(svc, case, kind)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("case", "kind"), _params(VALID))
def test_valid_request(request: pytest.FixtureRequest, case: Case, kind: str) -> None:
    svc = _served_by(request, case)
    answers = run_case(svc, case, kind)
    assert answers and all(a is not None and 200 <= a.status < 300 for a in answers), answers
    check_answers(svc, case, kind, answers)
    check_service(svc, case, kind)


def _served_by(request: pytest.FixtureRequest, case: Case) -> HostileService:
    """A deadline case goes to the quick service, the others to the default one."""
    svc: HostileService = request.getfixturevalue("quick_service" if case.slow else "service")
    return svc


@pytest.mark.parametrize("name", ["service", "quick_service"])
def test_service_intact_after_corpus(request: pytest.FixtureRequest, name: str) -> None:
    """After the corpus: same workers, only the app's tracebacks, no secret, on each service."""
    service: HostileService = request.getfixturevalue(name)
    assert service.alive()
    assert service.worker_pids() == service.workers, "a worker died during the corpus"
    logs = service.logs()
    assert "protocol error" in logs or "408" in logs, "the corpus did not run against it"
    for marker in ("request pipeline failed", "monitor request failed"):
        assert marker not in logs, f"{marker!r} in the log:\n{_around(logs, marker)}"
    # the only tracebacks: the app's /boom and the raising OnAuth (rest_error_full=1)
    traces = re.findall(
        r"Traceback \(most recent call last\).*?(?=^\d{4}-\d\d-\d\dT|\Z)", logs, re.S | re.M
    )
    assert len(traces) == logs.count("Traceback (most recent call last)")
    # the cases that raise wait on no deadline: the default service served them
    assert (len(traces) > 0) == (name == "service"), len(traces)
    for trace in traces:
        assert re.search(
            r"RuntimeError: kaboom-secret-detail|ValueError: the validator broke", trace
        ), trace
    assert not re.search(r"connection from \S+ failed", logs), _around(logs, "failed:")
    leaks = [secret for secret in service.secrets() if secret in logs]
    assert not leaks, f"secrets in the log: {leaks}\n{_around(logs, leaks[0])}"
    print(f"\nlog checked: {len(logs.splitlines())} lines, {len(service.secrets())} secret forms")


def _around(text: str, needle: str) -> str:
    at = text.find(needle)
    return text[max(0, at - 600) : at + 600] if at >= 0 else ""
