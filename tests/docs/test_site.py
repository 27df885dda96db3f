"""The guide builds with MkDocs without a warning, loads nothing from elsewhere, draws its Mermaid
diagrams (docs/decisions.md, "The user guide and the code map")."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.docs.blocks import example
from tests.tools.stale_refs import Tree

# an asset the page loads (not a link the reader follows)
_ASSET = re.compile(r"<(?:script[^>]*\ssrc|link[^>]*\shref|img[^>]*\ssrc)=\"(?P<url>[^\"]+)\"")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_mkdocs_builds_strict(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "authorization" / "index.html").is_file()
    assert (site / "js" / "mermaid" / "mermaid.min.js").is_file()
    assert (site / "js" / "mermaid" / "LICENSE").is_file()


def test_no_page_loads_an_asset_from_elsewhere(site: Path) -> None:
    outside = {
        f"{page.relative_to(site)}: {found['url']}"
        for page in site.rglob("*.html")
        for found in _ASSET.finditer(page.read_text(encoding="utf-8"))
        if re.match(r"(?:[a-z]+:)?//", found["url"])
    }
    assert not outside, sorted(outside)


def test_the_architecture_diagrams_are_drawn_from_the_site_alone(site: Path, browser: Any) -> None:
    page = browser.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        page.goto((site / "architecture" / "index.html").as_uri())
        drawn = page.locator("div.mermaid svg")
        drawn.nth(1).wait_for(timeout=30_000)
        assert drawn.count() == 2
        labels = page.locator("div.mermaid").nth(1).inner_text()
        assert "3 authorize" in labels and "9 finish" in labels, labels
        assert page.locator("code.language-mermaid").count() == 0  # each block replaced
    finally:
        page.close()
    assert requested and all(url.startswith("file://") for url in requested), requested


def test_the_request_diagram_has_the_pipelines_stages_in_order() -> None:
    """docs/architecture.md's request path names PortApp.handle's stages in server/app.py's
    docstring order (read from source: compiled modules have no ``__doc__``)."""
    doc = ast.get_docstring(ast.parse((ROOT / "src/fwrest/server/app.py").read_text()))
    assert doc is not None
    stages = re.findall(r"^(\d)\. \*\*(\w+)\*\*", doc, re.M)
    assert [int(n) for n, _ in stages] == list(range(1, 10))
    drawn = re.findall(r'"(\d) (\w+)', example("architecture-request").text)
    assert drawn == stages


def test_the_diagrams_name_only_modules_that_exist() -> None:
    layers, request = example("architecture-layers").text, example("architecture-request").text
    assert re.findall(r'"(\d) ', layers) == [str(n) for n in range(1, 7)]  # the six layers
    named = re.findall(r"[\w/]+/\w+\.py", layers + request)
    assert "server/http.py" in named
    tree = Tree()
    assert [name for name in named if not tree.path(name)] == []


def test_no_table_is_cut_by_a_blank_line() -> None:
    """A blank line between two rows ends a Markdown table: the rows after it are paragraphs
    of pipes (docs/index.md's command table lost its last rows so)."""
    cut = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = page.read_text().splitlines()
        fenced = False
        for number, line in enumerate(lines):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced or number < 2 or line.strip():
                continue
            before = lines[number - 1].strip()
            after = lines[number + 1].strip() if number + 1 < len(lines) else ""
            if (
                before.startswith("|")
                and after.startswith("|")
                and not _is_table_start(lines, number + 1)
            ):
                cut.append(f"{page.relative_to(ROOT)}:{number + 1}")
    assert cut == []


def _is_table_start(lines: list[str], at: int) -> bool:
    """Whether the row at ``at`` begins a table of its own (its delimiter row follows)."""
    return (
        at + 1 < len(lines) and re.fullmatch(r"\|?[\s:|-]+\|?", lines[at + 1].strip()) is not None
    )
