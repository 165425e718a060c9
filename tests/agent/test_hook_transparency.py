"""The hooks run none of the script's code: a script counts the same calls with and without them.

The hooks read module outputs, modules, optimizers, data loaders and tensors. Each program here
makes those objects count (or refuse) what is done to them: a `__class__` property, a dict or
list subclass' methods, a proxy's `__getattr__`, a `training` property, a Parameter subclass'
`__torch_function__`, a TorchFunctionMode, a wrapper subclass' `__torch_dispatch__`, a dataset's
`__eq__`. Each runs once as plain code and once under the instrumentation (in-process, with a
stand-in agent) and must print, count and raise the same, while memsight still records what it
should. A few run end to end, under `python` and under `memsight run`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, Dataset, TensorDataset

from memsight.profiler.agent.instrument import Instrumentation
from tests.agent.collecting_agent import CollectingAgent
from tests.support import run_memsight, run_plain, write_script


def plain_and_hooked(program: Callable[[], Any]) -> tuple[Any, Any, CollectingAgent]:
    """program() without, then with the instrumentation: both results, and what it recorded."""
    plain = program()
    agent = CollectingAgent()
    inst = Instrumentation(agent, torch)
    inst.install()
    try:
        hooked = program()
    finally:
        inst.uninstall()
    assert agent.errors == []
    return plain, hooked, agent


# -- module outputs, modules: no method or property of theirs runs -----------------------------


class Counted:
    """Where a program's objects report what was done to them."""

    calls: ClassVar[collections.Counter[str]] = collections.Counter()


def count(what: str) -> None:
    Counted.calls[what] += 1


class ClassProperty:
    """An output whose __class__ is a property (as mock objects and lazy proxies have)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        count("__class__")
        raise RuntimeError("__class__ read")


class ModelOutput(collections.OrderedDict):  # type: ignore[type-arg]
    """transformers' ModelOutput in small: a dict subclass with its own accessors."""

    def values(self) -> Any:
        count("values")
        return super().values()

    def items(self) -> Any:
        count("items")
        return super().items()

    def __getitem__(self, key: Any) -> Any:
        count("dict.__getitem__")
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[Any]:
        count("dict.__iter__")
        return super().__iter__()


class Batch(list):  # type: ignore[type-arg]
    def __getitem__(self, index: Any) -> Any:
        count("list.__getitem__")
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[Any]:
        count("list.__iter__")
        return super().__iter__()

    def __len__(self) -> int:
        count("list.__len__")
        return super().__len__()


class Pair(tuple):  # type: ignore[type-arg]
    def __getitem__(self, index: Any) -> Any:
        count("tuple.__getitem__")
        return super().__getitem__(index)

    def __iter__(self) -> Iterator[Any]:
        count("tuple.__iter__")
        return super().__iter__()


class Proxy:
    """A proxy (as wrapt's and lazy-object-proxy's): it passes for its target's class, and
    every attribute it lacks is counted and forwarded."""

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        count("__class__")
        return type(object.__getattribute__(self, "_target"))

    def __getattr__(self, name: str) -> Any:
        count("getattr " + name)
        return getattr(object.__getattribute__(self, "_target"), name)


class Net(nn.Module):
    def __init__(self, wrap: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)
        self.wrap = wrap

    def forward(self, x: torch.Tensor) -> Any:
        return self.wrap(self.layer(x))


class TrainingProperty(Net):
    """A module class whose `training` is a property over a field of its own."""

    @property
    def training(self) -> bool:
        count("training get")
        return bool(self.__dict__.get("_mode", True))

    @training.setter
    def training(self, mode: bool) -> None:
        count("training set")
        self.__dict__["_mode"] = mode


def first_tensor(output: Any) -> torch.Tensor:
    """The loss's input, found without counting (the script's own reads are not the hooks')."""
    if type(output) is ClassProperty:
        return output.tensor
    found: torch.Tensor
    if type(output) is Proxy:
        found = object.__getattribute__(output, "_target")
        return found
    if isinstance(output, dict):
        found = dict.__getitem__(output, "logits")
        return found
    if isinstance(output, (list, tuple)):
        found = (
            list.__getitem__(output, 0)
            if isinstance(output, list)
            else tuple.__getitem__(output, 0)
        )
        return found
    assert isinstance(output, torch.Tensor)
    return output


