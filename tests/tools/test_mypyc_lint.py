"""tests/tools/mypyc_lint.py finds each construct in samples, and nothing in code avoiding them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.tools.mypyc_lint import DOC, RULES, check_doc, check_source, compiled_modules


def _found(source: str) -> list[str]:
    return [f"{line}: {what}" for line, what in check_source(textwrap.dedent(source))]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` in the checkout, as ``make lint`` runs it."""
    command = [sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)


# Each sample of a construct the lint must find (its id), the line and words it is found by.
FINDS = {
    "async-generator": (
        "2: async generator pieces()",
        """
        async def pieces(items):
            for item in items:
                yield item
        """,
    ),
    "async-generator-bare-yield": (
        "2: async generator pieces()",
        """
        async def pieces(items):
            yield from_nowhere
        """,
    ),
    "async-generator-expression": (
        "3: async generator expression",
        """
        async def copy(source):
            return (piece async for piece in source)
        """,
    ),
    "generic-dataclass": (
        "8: generic dataclass Box",
        """
        from dataclasses import dataclass
        from typing import Generic, TypeVar

        T = TypeVar("T")

        @dataclass(frozen=True)
        class Box(Generic[T]):
            value: T
        """,
    ),
    "dataclass-of-a-subscripted-base": (
        "5: generic dataclass Pair",
        """
        import dataclasses

        @dataclasses.dataclass
        class Pair(Base[int, str]):
            left: int
        """,
    ),
    "continue-inside-with": (
        "6: continue inside with",
        """
        def drain(items, lock):
            for item in items:
                with lock:
                    if not item:
                        continue
                    use(item)
        """,
    ),
    "continue-inside-async-with": (
        "5: continue inside with",
        """
        async def drain(items, lock):
            while items:
                async with lock:
                    continue
        """,
    ),
    "async-for-in-try-except-baseexception-awaiting-finally": (
        "3: a finally that awaits",
        """
        async def send(stream, transport):
            try:
                async for piece in stream:
                    transport.write(piece)
            except BaseException as exc:
                log(exc)
            finally:
                await close(stream)
        """,
    ),
    "bare-except-inside-async-for-async-with-in-finally": (
        "4: a finally that awaits",
        """
        async def send(streams):
            async for stream in streams:
                try:
                    await stream.open()
                except:
                    pass
                finally:
                    async with stream:
                        pass
        """,
    ),
    "async-for-in-a-finally": (
        "3: a finally that awaits",
        """
        async def hold(lock, stream):
            try:
                await lock.acquire()
            finally:
                async for _ in stream:
                    pass
        """,
    ),
    "an-except-that-awaits": (
        "5: an except clause that awaits",
        """
        async def serve(router, files, path):
            try:
                return router.match(path)
            except NotFound:
                return await files.serve(path)
        """,
    ),
    "an-except-star-with-async-with": (
        "5: an except clause that awaits",
        """
        async def serve(lock, job):
            try:
                job()
            except* ValueError:
                async with lock:
                    pass
        """,
    ),
    "runtime-error-subclass": (
        "2: class Refused(RuntimeError)",
        """
        class Refused(RuntimeError):
            pass
        """,
    ),
    "key-error-subclass": (
        "2: class Missing(KeyError)",
        """
        class Missing(KeyError):
            pass
        """,
    ),
    "to-thread-awaited-directly": (
        "5: await to_thread(...)",
        """
        import asyncio

        async def check(fn):
            return await asyncio.to_thread(fn)
        """,
    ),
    "run-in-executor-awaited-directly": (
        "3: await run_in_executor(...)",
        """
        async def check(loop, pool, fn):
            return await loop.run_in_executor(pool, fn)
        """,
    ),
}


@pytest.mark.parametrize(("expected", "source"), FINDS.values(), ids=FINDS)
def test_the_lint_finds(source: str, expected: str) -> None:
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
    done = _run("-m", "tests.tools.mypyc_lint")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lint_names_the_file_and_line_and_fails(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("async def f():\n    yield 1\n")
    done = _run("-m", "tests.tools.mypyc_lint", str(sample))
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
    assert (
        check_doc(
            DOC.read_text(encoding="utf-8"),
            [str(p.relative_to(ROOT)) for p in compiled_modules()],
            RULES,
        )
        == []
    )
    assert check_doc(_DOC, _COMPILED, _RULES) == []


@pytest.mark.parametrize(
    ("doc", "compiled", "rules", "expected"),
    [
        pytest.param(
            _DOC,
            [*_COMPILED, "src/fwrest/server/select.py"],
            _RULES,
            "compiled module server/select.py not listed (setup.py COMPILED)",
            id="module-added-to-setup",
        ),
        pytest.param(
            _DOC,
            _COMPILED[:1],
            _RULES,
            "server/app.py listed, not in setup.py COMPILED",
            id="module-left-out-of-setup",
        ),
        pytest.param(
            _DOC,
            _COMPILED,
            (*_RULES, ("three", "a new rule")),
            "rule three not listed",
            id="rule-added-to-the-lint",
        ),
        pytest.param(
            _DOC.replace("the second rule", "the second rule, reworded"),
            _COMPILED,
            _RULES,
            "rule not the lint's: `two`: the second rule, reworded",
            id="rule-reworded-in-the-doc",
        ),
        pytest.param(
            _DOC.replace("compiled-modules: end", "compiled modules end"),
            _COMPILED,
            _RULES,
            "no <!-- compiled-modules: begin/end --> list",
            id="markers-gone",
        ),
    ],
)
def test_a_code_map_that_drifted_is_found(
    doc: str, compiled: list[str], rules: tuple[tuple[str, str], ...], expected: str
) -> None:
    found = check_doc(doc, compiled, rules)
    assert expected in found, found


def test_the_lint_fails_on_the_code_map() -> None:
    """``make lint``'s run checks the doc: a COMPILED without a module the doc lists fails."""
    done = _run(
        "-c",
        "import sys; import tests.tools.mypyc_lint as lint; "
        "lint.compiled_modules = lambda: [lint.ROOT / 'src/fwrest/wire.py']; "
        "sys.exit(lint.main([]))",
    )
    assert done.returncode == 1
    assert "docs/architecture.md: server/http.py listed, not in setup.py COMPILED" in done.stdout
