"""The configuration reference in docs/ is generated from the loader's key table."""

from __future__ import annotations

from pathlib import Path

from fwrest.config.reference import render
from fwrest.config.schema import KEYS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_reference_matches_the_key_table() -> None:
    assert DOC.read_text() == render(), (
        "docs/configuration.md is stale: run `python -m fwrest.config.reference > "
        "docs/configuration.md`"
    )


def test_every_key_is_documented() -> None:
    text = DOC.read_text()
    for key in KEYS:
        assert f"`{key.name}`" in text
        assert key.doc, f"{key.section} {key.name} has no description"
