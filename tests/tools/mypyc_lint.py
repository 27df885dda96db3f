"""What mypyc cannot build, or builds differently, in setup.py's ``COMPILED`` modules: ``python -m
tests.tools.mypyc_lint`` (``make lint``) finds in each syntax tree the constructs :data:`RULES`
lists, each with its reason (docs/decisions.md, "The compiled build"), and :func:`check_doc` checks
that docs/architecture.md lists the same rules and modules. Findings print as ``path:line: what``,
exit 1 if any; ``python -m tests.tools.mypyc_lint FILE...`` checks those files instead (not the
doc)."""

from __future__ import annotations

import ast
import builtins
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# built-in exceptions a compiled class may derive from (mypyc's can_subclass_builtin and its
# BaseException case); from others mypyc refuses the module, shipped then as Python
_MYPYC_BASES = frozenset(
    ("BaseException", "Exception", "LookupError", "IndexError", "ValueError")
) | {"Warning", "UserWarning"}
_BUILTIN_ERRORS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException) and name not in _MYPYC_BASES
)
_THREAD_AWAITS = frozenset(("run_in_executor", "to_thread", "wrap_future"))

DOC = ROOT / "docs" / "architecture.md"
# (id, the rule as docs/architecture.md states it): the doc's list is checked against this
RULES: tuple[tuple[str, str], ...] = (
    (
        "async-generator",
        "no async generator (an `async def` that yields, an async generator "
        "expression): mypyc cannot build one; `server/streams.py` keeps the pipeline's stream "
        "wrappers",
    ),
    (
        "generic-dataclass",
        "no generic dataclass (`Generic[...]`, a subscripted base, type "
        "parameters): mypyc cannot build one; `routing/router.py`'s records are plain classes",
    ),
    ("continue-in-with", "no `continue` inside `with` inside its loop: mypyc builds it wrongly"),
    (
        "finally-awaits",
        "no `finally` that awaits: compiled, an exception leaving it stays the "
        "thread's current exception, which the next such `finally` raises again (await after the "
        "`try`: `server/http.py`'s stream writer closes the stream after its `try`)",
    ),
    (
        "except-awaits",
        "no `except` clause that awaits: compiled, a coroutine suspended in it "
        "leaves its exception the loop thread's current one, which becomes the `__context__` "
        "of later raises elsewhere (keep the exception, await after the `try`: `server/app.py`'s "
        "static files after an unrouted path)",
    ),
    (
        "builtin-exception-base",
        "no class derived from a built-in exception mypyc cannot derive "
        "from: all but `Exception`, `ValueError`, `LookupError`, `IndexError`, `BaseException`, "
        "`Warning`, `UserWarning`",
    ),
    (
        "thread-await",
        "a thread's result is awaited through `auth/blocking.py`'s `settled`, "
        "never `run_in_executor`, `to_thread` or `wrap_future`: a compiled coroutine drops the "
        "traceback of an exception thrown into it, which `rest_error_full=1` logs",
    ),
)
_MODULES_MARK = "compiled-modules"
_RULES_MARK = "mypyc-rules"
_Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef


def compiled_modules(setup: Path = ROOT / "setup.py") -> list[Path]:
    """setup.py's ``COMPILED``, as paths (read from its source: importing it runs the build)."""
    tree = ast.parse(setup.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets
        ):
            return [setup.parent / p for p in ast.literal_eval(node.value)]
    raise SystemExit(f"{setup}: no COMPILED list")


