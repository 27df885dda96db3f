"""Checks ``make lint`` runs beside ruff and mypy (``python -m tests.tools.NAME``), and what they
and their tests share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def report(path: Path, findings: list[tuple[int, str]]) -> bool:
    """Prints each of ``path``'s findings as ``path:line: what``; whether there was one."""
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for line, what in findings:
        print(f"{shown}:{line}: {what}")
    return bool(findings)


def run_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in the checkout, as ``make lint`` runs it (``env``: its environment)."""
    command = [sys.executable, *args]
    return subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )
