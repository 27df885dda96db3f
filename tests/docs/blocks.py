"""The user guide's fenced blocks (README.md, docs/*.md) and their markers, an HTML comment on the
line before the fence (blank lines allowed): ``<!-- example: ID -->`` (a test runs it) or ``<!--
output: ID -->`` (a test compares real output with it), both found by :func:`example`. IDs are
unique; tests/docs/test_examples.py fails on an unmarked block and an ID no test asks for.
docs/configuration.md is generated (tests/docs/test_reference.py)."""

from __future__ import annotations

import ast
import configparser
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = {"docs/configuration.md"}
KINDS = ("example", "output")

_FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)[^\n]*$")
_MARKER = re.compile(r"^<!--\s*(?P<kind>[a-z]+)\s*:\s*(?P<id>[\w.-]+)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its marker."""

    page: str  # path relative to the repository, e.g. "docs/deploy.md"
    line: int  # 1-based line of the opening fence
    lang: str  # "" for a plain block
    text: str  # the lines between the fences, each ending with "\n"
    kind: str  # "example", "output", or "" when the block has no marker
    id: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def guide_pages() -> list[Path]:
    """README.md and every page of docs/, without the generated reference."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [p for p in pages if p.relative_to(ROOT).as_posix() not in GENERATED]


def page_blocks(page: Path) -> list[Block]:
    """The fenced blocks of one Markdown page, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    name = page.relative_to(ROOT).as_posix()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence = opened["fence"]
        end = i + 1
        while end < len(lines) and not lines[end].startswith(fence):
            end += 1
        assert end < len(lines), f"{name}:{i + 1}: a fence that is never closed"
        before = i - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = _MARKER.match(lines[before].strip()) if before >= 0 else None
        body = "".join(line + "\n" for line in lines[i + 1 : end])
        out.append(
            Block(
                page=name,
                line=i + 1,
                lang=opened["lang"],
                text=body,
                kind=marker["kind"] if marker else "",
                id=marker["id"] if marker else "",
            )
        )
        i = end + 1
    return out


@cache
def all_blocks() -> tuple[Block, ...]:
    return tuple(block for page in guide_pages() for block in page_blocks(page))


def example(block_id: str) -> Block:
    """The block whose marker names ``block_id`` (``<!-- example: ID -->`` or output)."""
    found = [b for b in all_blocks() if b.id == block_id]
    assert len(found) == 1, f"expected one block marked {block_id!r} in the guide, found {found}"
    return found[0]


def ini_example(
    block_id: str, *, inline_comments: bool = False, replacements: dict[str, str] | None = None
) -> dict[str, dict[str, str]]:
    """The sections of INI block ``block_id``, keys as written (``inline_comments``: ``; ...`` after
    a value is a comment), ``replacements`` in place (:func:`substitute`)."""
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",) if inline_comments else None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(substitute(example(block_id), replacements or {}))
    return {name: dict(parser[name]) for name in parser.sections()}


def substitute(block: Block, replacements: dict[str, str], text: str | None = None) -> str:
    """The block's text (or ``text``) with the test's values for placeholders, each found once."""
    text = block.text if text is None else text
    for placeholder, value in replacements.items():
        assert text.count(placeholder) == 1, (
            f"{block.where} ({block.id}): {placeholder!r} not found exactly once"
        )
        text = text.replace(placeholder, value)
    return text


def ids_asked_for(tests: Path = ROOT / "tests") -> dict[str, list[str]]:
    """ID -> the modules asking for it with ``example("ID")`` or ``ini_example("ID")``."""
    asked: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("example", "ini_example")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                asked.setdefault(node.args[0].value, []).append(path.relative_to(ROOT).as_posix())
    return asked
