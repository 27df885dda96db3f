"""tests/tools/stale_refs.py: every module a docstring, comment or code map names exists."""

from __future__ import annotations

import pytest

from tests.tools import run_python
from tests.tools.stale_refs import Tree, check_text


@pytest.fixture(scope="module")
def tree() -> Tree:
    return Tree()


@pytest.mark.parametrize(
    "text",
    [
        "``fwrest.server.app.PortApp`` serves a port",
        ":class:`~fwrest.wire.Reply`",
        "the logger ``fwrest.access``",  # a name the code spells, not a module
        "``fwrest.rest`` and ``fwrest.start()``",  # the package's lazy names
        "`server/app.py`'s `PortApp.handle`",
        "`grants/base.py`'s `Grant`",  # relative to its package
        "`tests/conftest.py`, `src/fwrest/wire.py`, `fwrest/wire.py`",
    ],
)
def test_existing_references_pass(tree: Tree, text: str) -> None:
    assert check_text(text, tree) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "implemented by ``fwrest.server.runtime.WorkerServices``",
            "fwrest.server.runtime.WorkerServices: no such module or name",
        ),
        ("see ``fwrest.server.app.NoSuchClass``", "fwrest.server.app.NoSuchClass"),
        ("built by `server/pipeline.py`", "server/pipeline.py: no such file"),
        ("`auth/oauth2/grants/implicit.py`", "auth/oauth2/grants/implicit.py"),
    ],
)
def test_missing_references_are_found(tree: Tree, text: str, expected: str) -> None:
    found = check_text("first line\n" + text, tree)
    assert len(found) == 1
    line, what = found[0]
    assert line == 2
    assert what.startswith(expected)


def test_sources_and_code_map_name_only_what_exists() -> None:
    done = run_python("-m", "tests.tools.stale_refs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""
