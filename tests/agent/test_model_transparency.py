"""The roots' instance hooks stay out of what a script does with its models.

After the first forward the outermost module carries memsight's forward hooks (bound methods
of the Instrumentation, which holds locks). Copies, pickles, checkpoints, TorchScript,
exported and compiled models must behave as without memsight: no error, the same results, and
no memsight hook in what they produce. The instrumented model keeps its hooks and keeps
being recorded.
"""

from __future__ import annotations

import copy
import inspect
import io
import os
import pickle
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.nn.modules.module as module_mod
from torch import nn
from torch.nn.utils import parametrize

from memsight.profiler import protocol
from memsight.profiler.agent.instrument import Instrumentation
from tests.support import run_memsight, run_plain, write_script


class Agent:
    """Stands in for the agent: keeps table rows and agent errors in memory."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[int, ...]]] = {"spans": [], "steps": []}
        self.errors: list[tuple[str, BaseException]] = []

    def event(self, type_: str, t: int | None = None, **data: Any) -> None:
        pass

    def row(self, schema: protocol.TableSchema, values: tuple[int, ...]) -> None:
        schema.row.pack(*values)  # what the real agent does: the row must fit its schema
        self.rows[schema.name].append(values)

    def name_id(self, name: str) -> int:
        return 1

    def error(self, where: str, exc: BaseException) -> None:
        self.errors.append((where, exc))

    def report_exception(self, exc: BaseException, where: str, uncaught: bool = False) -> None:
        pass

    def cuda_reader(self) -> Any:
        return None

    def forwards(self) -> int:
        """Forward spans of outermost calls (depth 0)."""
        return sum(
            1 for row in self.rows["spans"] if row[2] == protocol.SPAN_FORWARD and row[6] == 0
        )


def wrapped_attributes() -> tuple[Any, ...]:
    """Everything the instrumentation wraps for these purposes, as found."""
    return (
        nn.Module.__dict__.get("__reduce_ex__"),
        torch.jit._recursive.create_script_module,
        torch.export.export,
        module_mod._has_any_global_hook,
    )


def wrapped_functions() -> list[Any]:
    return [
        nn.Module.__reduce_ex__,
        torch.jit._recursive.create_script_module,
        torch.export.export,
        module_mod._has_any_global_hook,
    ]


@pytest.fixture
def hooked() -> Iterator[tuple[Instrumentation, Agent]]:
    before = wrapped_attributes()
    agent = Agent()
    inst = Instrumentation(agent, torch)
    inst.install()
    try:
        yield inst, agent
    finally:
        inst.uninstall()
        torch._dynamo.reset()
    assert wrapped_attributes() == before
    assert "__reduce_ex__" not in nn.Module.__dict__
    assert not module_mod._global_forward_pre_hooks and not module_mod._global_forward_hooks
    assert agent.errors == []


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 16))
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.head(torch.relu(self.body(x)))
        return y


class Exporting(Net):
    """A module with an exported method: torch.jit.trace scripts it too."""

    @torch.jit.export
    def features(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.body(x)
        return y


X = torch.randn(4, 8)


def memsight_hooks(model: nn.Module, tree: bool = True) -> list[Any]:
    """Memsight's hooks on the model, or anywhere in its module tree."""
    found = []
    for module in model.modules() if tree else [model]:
        for table in (module._forward_pre_hooks, module._forward_hooks):
            found += [
                h
                for h in table.values()
                if isinstance(getattr(h, "__self__", None), Instrumentation)
            ]
    return found


def trained(inst: Instrumentation, model: nn.Module | None = None) -> nn.Module:
    """A model after a few training steps: the outermost module carries our hooks."""
    torch.manual_seed(0)
    model = model or Net()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    for _ in range(3):
        opt.zero_grad()
        model(X).pow(2).mean().backward()
        opt.step()
    assert model in inst.roots and len(memsight_hooks(model, tree=False)) == 2
    return model


def assert_clean_copy(model: nn.Module, other: nn.Module) -> None:
    """`other` has no memsight hook and computes what `model` computes."""
    assert memsight_hooks(other) == []
    with torch.no_grad():
        assert torch.equal(other(X), model(X))


def assert_still_recorded(inst: Instrumentation, agent: Agent, model: nn.Module) -> None:
    """The instrumented model keeps its hooks, and a call of it is still one forward span."""
    assert len(memsight_hooks(model, tree=False)) == 2 and model in inst.roots
    before = agent.forwards()
    model(X)
    assert agent.forwards() == before + 1


def test_copy_copy_is_shallow_as_ever_but_without_our_hooks(hooked: Any) -> None:
    inst, agent = hooked
    model = trained(inst)
    shallow = copy.copy(model)
    assert_clean_copy(model, shallow)
    assert shallow._parameters is model._parameters and shallow._modules is model._modules
    assert_still_recorded(inst, agent, model)


