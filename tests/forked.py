"""``fwrest ARGS`` forked from the suite's forkserver, which imported fwrest once, for tests running
commands hundreds of times: it saves a fresh interpreter's half second of imports and is otherwise
the real thing (own process and folder, ``python -m fwrest``'s exit code and output). The server
imports only this module and ``fwrest.cli``, so a child carries nothing of the tests."""

from __future__ import annotations

import os
import sys


def run(
    args: list[str], cwd: str, out: str, err: str, code_path: str, stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> None:  # fmt: skip
    """A child's life: ``fwrest ARGS`` in ``cwd``, output to ``out``/``err``, exit code also to
    ``code_path`` (the forkserver reports 255 when several end at once), input from ``stdin`` (else
    none), ``env`` added to the suite's starting environment."""
    os.chdir(cwd)
    os.environ.update(env or {})
    if stdin is not None:
        source = os.open(stdin, os.O_RDONLY)
        os.dup2(source, 0)
        os.close(source)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's
    for fd, name in ((1, out), (2, err)):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    from fwrest.cli import main

    try:
        code: int = main(args)
    except SystemExit as exc:  # argparse's own exits
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(code_path, "w") as written:
        written.write(str(code))
    os._exit(code)
