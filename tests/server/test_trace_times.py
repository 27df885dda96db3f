"""``rest_trace_time``'s figures on the access line (SPEC 5.1: 1 total, 2 per phase)."""

from __future__ import annotations

from fwrest.server.app import trace_text


def text(level: int, *marks: int) -> str:
    return trace_text(level, *marks)


def test_level_1_is_the_total_in_microseconds() -> None:
    assert text(1, 1_000_000, 1_003_000, 1_023_000, 1_028_999) == "total=28us"


def test_level_2_splits_authorization_handler_and_serialization() -> None:
    got = text(2, 1_000_000, 1_003_000, 1_023_000, 1_028_000)
    assert got == "authorization=3us handler=20us serialization=5us total=28us"


def test_level_2_without_a_handler_has_zero_handler_and_serialization() -> None:
    # a 404 after authorization: no handler ran
    got = text(2, 1_000_000, 1_004_000, 0, 1_006_000)
    assert got == "authorization=4us handler=0us serialization=0us total=6us"


def test_level_2_refused_before_authorization_ended_has_the_total_only() -> None:
    assert text(2, 1_000_000, 0, 0, 1_002_000) == "total=2us"


def test_times_past_the_lookup_table_are_formatted_the_same_way() -> None:
    # phases under 1,024 us are looked up, longer requests formatted: one text either way
    got = text(2, 0, 1_023_999, 1_024_000, 1_024_000)
    assert got == "authorization=1023us handler=0us serialization=0us total=1024us"
    got = text(2, 0, 5_000, 2_005_000, 2_006_500)
    assert got == "authorization=5us handler=2000us serialization=1us total=2006us"
    assert text(2, 0, 1_000, 1_999, 1_023_999) == (
        "authorization=1us handler=0us serialization=1022us total=1023us"
    )