def test_deepcopy_gives_a_clean_model_for_an_ema(hooked: Any) -> None:
    inst, agent = hooked
    model = trained(inst)
    ema = copy.deepcopy(model)
    assert_clean_copy(model, ema)
    assert all(a is not b for a, b in zip(ema.parameters(), model.parameters(), strict=True))
    ema.requires_grad_(False)
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters(), strict=True):
            e.mul_(0.5).add_(p, alpha=0.5)
    assert ema(X).shape == (4, 1)
    assert ema not in inst.roots
    assert_still_recorded(inst, agent, model)
    # Containers deep-copy each module: a root inside a larger structure is filtered too.
    wrapped = copy.deepcopy({"model": model, "opt": torch.optim.SGD(model.parameters(), 0.1)})
    assert_clean_copy(model, cast(nn.Module, wrapped["model"]))


def test_pickle_round_trip(hooked: Any) -> None:
    inst, agent = hooked
    model = trained(inst)
    data = pickle.dumps(model)
    assert b"profiler" not in data and b"memsight" not in data  # loadable without memsight
    assert_clean_copy(model, pickle.loads(data))
    assert_still_recorded(inst, agent, model)


def test_torch_save_and_load_of_the_whole_model(hooked: Any, tmp_path: Path) -> None:
    inst, agent = hooked
    model = trained(inst)
    path = tmp_path / "model.pt"
    torch.save(model, path)
    loaded = torch.load(path, weights_only=False)
    assert_clean_copy(model, loaded)
    opt = torch.optim.SGD(loaded.parameters(), 0.1)  # the loaded model trains normally
    loaded(X).sum().backward()
    opt.step()
    assert_still_recorded(inst, agent, model)


def test_saving_an_output_tensor_gives_no_warning_about_our_gradient_hook(
    hooked: Any,
) -> None:
    inst, _ = hooked
    model = trained(inst)
    out = model(X)
    assert out.requires_grad and out._backward_hooks  # our hook marks backward starts
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.save(out, io.BytesIO())
    assert [str(w.message) for w in caught] == []


def test_state_dict_round_trip(hooked: Any, tmp_path: Path) -> None:
    inst, agent = hooked
    model = trained(inst)
    path = tmp_path / "weights.pt"
    torch.save(model.state_dict(), path)
    fresh = Net()
    fresh.load_state_dict(torch.load(path))
    with torch.no_grad():
        assert torch.equal(fresh(X), model(X))
    model.load_state_dict(fresh.state_dict())  # loading into the instrumented model
    assert_still_recorded(inst, agent, model)


# torch 2.10+ deprecates TorchScript; these tests are about what it makes of our hooks.
ignore_jit_deprecation = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"
)


@ignore_jit_deprecation
def test_torch_jit_script(hooked: Any) -> None:
    inst, agent = hooked
    model = trained(inst)
    tables = (model._forward_pre_hooks, model._forward_hooks)
    scripted = torch.jit.script(model)
    assert not scripted._forward_hooks and not scripted._forward_pre_hooks
    with torch.no_grad():
        assert torch.equal(scripted(X), model(X))
    # The model's own hook tables were shown filtered copies, then put back as they were.
    assert (model._forward_pre_hooks, model._forward_hooks) == tables
    assert model._forward_pre_hooks is tables[0] and model._forward_hooks is tables[1]
    assert_still_recorded(inst, agent, model)
    # A larger module holding the root scripts too (the root is a submodule there).
    outer = torch.jit.script(nn.Sequential(model, nn.Tanh()))
    with torch.no_grad():
        assert torch.equal(outer(X), torch.tanh(model(X)))
    assert_still_recorded(inst, agent, model)


@ignore_jit_deprecation
def test_torch_jit_trace(hooked: Any) -> None:
    inst, agent = hooked
    model = trained(inst)
    traced = torch.jit.trace(model, X)  # type: ignore[no-untyped-call]
    assert not traced._forward_hooks and not traced._forward_pre_hooks
    with torch.no_grad():
        assert torch.equal(traced(X), model(X))
    assert_still_recorded(inst, agent, model)
    exporting = cast(Exporting, trained(inst, Exporting()))
    traced = torch.jit.trace(exporting, X)  # type: ignore[no-untyped-call]  # scripts the module, then traces forward
    with torch.no_grad():
        assert torch.equal(traced.features(X), exporting.body(X))
        assert torch.equal(traced(X), exporting(X))
    assert_still_recorded(inst, agent, exporting)


@pytest.mark.parametrize("strict", [False, True])
def test_torch_export(hooked: Any, strict: bool) -> None:
    inst, agent = hooked
    model = trained(inst)
    model.eval()  # a mode switch: discovery's global hooks are back, as before an export
    assert inst._discovery
    program = torch.export.export(model, (X,), strict=strict)
    exported = program.module()
    assert memsight_hooks(exported) == []
    with torch.no_grad():
        assert torch.equal(exported(X), model(X))
    assert inst._discovery  # suspended during the export only
    assert_still_recorded(inst, agent, model)


