"""Instrumentation hooks, in-process with real (CPU) torch and an agent that collects events.

CUDA branches run against a fake of the few torch.cuda / torch._C calls they make.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch
import torch.nn.modules.module as module_mod
from torch import nn

from memsight.profiler.agent import discovery, modes, spans
from memsight.profiler.agent import steps as step_hooks
from memsight.profiler.agent.breakdown import measure_breakdown
from memsight.profiler.agent.instrument import Instrumentation
from memsight.profiler.agent.steps import (
    DETAIL_EVERY_NS,
    DETAIL_WARMUP_STEPS,
    LIGHT_RSS_EVERY_NS,
    RSS_EVERY_NS,
    RSS_EVERY_STEP,
)
from tests.agent.collecting_agent import CollectingAgent


@pytest.fixture
def hooked() -> Iterator[tuple[Instrumentation, CollectingAgent]]:
    agent = CollectingAgent()
    inst = Instrumentation(agent, torch)
    inst.install()
    try:
        yield inst, agent
    finally:
        inst.uninstall()
    assert not module_mod._global_forward_pre_hooks and not module_mod._global_forward_hooks
    assert agent.errors == []


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(*[nn.Linear(8, 8) for _ in range(6)], nn.ReLU(inplace=True))
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.head(self.body(x))
        return y


def train_steps(
    model: nn.Module, opt: torch.optim.Optimizer, steps: int, zero_grad: bool = True
) -> None:
    for _ in range(steps):
        if zero_grad:
            opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()


def test_after_discovery_only_the_outermost_module_carries_hooks(hooked: Any) -> None:
    inst, agent = hooked
    model = Net()
    train_steps(model, torch.optim.SGD(model.parameters(), 0.1), 3)
    assert list(inst.roots) == [model]
    assert not module_mod._global_forward_pre_hooks  # discovery ended at the first step
    for leaf in model.modules():
        if leaf is not model:
            assert not leaf._forward_hooks and not leaf._forward_pre_hooks
    forwards = agent.forwards()
    assert [f["module"] for f in forwards] == ["Net"] * 3
    assert all(f["training"] and f["grad"] and f["requires_grad"] for f in forwards)
    backwards = agent.backwards()
    assert [b["forwards"] for b in backwards] == [[1], [2], [3]]
    assert all(b["t"] <= b["end"] for b in backwards)


def assert_rss_paced(steps: list[dict[str, Any]], light: frozenset[int] = frozenset()) -> None:
    """The RSS is read at each of the first RSS_EVERY_STEP steps, then at the first step
    ending RSS_EVERY_NS or more after the last reading (LIGHT_RSS_EVERY_NS for the `light`
    steps); -1 on the steps in between."""
    last = None
    for step in steps:
        every = LIGHT_RSS_EVERY_NS if step["index"] in light else RSS_EVERY_NS
        first = step["index"] <= RSS_EVERY_STEP
        due = last is None or first or step["end"] >= last + every
        assert (step["rss"] > 0) if due else (step["rss"] == -1), (step, last)
        if due:
            last = step["end"]


def test_steps_further_apart_than_the_rss_interval_each_read_the_rss(hooked: Any) -> None:
    _, agent = hooked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    for _ in range(3):
        train_steps(model, opt, 1)
        time.sleep(2 * RSS_EVERY_NS / 1e9)
    steps = agent.steps()
    assert len(steps) == 3 and all(s["rss"] > 0 for s in steps)


def test_each_optimizer_step_is_one_event_with_memory_and_clearing(hooked: Any) -> None:
    _, agent = hooked
    model = Net()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    train_steps(model, opt, 4)
    steps = agent.steps()
    assert [s["index"] for s in steps] == [1, 2, 3, 4]
    assert [s["cleared"] for s in steps] == ["zero_grad"] * 4
    assert all(s["device"] == -1 and s["allocated"] == -1 for s in steps)
    assert_rss_paced(steps)
    expected = sum(p.numel() * p.element_size() for p in model.parameters())
    # Measured at the first steps, then at most once a second (-1: not measured).
    assert [s["params_cpu"] for s in steps] == [expected] * 3 + [-1]
    third = steps[2]
    assert (third["params_cpu"], third["params_gpu"]) == (expected, 0)
    assert (third["grads_cpu"], third["grads_gpu"]) == (expected, 0)
    assert third["state_cpu"] == 2 * expected  # Adam: exp_avg and exp_avg_sq


def test_missing_zero_grad_and_manual_clearing_are_told_apart(hooked: Any) -> None:
    _, agent = hooked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    train_steps(model, opt, 3, zero_grad=False)
    for p in model.parameters():
        p.grad = None
    train_steps(model, opt, 1, zero_grad=False)
    assert [s["cleared"] for s in agent.steps()] == ["first_step", None, None, "grad_replaced"]


def closure_steps(model: nn.Module, opt: torch.optim.Optimizer, steps: int, clear: str) -> None:
    """opt.step(closure), as LBFGS (and every Lightning run) does it; the closure clears the
    gradients by `clear`: "zero_grad", "set_to_none" (by hand) or "none"."""
    x = torch.randn(16, 8)
    for _ in range(steps):

        def closure() -> torch.Tensor:
            if clear == "zero_grad":
                opt.zero_grad()
            elif clear == "set_to_none":
                for p in model.parameters():
                    p.grad = None
            loss: torch.Tensor = model(x).pow(2).mean()
            loss.backward()  # type: ignore[no-untyped-call]
            return loss

        # torch types the closure as returning a float; LBFGS's own returns the loss tensor.
        opt.step(closure)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "clear, expected",
    [
        ("zero_grad", ["zero_grad"] * 4),  # zero_grad after the pre-hook counts for the step
        ("set_to_none", ["first_step"] + ["grad_replaced"] * 3),
        ("none", ["first_step"] + [None] * 3),  # the closure really accumulates: still seen
    ],
)
def test_clearing_inside_a_closure_counts_for_its_step(
    hooked: Any, clear: str, expected: list[str | None]
) -> None:
    _, agent = hooked
    model = Net()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
    closure_steps(model, opt, 4, clear)
    steps = agent.steps()
    assert [s["cleared"] for s in steps] == expected
    # LBFGS evaluates the closure several times per step: one step row each, backwards inside
    backwards = agent.backwards()
    assert len(steps) == 4 and len(backwards) > 4
    assert all(any(s["t"] <= b["t"] <= s["end"] for s in steps) for b in backwards)


def test_clearing_inside_a_step_is_not_carried_to_the_next_step(hooked: Any) -> None:
    _, agent = hooked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    closure_steps(model, opt, 1, "zero_grad")
    train_steps(model, opt, 2, zero_grad=False)  # plain steps after it, never cleared
    assert [s["cleared"] for s in agent.steps()] == ["zero_grad", None, None]


def test_parameters_sharing_one_storage_are_counted_once() -> None:
    flat = torch.zeros(200)  # a flat buffer whose views are the parameters
    first, second = nn.Parameter(flat[:150]), nn.Parameter(flat[150:])
    opt = torch.optim.SGD([first, second], 0.1)
    assert measure_breakdown(opt)["params"] == {"cpu": 200 * 4}


def test_train_eval_switches_are_events_and_rearm_discovery(hooked: Any) -> None:
    inst, agent = hooked
    model, other = Net(), nn.Linear(8, 2)
    train_steps(model, torch.optim.SGD(model.parameters(), 0.1), 1)
    model.eval()
    model.eval()  # no switch, no event
    with torch.no_grad():
        other(torch.randn(2, 8))  # a new outermost module, found by the new discovery
    model.train()
    assert [(m["training"], m["module"]) for m in agent.of("mode")] == [
        (False, "Net"),
        (True, "Net"),
    ]
    assert other in inst.roots
    eval_forward = agent.forwards()[-1]
    assert (eval_forward["module"], eval_forward["grad"], eval_forward["requires_grad"]) == (
        "Linear",
        False,
        False,
    )


def test_an_in_place_relu_model_trains_identically_with_the_hooks() -> None:
    def losses() -> list[float]:
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), 0.1)
        out = []
        for _ in range(5):
            opt.zero_grad()
            loss = model(torch.randn(4, 8)).pow(2).mean()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    plain = losses()
    agent = CollectingAgent()
    inst = Instrumentation(agent, torch)
    inst.install()
    try:
        hooked_losses = losses()
    finally:
        inst.uninstall()
    assert hooked_losses == plain
    assert agent.errors == []


def test_epochs_count_new_iterators_per_dataset_even_with_a_new_loader_each_time(
    hooked: Any,
) -> None:
    _, agent = hooked
    train_set = torch.utils.data.TensorDataset(torch.randn(8, 2))
    val_set = torch.utils.data.TensorDataset(torch.randn(4, 2))
    val = torch.utils.data.DataLoader(val_set)
    for _ in range(2):
        list(torch.utils.data.DataLoader(train_set, batch_size=4))  # rebuilt every epoch
        list(val)
    assert [(e["loader"], e["index"]) for e in agent.of("epoch")] == [
        (1, 1),
        (2, 1),
        (1, 2),
        (2, 2),
    ]


def test_an_oom_in_a_forward_is_seen_even_when_the_script_catches_it(hooked: Any) -> None:
    _, agent = hooked

    class Greedy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.empty(2**50, dtype=torch.uint8)

    with pytest.raises(RuntimeError, match="can't allocate memory"):
        Greedy()(torch.ones(1))
    assert agent.of("exception")[0]["where"] == "forward"


def test_the_cuda_oom_observer_is_attached_once_cuda_is_up_and_reports_the_phase(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    observers: list[Any] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch._C, "_cuda_attach_out_of_memory_observer", observers.append, raising=False
    )
    agent = CollectingAgent()
    agent.reader = SimpleNamespace(read=lambda device: {"allocated": 7, "reserved": 9})
    inst = Instrumentation(agent, torch)
    inst.install()
    try:
        model = Net()
        model(torch.randn(2, 8))
        assert len(observers) == 1
        inst.phase = "backward"
        observers[0](0, 2**30, 80 * 2**30, 2**20)
    finally:
        inst.uninstall()
    (event,) = agent.of("oom_observed")
    assert (event["device"], event["requested"], event["free"], event["phase"]) == (
        0,
        2**30,
        2**20,
        "backward",
    )
    assert event["memory"]["cuda"] == {"device": 0, "allocated": 7, "reserved": 9}


def test_compiled_regions_are_skipped(hooked: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    inst, agent = hooked
    monkeypatch.setattr(inst, "_is_compiling", lambda: True)
    Net()(torch.randn(2, 8))
    assert not inst.roots and agent.forwards() == []


def test_a_failed_install_leaves_nothing_behind() -> None:
    class Broken:
        """torch as far as the optimizer hooks go, with no nn module after them."""

        optim = torch.optim
        nn = None

    optimizer_module = importlib.import_module("torch.optim.optimizer")

    def state() -> tuple[Any, ...]:
        return (
            dict(optimizer_module._global_optimizer_pre_hooks),
            dict(optimizer_module._global_optimizer_post_hooks),
            torch.optim.Optimizer.__dict__["zero_grad"],
        )

    before = state()
    with pytest.raises(AttributeError):
        Instrumentation(CollectingAgent(), Broken()).install()
    assert state() == before


# -- steps in detail, sampled when they come fast (DETAIL_EVERY_NS) -----------------------------


class SteppedClock:
    """The instrumentation's clock, moved on by hand: `step_ns` per training step."""

    def __init__(self) -> None:
        self.now = time.monotonic_ns()

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clocked(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Instrumentation, CollectingAgent, SteppedClock]]:
    clock = SteppedClock()
    for module in (discovery, modes, spans, step_hooks):  # each binds the clock once
        monkeypatch.setattr(module, "_now", clock)
    agent = CollectingAgent()
    inst = Instrumentation(agent, torch)
    inst.install()
    try:
        yield inst, agent, clock
    finally:
        inst.uninstall()
    assert agent.errors == []


