"""tests/conftest.py's ``ENGINE_FREE`` modules are in the pure-engine run (``ENGINE_SLICE``) and
start no server, so that run may skip them."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ENGINE_FREE, ROOT

# what starts a server or speaks to one's socket in this suite
STARTS = re.compile(
    r"ServerProcess|\bserving\(|\brunning\(|\bexchange\(|RawConnection|create_connection"
    r"|start_service|fwrest\.start\([^)]|\bserve\s*[:,)]"
)


def engine_slice() -> list[str]:
    makefile = (ROOT / "Makefile").read_text()
    found = re.search(r"^ENGINE_SLICE := ((?:.*\\\n)*.*)$", makefile, re.MULTILINE)
    assert found, "the Makefile has no ENGINE_SLICE"
    return found.group(1).replace("\\", " ").split()


@pytest.mark.parametrize("module", sorted(ENGINE_FREE))
def test_an_engine_free_module_is_in_the_engine_run_and_starts_no_server(module: str) -> None:
    path = ROOT / module
    assert path.is_file(), f"ENGINE_FREE names {module}, which does not exist"
    assert any(module == p or module.startswith(p.rstrip("/") + "/") for p in engine_slice()), (
        f"{module} is not in the Makefile's ENGINE_SLICE: ENGINE_FREE need not name it"
    )
    starts = sorted(set(STARTS.findall(path.read_text())))
    assert not starts, f"{module} starts a server ({', '.join(starts)}): take it out of ENGINE_FREE"