@pytest.mark.parametrize("fullgraph", [False, True])
def test_torch_compile_with_the_eager_backend(hooked: Any, fullgraph: bool) -> None:
    inst, agent = hooked
    model = trained(inst)
    model.zero_grad(set_to_none=True)
    reference = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # An OptimizedModule, which torch types as the bare callable it was given.
        compiled = cast(nn.Module, torch.compile(model, backend="eager", fullgraph=fullgraph))
        assert inst._discovery  # constructing the OptimizedModule re-armed discovery
        out = compiled(X)
    # torch warns when a compiled module is called while global hooks exist: not of ours.
    assert [str(w.message) for w in caught if "hook" in str(w.message)] == []
    assert torch.equal(out, reference(X))
    out.sum().backward()
    reference(X).sum().backward()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad)
    assert memsight_hooks(copy.deepcopy(compiled)) == []
    assert_still_recorded(inst, agent, model)


def test_only_discovery_s_own_global_hooks_are_ignored_by_has_any_global_hook(
    hooked: Any,
) -> None:
    inst, _ = hooked
    assert inst._discovery  # discovery runs at start: its global hooks are registered
    assert not module_mod._has_any_global_hook()  # type: ignore[no-untyped-call]
    handle = module_mod.register_module_forward_hook(lambda module, args, output: None)
    try:
        assert module_mod._has_any_global_hook()  # type: ignore[no-untyped-call]
    finally:
        handle.remove()


def test_the_wrappers_keep_the_signatures_of_what_they_wrap() -> None:
    before = [inspect.signature(f) for f in wrapped_functions()]
    inst = Instrumentation(Agent(), torch)
    inst.install()
    try:
        assert [inspect.signature(f) for f in wrapped_functions()] == before
        assert [f.__name__ for f in wrapped_functions()] == [
            "__reduce_ex__",
            "create_script_module",
            "export",
            "_has_any_global_hook",
        ]
        with pytest.raises(TypeError):
            nn.Linear(1, 1).__reduce_ex__()  # type: ignore[call-arg]  # protocol is required, as for object
    finally:
        inst.uninstall()


def _cxx_compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++")) or shutil.which("clang++")


@pytest.mark.slow  # a cold inductor compile of even this model takes ~15 s on 2 cores
@ignore_jit_deprecation  # inductor's imports use torch.jit.script_method
@pytest.mark.skipif(_cxx_compiler() is None, reason="inductor's CPU backend needs a C++ compiler")
def test_torch_compile_with_inductor(hooked: Any) -> None:
    inst, agent = hooked
    model = trained(inst)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model)
    with torch.no_grad():
        assert torch.allclose(compiled(X), reference(X), rtol=1e-5, atol=1e-6)
        assert torch.allclose(compiled(2 * X), reference(2 * X), rtol=1e-5, atol=1e-6)
    assert_still_recorded(inst, agent, model)


def test_a_class_copying_itself_by_its_own_means_shares_the_hooks_rather_than_failing(
    hooked: Any,
) -> None:
    """Parametrized modules deep-copy their __dict__ themselves (no __reduce_ex__ involved)."""

    class Symmetric(nn.Module):
        def forward(self, w: torch.Tensor) -> torch.Tensor:
            return w.triu() + w.triu(1).T

    inst, agent = hooked
    model = nn.Linear(8, 8)
    parametrize.register_parametrization(model, "weight", Symmetric())
    model(X)
    assert model in inst.roots
    twin = copy.deepcopy(model)
    with torch.no_grad():
        assert torch.equal(twin(X), model(X))
    assert_still_recorded(inst, agent, model)


SCRIPT = """
import copy
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 32))
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def hooks(module):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in module.modules())


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 16), torch.randn(64, 1)
ema = None
for step in range(6):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if ema is None:
        ema = copy.deepcopy(model)  # after a forward: memsight's hooks are on the model
        ema.requires_grad_(False)
        print("ema hooks", hooks(ema))
    else:
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.9).add_(p, alpha=0.1)
    print(step, f"{loss.item():.6f}")

torch.save(model, sys.argv[1])  # as pytorch/examples' word_language_model does
loaded = torch.load(sys.argv[1], weights_only=False)
print("loaded hooks", hooks(loaded))
scripted = torch.jit.script(model)
print("scripted hooks", len(scripted._forward_hooks) + len(scripted._forward_pre_hooks))
with torch.no_grad():
    for name, m in (("model", model), ("ema", ema), ("loaded", loaded), ("scripted", scripted)):
        print(name, f"{m(x).sum().item():.6f}")
"""


@pytest.mark.slow
def test_a_script_checkpointing_copying_and_scripting_its_model_runs_as_without_memsight(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "checkpoint.py", SCRIPT)
    traced = run_memsight(["checkpoint.py", "traced.pt"], tmp_path)
    plain = run_plain(["checkpoint.py", "plain.pt"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert plain.returncode == 0, plain.stderr
    assert traced.stdout == plain.stdout
    assert "ema hooks 0" in traced.stdout and "loaded hooks 0" in traced.stdout
    profile = traced.profile()
    assert profile.steps is not None
    assert list(profile.steps["index"]) == [1, 2, 3, 4, 5, 6]
