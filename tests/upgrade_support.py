"""The previous release (SPEC 17.2) for the upgrade tests: :func:`previous_release` exports the
newest tag ``vX.Y.Z`` below this version (``v0.1.0``; commit ``edbc291`` without the tag) by ``git
archive`` and installs it pure (``FWREST_COMPILE=0``) into ``.upgrade-venv-<commit>`` (git-ignored,
reused). A clone without that history fails saying how to fix it (CI unshallows: .ci/run), never
skips."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import fwrest

REPO = Path(__file__).resolve().parent.parent
FIRST_TAG, FIRST_COMMIT = "v0.1.0", "edbc291"  # SPEC 17.2: the first release


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False, timeout=60
    )


def _version(text: str) -> tuple[int, ...] | None:
    parts = text.removeprefix("v").split(".")
    if len(parts) == 3 and all(map(str.isdigit, parts)):
        return tuple(int(p) for p in parts)
    return None


def _previous_tag() -> str:
    """SPEC 17.2: the newest ``vX.Y.Z`` below this version (no tag: ``v0.1.0``, by its commit)."""
    built = _version(fwrest.__version__)
    assert built is not None, fwrest.__version__
    tags = [t for t in _git("tag", "--list", "v*").stdout.split() if _version(t) is not None]
    below = [t for t in tags if (_version(t) or built) < built]
    return max(below, key=lambda t: _version(t) or ()) if below else FIRST_TAG


PREVIOUS_TAG = _previous_tag()
PREVIOUS_VERSION = PREVIOUS_TAG.removeprefix("v")


def previous_commit() -> str:
    """The full id of the previous release's commit: its tag's, else (v0.1.0) ``edbc291``'s."""
    names = (PREVIOUS_TAG, FIRST_COMMIT) if PREVIOUS_TAG == FIRST_TAG else (PREVIOUS_TAG,)
    for name in names:
        found = _git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip()
    pytest.fail(
        f"the previous release is not in this clone's history: {' nor '.join(names)} is not "
        f"there (shallow clone: {shallow or 'unknown'}). Fetch it: git fetch --unshallow "
        f"--tags (or git fetch origin tag {PREVIOUS_TAG})",
        pytrace=False,
    )


def previous_release() -> Path:
    """The ``bin`` folder of an environment where ``fwrest`` is the previous release."""
    commit = previous_commit()
    venv = REPO / f".upgrade-venv-{commit[:12]}"
    stamp = venv / ".installed"
    if stamp.exists():
        return venv / "bin"
    with (REPO / f".upgrade-venv-{commit[:12]}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist's workers build it once
        if not stamp.exists():
            _build(commit, venv)
    return venv / "bin"


def _build(commit: str, venv: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="fwrest-previous-") as tmp:
        tree, tar = Path(tmp) / "src", Path(tmp) / "src.tar"
        tree.mkdir()
        archive = _git("archive", "--format=tar", f"--output={tar}", commit)
        assert archive.returncode == 0, archive.stderr
        subprocess.run(["tar", "-x", "-f", str(tar), "-C", str(tree)], check=True, timeout=120)
        steps = (
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "pip"), "install", "--quiet", str(tree)],
        )
        env = {**os.environ, "FWREST_COMPILE": "0"}  # the pure build: nothing to compile
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, env=env, timeout=900)
            assert done.returncode == 0, f"{' '.join(step)}:\n{done.stdout}\n{done.stderr}"
    version = subprocess.run(
        [str(venv / "bin" / "fwrest"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.stdout.strip() == f"fwrest {PREVIOUS_VERSION}", version
    (venv / ".installed").write_text(commit + "\n")


def previous_python(code: str, *args: str) -> str:
    """Run ``code`` with the previous release's Python (its fwrest importable); its stdout."""
    # cwd: not the repository, whose src/ must not shadow the release
    command = [str(previous_release() / "python"), "-c", code, *args]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir()
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
