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


def test_every_method_of_the_rest_object_is_on_the_endpoints_page() -> None:
    """Each of the original's REST object names has its line in docs/endpoints.md's table."""
    from fwrest.context.rest import RestObject

    text = (DOC.parent / "endpoints.md").read_text()
    table = text.split("## The REST object", 1)[1].split("\n## ", 1)[0]
    names = [
        name
        for name in vars(RestObject)
        if name[:1].islower() and any(c.isupper() for c in name) and not name.startswith("ws")
    ]
    assert len(names) >= 37
    missing = [name for name in names if f"`{name}(" not in table]
    assert not missing, f"not on the endpoints page: {missing}"
