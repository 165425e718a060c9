"""Numpy work over a long range, in two halves on two threads.

numpy lets go of the GIL in its loops, so a pass over a day-long run's columns (8.6 million
values) takes about half as long split between two cores. One pool of two threads serves
every caller, made at the first long range.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_POOL: list[ThreadPoolExecutor] = []


def in_halves(count: int, work: Callable[[int, int], None], minimum: int) -> None:
    """work(0, count); when count is `minimum` or more, work(0, half) and work(half, count)
    on two threads instead, returning once both are done (raising what either raised).

    Never call it from work running in this pool: both threads may be waiting then."""
    if count < minimum:
        work(0, count)
        return
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(2, thread_name_prefix="memsight-halves"))
    half = count // 2
    for _ in _POOL[0].map(work, (0, half), (half, count)):
        pass
