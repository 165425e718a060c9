"""The census of live tensors and their holders (profiler/agent/census.py), on real CPU tensors.

Each test makes a holder of a known kind (a global, a local two calls deep, an attribute, a
class attribute, a closure cell, ...) and looks for it, by id, in a census taken in this
process. Censuses here get a generous max_seconds: pytest's own frames are walked too, and
the suite may share a slow machine; only the partial-census test wants the budget to run out.
"""

from __future__ import annotations

import collections
import gc
import json
import sys
import threading
import weakref
from typing import Any, ClassVar

import pytest
import torch

from memsight.profiler.agent.census import Census, safe_to_run, take_census
from memsight.profiler.agent.heap import HeapReader

FULL = 30.0  # seconds: a census that is not meant to stop early
MB = 1_000_000

KEPT: list[torch.Tensor] = []  # a module global, filled by one test
MODULE = __name__


def census(**options: Any) -> Census:
    options.setdefault("max_seconds", FULL)
    result = take_census(torch, **options)
    assert not result.partial, result.cost
    consistent(result)
    return result


def consistent(c: Census) -> None:
    """Every storage counted once: under one holder (directly or through a graph), or left
    unattributed; and the JSON is made of JSON's own types (no float, nothing of the process)."""
    data = c.to_json()
    held = sum(h["bytes"] + h["grad_bytes"] for h in data["holders"])
    left = data["holders_left_out"]
    held += left["bytes"] + left["grad_bytes"]
    assert held + data["unattributed_bytes"] == data["tensors"]["bytes"]
    plain(data)
    assert json.loads(json.dumps(data)) == data


def plain(value: Any) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            assert type(k) is str
            plain(v)
    elif isinstance(value, list):
        for v in value:
            plain(v)
    else:
        assert value is None or type(value) in (str, int, bool), repr(value)


def holder(c: Census, id_ending: str) -> dict[str, Any]:
    found = [h for h in c.holders if h["id"].endswith(id_ending)]
    assert len(found) == 1, (id_ending, [h["id"] for h in c.holders])
    return found[0]


def has_no_holder(c: Census, id_ending: str) -> bool:
    return not any(h["id"].endswith(id_ending) for h in c.holders)


def floats(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.float32)


# -- roots -------------------------------------------------------------------------------------


def test_a_module_global_list() -> None:
    KEPT.extend(floats(1000) for _ in range(3))
    try:
        c = census()
    finally:
        KEPT.clear()
    h = holder(c, f"global:{MODULE}:KEPT")
    assert h["name"] == "KEPT"
    assert h["kind"] == "global"
    assert h["container"] == "list"
    assert h["owner"] == MODULE
    assert h["file"] == __file__
    assert (h["count"], h["storages"], h["bytes"]) == (3, 3, 12000)
    assert h["devices"] == ["cpu"] and h["dtypes"] == ["float32"]
    assert h["shapes"] == [[1000]]
    assert h["with_graph"] == 0 and h["grad_bytes"] == 0


def _outer() -> tuple[Census, int, int]:
    return _inner()


def _inner() -> tuple[Census, int, int]:
    acts = [floats(500) for _ in range(4)]
    line = sys._getframe().f_lineno + 1
    c = census()
    del acts
    return c, line, _inner.__code__.co_firstlineno


def test_a_local_two_calls_deep_from_inside_the_callee() -> None:
    c, line, first = _outer()
    h = holder(c, "_inner:" + str(first) + ":acts")
    assert h["name"] == h["root"] == "acts"
    assert h["kind"] == "local"
    assert h["owner"] == h["function"] == "_inner"
    assert h["file"] == __file__
    assert h["line"] == line  # where the frame is now
    assert h["first_line"] == first
    assert h["thread"] == "MainThread"
    assert (h["count"], h["bytes"]) == (4, 8000)


def _fill_until_it_fails() -> None:
    outputs = [floats(250) for _ in range(6)]
    raise MemoryError(f"out of memory after {len(outputs)} outputs")


def test_the_frames_an_error_left_are_roots_when_its_traceback_is_given() -> None:
    # An out-of-memory error that ends the script is reported after every frame has returned:
    # what the failing function held is reached only through the traceback.
    try:
        _fill_until_it_fails()
    except MemoryError as exc:
        error = exc
    first = _fill_until_it_fails.__code__.co_firstlineno
    assert has_no_holder(census(), f"_fill_until_it_fails:{first}:outputs")
    h = holder(census(traceback=error.__traceback__), f"_fill_until_it_fails:{first}:outputs")
    assert h["kind"] == "local" and h["owner"] == "_fill_until_it_fails"
    assert h["line"] == first + 2  # the line that raised
    assert (h["count"], h["bytes"]) == (6, 6000)


