"""How often a live run is redrawn: as often as 30 times a second, as long as the app's CPU
time stays within its budget.

The app shares the machine with the script it watches, on a laptop or a 2-core VM as often as
on a workstation, so it takes a fixed share of one core rather than a fixed frame rate. A frame
costs what the window's size, the number of curves and the software renderer make it cost;
the pace measures the whole process' CPU time (the GUI thread's redraws, the frame reader,
live diagnosis) over each second and spaces the refreshes out when it is over budget, closer
again when it is well under. Panning and zooming are painted when they happen, whatever the
pace: only the timer's redraws of new samples wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable

CPU_BUDGET = 0.08  # of one core: the app's whole share while it watches a run
FASTEST_MS = 33  # ≤ 30 Hz: no eye follows a memory curve faster
SLOWEST_MS = 250  # 4 Hz: the latest samples never wait longer than this to show
MEASURE_EVERY_S = 1.0  # CPU time is compared with the budget over this much wall time
EASE_BELOW = 0.6  # under this fraction of the budget, refreshes come closer again
EASE_FACTOR = 0.8  # ... by this much a second, so the pace never swings back and forth


class RefreshPace:
    """The live refresh interval, kept so the process' CPU time stays within `budget`.

    `tick()` is called once per refresh; it returns the interval to wait before the next one.
    The clocks are parameters so that tests can give the costs they want to see handled.
    """

    def __init__(
        self,
        budget: float = CPU_BUDGET,
        cpu_clock: Callable[[], float] = time.process_time,
        wall_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self.interval_ms = FASTEST_MS
        self._cpu_clock = cpu_clock
        self._wall_clock = wall_clock
        self._cpu_since = cpu_clock()
        self._wall_since = wall_clock()
        self.last_share = 0.0  # CPU share of one core over the last measured second

    def restart(self) -> None:
        """A new run: the fastest pace, measured afresh."""
        self.interval_ms = FASTEST_MS
        self._cpu_since = self._cpu_clock()
        self._wall_since = self._wall_clock()

    def tick(self) -> int:
        wall = self._wall_clock()
        elapsed = wall - self._wall_since
        if elapsed < MEASURE_EVERY_S:
            return self.interval_ms
        cpu = self._cpu_clock()
        share = (cpu - self._cpu_since) / elapsed
        self.last_share = share
        self._cpu_since, self._wall_since = cpu, wall
        if share > self.budget:
            # The cost of redrawing goes with the number of redraws: space them out in
            # proportion, at once, rather than creep up on the budget second by second.
            wanted = self.interval_ms * share / self.budget
            self.interval_ms = int(min(SLOWEST_MS, max(wanted, self.interval_ms + 1)))
        elif share < self.budget * EASE_BELOW:
            self.interval_ms = int(max(FASTEST_MS, self.interval_ms * EASE_FACTOR))
        return self.interval_ms
