"""When the agent takes censuses: between iterations of the loop's kind, within its budget."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch

from memsight.profiler.agent import census_schedule
from memsight.profiler.agent.census_schedule import CensusSchedule
from memsight.profiler.agent.port import AgentPort
from memsight.profiler.protocol import BACKWARD_PASSES, FORWARD_PASSES, OPTIMIZER_STEPS


class Agent:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []

    def event(self, type_: str, **data: Any) -> None:
        self.events.append({"type": type_, **data})

    def error(self, where: str, exc: BaseException) -> None:
        self.errors.append(f"{where}: {exc}")


@pytest.fixture(autouse=True)
def unlimited_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(census_schedule, "BUDGET_SHARE", 1e9)
    # Each census of this process' heap (pytest's, torch's) is taken whole, in one pause: on
    # a busy machine it can take longer than one pause allows, and would then be sent, in
    # slices, at a later iteration than the one these tests are about.
    monkeypatch.setattr(census_schedule, "MAX_PAUSE_S", 60.0)


def on_a_clock(
    monkeypatch: pytest.MonkeyPatch, start: float, mode: str = "auto"
) -> tuple[list[float], Agent, CensusSchedule]:
    """A schedule whose clock reads now[0], started (as its agent) at `start`."""
    now = [start]
    monkeypatch.setattr("memsight.profiler.agent.census_schedule.time.monotonic", lambda: now[0])
    agent = Agent()
    agent.started = start  # type: ignore[attr-defined]
    return now, agent, CensusSchedule(cast(AgentPort, agent), torch, mode)


def taken(agent: Agent) -> list[tuple[str, int]]:
    return [(e["iterations_are"], e["iteration"]) for e in agent.events if e["type"] == "census"]


def test_auto_takes_censuses_at_doubling_iterations_of_the_loops_best_kind() -> None:
    agent = Agent()
    schedule = CensusSchedule(cast(AgentPort, agent), torch, "auto")
    kept = [torch.ones(1000) for _ in range(3)]  # something for the census to find
    for step in range(1, 101):
        schedule.at_boundary(FORWARD_PASSES, step)  # a forward and a backward per step
        schedule.at_boundary(BACKWARD_PASSES, step)
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    # Before the first step the forwards counted; once steps exist, only they do.
    assert taken(agent) == [(OPTIMIZER_STEPS, n) for n in (5, 10, 20, 40, 80)]
    census = agent.events[0]["census"]
    assert any(h["name"] == "kept" for h in census["holders"]) and not agent.errors
    assert len(kept) == 3


def test_every_n_and_never() -> None:
    every = Agent()
    schedule = CensusSchedule(cast(AgentPort, every), torch, "every-7")
    for step in range(1, 30):
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    assert taken(every) == [(OPTIMIZER_STEPS, n) for n in (7, 14, 21, 28)]
    never = Agent()
    schedule = CensusSchedule(cast(AgentPort, never), torch, "never")
    for step in range(1, 30):
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    assert never.events == []


def test_over_budget_a_census_waits_for_a_later_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Agent()
    schedule = CensusSchedule(cast(AgentPort, agent), torch, "every-1")
    monkeypatch.setattr(census_schedule, "BUDGET_SHARE", 0.0)
    schedule._spent = 1.0  # as if censuses had already cost a second
    # The first two censuses start whatever they cost: one alone compares with nothing.
    for step in range(1, 10):
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    assert taken(agent) == [(OPTIMIZER_STEPS, 1), (OPTIMIZER_STEPS, 2)]
    assert schedule.skipped == 7
    monkeypatch.setattr(census_schedule, "BUDGET_SHARE", 1e9)
    schedule.at_boundary(OPTIMIZER_STEPS, 10)
    assert taken(agent)[-1] == (OPTIMIZER_STEPS, 10)


def test_a_program_without_iterations_gets_censuses_on_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now, agent, schedule = on_a_clock(monkeypatch, 1000.0)  # torch imported at 1000 s
    seen = []
    for second in range(0, 40):
        now[0] = 1000.0 + second
        schedule.on_clock()
        seen.append(len(taken(agent)))
    # 2 s after torch's import, then at doubling times: 4, 8, 16, 32.
    assert [s for s in range(40) if seen[s] > (seen[s - 1] if s else 0)] == [2, 4, 8, 16, 32]
    assert all(e["iterations_are"] == "time" for e in agent.events if e["type"] == "census")
    # Once iterations are seen, the clock takes no more.
    schedule.at_boundary(OPTIMIZER_STEPS, 1)
    before = len(taken(agent))
    now[0] = 1100.0
    schedule.on_clock()
    assert len(taken(agent)) == before


def test_every_n_on_the_clock_is_every_n_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    now, agent, schedule = on_a_clock(monkeypatch, 0.0, "every-3")
    for tenth in range(0, 120):
        now[0] = tenth / 10
        schedule.on_clock()
    assert [e["iteration"] for e in agent.events if e["type"] == "census"] == [1, 2, 3, 4]


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_a_census_is_charged_its_cpu_time_not_its_pause_on_a_busy_machine() -> None:
    # Another thread of the script keeps the interpreter busy: the census' pause is longer by
    # the time that thread ran, its own work is not. The budget counts the work, so a busy
    # machine does not hold back the next census (or a census' next slice) for longer.
    import threading

    agent = Agent()
    schedule = CensusSchedule(cast(AgentPort, agent), torch, "every-1")
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            pass

    # A census of some tens of milliseconds. Made before the other thread starts: each
    # torch.ones releases the GIL and would wait out that thread's switch interval.
    kept = [torch.ones(10) for _ in range(20_000)]
    thread = threading.Thread(target=busy)
    thread.start()
    try:
        schedule.at_boundary(OPTIMIZER_STEPS, 1)
    finally:
        stop.set()
        thread.join()
    [event] = [e for e in agent.events if e["type"] == "census"]
    cost = event["census"]["cost"]
    assert schedule._spent == pytest.approx(cost["cpu_us"] / 1e6, abs=1e-6)
    assert cost["wall_us"] > cost["cpu_us"]  # the other thread ran during the pause
    assert len(kept) == 20_000


def test_censuses_on_the_clock_leave_the_loop_its_first_two(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen on a busy machine: a script slow to reach its loop got its two censuses on the
    # clock, which spent the budget, and its loop none, so no holder of the leak was named.
    # Censuses are compared within their kind: the loop's first two start whatever the
    # budget says.
    now, agent, schedule = on_a_clock(monkeypatch, 1000.0)
    for second in (2, 4):
        now[0] = 1000.0 + second
        schedule.on_clock()
    assert [kind for kind, _ in taken(agent)] == ["time", "time"]
    monkeypatch.setattr(census_schedule, "BUDGET_SHARE", 0.0)
    schedule._spent = 10.0  # as if they had cost far more than any budget
    for step in range(1, 30):
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    assert taken(agent)[2:] == [(OPTIMIZER_STEPS, 5), (OPTIMIZER_STEPS, 10)]


def test_the_loops_censuses_are_not_charged_for_those_on_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen on a busy machine: a census on the clock while the script was still building
    # (140 ms) spent a short loop's budget, the loop got its free first two (steps 5 and 10)
    # and no later one, both before the leak's climb, and the holder went unnamed.
    now, agent, schedule = on_a_clock(monkeypatch, 1000.0)
    now[0] = 1002.0
    schedule.on_clock()
    assert [kind for kind, _ in taken(agent)] == ["time"]
    monkeypatch.setattr(census_schedule, "BUDGET_SHARE", 0.0)
    monkeypatch.setattr(census_schedule, "BUDGET_FLOOR_S", 1000.0)  # any census fits it...
    schedule._spent += 5000.0  # ...but not what the census on the clock cost
    schedule._spent_on_clock += 5000.0
    for step in range(1, 50):
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    assert taken(agent)[1:] == [(OPTIMIZER_STEPS, n) for n in (5, 10, 20, 40)]
