"""``rest_trace_time``'s figures on the access line (SPEC 5.1: 1 total, 2 per phase)."""

from __future__ import annotations

import pytest

from fwrest.server.app import trace_text

PHASES = "authorization={}us handler={}us serialization={}us total={}us"


@pytest.mark.parametrize(
    ("level", "marks", "expected"),
    [
        (1, (1_000_000, 1_003_000, 1_023_000, 1_028_999), "total=28us"),  # in microseconds
        (2, (1_000_000, 1_003_000, 1_023_000, 1_028_000), PHASES.format(3, 20, 5, 28)),
        # a 404 after authorization: no handler ran, nor any serialization
        (2, (1_000_000, 1_004_000, 0, 1_006_000), PHASES.format(4, 0, 0, 6)),
        # refused before authorization ended: the total only
        (2, (1_000_000, 0, 0, 1_002_000), "total=2us"),
        # phases under 1,024 us are looked up, longer requests formatted: one text either way
        (2, (0, 1_023_999, 1_024_000, 1_024_000), PHASES.format(1023, 0, 0, 1024)),
        (2, (0, 5_000, 2_005_000, 2_006_500), PHASES.format(5, 2000, 1, 2006)),
        (2, (0, 1_000, 1_999, 1_023_999), PHASES.format(1, 0, 1022, 1023)),
    ],
)
def test_the_trace_figures_of_each_level(level: int, marks: tuple[int, ...], expected: str) -> None:
    assert trace_text(level, *marks) == expected
