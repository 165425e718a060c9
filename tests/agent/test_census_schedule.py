"""When the agent takes censuses: between iterations of the loop's kind, within its budget."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from profiler.agent import census_schedule
from profiler.agent.census_schedule import (
    BACKWARD_PASSES,
    FORWARD_PASSES,
    OPTIMIZER_STEPS,
    CensusSchedule,
)


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


def taken(agent: Agent) -> list[tuple[str, int]]:
    return [(e["iterations_are"], e["iteration"]) for e in agent.events if e["type"] == "census"]


def test_auto_takes_censuses_at_doubling_iterations_of_the_loops_best_kind() -> None:
    agent = Agent()
    schedule = CensusSchedule(agent, torch, "auto")
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
    schedule = CensusSchedule(every, torch, "every-7")
    for step in range(1, 30):
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    assert taken(every) == [(OPTIMIZER_STEPS, n) for n in (7, 14, 21, 28)]
    never = Agent()
    schedule = CensusSchedule(never, torch, "never")
    for step in range(1, 30):
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    assert never.events == []


def test_over_budget_a_census_waits_for_a_later_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Agent()
    schedule = CensusSchedule(agent, torch, "every-1")
    monkeypatch.setattr(census_schedule, "BUDGET_SHARE", 0.0)
    schedule._spent = 1.0  # as if censuses had already cost a second
    for step in range(1, 10):
        schedule.at_boundary(OPTIMIZER_STEPS, step)
    assert taken(agent) == [] and schedule.skipped == 9
    monkeypatch.setattr(census_schedule, "BUDGET_SHARE", 1e9)
    schedule.at_boundary(OPTIMIZER_STEPS, 10)
    assert taken(agent) == [(OPTIMIZER_STEPS, 10)]