def train(model_class: type[Net], wrap: Callable[[torch.Tensor], Any], steps: int = 4) -> Any:
    torch.manual_seed(0)
    Counted.calls = collections.Counter()
    model = model_class(wrap)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    losses = []
    for step in range(steps):
        model.train()
        opt.zero_grad()
        loss = first_tensor(model(torch.randn(2, 4))).pow(2).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        losses.append(round(loss.item(), 6))
        if step == steps - 1:
            model.eval()
            with torch.no_grad():
                first_tensor(model(torch.randn(2, 4)))
    return losses, dict(Counted.calls)


OUTPUTS: dict[str, Callable[[torch.Tensor], Any]] = {
    "class_property": ClassProperty,
    "model_output": lambda t: ModelOutput(loss=None, logits=t, hidden=(t,)),
    "list_subclass": lambda t: Batch([t, t.detach()]),
    "tuple_subclass": lambda t: Pair((t, 1)),
    "proxy": Proxy,
}


@pytest.mark.parametrize("kind", sorted(OUTPUTS))
def test_the_hooks_call_no_method_or_property_of_a_forward_output(kind: str) -> None:
    plain, hooked, agent = plain_and_hooked(lambda: train(Net, OUTPUTS[kind]))
    assert hooked == plain
    forwards = agent.forwards()
    assert len(forwards) == 5 and len(agent.steps()) == 4
    if kind in ("model_output", "list_subclass", "tuple_subclass"):
        # The tensor inside is still found: each training forward has its backward.
        assert [f["requires_grad"] for f in forwards] == [True] * 4 + [False]
        assert len(agent.backwards()) == 4


def test_a_training_property_of_the_module_class_is_never_called() -> None:
    plain, hooked, agent = plain_and_hooked(lambda: train(TrainingProperty, lambda t: t))
    assert hooked == plain
    assert plain[1] == {"training set": 6}  # torch's: Module.__init__ and five train()/eval()
    assert len(agent.forwards()) == 5 and len(agent.backwards()) == 4
    # Unreadable without the property: each switch is taken for a change, with the mode set.
    assert [e["training"] for e in agent.of("mode")][-1] is False


# -- tensors: no __torch_function__ (subclass or mode) or __torch_dispatch__ sees the hooks ----


CALLS: list[str] = []


class CountedParameter(nn.Parameter):
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        CALLS.append("parameter " + getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})  # type: ignore[no-untyped-call]


class CountingMode(TorchFunctionMode):
    """FlopCounterMode's way in: every torch call of the script passes through it."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        CALLS.append("mode " + getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class Wrapper(torch.Tensor):
    """A wrapper subclass (as DTensor, quantized and NJT tensors are): its sizes come from
    __torch_dispatch__, so even reading its .shape, .dim() or numel() is a call it sees."""

    inner: torch.Tensor  # type: ignore[assignment]  # shadows torch's Tensor.inner(), as DTensor's fields do

    @staticmethod
    def __new__(cls, inner: torch.Tensor, requires_grad: bool = False) -> Wrapper:
        made = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.shape,
            dtype=inner.dtype,
            requires_grad=requires_grad,
            dispatch_sizes_strides_policy="sizes",
        )
        made.inner = inner
        return made

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch types it as a plain method
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        CALLS.append("dispatch " + str(func))
        sizes: dict[Any, Callable[[Wrapper], Any]] = {
            torch.ops.aten.sym_size.default: lambda t: t.inner.size(),
            torch.ops.aten.dim.default: lambda t: t.inner.dim(),
            torch.ops.aten.sym_numel.default: lambda t: t.inner.numel(),
            torch.ops.aten.sym_stride.default: lambda t: t.inner.stride(),
            torch.ops.aten.sym_storage_offset.default: lambda t: 0,
        }
        if func in sizes:
            return sizes[func](args[0])

        def unwrap(x: Any) -> Any:
            return x.inner if isinstance(x, Wrapper) else x

        out = func(*map(unwrap, args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        return Wrapper(out) if isinstance(out, torch.Tensor) else out


class ParameterNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = CountedParameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor) -> Any:
        out = x @ self.weight
        return out, Wrapper(out.detach().clone(), requires_grad=True)


def tensor_program(mode: bool) -> Any:
    torch.manual_seed(0)
    model = ParameterNet()
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    CALLS.clear()
    losses = []
    for _ in range(4):
        with CountingMode() if mode else torch.enable_grad():
            opt.zero_grad()
            out, wrapped = model(torch.randn(2, 4))
            loss = out.sum()
            loss.backward()
            opt.step()
            # A wrapper tensor in the optimizer's state: the breakdown walks the state.
            opt.state[model.weight]["ema"] = wrapped
        losses.append(round(loss.item(), 6))
    return losses, collections.Counter(CALLS)


@pytest.mark.parametrize("mode", [False, True], ids=["subclasses", "function_mode"])
def test_no_torch_function_or_dispatch_of_the_script_sees_the_hooks(mode: bool) -> None:
    plain, hooked, agent = plain_and_hooked(lambda: tensor_program(mode))
    assert hooked == plain
    assert plain[1]  # the program does count
    steps = agent.steps()
    assert len(steps) == 4 and len(agent.backwards()) == 4
    # The plain tensors are still measured; the wrapper's storage (none of its own) is left out.
    assert steps[0]["params_cpu"] == 16 * 4 and steps[0]["grads_cpu"] == 16 * 4


# -- epochs: a dataset is known by its identity ------------------------------------------------


class MapDataset(Dataset):  # type: ignore[type-arg]
    """A map-style dataset whose == and hash are the script's (and refuse to run)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((2,), float(index))

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("dataset compared")

    def __hash__(self) -> int:
        raise RuntimeError("dataset hashed")