def _hold_and_wait(run_census: Any, done: threading.Event) -> int:
    waiting = [floats(700) for _ in range(2)]
    thread = threading.Thread(target=run_census, name="census")
    thread.start()
    assert done.wait(60)
    thread.join()
    del waiting
    return _hold_and_wait.__code__.co_firstlineno


def test_a_local_of_a_waiting_thread_seen_from_another_thread() -> None:
    result: dict[str, Census] = {}
    done = threading.Event()

    def run_census() -> None:
        try:
            result["census"] = census(exclude_threads={threading.get_ident()})
        finally:
            done.set()

    first = _hold_and_wait(run_census, done)
    c = result["census"]
    h = holder(c, f"_hold_and_wait:{first}:waiting")
    assert h["kind"] == "local" and h["thread"] == "MainThread"
    assert (h["count"], h["bytes"]) == (2, 5600)
    assert not any(h["thread"] == "census" for h in c.holders)  # excluded


class Cache:
    def __init__(self) -> None:
        self.cache: list[torch.Tensor] = []


def test_an_attribute_of_an_object_held_by_a_local() -> None:
    keeper = Cache()
    keeper.cache.extend(floats(250) for _ in range(2))
    c = census()
    h = holder(c, ":keeper.cache")
    assert h["id"].startswith("local:")
    assert h["name"] == "Cache.cache"
    assert h["root"] == "cache"
    assert h["kind"] == "attribute"
    assert h["owner"] == "Cache"
    assert h["container"] == "list"
    assert h["file"] == __file__
    assert (h["count"], h["bytes"]) == (2, 2000)


class Registry:
    items: ClassVar[list[torch.Tensor]] = []


def test_a_class_attribute() -> None:
    Registry.items.append(floats(100))
    try:
        c = census()
    finally:
        Registry.items.clear()
    h = holder(c, f"class:{MODULE}:Registry.items")
    assert h["name"] == "Registry.items"
    assert h["kind"] == "class attribute"
    assert h["owner"] == "Registry"
    assert h["file"] == __file__
    assert (h["count"], h["bytes"]) == (1, 400)


class Log:
    def __init__(self) -> None:
        self.entries: list[dict[str, torch.Tensor]] = []


def test_a_dict_in_a_list_in_an_attribute_is_named_by_its_path() -> None:
    log = Log()
    log.entries.extend({"acts": floats(10), "mask": floats(20)} for _ in range(3))
    c = census()
    acts = holder(c, ':log.entries[*]["acts"]')
    assert acts["name"] == 'Log.entries[*]["acts"]'
    assert acts["root"] == "entries"
    assert acts["kind"] == "attribute"
    assert (acts["count"], acts["bytes"]) == (3, 120)
    mask = holder(c, ':log.entries[*]["mask"]')
    assert (mask["count"], mask["bytes"]) == (3, 240)


def test_nested_containers_of_a_global_keep_the_global_kind() -> None:
    history = {"train": [floats(10)], "val": [floats(20), floats(20)]}
    c = census()
    train = holder(c, ':history["train"]')
    assert train["name"] == 'history["train"]' and train["kind"] == "local"
    assert train["container"] == "list"
    assert (train["count"], train["bytes"]) == (1, 40)
    assert holder(c, ':history["val"]')["bytes"] == 160
    del history


def test_a_deque_and_a_set() -> None:
    recent = collections.deque((floats(50) for _ in range(3)), maxlen=5)
    unique = {floats(25), floats(25)}  # tensors hash by identity
    c = census()
    q = holder(c, ":recent")
    assert q["container"] == "deque" and (q["count"], q["bytes"]) == (3, 600)
    s = holder(c, ":unique")
    assert s["container"] == "set" and (s["count"], s["bytes"]) == (2, 200)
    del recent, unique


def _accumulator() -> Any:
    total = floats(300)
    seen: list[torch.Tensor] = []

    def add(x: torch.Tensor) -> torch.Tensor:
        seen.append(x)
        return total

    return add


