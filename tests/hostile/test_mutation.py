"""A mutation run: the corpus's valid requests mutated by a seeded RNG (flip, insert, delete,
duplicate or swap lines, splice, change a number) to ``fwrest serve --workers 2`` over many
connections, several requests each while kept open. Each connection ends in well-formed answers
(under 500 or an allowed 5xx) or a close within a hang guard; no worker dies; counts printed.
``FWREST_MUTATIONS`` (default 20,000; the soak 200,000), ``FWREST_MUTATION_SEED``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme
import uvloop

from tests.hostile.corpus import CONTINUE, VALID, Ctx, render
from tests.hostile.service import ALLOWED_5XX, HostileService, start_service

MUTATIONS = int(os.environ.get("FWREST_MUTATIONS", "20000"))
SEED = int(os.environ.get("FWREST_MUTATION_SEED", "20261122"))
CONCURRENCY = 48
READ_GUARD = 5.0  # seconds a read may wait: far above the service's 500 ms deadlines
# the monitor keeps the default deadlines (headers 10 s, body 30 s): not settable there
MONITOR_GUARD = 35.0
CONNECTION_GUARD = {"basic": 30.0, "oauth": 30.0, "monitor": 60.0}
DEADLINE_MS = 500
STATUS_LINE = re.compile(rb"HTTP/1\.1 ([1-5][0-9][0-9]) [^\r\n]*")
INTERESTING = [
    b"\r", b"\n", b"\r\n", b"\r\n\r\n", b" ", b"\t", b"\x00", b"\x7f", b"\xff", b"\xc3(",
    b":", b";", b",", b"%", b"%00", b"%2f", b"%2e%2e", b"/", b"/..", b"//", b"\\", b"?", b"#",
    b"0", b"9", b"-1", b"ffffffffffffffff", b"chunked", b"Content-Length: 5\r\n",
    b"Transfer-Encoding: chunked\r\n", b"Authorization: Basic eDp5\r\n", b"Expect: 100-continue\r\n",
    b"Connection: close\r\n", b"Host: x\r\n", b"0\r\n\r\n", b"GET / HTTP/1.1\r\n",
]  # fmt: skip


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    closed_without_answer: int = 0
    interim: int = 0
    connections: int = 0
    sent: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, ca: trustme.CA) -> Iterator[HostileService]:
    folder: Path = tmp_path_factory.mktemp("mutation")
    svc = start_service(
        folder, ca, general={"rest_log_level": 2}, deadline_ms=DEADLINE_MS, keep_alive_ms=1000
    )
    yield svc
    assert svc.proc.stop() == 0, "the service did not stop cleanly"


def seeds(svc: HostileService) -> list[tuple[str, bytes]]:
    """Valid requests per port kind (no HEAD: a mutation makes a bodiless answer ambiguous)."""
    out = []
    for case in VALID:
        for kind in case.kinds:
            ctx = Ctx(kind, "seed", svc.access_token, svc.refresh_token, svc.signing_key)
            # a refresh token of its own family: the replays revoke it, not the access token's
            ctx.fresh_refresh = svc.fresh_refresh
            steps = case.raw if isinstance(case.raw, tuple) else (case.raw,)
            sent = [step(ctx) if callable(step) else step for step in steps if step is not CONTINUE]
            data = b"".join(render(text, ctx) for text in sent)
            if b"HEAD " not in data:
                out.append((kind, data))
    return out


def mutate(rng: random.Random, data: bytes, others: list[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(8)
        at = rng.randrange(len(out) + 1)
        if op == 0 and out:  # flip bits of one byte
            at = min(at, len(out) - 1)
            out[at] ^= 1 << rng.randrange(8)
        elif op == 1 and out:  # replace one byte
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif op == 2:  # insert something interesting
            out[at:at] = rng.choice(INTERESTING)
        elif op == 3:  # delete a few bytes
            del out[at : at + rng.randint(1, 8)]
        elif op == 4:  # duplicate a line
            lines = bytes(out).split(b"\r\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            out = bytearray(b"\r\n".join(lines))
        elif op == 5:  # swap two lines
            lines = bytes(out).split(b"\r\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            out = bytearray(b"\r\n".join(lines))
        elif op == 6:  # splice with another request
            other = rng.choice(others)
            out = out[:at] + other[rng.randrange(len(other) + 1) :]
        else:  # change a number
            digits = [m.span() for m in re.finditer(rb"[0-9]+", bytes(out))]
            if digits:
                start, end = rng.choice(digits)
                number = rng.choice((0, 1, 2**31, 2**64 + 5, rng.randrange(99999)))
                out[start:end] = str(number).encode()
    return bytes(out)


async def read_answer(
    reader: asyncio.StreamReader, buffer: bytearray, tally: Tally, guard: float
) -> tuple[int, bool] | None:
    """One final answer (1xx skipped): status and whether it announced a close, None once closed;
    AssertionError on non-HTTP/1.1 bytes or past the guard."""
    while True:
        while b"\r\n\r\n" not in buffer:
            chunk = await _read(reader, guard)
            if not chunk:
                assert not buffer, f"closed inside an answer: {bytes(buffer[:200])!r}"
                return None
            buffer += chunk
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        match = STATUS_LINE.fullmatch(lines[0])
        assert match, f"not a status line: {lines[0][:200]!r}"
        status = int(match.group(1))
        headers = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            assert colon and name and name == name.strip(), f"bad header line {line!r}"
            assert name.lower() not in headers, f"repeated header {name!r}"
            headers[name.lower()] = value.strip()
        buffer[:] = rest
        if status < 200:
            tally.interim += 1
            continue
        length = headers.get(b"content-length")
        assert length is not None and length.isdigit(), f"no content-length: {head[:300]!r}"
        while len(buffer) < int(length):
            chunk = await _read(reader, guard)
            assert chunk, "closed inside a body"
            buffer += chunk
        body = bytes(buffer[: int(length)])
        del buffer[: int(length)]
        if status >= 400 and headers.get(b"content-type", b"").startswith(b"application/json"):
            shape = set(json.loads(body))
            assert shape in (
                {"code", "detailedMessage", "message"},
                {"error", "error_description"},
            ), body
        if status >= 500:
            allowed = status in ALLOWED_5XX and (status != 503 or b"retry-after" in headers)
            assert allowed, f"a framework {status}: {body[:300]!r}"
        return status, headers.get(b"connection", b"").lower() == b"close"


async def _read(reader: asyncio.StreamReader, guard: float) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(65536), guard)
    except TimeoutError:
        raise AssertionError(f"hang: nothing sent and not closed for {guard} s") from None
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return b""


class Budget:
    """The mutated requests still to send, shared by all connections."""

    def __init__(self, total: int) -> None:
        self.left = total

    def take(self, wanted: int) -> int:
        got = min(wanted, self.left)
        self.left -= got
        return got


async def connection(
    svc: HostileService,
    kind: str,
    requests: list[bytes],
    pipelined: bool,
    budget: Budget,
    tally: Tally,
) -> None:
    """``requests`` in turn or at once, while the budget lasts and the connection stays open."""
    first = budget.take(len(requests) if pipelined else 1)
    if not first:
        return
    tls = svc.tls if kind == "oauth" else None
    host = "127.0.0.1" if tls else None
    connecting = asyncio.open_connection("127.0.0.1", svc.port(kind), ssl=tls, server_hostname=host)
    reader, writer = await asyncio.wait_for(connecting, READ_GUARD)
    tally.connections += 1
    guard = MONITOR_GUARD if kind == "monitor" else READ_GUARD
    buffer = bytearray()
    try:
        if pipelined:
            writer.write(b"".join(requests[:first]))
            tally.sent += first
            for _ in range(first):
                answer = await read_answer(reader, buffer, tally, guard)
                if answer is None:
                    tally.closed_without_answer += 1
                    return
                tally.statuses[answer[0]] += 1
                if answer[1]:
                    return
            return
        for index, data in enumerate(requests):
            if index and not budget.take(1):
                return
            try:
                writer.write(data)
                await writer.drain()
            # RuntimeError: uvloop writing on a transport it closed (keep-alive ended when loaded)
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError, RuntimeError):
                tally.closed_without_answer += 1
                return
            finally:
                tally.sent += 1
            answer = await read_answer(reader, buffer, tally, guard)
            if answer is None:
                tally.closed_without_answer += 1
                return
            tally.statuses[answer[0]] += 1
            if answer[1]:
                return  # the server said it closes: the rest of the batch is not sent
    except AssertionError as exc:
        tally.problem(f"{kind}: {exc} after {requests[:2]!r}"[:600])
    finally:
        writer.close()
        with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
            await asyncio.wait_for(writer.wait_closed(), 1)


async def campaign(svc: HostileService, total: int, seed: int) -> Tally:
    rng = random.Random(seed)
    pool = seeds(svc)
    others = [data for _kind, data in pool]
    tally = Tally()
    budget = Budget(total)
    tasks: set[asyncio.Task[None]] = set()

    async def run(kind: str, batch: list[bytes], pipelined: bool) -> None:
        try:
            await asyncio.wait_for(
                connection(svc, kind, batch, pipelined, budget, tally), CONNECTION_GUARD[kind]
            )
        except TimeoutError:
            tally.problem(
                f"{kind}: the connection took over {CONNECTION_GUARD[kind]} s: {batch[:1]!r}"[:600]
            )
        except OSError as exc:
            tally.problem(f"{kind}: could not connect: {exc!r}")

    while budget.left > 0:
        kind, _ = rng.choice(pool)
        same_kind = [data for k, data in pool if k == kind]
        batch = [mutate(rng, rng.choice(same_kind), others) for _ in range(rng.randint(1, 6))]
        while len(tasks) >= CONCURRENCY:
            _done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        tasks.add(asyncio.ensure_future(run(kind, batch, rng.random() < 0.2)))
    if tasks:
        await asyncio.wait(tasks)
    return tally


def test_mutated_requests(service: HostileService) -> None:
    started = time.monotonic()
    tally = uvloop.run(campaign(service, MUTATIONS, SEED))
    elapsed = time.monotonic() - started
    answered = sum(tally.statuses.values())
    print(
        f"\nmutation run: {MUTATIONS} mutated requests (seed {SEED}) on {tally.connections} "
        f"connections in {elapsed:.1f} s; {answered} answered, "
        f"{tally.closed_without_answer} connections closed without an answer, "
        f"{tally.interim} interim 100"
    )
    for status, count in sorted(tally.statuses.items()):
        print(f"  {status}: {count}")
    assert not tally.problems, "\n".join(tally.problems)
    assert service.alive(), "the supervisor died"
    assert service.worker_pids() == service.workers, "a worker died or was replaced"
    assert tally.sent == MUTATIONS, tally.sent
    assert answered >= MUTATIONS // 4, "too few answers: the mutation run did not reach the server"
    assert tally.statuses[200] > 0 and tally.statuses[400] > 0, tally.statuses
    assert len(tally.statuses) >= 5, tally.statuses
    logs = service.logs()
    assert "Traceback" not in logs and "request pipeline failed" not in logs, logs[-3000:]