def timed_steps(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    clock: SteppedClock,
    steps: int,
    step_ns: int,
    clear: str = "zero_grad",
) -> None:
    """Training steps `step_ns` apart on the clock; gradients cleared by `clear`: zero_grad,
    set_to_none (by hand), set_to_none before every other step only ("alternate"), or none."""
    for i in range(steps):
        clock.now += step_ns
        if clear == "zero_grad":
            opt.zero_grad()
        elif clear == "set_to_none" or (clear == "alternate" and i % 2 == 0):
            for p in model.parameters():
                p.grad = None
        model(torch.randn(4, 8)).sum().backward()
        opt.step()


def detailed_steps(agent: CollectingAgent) -> list[int]:
    """Steps whose forward was recorded (a forward span between the step before and it)."""
    ends = [s["end"] for s in agent.steps()]
    detailed = set()
    for forward in agent.forwards():
        index = sum(1 for end in ends if end < forward["t"]) + 1
        detailed.add(index)
    return sorted(detailed)


def test_fast_steps_are_recorded_in_detail_one_per_detail_interval(clocked: Any) -> None:
    _, agent, clock = clocked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    timed_steps(model, opt, clock, 350, step_ns=1_000_000)  # 1 ms steps for 350 ms
    steps = agent.steps()
    # Every step has its row, and how its gradients were cleared.
    assert [s["index"] for s in steps] == list(range(1, 351))
    assert all(s["cleared"] == "zero_grad" for s in steps)
    # The first DETAIL_WARMUP_STEPS in detail, then one step per DETAIL_EVERY_NS (100 steps).
    every = DETAIL_EVERY_NS // 1_000_000
    warmup = DETAIL_WARMUP_STEPS
    expected = list(range(1, warmup + 1)) + list(range(warmup + every, 351, every))
    assert detailed_steps(agent) == expected
    assert [b["forwards"] for b in agent.backwards()] == [[f["id"]] for f in agent.forwards()]
    assert [(e["from_step"], e["every_ns"]) for e in agent.of("step_detail")] == [
        (warmup + 1, DETAIL_EVERY_NS)
    ]
    # Light steps read the RSS LIGHT_RSS_EVERY_NS apart (every 20th step here).
    assert_rss_paced(steps, light=frozenset(range(1, 351)) - set(expected))


