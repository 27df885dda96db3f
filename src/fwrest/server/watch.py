"""``fwrest serve --reload`` (SPEC 13.2): a process forked by the supervisor watches the
configuration, the repository's files and the certificates (``watchfiles``) and sends the
supervisor SIGHUP on a change; it ends with the supervisor."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

__all__ = ["watch_files"]


def watch_files(files: list[Path], supervisor: int, say: Callable[[str], None]) -> None:
    """Watch ``files`` (and any ``.py`` file added beside a watched ``.py`` file) until the
    supervisor is gone; SIGHUP to it after each change."""
    import watchfiles  # in this process only: its threads never cross the supervisor's forks

    wanted = {str(f) for f in files}
    code_folders = {str(f.parent) for f in files if f.suffix == ".py"}
    folders = sorted({str(f.parent) for f in files if f.parent.is_dir()})

    def relevant(_change: watchfiles.Change, path: str) -> bool:
        return path in wanted or (path.endswith(".py") and os.path.dirname(path) in code_folders)

    say(f"watching {len(files)} file(s) for changes (--reload)")
    for changes in watchfiles.watch(
        *folders,
        watch_filter=relevant,
        recursive=False,
        debounce=400,
        rust_timeout=1000,
        yield_on_timeout=True,
        raise_interrupt=False,
    ):
        if os.getppid() != supervisor:
            return
        if changes:
            names = ", ".join(sorted({os.path.basename(path) for _, path in changes}))
            say(f"changed: {names}; reloading")
            os.kill(supervisor, signal.SIGHUP)
