"""Probing the file system as a start would: whether the service can write a file or a folder
(``LogFile``, ``DataPath``), leaving nothing behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["probe_writable"]


def probe_writable(path: Path, *, directory: bool) -> str:
    """Why the service could not write ``path`` (a file, or a folder when ``directory``), or
    "" when it can. Missing folders are created to find out, then removed with anything else
    the probe made: `fwrest check` leaves nothing behind."""
    made: list[Path] = []
    try:
        if path.exists():
            if path.is_dir() != directory:
                return "it is a folder" if path.is_dir() else "it is not a folder"
        else:
            missing = []
            parent = path if directory else path.parent
            while not parent.exists():
                missing.append(parent)
                parent = parent.parent
            if not parent.is_dir():
                return f"{parent} is not a folder"
            for folder in reversed(missing):
                folder.mkdir()
                made.append(folder)
        if directory:
            fd, probe = tempfile.mkstemp(dir=path, prefix=".fwrest-probe-")
            os.close(fd)
            os.unlink(probe)
        elif path.exists():
            with path.open("ab"):
                pass
        else:
            path.open("xb").close()
            made.append(path)
        return ""
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        for item in reversed(made):
            with contextlib.suppress(OSError):
                item.unlink() if item.is_file() else item.rmdir()
