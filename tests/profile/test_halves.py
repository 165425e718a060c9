"""in_halves: the whole range once, in one call below the minimum or two halves from it."""

from __future__ import annotations

import threading

import pytest

from memsight.profiler.profile.halves import in_halves


@pytest.mark.parametrize(
    ("count", "minimum", "calls"),
    [(0, 4, [(0, 0)]), (3, 4, [(0, 3)]), (4, 4, [(0, 2), (2, 4)]), (9, 4, [(0, 4), (4, 9)])],
)
def test_the_range_is_covered_once(count: int, minimum: int, calls: list[tuple[int, int]]) -> None:
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def work(start: int, stop: int) -> None:
        with lock:
            seen.append((start, stop))

    in_halves(count, work, minimum)
    assert sorted(seen) == calls


def test_an_error_in_a_half_is_raised_to_the_caller() -> None:
    def work(start: int, stop: int) -> None:
        if start:
            raise ValueError("second half")

    with pytest.raises(ValueError, match="second half"):
        in_halves(10, work, 2)