def test_each_kind_of_dataset_counts_its_epochs() -> None:
    datasets = {
        "tensor": torch.randn(8, 2),
        "list": [torch.randn(2) for _ in range(8)],
        "tensor_dataset": TensorDataset(torch.randn(8, 2)),
        "map": MapDataset(),
    }

    def program() -> list[int]:
        seen = []
        for _ in range(4):
            for data in datasets.values():
                # A tensor and a list serve as map-style datasets too.
                seen.append(sum(1 for _ in DataLoader(cast("Dataset[Any]", data), batch_size=4)))
        return seen

    plain, hooked, agent = plain_and_hooked(program)
    assert hooked == plain
    epochs = [(e["loader"], e["index"]) for e in agent.of("epoch")]
    assert epochs == [(loader, epoch) for epoch in (1, 2, 3, 4) for loader in (1, 2, 3, 4)]


def test_a_dataset_freed_and_another_made_is_a_new_loader() -> None:
    def program() -> None:
        for _ in range(3):
            list(DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))

    _, _, agent = plain_and_hooked(program)
    assert [(e["loader"], e["index"]) for e in agent.of("epoch")] == [(1, 1), (2, 1), (3, 1)]


# -- optimizer steps: a step that raised does not stop the count ---------------------------------


class Flaky(torch.optim.SGD):
    """An optimizer whose step raises when told to (a NaN check, a failed all-reduce)."""

    fail = False

    def step(self, closure: Any = None) -> Any:
        if self.fail:
            raise FloatingPointError("non-finite gradients")
        return super().step(closure)


class Outer(torch.optim.Optimizer):
    """An optimizer wrapping another (Lookahead-style): its inner step may raise."""

    def __init__(self, inner: torch.optim.Optimizer) -> None:
        self.inner = inner
        super().__init__(inner.param_groups, {})

    def step(self, closure: Any = None) -> Any:
        try:
            self.inner.step()
        except FloatingPointError:
            self.inner.fail = False  # type: ignore[attr-defined]
            self.inner.step()


def flaky_steps(steps: int, fail_at: set[int], wrapped: bool = False) -> list[str]:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    inner = Flaky(model.parameters(), 0.1)
    opt: torch.optim.Optimizer = Outer(inner) if wrapped else inner
    seen = []
    for step in range(steps):
        opt.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        inner.fail = step in fail_at
        try:
            opt.step()
            seen.append("ok")
        except FloatingPointError:
            seen.append("failed")
    return seen


def test_every_step_after_one_that_raised_is_recorded() -> None:
    plain, hooked, agent = plain_and_hooked(lambda: flaky_steps(80, {0, 30, 31}))
    assert hooked == plain and plain.count("ok") == 77
    steps = agent.steps()
    assert [s["index"] for s in steps] == list(range(1, 78))
    assert all(s["cleared"] == "zero_grad" for s in steps[1:])


