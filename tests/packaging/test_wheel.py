"""fwrest builds as an sdist and a wheel that install into a clean environment (issue 10)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import ROOT

# what the commands run here see: not the suite's PYTHONPATH (its ``src`` holds fwrest's
# egg-info, which pip would take for fwrest installed)
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        env=CLEAN_ENV,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def _wheel(dist: Path) -> Path:
    wheels = list(dist.glob("fwrest-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_holds_the_package_typed_and_bounded(dist: Path) -> None:
    with zipfile.ZipFile(_wheel(dist)) as whl:
        names = whl.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(whl.read(meta_name).decode())
    assert "fwrest/py.typed" in names
    assert "fwrest/server/http.py" in names
    assert not any(n.startswith("tests/") for n in names)
    assert meta["Version"] == version("fwrest")
    requires = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert requires, "the wheel declares its dependencies"
    for req in requires:
        assert "==" in req or "<" in req, f"unbounded dependency: {req}"


def test_sdist_holds_the_sources(dist: Path) -> None:
    sdists = list(dist.glob("fwrest-*.tar.gz"))
    assert len(sdists) == 1
    with tarfile.open(sdists[0]) as tar:
        names = tar.getnames()
    assert any(n.endswith("src/fwrest/__init__.py") for n in names)
    assert any(n.endswith("pyproject.toml") for n in names)


def test_wheel_installs_into_a_clean_venv_with_a_working_command(
    dist: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    # a venv without pip of its own (ensurepip takes seconds), installed into by this pip
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet",
         str(_wheel(dist))],
        capture_output=True,
        text=True,
        timeout=600,
        env=CLEAN_ENV,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    done = subprocess.run(
        [str(env_dir / "bin" / "fwrest"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=CLEAN_ENV,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"fwrest {version('fwrest')}"
    api = subprocess.run(
        [str(py), "-c", "import fwrest, sys; sys.stdout.write(','.join(sorted(fwrest.__all__)))"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=CLEAN_ENV,
    )
    assert api.returncode == 0, api.stderr
    assert "start" in api.stdout.split(",")
    assert "rest" in api.stdout.split(",")