def test_steps_further_apart_than_the_detail_interval_are_all_detailed(clocked: Any) -> None:
    _, agent, clock = clocked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    timed_steps(model, opt, clock, 30, step_ns=DETAIL_EVERY_NS + 1)
    assert detailed_steps(agent) == list(range(1, 31))
    assert agent.of("step_detail") == []


@pytest.mark.parametrize("clear, expected", [("none", None), ("set_to_none", "grad_replaced")])
def test_light_steps_still_tell_how_the_gradients_were_cleared(
    clocked: Any, clear: str, expected: str | None
) -> None:
    _, agent, clock = clocked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    timed_steps(model, opt, clock, 60, step_ns=1_000_000, clear=clear)
    cleared = [s["cleared"] for s in agent.steps()]
    assert cleared == ["first_step"] + [expected] * 59


def test_light_steps_see_gradients_cleared_before_every_other_step_only(clocked: Any) -> None:
    _, agent, clock = clocked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    timed_steps(model, opt, clock, 60, step_ns=1_000_000, clear="alternate")
    cleared = [s["cleared"] for s in agent.steps()]
    assert cleared == ["first_step"] + [
        "grad_replaced" if i % 2 == 0 else None for i in range(1, 60)
    ]


def test_a_forward_after_the_fast_steps_is_recorded_in_detail(clocked: Any) -> None:
    inst, agent, clock = clocked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    timed_steps(model, opt, clock, 50, step_ns=1_000_000)
    assert not inst.detail  # the next step would be light
    recorded = len(agent.forwards())
    clock.now += 50_000_000  # a forward long after the loop's last step, still in train mode
    model(torch.randn(4, 8))
    forwards = agent.forwards()
    assert len(forwards) == recorded + 1
    assert forwards[-1]["training"] and forwards[-1]["grad"]


