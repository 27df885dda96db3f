"""``FWREST_TEST_BUILD`` (the Makefile's): the suite refuses another build than asked."""

from __future__ import annotations

import importlib.machinery
import os

import pytest

import fwrest.wire
from tests.tools import run_python

COMPILED = any(fwrest.wire.__file__.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)
OTHER = "pure" if COMPILED else "compiled"
LINT = "tests/tools/test_mypyc_lint.py"  # a small module to collect


@pytest.mark.parametrize("build", [OTHER, "cython"])
def test_the_suite_refuses_another_build(build: str) -> None:
    env = {**os.environ, "FWREST_TEST_BUILD": build}
    done = run_python(
        "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", LINT, env=env
    )
    assert done.returncode == 4, done.stdout + done.stderr  # a usage error: nothing ran
    assert f"FWREST_TEST_BUILD={build}: " in done.stderr
