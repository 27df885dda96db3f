"""A function served through LoadURNs in the configuration, without an annotation."""

from __future__ import annotations


def hello_mapped(name: str) -> str:
    return f"Hello, {name}, from a mapped route"
