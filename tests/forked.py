"""``fwrest ARGS`` in a process forked from one that imported fwrest once (the test suite's
forkserver), for the tests that run a command hundreds of times on broken configurations.

A fresh interpreter spends about half a second importing fwrest before it reads a config; a
child of the forkserver starts with it imported, and is otherwise the real thing: a process of
its own, in its own folder, with the exit code, standard output and standard error that
``python -m fwrest ARGS`` would have. Only this module and ``fwrest.cli`` are imported by the
server (never the test modules), so a child carries nothing of the tests.
"""

from __future__ import annotations

import os
import sys


def run(
    args: list[str], cwd: str, out: str, err: str, code_path: str, stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> None:  # fmt: skip
    """The child's whole life: ``fwrest ARGS`` in ``cwd``, its output into ``out``/``err``,
    its exit code into ``code_path`` too (the forkserver's own report of a child's status is
    255 when several children end at once: read it from here); its input from the file
    ``stdin`` (else none); ``env``: variables set in its environment (the forkserver's is
    the one the suite started with)."""
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
