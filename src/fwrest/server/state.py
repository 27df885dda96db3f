"""Process-wide run-time state of a worker: the tunables snapshot, swapped whole."""

from __future__ import annotations

from fwrest.config.model import Tunables

__all__ = ["TunablesHolder", "tunables"]


class TunablesHolder:
    """One immutable :class:`Tunables` snapshot; readers never see half a change."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current = Tunables()

    def swap(self, new: Tunables) -> None:
        self.current = new


tunables = TunablesHolder()
