"""tests/tools/mypyc_lint.py finds each construct in samples, and nothing in code avoiding them."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.tools import ROOT, mypyc_lint, run_python
from tests.tools.mypyc_lint import DOC, RULES, check_doc, check_source, compiled_modules


def _found(source: str) -> list[str]:
    return [f"{line}: {what}" for line, what in check_source(textwrap.dedent(source))]


# Each sample of a construct the lint must find (its id); the line it is found on ends with
# `# finds: ` and the words it is found by.
MARK = "  # finds: "
FINDS = {
    "async-generator": """
        async def pieces(items):  # finds: async generator pieces()
            for item in items:
                yield item
        """,
    "async-generator-bare-yield": """
        async def pieces(items):  # finds: async generator pieces()
            yield from_nowhere
        """,
    "async-generator-expression": """
        async def copy(source):
            return (piece async for piece in source)  # finds: async generator expression
        """,
    "generic-dataclass": """
        from dataclasses import dataclass
        from typing import Generic, TypeVar

        T = TypeVar("T")

        @dataclass(frozen=True)
        class Box(Generic[T]):  # finds: generic dataclass Box
            value: T
        """,
    "dataclass-of-a-subscripted-base": """
        import dataclasses

        @dataclasses.dataclass
        class Pair(Base[int, str]):  # finds: generic dataclass Pair
            left: int
        """,
    "continue-inside-with": """
        def drain(items, lock):
            for item in items:
                with lock:
                    if not item:
                        continue  # finds: continue inside with
                    use(item)
        """,
    "continue-inside-async-with": """
        async def drain(items, lock):
            while items:
                async with lock:
                    continue  # finds: continue inside with
        """,
    "async-for-in-try-except-baseexception-awaiting-finally": """
        async def send(stream, transport):
            try:  # finds: a finally that awaits
                async for piece in stream:
                    transport.write(piece)
            except BaseException as exc:
                log(exc)
            finally:
                await close(stream)
        """,
    "bare-except-inside-async-for-async-with-in-finally": """
        async def send(streams):
            async for stream in streams:
                try:  # finds: a finally that awaits
                    await stream.open()
                except:
                    pass
                finally:
                    async with stream:
                        pass
        """,
    "async-for-in-a-finally": """
        async def hold(lock, stream):
            try:  # finds: a finally that awaits
                await lock.acquire()
            finally:
                async for _ in stream:
                    pass
        """,
    "an-except-that-awaits": """
        async def serve(router, files, path):
            try:
                return router.match(path)
            except NotFound:  # finds: an except clause that awaits
                return await files.serve(path)
        """,
    "an-except-star-with-async-with": """
        async def serve(lock, job):
            try:
                job()
            except* ValueError:  # finds: an except clause that awaits
                async with lock:
                    pass
        """,
    "runtime-error-subclass": """
        class Refused(RuntimeError):  # finds: class Refused(RuntimeError)
            pass
        """,
    "key-error-subclass": """
        class Missing(KeyError):  # finds: class Missing(KeyError)
            pass
        """,
    "to-thread-awaited-directly": """
        import asyncio

        async def check(fn):
            return await asyncio.to_thread(fn)  # finds: await to_thread(...)
        """,
    "run-in-executor-awaited-directly": """
        async def check(loop, pool, fn):
            return await loop.run_in_executor(pool, fn)  # finds: await run_in_executor(...)
        """,
}


@pytest.mark.parametrize("source", FINDS.values(), ids=FINDS)
def test_the_lint_finds(source: str) -> None:
    lines = textwrap.dedent(source).splitlines()
    (expected,) = [
        f"{number}: {line.split(MARK)[1]}" for number, line in enumerate(lines, 1) if MARK in line
    ]
    found = _found(source)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found


def test_the_lint_passes_what_mypyc_builds_as_python_runs_it() -> None:
    """The same shapes, written the way the compiled modules do."""
    source = """
        import asyncio
        from dataclasses import dataclass

        from fwrest.auth.blocking import settled

        class Denied(Exception):
            pass

        class Refused(ValueError):  # a base mypyc builds on
            pass

        class Stop(BaseException):  # another
            pass

        class RuntimeError(Exception):  # the module's own name: not the built-in
            pass

        class Stricter(RuntimeError):
            pass

        @dataclass(frozen=True)
        class Box:
            value: int

        def pieces(items):  # a plain generator
            yield from items

        async def collect(source):
            return [piece async for piece in source]  # an async comprehension, not a generator

        def drain(items, lock):
            for item in items:
                if not item:
                    continue
                with lock:
                    for inner in item:  # a loop inside the with: its own continue
                        if inner:
                            continue
                        use(inner)
                    def later():
                        for x in item:
                            continue

        async def send(stream, transport):
            failure = None
            try:
                try:
                    async for piece in stream:
                        transport.write(piece)
                except BaseException:
                    raise
            except BaseException as exc:
                failure = exc
            await close(stream)  # after the try, not in a finally
            if failure is not None:
                raise failure
            unrouted = None
            try:
                router.match(stream)
            except LookupError as exc:
                unrouted = exc

                async def later_too():  # a function defined there: not the clause's await
                    await close(stream)
            if unrouted is not None:
                await close(stream)  # after the try, not in its except clause
            try:
                async for piece in stream:
                    transport.write(piece)
            finally:
                close_now(stream)  # nothing awaited

                async def later():  # a function defined there: not the finally's own await
                    await close(stream)

        async def check(fn):
            return await settled(asyncio.to_thread(fn))
    """
    assert _found(source) == []


def test_the_compiled_modules_pass_the_lint() -> None:
    """``make lint``'s run: setup.py's COMPILED, each of them clean."""
    modules = compiled_modules()
    assert ROOT / "src/fwrest/server/http.py" in modules
    done = run_python("-m", "tests.tools.mypyc_lint")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lint_names_the_file_and_line_and_fails(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("async def f():\n    yield 1\n")
    done = run_python("-m", "tests.tools.mypyc_lint", str(sample))
    assert done.returncode == 1
    assert done.stdout.startswith(f"{sample}:1: async generator f()")


_DOC = """## The compiled build