def test_closure_cells() -> None:
    add = _accumulator()
    add(floats(40))
    add(floats(40))
    c = census()
    first = _accumulator.__code__.co_firstlineno + 4  # the line of `def add`
    seen = holder(c, f"_accumulator.<locals>.add:{first}:seen")
    assert seen["name"] == "cell seen" and seen["kind"] == "closure"
    assert seen["owner"] == "_accumulator.<locals>.add"
    assert seen["file"] == __file__ and seen["line"] == first
    assert (seen["count"], seen["bytes"]) == (2, 320)
    total = holder(c, f"_accumulator.<locals>.add:{first}:total")
    assert total["name"] == "cell total" and total["bytes"] == 1200
    del add


def _remember(x: torch.Tensor, memo: list[torch.Tensor] = []) -> None:  # noqa: B006 (the bug)
    memo.append(x)


def test_a_mutable_default_argument() -> None:
    _remember(floats(60))
    try:
        c = census()
        h = holder(c, ":_remember:" + str(_remember.__code__.co_firstlineno) + ":memo")
        assert h["kind"] == "default" and h["name"] == "default memo"
        assert (h["count"], h["bytes"]) == (1, 240)
    finally:
        _remember.__defaults__[0].clear()  # type: ignore[index]


def _batches() -> Any:
    batch = [floats(90), floats(90)]
    yield batch
    yield batch


def test_locals_of_a_suspended_generator() -> None:
    batches = _batches()
    next(batches)
    c = census()
    h = holder(c, "_batches:" + str(_batches.__code__.co_firstlineno) + ":batch")
    assert h["kind"] == "local" and h["owner"] == "_batches"
    assert h["line"] == _batches.__code__.co_firstlineno + 2  # suspended at the first yield
    assert (h["count"], h["bytes"]) == (2, 720)
    del batches


# -- what counts -------------------------------------------------------------------------------


def test_total_plus_loss_counts_the_activations_its_graph_keeps() -> None:
    x = torch.randn(1024, 1024)  # 4 MiB
    w = torch.randn(1024, 1024, requires_grad=True)
    total: torch.Tensor | int = 0
    for _ in range(12):
        loss = torch.tanh(x @ w).sum()  # tanh saves its 4 MiB output
        total += loss
    del loss
    c = census()
    h = holder(c, ":total")
    assert h["kind"] == "local" and h["container"] == "Tensor"
    assert (h["count"], h["bytes"]) == (1, 4)
    assert h["with_graph"] == 1
    assert h["grad_bytes"] >= 40 * MB
    assert h["grad_storages"] == 12
    # x and w are saved by the graph too, but held directly: counted under their own names.
    assert holder(c, ":x")["bytes"] == holder(c, ":w")["bytes"] == 4 * 2**20
    del total


def test_graphs_of_tensors_no_root_reaches_are_a_holder_of_their_own() -> None:
    w = torch.randn(128, 128, requires_grad=True)
    deep = [[[torch.tanh(w @ w).sum()]]]  # below the depth limit: unreached
    c = census(max_depth=2)
    h = holder(c, "graph:unreached")
    assert h["kind"] == "graph" and h["with_graph"] >= 1
    assert h["grad_bytes"] >= 128 * 128 * 4  # tanh's output, which no Python tensor holds
    assert holder(c, ":w")["bytes"] == 128 * 128 * 4  # held directly: not the graph's
    del deep


def test_saved_tensor_hooks_are_never_run() -> None:
    # Unpacking a saved tensor runs the unpack hook: activation checkpointing's recomputes
    # the forward. The census reads what the pack hook returned instead.
    unpacked: list[int] = []

    def unpack(t: torch.Tensor) -> torch.Tensor:
        unpacked.append(1)
        return t

    w = torch.randn(256, 256, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        out = torch.tanh(w @ w).sum()
    c = census()
    assert unpacked == []
    assert holder(c, ":out")["grad_bytes"] == 256 * 256 * 4  # tanh's output
    out.backward()  # type: ignore[no-untyped-call]
    assert unpacked  # the hooks were real


def test_views_of_one_storage_count_once() -> None:
    views = _views()
    c = census()
    h = holder(c, ":views")
    assert (h["count"], h["storages"], h["bytes"]) == (3, 1, 4000)
    assert h["shapes"] == [[10], [990], [10, 100]]
    del views


def _views() -> list[torch.Tensor]:
    base = floats(1000)
    return [base[:10], base[10:], base.view(10, 100)]


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_a_model_its_grads_and_optimizer_state() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10))
            self.kept: list[torch.Tensor] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y: torch.Tensor = self.body(x)
            self.kept.append(y.detach())
            return y

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(2, 10)).sum().backward()
    opt.step()
    c = census()
    model = holder(c, ":net")
    assert model["container"] == "Net" and model["kind"] == "local"
    assert model["count"] == 8  # 4 parameters and their 4 grads
    assert model["bytes"] == 2 * 2 * (100 + 10) * 4
    kept = holder(c, ":net.kept")
    assert kept["name"] == "Net.kept" and kept["count"] == 1
    momentum = holder(c, ':opt.state[*]["momentum_buffer"]')
    assert momentum["name"] == 'SGD.state[*]["momentum_buffer"]' and momentum["count"] == 4
    del net, opt


