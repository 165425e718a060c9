"""Counting in the diagnosis' signals, done without np.unique's hashing where the millions of
rows of a day-long run make it slow: the same answers as np.unique."""

from __future__ import annotations

import numpy as np
import pytest

from memsight.profiler.diagnosis.signals import IterationLevels, distinct
from memsight.profiler.protocol import OPTIMIZER_STEPS


def _levels(group: int) -> IterationLevels:
    index = np.arange(1, 101)
    return IterationLevels(
        "ram", None, index.astype(float), index, index.astype(float), OPTIMIZER_STEPS, 100, group
    )


@pytest.mark.parametrize("group", [1, 3, 7])
def test_readings_count_the_distinct_groups_in_order_or_not(group: int) -> None:
    levels = _levels(group)
    rng = np.random.default_rng(group)
    picks = [
        np.arange(1, 101),
        np.arange(40, 61),
        np.array([5]),
        np.array([], dtype=np.int64),
        np.sort(rng.choice(np.arange(1, 101), 30, replace=False)),
        rng.permutation(np.arange(1, 101))[:30],
    ]
    for index in picks:
        assert levels.readings(index) == len(np.unique((index - 1) // group))


@pytest.mark.parametrize("size", [0, 1, 2, 10, 5000])
def test_distinct_is_np_unique(size: int) -> None:
    rng = np.random.default_rng(size)
    for values in (
        rng.integers(-50, 50, size),
        rng.integers(-(2**62), 2**62, size),
        np.arange(size)[::-1],
        np.zeros(size, dtype=np.int64),
    ):
        assert np.array_equal(distinct(values), np.unique(values))
