"""The live view keeps to its CPU budget: refreshes are spaced out when they cost more, and
come closer again when they cost less; a new run starts at the fastest pace."""

from __future__ import annotations

from memsight.app.pace import FASTEST_MS, MEASURE_EVERY_S, SLOWEST_MS, RefreshPace


class Clocks:
    """A wall clock and a CPU clock the test moves by hand."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def second(self, cpu_share: float) -> None:
        """One measured second passes, in which the app used this share of a core."""
        self.wall += MEASURE_EVERY_S
        self.cpu += MEASURE_EVERY_S * cpu_share


def _pace(clocks: Clocks, budget: float = 0.08) -> RefreshPace:
    return RefreshPace(budget, cpu_clock=lambda: clocks.cpu, wall_clock=lambda: clocks.wall)


def test_refreshes_that_cost_twice_the_budget_come_half_as_often() -> None:
    clocks = Clocks()
    pace = _pace(clocks)
    assert pace.tick() == FASTEST_MS  # nothing measured yet
    clocks.second(0.16)
    assert pace.tick() == 2 * FASTEST_MS
    assert pace.last_share == 0.16


def test_within_the_budget_the_pace_holds() -> None:
    clocks = Clocks()
    pace = _pace(clocks)
    clocks.second(0.16)
    slowed = pace.tick()
    for _ in range(5):
        clocks.second(0.07)  # under the budget, but not far under: no swinging back
        assert pace.tick() == slowed


def test_cheap_refreshes_come_closer_again_but_never_past_30_a_second() -> None:
    clocks = Clocks()
    pace = _pace(clocks)
    clocks.second(0.4)
    slowed = pace.tick()
    clocks.second(0.01)
    assert FASTEST_MS <= pace.tick() < slowed
    for _ in range(30):
        clocks.second(0.01)
        pace.tick()
    assert pace.interval_ms == FASTEST_MS


def test_however_costly_the_latest_samples_show_four_times_a_second() -> None:
    clocks = Clocks()
    pace = _pace(clocks)
    for _ in range(10):
        clocks.second(0.9)
        pace.tick()
    assert pace.interval_ms == SLOWEST_MS


def test_a_new_run_starts_at_the_fastest_pace() -> None:
    clocks = Clocks()
    pace = _pace(clocks)
    clocks.second(0.5)
    pace.tick()
    pace.restart()
    assert pace.interval_ms == FASTEST_MS
    clocks.wall += 0.5  # half a second of the new run: not yet measured
    assert pace.tick() == FASTEST_MS