def test_a_tensor_subclass_is_counted_without_its_torch_function() -> None:
    calls: list[Any] = []

    class Traced(torch.Tensor):
        @classmethod
        def __torch_function__(
            cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})  # type: ignore[no-untyped-call]

    traced = floats(100).as_subclass(Traced)
    calls.clear()
    c = census()
    assert calls == []
    assert holder(c, ":traced")["bytes"] == 400
    del traced


# -- safety ------------------------------------------------------------------------------------


def test_hostile_objects_are_read_without_calling_any_of_their_methods() -> None:
    called: list[str] = []
    armed = [False]

    def trap(name: str) -> Any:
        def method(self: Any, *args: Any) -> Any:
            if armed[0]:
                called.append(name)
                raise RuntimeError(name)
            return getattr(object, name)(self, *args) if name != "__len__" else 0

        return method

    traps = {
        name: trap(name)
        for name in ("__eq__", "__hash__", "__len__", "__repr__", "__iter__", "__bool__")
    }

    def getattribute(self: Any, name: str) -> Any:
        if armed[0]:
            called.append("__getattribute__ " + name)
            raise RuntimeError(name)
        return object.__getattribute__(self, name)

    def getattr_(self: Any, name: str) -> Any:
        called.append("__getattr__ " + name)
        raise AttributeError(name)

    Hostile = type(
        "Hostile",
        (),
        {**traps, "__getattribute__": getattribute, "__getattr__": getattr_},
    )

    class HostileMeta(type):
        def __getattribute__(cls, name: str) -> Any:
            if armed[0]:
                called.append("meta " + name)
                raise RuntimeError(name)
            return type.__getattribute__(cls, name)

    class WithMeta(metaclass=HostileMeta):
        table: ClassVar[list[torch.Tensor]] = [floats(4)]

    class HostileDict(dict):  # type: ignore[type-arg]
        locals().update(traps)
        items = values = keys = get = trap("items")

    class HostileList(list):  # type: ignore[type-arg]
        locals().update(traps)
        __getitem__ = copy = trap("__getitem__")

    class DictProperty:
        @property
        def __dict__(self) -> Any:  # type: ignore[override]
            called.append("__dict__")
            raise RuntimeError("__dict__")

    reference = [floats(8)]
    before = census()
    hostile = Hostile()
    object.__setattr__(hostile, "data", floats(16))
    key = Hostile()
    by_hostile_key = {key: floats(32)}
    hostile_dict = HostileDict(a=floats(64))
    hostile_list = HostileList([floats(128)])
    meta = WithMeta
    odd = DictProperty()
    armed[0] = True
    try:
        c = census()
    finally:
        armed[0] = False
    assert called == []
    assert holder(c, ":hostile.data")["bytes"] == 64
    assert holder(c, ":by_hostile_key")["bytes"] == 128
    assert holder(c, ':hostile_dict["a"]')["bytes"] == 256
    assert holder(c, ":hostile_list")["bytes"] == 512
    assert holder(c, "WithMeta.table")["bytes"] == 16
    same = holder(c, ":reference")
    assert {k: v for k, v in same.items() if k != "line"} == {
        k: v for k, v in holder(before, ":reference").items() if k != "line"
    }
    del hostile, key, by_hostile_key, hostile_dict, hostile_list, meta, odd, reference


def test_the_census_changes_nothing_and_keeps_nothing() -> None:
    kept = [floats(10)]
    keeper = Cache()
    keeper.cache.append(floats(5))
    frame = sys._getframe()
    names = {k: id(v) for k, v in frame.f_locals.items()}
    attributes = dict(vars(keeper))
    refs = sys.getrefcount(kept[0])
    c = census()
    assert {k: id(v) for k, v in frame.f_locals.items() if k in names} == names
    assert vars(keeper) == attributes
    assert len(kept) == 1 and len(keeper.cache) == 1
    after = sys.getrefcount(kept[0])  # outside the assert: pytest's rewriting holds its operands
    assert after == refs
    assert gc.isenabled()
    assert c.holders
    del frame