def _own_nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``body``, not descending into nested functions, lambdas or classes."""
    todo: list[ast.AST] = [node for node in body if not isinstance(node, _Scope)]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _Scope))


def _is_dataclass(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Name):
        return target.id == "dataclass"
    return isinstance(target, ast.Attribute) and target.attr == "dataclass"


def _awaits(body: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Await | ast.AsyncFor | ast.AsyncWith) for n in _own_nodes(body))


class _Checker(ast.NodeVisitor):
    def __init__(self, shadowed: frozenset[str]) -> None:
        self.found: list[tuple[int, str]] = []
        self._shadowed = shadowed
        self._withs = 0  # `with` blocks entered since the innermost loop

    def _report(self, node: ast.stmt | ast.expr | ast.excepthandler, what: str) -> None:
        self.found.append((node.lineno, what))

    def _scope(self, node: _Scope) -> None:
        saved = self._withs
        self._withs = 0
        self.generic_visit(node)
        self._withs = saved

    visit_FunctionDef = visit_Lambda = _scope  # noqa: N815 (ast.NodeVisitor's names)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        if any(isinstance(n, ast.Yield | ast.YieldFrom) for n in _own_nodes(node.body)):
            self._report(node, f"async generator {node.name}(): mypyc cannot build it")
        self._scope(node)

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        if any(comp.is_async for comp in node.generators):
            self._report(node, "async generator expression: mypyc cannot build it")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if any(_is_dataclass(d) for d in node.decorator_list) and (
            getattr(node, "type_params", None)
            or any(isinstance(base, ast.Subscript) for base in node.bases)
        ):
            self._report(node, f"generic dataclass {node.name}: mypyc cannot build it")
        for base in node.bases:
            if (
                isinstance(base, ast.Name)
                and base.id in _BUILTIN_ERRORS
                and base.id not in self._shadowed
            ):
                self._report(
                    node,
                    f"class {node.name}({base.id}): mypyc cannot derive a compiled class from "
                    f"{base.id} (derive from Exception or ValueError)",
                )
        self._scope(node)

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        saved = self._withs
        self._withs = 0
        for child in node.body:
            self.visit(child)
        self._withs = saved
        for child in [node.target] if isinstance(node, ast.For | ast.AsyncFor) else []:
            self.visit(child)
        self.visit(node.iter if isinstance(node, ast.For | ast.AsyncFor) else node.test)
        for child in node.orelse:  # the else: not the loop's body (a continue there is outer)
            self.visit(child)

    visit_For = visit_AsyncFor = visit_While = _loop  # noqa: N815 (ast.NodeVisitor's names)

    def _with(self, node: ast.With | ast.AsyncWith) -> None:
        self._withs += 1
        self.generic_visit(node)
        self._withs -= 1

    visit_With = visit_AsyncWith = _with  # noqa: N815 (ast.NodeVisitor's names)

    def visit_Continue(self, node: ast.Continue) -> None:
        if self._withs:
            self._report(node, "continue inside with: mypyc builds it wrongly")

    def _try(self, node: ast.Try | ast.TryStar) -> None:
        if node.finalbody and _awaits(node.finalbody):
            self._report(
                node,
                "a finally that awaits: compiled, an exception leaving it stays the thread's "
                "current exception, which the next such finally raises again (await after "
                "the try instead)",
            )
        for handler in node.handlers:
            if _awaits(handler.body):
                self._report(
                    handler,
                    "an except clause that awaits: compiled, its exception stays the loop "
                    "thread's current one while the coroutine waits (keep it, await after "
                    "the try instead)",
                )
        self.generic_visit(node)

    visit_Try = visit_TryStar = _try  # noqa: N815 (ast.NodeVisitor's names)

    def visit_Await(self, node: ast.Await) -> None:
        call = node.value
        if isinstance(call, ast.Call):
            func = call.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _THREAD_AWAITS:
                self._report(
                    node,
                    f"await {name}(...): a thread's future is awaited through "
                    "fwrest.auth.blocking.settled (a compiled coroutine loses the traceback)",
                )
        self.generic_visit(node)


def _shadowed(tree: ast.Module) -> frozenset[str]:
    """Names of built-in exceptions the module binds itself (imported, or its own class)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
    return frozenset(names & _BUILTIN_ERRORS)


def check_source(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """The findings in ``source``: (line, what), in the order of the lines."""
    tree = ast.parse(source, filename)
    checker = _Checker(_shadowed(tree))
    checker.visit(tree)
    return sorted(checker.found)


def _marked(doc: str, mark: str) -> list[str] | None:
    """The list items between ``<!-- MARK: begin -->`` and ``<!-- MARK: end -->``."""
    found = re.search(rf"<!-- {mark}: begin -->\n(.*?)<!-- {mark}: end -->", doc, re.DOTALL)
    if found is None:
        return None
    items: list[str] = []
    for line in found.group(1).splitlines():
        if line.startswith("- "):
            items.append(line[2:])
        elif line.startswith("  ") and items:
            items[-1] += " " + line.strip()  # an item's continuation line
    return items


def check_doc(doc: str, compiled: list[str], rules: tuple[tuple[str, str], ...]) -> list[str]:
    """Where docs/architecture.md's lists differ from the code: ``compiled`` as setup.py lists it,
    the doc's as ``x.py``; rules as ``- `id`: text``."""
    problems: list[str] = []
    modules = _marked(doc, _MODULES_MARK)
    if modules is None:
        problems.append(f"no <!-- {_MODULES_MARK}: begin/end --> list")
    else:
        listed = [m.strip("`") for m in modules]
        wanted = [m.removeprefix("src/fwrest/") for m in compiled]
        problems += [
            f"compiled module {m} not listed (setup.py COMPILED)" for m in wanted if m not in listed
        ]
        problems += [f"{m} listed, not in setup.py COMPILED" for m in listed if m not in wanted]
    stated = _marked(doc, _RULES_MARK)
    if stated is None:
        problems.append(f"no <!-- {_RULES_MARK}: begin/end --> list")
    else:
        own = {f"`{rule}`: {text}" for rule, text in rules}
        problems += [f"rule not the lint's: {item}" for item in stated if item not in own]
        problems += [
            f"rule {rule} not listed" for rule, text in rules if f"`{rule}`: {text}" not in stated
        ]
    return problems


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or compiled_modules()
    failed = False
    if not argv:
        compiled = [str(p.relative_to(ROOT)) for p in paths]
        for problem in check_doc(DOC.read_text(encoding="utf-8"), compiled, RULES):
            print(f"{DOC.relative_to(ROOT)}: {problem}")
            failed = True
    for path in paths:
        for line, what in check_source(path.read_text(encoding="utf-8"), str(path)):
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            print(f"{shown}:{line}: {what}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
