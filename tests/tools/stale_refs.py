"""Module names in fwrest's docstrings, comments and code map that no longer exist. ``python -m
tests.tools.stale_refs`` (``make lint``; test_stale_refs.py) reads ``src/fwrest``'s ``.py`` files
and ``docs/architecture.md``: a dotted ``fwrest.x.y`` must have a longest module prefix in ``src/``
and a rest starting with a name its source holds (a function, class, lazy name of
``fwrest/__init__.py``), or be a name the code spells as a string (``fwrest.access``); a path
``x/y.py`` must be a file of the checkout or ``src/``, end a path under ``src/fwrest``
(``grants/base.py``), or be in :data:`EXAMPLES`. Findings print as ``path:line: what``, exit 1 if
any."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.tools import ROOT, report

SRC = ROOT / "src"
PACKAGE = SRC / "fwrest"
DOCS = (ROOT / "docs" / "architecture.md",)

# paths that name an application's files in an example, not fwrest's
EXAMPLES = frozenset({"app/users.py"})

_DOTTED = re.compile(r"(?<![\w.])fwrest(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"(?<![\w/.-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.py)\b")


class Tree:
    """What a reference can resolve to: modules, the checkout's files, ``fwrest.*`` string names."""

    def __init__(self, src: Path = SRC, root: Path = ROOT) -> None:
        self.root = root
        self.modules: dict[str, Path] = {}
        for path in src.rglob("*.py"):
            name = ".".join(path.relative_to(src).with_suffix("").parts)
            self.modules[name.removesuffix(".__init__")] = path
        self.files = {str(p.relative_to(src / "fwrest")) for p in (src / "fwrest").rglob("*.py")}
        self._sources: dict[Path, str] = {}
        self.spelled = {
            node.value
            for path in self.modules.values()
            for node in ast.walk(ast.parse(self.source(path)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            if _DOTTED.fullmatch(node.value)
        }

    def source(self, path: Path) -> str:
        if path not in self._sources:
            self._sources[path] = path.read_text(encoding="utf-8")
        return self._sources[path]

    def dotted(self, name: str) -> bool:
        """Whether ``fwrest.x.y`` names a module, a name in one, or a spelled name."""
        if name in self.spelled or name in self.modules:
            return True
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = self.modules.get(".".join(parts[:cut]))
            if module is not None:
                return re.search(rf"\b{re.escape(parts[cut])}\b", self.source(module)) is not None
        return False

    def path(self, rel: str) -> bool:
        """Whether ``x/y.py`` names a file of the checkout or of the package."""
        if rel in EXAMPLES or (self.root / rel).is_file() or (self.root / "src" / rel).is_file():
            return True
        return any(f == rel or f.endswith("/" + rel) for f in self.files)


def references(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line, reference, dotted) for each module reference in ``text``."""
    for number, line in enumerate(text.splitlines(), 1):
        for found in _DOTTED.finditer(line):
            yield number, found.group(0), True
        for found in _PATH.finditer(line):
            yield number, found.group(1), False


def check_text(text: str, tree: Tree) -> list[tuple[int, str]]:
    """The references of ``text`` that resolve to nothing: (line, what)."""
    return [
        (number, f"{ref}: no such {'module or name' if dotted else 'file'}")
        for number, ref, dotted in references(text)
        if not (tree.dotted(ref) if dotted else tree.path(ref))
    ]


def main(argv: list[str]) -> int:
    tree = Tree()
    failed = False
    for path in [Path(a) for a in argv] or [*sorted(PACKAGE.rglob("*.py")), *DOCS]:
        failed |= report(path, check_text(path.read_text(encoding="utf-8"), tree))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
