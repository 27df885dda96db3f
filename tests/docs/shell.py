"""Run the guide's ``sh`` blocks of ``curl`` commands against a real server, as a reader types them:
``\\`` continues a line, ``NAME=value`` sets a variable, a comment after or below a command starting
with a status (``# 401, WWW-Authenticate: Bearer ...``) or JSON says what it answers (``...``: any
text), other comments are prose; a command without an answer must get a 2xx.

Only changes: ``curl`` is a function adding ``-sS``, ``--connect-to`` per documented address
(``127.0.0.1:8080`` reaches the real port; URL, ``Host`` and TLS name stay as written), ``-D`` and
``-w``; ``$ACCESS_TOKEN``, ``$REFRESH_TOKEN``, ``$CSRF`` and ``$CODE`` hold the last answer's
values, as a reader copies them. Commands run with ``bash`` in the test's folder (where ``ca.pem``
or ``examples/certs/ca.pem`` exists)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.docs.blocks import Block

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S")
_STATUS_MARK = "@@fwrest-doc-status="


@dataclass
class Answer:
    """What a comment says a command answers (all None for prose)."""

    status: int | None = None
    body: str | None = None  # a pattern: JSON, ``...`` for any text
    header: tuple[str, str] | None = None  # (name, value pattern)

    @property
    def is_prose(self) -> bool:
        return self.status is None and self.body is None and self.header is None


@dataclass
class Step:
    line: int  # in the page
    command: str  # continuations joined; an assignment or a command
    answer: Answer = field(default_factory=Answer)

    @property
    def is_assignment(self) -> bool:
        return bool(_ASSIGNMENT.match(self.command)) and " " not in self.command.split("=")[0]


@dataclass
class Reply:
    exit_code: int
    status: int
    headers: dict[str, str]  # lower-cased names, the last value of each
    body: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.body)


def split_comment(line: str) -> tuple[str, str]:
    """``curl 'x#y' # a comment`` -> (``curl 'x#y'``, ``a comment``); quotes are respected."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def parse_answer(comment: str) -> Answer:
    text = comment.strip()
    if text[:1] in "{[":
        return Answer(body=text)
    m = re.match(r"^(\d{3})\b,?\s*(?:with\s+)?(.*)$", text)
    if m is None:
        return Answer()
    status, rest = int(m[1]), m[2].strip()
    if rest[:1] in "{[":
        return Answer(status, body=rest)
    header = re.match(r"^([A-Za-z][\w-]*): (.+)$", rest)
    if header:
        return Answer(status, header=(header[1].lower(), header[2]))
    return Answer(status)


def steps(block: Block) -> list[Step]:
    """The block's assignments and commands, with the answers their comments state."""
    out: list[Step] = []
    pending = ""
    start = 0
    for offset, raw in enumerate(block.text.splitlines()):
        code, comment = split_comment(raw)
        if pending:
            code = pending + " " + code.strip()
        elif not code.strip():
            if comment and out:  # a comment line: what the command above answers, or prose
                answer = parse_answer(comment)
                if not answer.is_prose:
                    assert out[-1].answer.is_prose, f"{block.where}: two answers for one command"
                    out[-1].answer = answer
            continue
        else:
            start = block.line + 1 + offset
        if code.endswith("\\"):
            pending = code[:-1].rstrip()
            continue
        pending = ""
        out.append(Step(start, code.strip(), parse_answer(comment) if comment else Answer()))
    assert not pending, f"{block.where}: a command continues past the end of the block"
    return out


def pattern(expected: str) -> re.Pattern[str]:
    """``...`` stands for any text; everything else is literal."""
    parts = [re.escape(p) for p in expected.split("...")]
    return re.compile(".*?".join(parts), re.S)


def body_matches(expected: str, actual: str) -> bool:
    if "..." not in expected:
        try:
            return bool(json.loads(expected) == json.loads(actual))
        except ValueError:
            return expected.strip() == actual.strip()
    return pattern(expected.strip()).fullmatch(actual.strip()) is not None


def curl_function(connect_to: dict[str, str], headers: Path) -> str:
    """The ``curl`` shell function: the documented command plus the runner's options."""
    options = " ".join(f"--connect-to {doc}:{real}" for doc, real in connect_to.items())
    return (
        f"curl() {{ command curl -sS {options} -D '{headers}' "
        f"-w '\\n{_STATUS_MARK}%{{http_code}}' \"$@\"; }}\n"
    )


def run_command(
    command: str, prelude: str, cwd: Path, connect_to: dict[str, str], env: dict[str, str]
) -> Reply:
    headers = cwd / ".curl-headers"
    headers.unlink(missing_ok=True)
    script = "set -u\n" + curl_function(connect_to, headers) + prelude + command + "\n"
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    out, _mark, status = done.stdout.rpartition("\n" + _STATUS_MARK)
    body = out
    if re.search(r"(^|\s)-i(\s|$)", command):  # -i: the headers come first on stdout
        body = re.split(r"\r?\n\r?\n", out, maxsplit=1)[-1]
    raw_headers = headers.read_text(errors="replace") if headers.exists() else ""
    found: dict[str, str] = {}
    for line in raw_headers.splitlines():
        name, colon, value = line.partition(":")
        if colon and not line.startswith("HTTP/"):
            found[name.strip().lower()] = value.strip()
    return Reply(done.returncode, int(status or 0), found, body, done.stderr)


def run_block(
    block: Block, cwd: Path, connect_to: dict[str, str], env: dict[str, str] | None = None
) -> list[tuple[Step, Reply]]:
    """``block``'s commands in order, checked against their comments; each with its reply."""
    env = dict(env or {})
    prelude = ""
    done: list[tuple[Step, Reply]] = []
    for step in steps(block):
        if step.is_assignment:
            prelude += step.command + "\n"
            continue
        assert step.command.startswith("curl "), f"{block.where}: not a curl command: {step}"
        reply = run_command(step.command, prelude, cwd, connect_to, env)
        where = f"{block.page}:{step.line} `{step.command}`"
        assert reply.exit_code == 0, f"{where}: curl exited {reply.exit_code}: {reply.stderr}"
        answer = step.answer
        if answer.status is not None:
            assert reply.status == answer.status, f"{where}: {reply.status} {reply.body}"
        else:
            assert 200 <= reply.status < 300, f"{where}: {reply.status} {reply.body}"
        if answer.body is not None:
            assert body_matches(answer.body, reply.body), (
                f"{where}: the guide says {answer.body}, the server answered {reply.body}"
            )
        if answer.header is not None:
            name, value = answer.header
            assert name in reply.headers, f"{where}: no {name} header in {reply.headers}"
            assert pattern(value).fullmatch(reply.headers[name]), (
                f"{where}: the guide says {name}: {value}, the server sent {reply.headers[name]}"
            )
        form_token = re.search(r'name="fw_csrf" value="([^"]+)"', reply.body)
        if form_token:
            env["CSRF"] = form_token[1]
        code = re.search(r"[?&]code=([^&]+)", reply.headers.get("location", ""))
        if code:
            env["CODE"] = code[1]
        if reply.body.startswith("{"):
            answered = json.loads(reply.body)
            if isinstance(answered, dict):
                for key in ("access_token", "refresh_token"):
                    if isinstance(answered.get(key), str):
                        env[key.upper()] = answered[key]
        done.append((step, reply))
    return done
