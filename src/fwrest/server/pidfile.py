"""``serve --pid-file`` and ``fwrest reload PIDFILE`` (SPEC 13.1): the supervisor's pid in a
file, and SIGHUP to the process it names once it is known to be a running ``fwrest serve``."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil

__all__ = ["PidFileError", "remove_pid_file", "send_reload", "write_pid_file"]


class PidFileError(Exception):
    """The pid file names no running ``fwrest serve``: nothing was signalled."""


def write_pid_file(path: Path) -> None:
    """Write this process's pid, whole or not at all (a temporary file renamed over it).

    Raises:
        PidFileError: the file cannot be written.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(f"{os.getpid()}\n")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PidFileError(
            f"cannot write the pid file {path} ({exc.strerror or exc}); give --pid-file a file "
            "in a folder that exists and that the service may write to."
        ) from None


def remove_pid_file(path: Path) -> None:
    """Remove the file if it still names this process (a later start may have taken it)."""
    with contextlib.suppress(OSError, ValueError):
        if int(path.read_text().strip()) == os.getpid():
            path.unlink()


def send_reload(path: Path) -> int:
    """SIGHUP to the ``fwrest serve`` the file names; its pid.

    Raises:
        PidFileError: the file is missing or unreadable, holds no pid, or names a process that
            is gone or is not ``fwrest serve`` (a stale file: the pid may be another program's).
    """
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise PidFileError(
            f"the pid file {path} does not exist: is the service running, started with "
            f"`fwrest serve CONFIG --pid-file {path}`?"
        ) from None
    except OSError as exc:
        raise PidFileError(f"the pid file {path} cannot be read: {exc.strerror or exc}.") from None
    if not text.isdigit() or int(text) < 1:
        raise PidFileError(f"the pid file {path} holds no pid ({text[:40]!r}).")
    pid = int(text)
    try:
        args = psutil.Process(pid).cmdline()
    except psutil.Error:
        raise PidFileError(
            f"the pid file {path} is stale: no process has pid {pid} (the service stopped "
            "without removing it); start the service again."
        ) from None
    # `fwrest serve ...` or `python -m fwrest serve ...`
    if "serve" not in args or not any(a == "fwrest" or a.endswith("/fwrest") for a in args):
        shown = " ".join(args)[:80]
        raise PidFileError(
            f"the pid file {path} is stale: pid {pid} is not `fwrest serve` but {shown!r}; "
            "nothing was signalled."
        )
    os.kill(pid, signal.SIGHUP)
    return pid
