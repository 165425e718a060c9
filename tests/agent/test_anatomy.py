"""The anatomy of one iteration (agent/anatomy.py), in-process with real (CPU) torch: what each
module's forward saves for backward, its parameters, gradients and optimizer state, to the
byte; and the program computing exactly what it computes without it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.modules.module as module_mod
from torch import nn

from memsight.profiler.agent import anatomy as anatomy_mod
from memsight.profiler.agent.anatomy import OUTSIDE_MODULES
from memsight.profiler.agent.instrument import Instrumentation
from tests.agent.collecting_agent import CollectingAgent

FLOAT = 4
BATCH, WIDTH, HIDDEN, OUT = 8, 16, 32, 4


def hooked_with(setting: str) -> tuple[Instrumentation, CollectingAgent]:
    agent = CollectingAgent()
    agent.anatomy = setting  # type: ignore[attr-defined]
    inst = Instrumentation(agent, torch)
    inst.install()
    return inst, agent


@pytest.fixture
def hooked() -> Iterator[tuple[Instrumentation, CollectingAgent]]:
    inst, agent = hooked_with("auto")
    try:
        yield inst, agent
    finally:
        inst.uninstall()
    assert_no_hooks_left()
    assert agent.errors == []


def assert_no_hooks_left() -> None:
    assert not module_mod._global_forward_pre_hooks
    assert not module_mod._global_forward_hooks
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def train(model: nn.Module, steps: int, loss_module: nn.Module | None = None) -> torch.Tensor:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(BATCH, WIDTH, generator=generator)
        out = model(x)
        loss = loss_module(out, torch.zeros(BATCH, OUT)) if loss_module else out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def by_path(event: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["path"]: m for m in event["modules"]}


def test_each_module_is_charged_what_its_forward_saved_and_what_it_owns(hooked: Any) -> None:
    _, agent = hooked
    train(mlp(), 3)
    [event] = agent.of("anatomy")
    assert (event["iteration"], event["skipped"], event["partial"]) == (1, "", False)
    assert (event["batch_size"], event["batch_bytes"]) == (BATCH, BATCH * WIDTH * FLOAT)
    modules = by_path(event)
    first = (WIDTH * HIDDEN + HIDDEN) * FLOAT
    last = (HIDDEN * OUT + OUT) * FLOAT
    # The first Linear saves only its input (the batch, counted as such) and its weight.
    assert modules["0"]["activations"] == 0
    assert modules["0"]["parameters"] == modules["0"]["gradients"] == first
    assert modules["0"]["optimizer_state"] == first  # SGD's momentum buffers
    # ReLU saves its output, which the last Linear saves too: charged once, to the first.
    assert modules["1"]["activations"] == modules["1"]["activations_fp32"] == BATCH * HIDDEN * 4
    assert modules["2"]["activations"] == 0
    assert modules["2"]["parameters"] == modules["2"]["optimizer_state"] == last
    # The loss, computed outside any module, saved the model's output.
    assert modules[OUTSIDE_MODULES]["activations"] == BATCH * OUT * FLOAT
    assert modules["1"]["input_bytes"] == BATCH * HIDDEN * FLOAT
    assert {m["device"] for m in event["modules"]} == {"cpu"}
    assert event["largest_saved"] == {"cpu": BATCH * HIDDEN * FLOAT}
    # Each storage's size, for the fit's model of what malloc keeps: largest first.
    assert event["saved_sizes"] == {"cpu": [[BATCH * HIDDEN * FLOAT, 1], [BATCH * OUT * FLOAT, 1]]}
    weights = [WIDTH * HIDDEN * FLOAT, HIDDEN * OUT * FLOAT, HIDDEN * FLOAT, OUT * FLOAT]
    assert event["gradient_sizes"] == {"cpu": [[size, 1] for size in weights]}


def test_past_the_listed_sizes_the_smallest_are_folded_into_one_of_their_mean_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(anatomy_mod, "MAX_SIZES", 3)
    counts = {4096: 1, 2048: 2, 100: 1, 50: 2, 30: 1}
    assert anatomy_mod._size_list(counts) == [[4096, 1], [2048, 2], [(100 + 100 + 30) // 4, 4]]
    assert anatomy_mod._size_list({8: 3}) == [[8, 3]]


class CallsItsBlockThrice(nn.Module):
    """Its block called on two tensors, one of them twice (as a GAN's discriminator is called
    on real and fake samples, or an RNN's cell at every step)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.ReLU())

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.block(a) + self.block(b) + self.block(a)
        return out


def test_a_blocks_input_counts_at_each_of_its_calls_once_per_storage(hooked: Any) -> None:
    # What checkpointing the block keeps: every call's input, a tensor passed twice once.
    _, agent = hooked
    model = CallsItsBlockThrice()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    a, b = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    model(a, b).pow(2).mean().backward()
    c = torch.randn(BATCH, WIDTH)
    model(c, c).pow(2).mean().backward()  # after the measured backward: not measured
    opt.step()
    [event] = agent.of("anatomy")
    modules = by_path(event)
    assert modules["block"]["input_bytes"] == 2 * BATCH * WIDTH * FLOAT
    assert modules["block.1"]["activations"] == 3 * BATCH * HIDDEN * FLOAT  # each ReLU's output


def test_the_program_computes_exactly_what_it_computes_without_memsight() -> None:
    plain = train(mlp(), 4)
    inst, agent = hooked_with("auto")
    try:
        measured = train(mlp(), 4)
    finally:
        inst.uninstall()
    assert len(agent.of("anatomy")) == 1
    assert torch.equal(plain, measured)
    assert_no_hooks_left()


class ModifiesASavedTensor(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.sigmoid()  # sigmoid saves its output for backward
        y.add_(1)  # which this in-place add then changes
        return y


def test_an_in_place_change_of_a_saved_tensor_still_fails_as_without_memsight(
    hooked: Any,
) -> None:
    model = ModifiesASavedTensor()
    x = torch.randn(4, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        model(x).sum().backward()


def test_the_scripts_own_saved_tensor_hooks_are_left_alone(hooked: Any) -> None:
    _, agent = hooked
    packed: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t.numel())
        return t

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randn(BATCH, WIDTH)).sum().backward()
    opt.step()
    assert packed  # the script's hooks saw every saved tensor, as without memsight
    [event] = agent.of("anatomy")
    assert event["skipped"] == "the script's own saved-tensor hooks are in place"
    assert event["modules"] == []


def test_a_second_outermost_module_is_named_by_its_class(hooked: Any) -> None:
    _, agent = hooked
    train(mlp(), 2, loss_module=nn.MSELoss())
    [event] = agent.of("anatomy")
    modules = by_path(event)
    assert "MSELoss" in modules and OUTSIDE_MODULES not in modules
    assert modules["MSELoss"]["type"] == "MSELoss"


@pytest.mark.parametrize(("setting", "iteration"), [("3", 3), ("1", 1)])
def test_the_iteration_measured_is_the_one_asked_for(setting: str, iteration: int) -> None:
    inst, agent = hooked_with(setting)
    try:
        train(mlp(), 5)
    finally:
        inst.uninstall()
    [event] = agent.of("anatomy")
    assert event["iteration"] == iteration
    assert by_path(event)["1"]["activations"] == BATCH * HIDDEN * 4
    assert_no_hooks_left()


def test_off_measures_nothing_and_installs_nothing() -> None:
    inst, agent = hooked_with("off")
    try:
        train(mlp(), 3)
        assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    finally:
        inst.uninstall()
    assert agent.of("anatomy") == []


def test_a_script_that_ends_before_its_first_step_sends_what_its_graph_holds() -> None:
    inst, agent = hooked_with("auto")
    model = mlp()
    kept = model(torch.randn(BATCH, WIDTH)).sum()  # a forward, then the script ends
    inst.uninstall()
    [event] = agent.of("anatomy")
    assert event["partial"] is True
    assert by_path(event)["1"]["activations"] == BATCH * HIDDEN * 4
    assert kept.grad_fn is not None
    assert_no_hooks_left()


def test_a_forward_whose_graph_is_gone_before_the_backward_is_not_in_the_peak(
    hooked: Any,
) -> None:
    _, agent = hooked
    model = mlp()
    print(model(torch.randn(BATCH, WIDTH)).shape)  # a look at the output, its graph dropped
    train(model, 2)
    [event] = agent.of("anatomy")
    # Only the training forward's ReLU output is alive when its backward starts.
    assert by_path(event)["1"]["activations"] == BATCH * HIDDEN * 4


def test_a_loop_without_an_optimizer_is_measured_over_its_backward_passes(hooked: Any) -> None:
    _, agent = hooked
    model = mlp()
    for _ in range(10):
        model(torch.randn(BATCH, WIDTH)).pow(2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                assert p.grad is not None
                p.sub_(0.01 * p.grad)
                p.grad = None
    [event] = agent.of("anatomy")
    assert event["counted"] == "backward passes"
    assert by_path(event)["1"]["activations"] == BATCH * HIDDEN * 4


def test_a_model_called_with_keywords_gets_its_batch_from_its_first_module(hooked: Any) -> None:
    class Keywords(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, 8)
            self.head = nn.Linear(8, 2)

        def forward(self, *, input_ids: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.emb(input_ids))
            return out

    _, agent = hooked
    model = Keywords()
    opt = torch.optim.Adam(model.parameters())
    for _ in range(2):
        model(input_ids=torch.randint(0, 50, (6, 5))).sum().backward()
        opt.step()
        opt.zero_grad()
    [event] = agent.of("anatomy")
    assert event["batch_size"] == 6
    assert by_path(event)["emb"]["optimizer_state"] == 2 * 50 * 8 * FLOAT  # Adam: two moments


class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.reentrant = reentrant
        self.inp = nn.Linear(WIDTH, WIDTH)  # so that the blocks' inputs require grad
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(3)
        )
        self.head = nn.Linear(WIDTH, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=self.reentrant)
        out: torch.Tensor = self.head(x)
        return out


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_blocks_train_as_without_memsight_and_save_only_their_inputs(
    reentrant: bool,
) -> None:
    plain = train(Checkpointed(reentrant), 3)
    inst, agent = hooked_with("auto")
    try:
        measured = train(Checkpointed(reentrant), 3)
    finally:
        inst.uninstall()
    assert torch.equal(plain, measured)
    assert_no_hooks_left()
    assert agent.errors == []
    [event] = agent.of("anatomy")
    modules = by_path(event)
    # Inside a checkpoint its own hooks keep nothing but the block's input: no Tanh output
    # is charged to the blocks.
    assert all(modules.get(f"blocks.{i}.1", {}).get("activations", 0) == 0 for i in range(3))


def test_a_fork_child_drops_the_measurement_and_its_hooks() -> None:
    # What the agent does in a DataLoader worker forked before the first training forward.
    inst, agent = hooked_with("auto")
    try:
        assert inst._anatomy_global_hooks()  # armed: waiting for the first training forward
        inst.drop_anatomy()
        assert inst._anatomy_global_hooks() == []
        train(mlp(), 2)
        assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    finally:
        inst.uninstall()
    assert agent.of("anatomy") == []
    assert_no_hooks_left()
