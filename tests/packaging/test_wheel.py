"""sdist and wheel install into a clean environment (issue 10); the request path is compiled by
mypyc with a C compiler, pure Python without (issue 24, setup.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from tests.conftest import APP_SOURCE, ROOT, ServerProcess, free_config, local_port

# not the suite's PYTHONPATH: its ``src`` egg-info would pass with pip for fwrest installed
_CLEAN = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

# the compiled build takes ~100 s of one core when quiet: the suite's 120 s would fail it when busy
pytestmark = pytest.mark.timeout(900)


def _run(
    *argv: str, timeout: float = 60, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A command as an installer or a user runs it: output captured, the clean environment."""
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env or _CLEAN
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from it: on the compiled wheel's run, the very files `make
    wheel` built and installed into the environment under test (building them again took the
    parallel part four minutes of a core); elsewhere, built here."""
    made = ROOT / ".wheel"
    if os.environ.get("FWREST_TEST_BUILD") == "compiled":
        found = sorted(made.glob("fwrest-*.whl")) + sorted(made.glob("fwrest-*.tar.gz"))
        assert len(found) == 2, f"make wheel leaves one wheel and one sdist in {made}: {found}"
        return made
    out = tmp_path_factory.mktemp("dist")
    done = _run(sys.executable, "-m", "build", "--outdir", str(out), str(ROOT), timeout=600)
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
    # the native engine's sources and the vendored llhttp's licence (its generated C is not)
    for path in ("_native/engine.pyx", "_native/llhttp/src/llhttp.c", "_native/llhttp/LICENSE"):
        assert any(n.endswith(f"src/fwrest/{path}") for n in names), path
    assert not any(n.endswith("src/fwrest/_native/engine.c") for n in names)


def _compiled_modules() -> list[str]:
    """setup.py's ``COMPILED`` as module names (from its source: importing it would build)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    paths = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets)
    )
    return [p.removeprefix("src/").removesuffix(".py").replace("/", ".") for p in paths]


def test_the_wheel_holds_each_compiled_module_beside_its_source(dist: Path) -> None:
    with zipfile.ZipFile(_wheel(dist)) as whl:
        names = whl.namelist()
    modules = _compiled_modules()
    assert "fwrest.server.http" in modules
    for module in modules:
        stem = module.replace(".", "/")
        assert any(n.startswith(f"{stem}.cpython-") and n.endswith(".so") for n in names), module
        assert f"{stem}.py" in names, module  # the source stays: the fallback, and tracebacks
    assert not _wheel(dist).name.endswith("-none-any.whl")  # a platform wheel
    # the native engine (docs/engine.md), built from the sdist, with llhttp's licence
    assert any(n.startswith("fwrest/_native/engine.cpython-") for n in names), "native engine"
    assert "fwrest/_native/llhttp/LICENSE" in names


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtual environment with the wheel installed: its ``bin`` folder."""
    env_dir = tmp_path_factory.mktemp("venv")
    # a venv without pip of its own (ensurepip takes seconds), installed into by this pip
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    wheel = str(_wheel(dist))
    install = _run(
        *(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", wheel), timeout=600
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return env_dir / "bin"


def test_wheel_installs_into_a_clean_venv_with_a_working_command(
    installed: Path, tmp_path: Path
) -> None:
    py = installed / "python"
    done = _run(str(installed / "fwrest"), "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"fwrest {version('fwrest')}"
    listing = "import fwrest, sys; sys.stdout.write(','.join(sorted(fwrest.__all__)))"
    api = _run(str(py), "-c", listing, cwd=tmp_path)
    assert api.returncode == 0, api.stderr
    assert "start" in api.stdout.split(",")
    assert "rest" in api.stdout.split(",")


_CHECK = """
def check(user, password):
    if user == "raise":
        raise ValueError("cannot check the password of " + user)
    return (user, password) == ("ada", "pw-ada")
"""


def test_the_installed_compiled_build_serves_and_logs_the_applications_tracebacks(
    installed: Path, tmp_path: Path
) -> None:
    """The compiled modules are loaded and serve an open port and a Basic port with a ``def``
    OnAuth; a handler's and OnAuth's exceptions in a thread keep their frames in the log
    (``rest_error_full=1``), lost by compiled coroutines unless awaited through
    ``fwrest.auth.blocking.settled``."""
    py = installed / "python"
    modules = _compiled_modules()
    show = f"import importlib; [print(importlib.import_module(m).__file__) for m in {modules!r}]"
    where = _run(str(py), "-c", show, cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    files = where.stdout.split()
    assert len(files) == len(modules) and all(f.endswith(".so") for f in files), files
    config = free_config(
        tmp_path,
        app=APP_SOURCE + _CHECK,
        general={"rest_error_full": 1},
        servers={
            "HTTP_REST": local_port(),
            "HTTP_BASIC": local_port(
                FwData={"Authorization": {"scheme": "basic", "OnAuth": "check"}}
            ),
        },
    )
    server = ServerProcess(config, env={"PYTHONPATH": ""}, command=[str(py), "-m", "fwrest"])
    server.wait_ready()
    try:
        open_url, basic_url = server.url("HTTP_REST"), server.url("HTTP_BASIC")
        assert httpx.get(f"{open_url}/items/5").json() == {"id": "5"}
        echoed = httpx.post(f"{open_url}/echo", content=b"compiled")
        assert echoed.status_code == 200 and b"compiled" in echoed.content
        assert httpx.get(f"{open_url}/nowhere").status_code == 404
        assert httpx.get(f"{basic_url}/items/7", auth=("ada", "pw-ada")).status_code == 200
        assert httpx.get(f"{basic_url}/items/7").status_code == 401
        assert httpx.get(f"{basic_url}/items/7", auth=("ada", "wrong")).status_code == 403
        assert httpx.get(f"{basic_url}/items/7", auth=("raise", "x")).status_code == 500
        assert httpx.get(f"{open_url}/boom").status_code == 500
        text = server.wait_log('raise RuntimeError("kaboom-secret-detail")')
        text = server.wait_log('raise ValueError("cannot check the password of " + user)')
        assert "Traceback (most recent call last)" in text
    finally:
        server.stop()


def test_without_a_c_compiler_the_build_is_pure_python(tmp_path: Path) -> None:
    """No compiler: the same wheel, pure Python, with a warning saying so."""
    done = _run(
        *(sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(ROOT)),
        timeout=600,
        env={**_CLEAN, "CC": str(tmp_path / "no-such-compiler")},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no C compiler found: building pure Python" in done.stdout + done.stderr
    wheel = _wheel(tmp_path)
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    assert not [n for n in names if n.endswith(".so")]
    assert "fwrest/server/http.py" in names
