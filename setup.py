"""The build of fwrest: pure Python, plus the request path compiled to C with mypyc where it can be.

pyproject.toml holds the metadata; this file only decides the extension modules:

* a wheel or an install from source (``pip install .``, ``python -m build``) compiles the
  modules of ``COMPILED`` with mypyc (the code passes mypy --strict; mypyc turns such modules
  into C extensions, as black and mypy ship). The ``.py`` files ship beside them: Python loads
  the extension where it is there, the source where it is not.
* an editable install (``pip install -e .``, ``make``'s development set-up) stays pure Python,
  so that an edit takes effect at once;
* ``FWREST_COMPILE=0`` builds pure Python anywhere, ``FWREST_COMPILE=1`` compiles even an
  editable install (and fails if it cannot, instead of falling back);
* a machine without a C compiler, or where mypyc is missing, gets the pure-Python package,
  with a warning: every module works either way (docs/decisions.md, "The compiled build").
* the native engine's parser (``src/fwrest/_native/engine.pyx``, Cython over the vendored
  llhttp) is built wherever the mypyc modules are, and by the editable install too; its build
  is optional always: without Cython or a C compiler, or where it fails, a warning says so and
  the pure engine serves (docs/engine.md, "The native engine").
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Any

from setuptools import setup

# The request path: the HTTP engine and its wire records, routing, the port pipeline,
# OnSelect, the request context and request ids, the guards and the token service with its
# grants (their registry, grants/__init__.py, runs at start only: left pure), the
# security headers, the usage figures. A module here awaits a thread's future only through
# fwrest.auth.blocking.settled (a compiled coroutine drops a thrown exception's traceback),
# and holds no async generator (server/streams.py keeps those), no generic dataclass, no
# subclass of a built-in exception but Exception, no `continue` inside `with`: mypyc cannot
# build them. Left out on purpose: server/handler.py and context/rest.py (compiled, some
# handlers' results and REST calls differed from the pure build's in the suite) and
# server/pool.py (its threads' loop, compiled, made a `def` OnAuth 0.90x the pure build;
# 1.12x without it: bench case 2). docs/decisions.md, "The compiled build".
COMPILED = [
    "src/fwrest/wire.py",
    "src/fwrest/server/http.py",
    "src/fwrest/server/connstate.py",
    "src/fwrest/routing/paths.py",
    "src/fwrest/routing/router.py",
    "src/fwrest/server/app.py",
    "src/fwrest/context/request.py",
    "src/fwrest/auth/basic.py",
    "src/fwrest/auth/oauth2/guard.py",
    "src/fwrest/server/usage.py",
    "src/fwrest/server/select.py",
    "src/fwrest/context/request_id.py",
    "src/fwrest/auth/oauth2/tokens.py",
    "src/fwrest/auth/oauth2/grants/base.py",
    "src/fwrest/auth/oauth2/grants/password.py",
    "src/fwrest/auth/oauth2/grants/refresh.py",
    "src/fwrest/auth/oauth2/grants/client_credentials.py",
    "src/fwrest/auth/oauth2/grants/authorization_code.py",
    "src/fwrest/features/headers.py",
]

_BUILDS = {"bdist_wheel", "build", "build_ext", "install", "editable_wheel", "develop"}


def _compiler() -> str | None:
    """The C compiler Python's build would call, if the machine has it."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    return shutil.which(cc[0]) if cc else None


NATIVE = Path("src/fwrest/_native")


def native_modules() -> list[Any]:
    """The native engine's extension, cythonized here (the C file is not kept in the
    repository); [] with a warning where Cython or the compiler is missing."""
    try:
        from Cython.Build import cythonize
        from setuptools import Extension
    except ImportError:
        warnings.warn("fwrest: Cython is not installed: the pure engine will serve", stacklevel=1)
        return []
    if _compiler() is None:
        warnings.warn("fwrest: no C compiler found: the pure engine will serve", stacklevel=1)
        return []
    llhttp = NATIVE / "llhttp"
    extension = Extension(
        "fwrest._native.engine",
        sources=[
            str(NATIVE / "engine.pyx"),
            *(str(llhttp / "src" / n) for n in ("llhttp.c", "api.c", "http.c")),
        ],
        include_dirs=[str(llhttp / "include")],
        extra_compile_args=["-O2", "-g0"],  # no debug sections: a tenth of the size
        optional=True,  # a failed build warns and the pure engine serves
    )
    try:
        modules: list[Any] = cythonize([extension], language_level=3, quiet=True)
    except Exception as exc:  # Cython's own failure: the pure engine serves
        warnings.warn(
            f"fwrest: the native engine was not built ({exc}): the pure engine will serve",
            stacklevel=1,
        )
        return []
    for module in modules:
        module.optional = True
    return modules


def ext_modules() -> list[Any]:
    wanted = os.environ.get("FWREST_COMPILE", "auto").strip().lower()
    command = set(sys.argv[1:]) & _BUILDS
    if wanted in ("0", "no", "false") or not command:
        return []  # metadata only (egg_info, sdist), or pure Python asked for
    forced = wanted in ("1", "yes", "true")
    if not forced and command & {"editable_wheel", "develop"}:
        return native_modules()  # the engine's parser; the mypyc modules stay pure
    try:
        from mypyc.build import mypycify
    except ImportError:
        if forced:
            raise
        warnings.warn("fwrest: mypyc is not installed: building pure Python", stacklevel=1)
        return native_modules()
    if _compiler() is None:
        if forced:
            raise SystemExit("fwrest: FWREST_COMPILE=1 but no C compiler was found")
        warnings.warn("fwrest: no C compiler found: building pure Python", stacklevel=1)
        return []
    # The build's own mypy settings (not pyproject.toml's strict ones): the isolated build
    # environment lacks the libraries fwrest calls (orjson, msgspec, httptools...), whose calls
    # are then Any; `make lint` checks the whole code strictly with them.
    config = Path(tempfile.mkdtemp(prefix="fwrest-mypyc-")) / "mypyc.ini"
    config.write_text("[mypy]\npython_version = 3.11\nignore_missing_imports = True\n")
    modules = mypycify([f"--config-file={config}", *COMPILED], opt_level="3", debug_level="0")
    if not forced:
        for module in modules:
            module.optional = True  # a failed C build skips the module: the .py is used
    return [*modules, *native_modules()]


setup(ext_modules=ext_modules())