def _census_of(n: int) -> tuple[weakref.ref[Cache], Census]:
    keeper = Cache()
    keeper.cache.append(floats(n))
    return weakref.ref(keeper), census()


def test_the_census_keeps_no_reference_to_what_it_saw() -> None:
    # Once the frame that held them is gone (on Python < 3.13 a frame's f_locals, once read,
    # keeps its values until it returns: a debugger's read does the same). With the cyclic
    # collector off, as between collections in a real loop: nothing of the census may sit in
    # a reference cycle that holds the frames it walked, or their tensors outlive them (an
    # inference loop's RAM climbed 6 MiB per census, until the next full collection).
    collecting = gc.isenabled()
    gc.disable()
    try:
        watch, c = _census_of(13)
        alive = watch() is not None
    finally:
        if collecting:
            gc.enable()
    assert holder(c, "_census_of:" + str(_census_of.__code__.co_firstlineno) + ":keeper.cache")
    assert not alive


def test_memsights_own_frames_and_objects_are_not_holders() -> None:
    # The agent's objects are reachable from a model it hooks: what they keep is not the user's.
    reader = HeapReader(floats(50))
    c = census()
    assert not any("/profiler/" in str(h["file"]) for h in c.holders)
    assert has_no_holder(c, ":reader") and has_no_holder(c, ":reader._mallinfo2")
    assert c.unattributed_bytes is not None and c.unattributed_bytes >= 200
    del reader


# -- diff, budget ------------------------------------------------------------------------------


def test_comparing_two_censuses_shows_the_holder_that_grew() -> None:
    # The diagnosis' comparison (profiler/diagnosis/contents.py), on real censuses.
    from memsight.profiler.diagnosis.contents import Census as Taken
    from memsight.profiler.diagnosis.contents import changes

    def taken(data: dict[str, Any]) -> Taken:
        return Taken(0.0, "optimizer steps", 1, data)

    growing = [floats(100)]
    steady = [floats(100)]
    first = taken(census().to_json())
    growing.extend(floats(100) for _ in range(5))
    added = [floats(7)]
    second = taken(census().to_json())
    rows = changes(first, second)
    top = rows[0]
    assert top.row.id.endswith(":growing")
    assert (top.count_delta, top.bytes_delta, top.row.bytes) == (5, 2000, 2400)
    assert not top.gone
    new = next(r for r in rows if r.row.id.endswith(":added"))
    assert (new.count_delta, new.bytes_delta) == (1, new.row.bytes) == (1, 28)  # from zero
    assert not any(r.row.id.endswith(":steady") for r in rows)  # unchanged: left out
    gone = changes(second, first)
    assert next(r for r in gone if r.row.id.endswith(":added")).gone
    del growing, steady, added


def test_no_time_left_gives_a_partial_census_that_says_so() -> None:
    kept = [floats(10)]
    c = take_census(torch, max_seconds=0)
    assert c.partial
    data = c.to_json()
    assert data["cost"]["partial"] is True and data["cost"]["stopped_by"] == "time"
    assert data["unattributed_bytes"] is None  # unknown: the walk did not finish
    assert data["tensors"]["bytes"] >= 40  # the tensors were still all found
    plain(data)
    del kept


def test_the_object_limit_also_stops_it() -> None:
    c = take_census(torch, max_seconds=FULL, max_objects=1)
    assert c.partial and c.cost["stopped_by"] == "objects"


def test_holders_beyond_the_limit_are_summed() -> None:
    kept_a, kept_b, kept_c = [floats(30)], [floats(20)], [floats(10)]
    c = census(max_holders=1)
    assert len(c.holders) == 1
    assert c.to_json()["holders_left_out"]["holders"] >= 2
    del kept_a, kept_b, kept_c


def test_safe_to_run_outside_compiled_code() -> None:
    assert safe_to_run(torch)


@pytest.mark.parametrize("depth", [1, 2])
def test_the_depth_limit_stops_the_descent(depth: int) -> None:
    deep = [[[floats(3)]]]  # the tensor is 3 steps below the local
    c = census(max_depth=depth)
    assert has_no_holder(c, ":deep")
    del deep