<!-- compiled-modules: begin -->
- `wire.py`
- `server/app.py`
<!-- compiled-modules: end -->

<!-- mypyc-rules: begin -->
- `one`: the first rule, written
  on two lines
- `two`: the second rule
<!-- mypyc-rules: end -->
"""
_COMPILED = ["src/fwrest/wire.py", "src/fwrest/server/app.py"]
_RULES = (("one", "the first rule, written on two lines"), ("two", "the second rule"))


def test_the_code_maps_lists_are_the_codes() -> None:
    """docs/architecture.md's compiled modules and rules, as setup.py and the lint have them."""
    compiled = [str(p.relative_to(ROOT)) for p in compiled_modules()]
    assert check_doc(DOC.read_text(encoding="utf-8"), compiled, RULES) == []
    assert check_doc(_DOC, _COMPILED, _RULES) == []


# Each drift of the code map from the code (its id): what differs from _DOC, _COMPILED and
# _RULES, and the problem check_doc names.
DRIFTS = {
    "module-added-to-setup": (
        {"compiled": [*_COMPILED, "src/fwrest/server/select.py"]},
        "compiled module server/select.py not listed (setup.py COMPILED)",
    ),
    "module-left-out-of-setup": (
        {"compiled": _COMPILED[:1]},
        "server/app.py listed, not in setup.py COMPILED",
    ),
    "rule-added-to-the-lint": (
        {"rules": (*_RULES, ("three", "a new rule"))},
        "rule three not listed",
    ),
    "rule-reworded-in-the-doc": (
        {"doc": _DOC.replace("the second rule", "the second rule, reworded")},
        "rule not the lint's: `two`: the second rule, reworded",
    ),
    "markers-gone": (
        {"doc": _DOC.replace("compiled-modules: end", "compiled modules end")},
        "no <!-- compiled-modules: begin/end --> list",
    ),
}


@pytest.mark.parametrize(("drift", "expected"), DRIFTS.values(), ids=DRIFTS)
def test_a_code_map_that_drifted_is_found(drift: dict[str, Any], expected: str) -> None:
    found = check_doc(**{"doc": _DOC, "compiled": _COMPILED, "rules": _RULES, **drift})
    assert expected in found, found


def test_the_lint_fails_on_the_code_map(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``make lint``'s run checks the doc: a COMPILED without a module the doc lists fails."""
    monkeypatch.setattr(mypyc_lint, "compiled_modules", lambda: [ROOT / "src/fwrest/wire.py"])
    assert mypyc_lint.main([]) == 1
    shown = capsys.readouterr().out
    assert "docs/architecture.md: server/http.py listed, not in setup.py COMPILED" in shown