def test_a_wrapping_optimizer_counts_once_even_when_its_inner_step_raised() -> None:
    plain, hooked, agent = plain_and_hooked(lambda: flaky_steps(12, {2, 5}, wrapped=True))
    assert hooked == plain == ["ok"] * 12
    names = {v: k for k, v in agent.names.items()}
    assert [names[s["optimizer"]] for s in agent.steps()] == ["Outer"] * 12


# -- end to end: the same program under python and under `memsight run` --------------------------

HOSTILE = """
import collections
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, TensorDataset

calls = collections.Counter()


class Output(collections.OrderedDict):
    def values(self):
        calls["output.values"] += 1
        return super().values()

    def __getitem__(self, key):
        calls["output.__getitem__"] += 1
        return super().__getitem__(key)


class Shy:
    @property
    def __class__(self):
        raise RuntimeError("__class__ read")


class CountedParameter(nn.Parameter):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        calls["parameter"] += 1
        return super().__torch_function__(func, types, args, kwargs or {})


class Counting(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        calls["mode"] += 1
        return func(*args, **(kwargs or {}))


class Wrapper(torch.Tensor):
    @staticmethod
    def __new__(cls, inner):
        made = torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, dtype=inner.dtype, dispatch_sizes_strides_policy="sizes"
        )
        made.inner = inner
        return made

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        calls["dispatch"] += 1
        if func is torch.ops.aten.dim.default:
            return args[0].inner.dim()
        if func is torch.ops.aten.sym_size.default:
            return args[0].inner.size()
        if func is torch.ops.aten.sym_numel.default:
            return args[0].inner.numel()
        if func is torch.ops.aten.sym_stride.default:
            return args[0].inner.stride()
        return func(*[a.inner if isinstance(a, Wrapper) else a for a in args], **(kwargs or {}))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = CountedParameter(torch.randn(4, 1))

    @property
    def training(self):
        calls["training get"] += 1
        return self.__dict__.get("_mode", True)

    @training.setter
    def training(self, mode):
        calls["training set"] += 1
        self.__dict__["_mode"] = mode

    def forward(self, x):
        return Output(logits=x @ self.weight, shy=SHY)


class Flaky(torch.optim.SGD):
    fail = False

    def step(self, closure=None):
        if self.fail:
            raise FloatingPointError("non-finite gradients")
        return super().step(closure)


SHY = Shy()
torch.manual_seed(0)
model = Net()
opt = Flaky(model.parameters(), 0.05)
opt.state[model.weight]["shadow"] = Wrapper(torch.zeros(4, 1))
datasets = [
    torch.randn(16, 4),
    [torch.randn(4) for _ in range(16)],
    TensorDataset(torch.randn(16, 4)),
]
step = failed = 0
for epoch in range(4):
    model.train()
    for data in datasets:
        for x in DataLoader(data, batch_size=8):
            x = x[0] if isinstance(x, list) else x
            with Counting() if step % 3 == 0 else torch.enable_grad():
                opt.zero_grad()
                loss = dict.__getitem__(model(x), "logits").pow(2).mean()
                loss.backward()
                opt.fail = step == 2
                try:
                    opt.step()
                except FloatingPointError:
                    failed += 1
            step += 1
    model.eval()
print("steps", step, "failed", failed, "loss", round(loss.item(), 5))
print(sorted(calls.items()))
"""


@pytest.mark.slow
def test_a_hostile_program_behaves_as_under_python(tmp_path: Path) -> None:
    write_script(tmp_path, "hostile.py", HOSTILE)
    plain = run_plain(["hostile.py"], tmp_path)
    traced = run_memsight(["hostile.py"], tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout), traced.stderr
    # The script's own calls (its wrapper tensor it never uses: no dispatch of its own).
    assert "('mode', " in plain.stdout and "'dispatch'" not in plain.stdout
    profile = traced.profile()
    # 24 steps, one of which raised: every other one is recorded.
    assert profile.steps is not None
    assert list(profile.steps["index"]) == list(range(1, 24))
    epochs = [(e.get("loader"), e.get("index")) for e in profile.events_of("epoch")]
    assert epochs == [(loader, epoch) for epoch in (1, 2, 3, 4) for loader in (1, 2, 3)]
