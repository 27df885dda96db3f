"""The example service's application hooks (docs/hooks.md), named by [THREAD_POOL]."""

from __future__ import annotations

from fwrest import rest


async def stamp() -> None:
    """``OnSend``: every answer of the pool's routes says which service gave it."""
    rest.setKeyHeaderResponse("X-Served-By", "fwrest-example")