def test_a_light_forward_still_marks_the_phase_and_a_caught_oom(clocked: Any) -> None:
    inst, agent, clock = clocked
    phases: list[str | None] = []

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fail = False
            self.body = Net()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            phases.append(inst.phase)
            if self.fail:
                return torch.empty(2**50, dtype=torch.uint8)
            y: torch.Tensor = self.body(x)
            return y

    model = Probe()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    timed_steps(model, opt, clock, 30, step_ns=1_000_000)
    assert not inst.detail
    assert phases == ["forward"] * 30 and inst.phase is None
    model.fail = True
    clock.now += 1_000_000
    with pytest.raises(RuntimeError, match="can't allocate memory"):
        model(torch.randn(4, 8))
    assert not inst.detail and agent.of("exception")[0]["where"] == "forward"


def test_an_eval_loop_right_after_the_fast_steps_is_recorded_in_detail(clocked: Any) -> None:
    inst, agent, clock = clocked
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    timed_steps(model, opt, clock, 50, step_ns=1_000_000)
    assert not inst.detail
    recorded = len(agent.forwards())
    model.eval()  # at once: no time passes on the clock
    # A tensor serves as the dataset of its rows.
    loader = torch.utils.data.DataLoader(
        cast("torch.utils.data.Dataset[torch.Tensor]", torch.randn(12, 8)), batch_size=4
    )
    for batch in loader:
        model(batch)
    forwards = agent.forwards()
    assert len(forwards) == recorded + 3
    assert not any(f["training"] for f in forwards[recorded:])


def test_light_steps_read_the_cuda_counters_with_the_rss(
    clocked: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, agent, clock = clocked
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch._C, "_cuda_attach_out_of_memory_observer", lambda observer: None, raising=False
    )
    agent.reader = SimpleNamespace(read=lambda device: {"allocated": 7, "reserved": 9})
    model = Net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    first = RSS_EVERY_STEP
    timed_steps(model, opt, clock, first + 60, step_ns=1_000_000)
    steps = agent.steps()
    warmup = DETAIL_WARMUP_STEPS
    # Detailed steps read the counters every step, light ones only with the RSS.
    assert all(s["allocated"] == 7 and s["device"] == 0 for s in steps[:warmup])
    for s in steps[warmup:]:
        read = s["rss"] > 0
        assert (s["device"], s["allocated"], s["reserved"]) == ((0, 7, 9) if read else (-1,) * 3)
    # Each of the first steps, then one per LIGHT_RSS_EVERY_NS.
    assert all(s["rss"] > 0 for s in steps[:first])
    assert sum(s["rss"] > 0 for s in steps[first:]) == 60 // (LIGHT_RSS_EVERY_NS // 1_000_000)
