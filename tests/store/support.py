"""Steps of a store test that must fit in one short window (a failure count, a rate): make
test's parallel part runs at nice 10 beside the serial one and can be descheduled for seconds,
past such a window, which says nothing of the store. :func:`in_one_window` tells such an
attempt (:class:`Starved`) from a failure, and :func:`unstarved` runs the steps again, with
state of their own, after one: the assertions stay those of an attempt that ran in time."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

TRIES = 3


class Starved(Exception):
    """Steps that must fit in one window were spread past it (the process descheduled)."""


@contextlib.contextmanager
def in_one_window(window_s: float) -> Iterator[None]:
    """Steps that count in one window of ``window_s``, which begins after this does: an
    assertion that fails once more than the window has passed is :class:`Starved`; within
    the window it fails the test."""
    began = time.monotonic()
    try:
        yield
    except AssertionError as exc:
        took = time.monotonic() - began
        if took >= window_s:
            raise Starved(f"{took:.3f} s for steps of one {window_s} s window: {exc}") from exc
        raise


def unstarved(attempt: Callable[[int], None], tries: int = TRIES) -> None:
    """``attempt(n)`` for n = 0, 1, ... until one is not :class:`Starved` (each attempt uses
    state of its own: keys, a store, named after ``n``); an AssertionError after ``tries``."""
    for n in range(tries):
        try:
            attempt(n)
            return
        except Starved as exc:
            print(f"attempt {n + 1} starved: {exc}")
    raise AssertionError(f"every one of {tries} attempts outlasted its window")
