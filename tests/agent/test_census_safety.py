"""The census inside a real program: bounded whatever the heap, and invisible to the program.

Each test builds, in this process, what an ordinary training script holds (a dataset of
millions of small records, classes used as dict keys, an exec namespace, a numpy buffer, a
per-step timeout, a tracer or a mode of torch's) and takes a census as the agent's schedule
does. Budgets are checked with a clock that advances by a fixed step at each reading: what
the census may do between two readings is then a count, the same on a busy machine.
"""

from __future__ import annotations

import functools
import gc
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import pytest
import torch

from memsight.profiler.agent import census as census_module
from memsight.profiler.agent import (
    census_limits,
    census_objects,
    census_roots,
    census_state,
    census_tensors,
    census_walk,
)
from memsight.profiler.agent.census import Census, take_census, unsafe_because
from memsight.profiler.agent.port import AgentPort

FULL = 30.0
CLOCK_STEP = 0.001  # seconds the fake clock advances at each reading


def floats(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.float32)


def holder(c: Census, id_ending: str) -> dict[str, Any]:
    found = [h for h in c.holders if h["id"].endswith(id_ending)]
    assert len(found) == 1, (id_ending, [h["id"] for h in c.holders])
    return found[0]


@pytest.fixture
def stepping_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The census' clock advances CLOCK_STEP at each reading; yields [readings]."""
    readings = [0]
    start = time.perf_counter()

    def clock() -> float:
        readings[0] += 1
        return start + readings[0] * CLOCK_STEP

    monkeypatch.setattr("memsight.profiler.agent.census.time.perf_counter", clock)
    yield readings


@pytest.fixture
def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many objects the census asked gc about: every item it looks at is asked once."""
    count = [0]
    real = gc.is_tracked

    def is_tracked(obj: Any) -> bool:
        count[0] += 1
        return real(obj)

    # Every census module that asks gc reads it through a global of its own: each is patched.
    for module in (census_objects, census_state, census_tensors, census_roots, census_walk):
        monkeypatch.setattr(module, "_is_tracked", is_tracked)
    return count


# -- bounded cost ------------------------------------------------------------------------------


def test_the_time_budget_holds_inside_one_huge_list(
    stepping_clock: list[int], counted_reads: list[int]
) -> None:
    # A tokenised dataset: one list of 300 k small lists. 20 readings of the clock are the whole
    # budget; the census must look at no more than a few chunks' worth of items after each.
    dataset = [[i, i + 1, i + 2] for i in range(300_000)]
    c = take_census(torch, max_seconds=20 * CLOCK_STEP, find_unreached=False)
    assert c.partial and c.cost["stopped_by"] == "time"
    per_reading = counted_reads[0] / stepping_clock[0]
    assert per_reading < 4 * census_limits.CHUNK, (counted_reads[0], stepping_clock[0])
    del dataset


def test_the_time_budget_holds_inside_one_huge_dict(
    stepping_clock: list[int], counted_reads: list[int]
) -> None:
    index = {str(i): (i, [i]) for i in range(200_000)}
    c = take_census(torch, max_seconds=20 * CLOCK_STEP, find_unreached=False)
    assert c.partial and c.cost["stopped_by"] == "time"
    assert counted_reads[0] / stepping_clock[0] < 4 * census_limits.CHUNK
    del index


def _records(n: int) -> list[dict[str, Any]]:
    # Annotations: each a dict with a nested dict, so that every record is walked.
    return [{"bbox": [i, 1, 2, 3], "label": i, "meta": {"ids": [i], "src": "a"}} for i in range(n)]


MEMORY_PROBE = """
import gc, sys
import torch
from memsight.profiler.agent.census import take_census

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

records = [{"bbox": [i, 1, 2, 3], "label": i, "meta": {"ids": [i], "src": "a"}}
           for i in range(int(sys.argv[1]))]
kept = [torch.ones(10) for _ in range(3)]
gc.collect()
before = hwm()
c = take_census(torch, max_seconds=300, find_unreached=False)
held = [h["bytes"] for h in c.holders if h["id"].endswith(":kept")]
print(hwm() - before, c.cost["objects"], int(c.partial), held)
"""


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_the_census_memory_does_not_grow_with_the_heap(tmp_path: Any) -> None:
    # In a process of its own, so that its peak RSS is the census' alone: 300 k records of two
    # dicts each, every one walked.
    import subprocess

    script = tmp_path / "probe.py"
    script.write_text(MEMORY_PROBE)
    done = subprocess.run(
        [sys.executable, str(script), "300000"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(Path(census_module.__file__).parents[2]),
    )
    assert done.returncode == 0, done.stderr
    added, objects, partial, held = done.stdout.split(maxsplit=3)
    assert partial == "0" and int(objects) >= 600_000
    assert held.strip() == "[120]"
    # 16 MiB + 1 % of the RSS is the target; the census' own tables stay far below it.
    assert int(added) < 16 * 2**20, added


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_holders_outside_a_huge_collection_are_named_before_it_is_read(
    stepping_clock: list[int],
) -> None:
    # The time for the walk outside collections (this process' own objects), and 40 readings
    # more: enough for the losses, not for the 600 k objects of the dataset.
    outside = take_census(torch, max_seconds=FULL, find_unreached=False).cost["objects"]
    readings = outside // census_limits.CHECK_EVERY + 40
    dataset = _records(200_000)  # met first, read last
    losses = [floats(4) for _ in range(3000)]  # a collection too, but a small one
    kept = [floats(100)]
    c = take_census(torch, max_seconds=readings * CLOCK_STEP, find_unreached=False)
    assert c.partial
    assert holder(c, ":kept")["bytes"] == 400
    assert holder(c, ":losses")["count"] == 3000
    del dataset, losses, kept


# -- never the user's code ---------------------------------------------------------------------


def test_classes_with_a_metaclass_hash_are_never_hashed() -> None:
    calls: list[str] = []

    class Meta(type):
        def __hash__(cls) -> int:
            calls.append("__hash__")
            raise RuntimeError("hashed")

        def __eq__(cls, other: object) -> bool:
            calls.append("__eq__")
            raise RuntimeError("compared")

    class Key(metaclass=Meta):
        pass

    class Record(metaclass=Meta):
        def __init__(self) -> None:
            self.data = floats(8)

    by_class = {id(Key): floats(16)}
    records = [Record() for _ in range(3)]
    calls.clear()
    c = take_census(torch, max_seconds=FULL)
    assert calls == []
    assert not c.partial and c.cost["errors"] == 0
    assert holder(c, ":by_class")["bytes"] == 64
    assert holder(c, ":records[*].data")["bytes"] == 96
    del by_class, records, Key, Record


class CountingMapping(Mapping[str, Any]):
    """A namespace of the user's: every read is counted."""

    def __init__(self, data: dict[str, Any], calls: list[str]) -> None:
        self.data, self.calls = data, calls

    def __getitem__(self, key: str) -> Any:
        self.calls.append("__getitem__")
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        self.calls.append("__iter__")
        return iter(self.data)

    def __len__(self) -> int:
        self.calls.append("__len__")
        return len(self.data)

    def items(self) -> Any:
        self.calls.append("items")
        return self.data.items()

    def keys(self) -> Any:
        self.calls.append("keys")
        return self.data.keys()


def test_a_namespace_of_the_users_is_never_read() -> None:
    # exec(code, globals, mapping) in another thread, waiting: its frame's f_locals is the
    # mapping; reading it would run the user's items().
    calls: list[str] = []
    ready, release = threading.Event(), threading.Event()
    namespace = CountingMapping({"x": floats(4)}, calls)
    code = compile("ready.set()\nrelease.wait(30)\n", "<user exec>", "exec")
    worker = threading.Thread(
        target=exec, args=(code, {"ready": ready, "release": release}, namespace)
    )
    worker.start()
    try:
        assert ready.wait(30)
        calls.clear()
        c = take_census(torch, max_seconds=FULL)
        seen = list(calls)
    finally:
        release.set()
        worker.join(30)
    assert seen == []
    assert not c.partial


def _resize_after_census() -> None:
    buffer = np.zeros(16)
    take_census(torch, max_seconds=FULL, find_unreached=False)
    buffer.resize(32)  # refcheck: raises while anything else holds a reference to it


def test_a_local_buffer_can_be_resized_after_a_census() -> None:
    _resize_after_census()


def test_the_locals_a_function_kept_itself_stay_as_they_were() -> None:
    # `env = locals()` holds the frame's snapshot: the census leaves it alone.
    value = floats(3)
    env = locals()
    take_census(torch, max_seconds=FULL, find_unreached=False)
    assert env["value"] is value


class StepTimeout(Exception):
    pass


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_a_signal_handlers_exception_during_a_census_reaches_the_script() -> None:
    records = _records(300_000)  # a census of seconds
    main = threading.get_ident()
    census_file = census_module.__file__

    def in_census() -> bool:
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code.co_filename == census_file:
                return True
            frame = frame.f_back
        return False

    def alarm() -> None:
        deadline = time.monotonic() + 60
        while not in_census() and time.monotonic() < deadline:
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGALRM)

    def on_alarm(signum: int, frame: Any) -> None:
        raise StepTimeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    sender = threading.Thread(target=alarm)
    try:
        sender.start()
        with pytest.raises(StepTimeout) as raised:
            take_census(torch, max_seconds=FULL, find_unreached=False)
    finally:
        sender.join(60)
        signal.signal(signal.SIGALRM, previous)
    files = []
    tb = raised.value.__traceback__
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert census_file in files  # raised while the census ran, and not swallowed by it
    assert gc.isenabled()
    del records


def test_the_schedule_lets_the_scripts_exception_through() -> None:
    from memsight.profiler.agent.census_schedule import CensusSchedule

    class Agent:
        started = time.monotonic()
        errors: ClassVar[list[str]] = []

        def error(self, where: str, exc: BaseException) -> None:
            self.errors.append(where)

        def event(self, *args: Any, **kwargs: Any) -> None:
            pass

    def raise_from_the_script(*args: Any, **kwargs: Any) -> Any:
        raise StepTimeout()  # this test file is the script's code

    agent = Agent()
    schedule = CensusSchedule(cast(AgentPort, agent), torch, "every-1")
    original = census_module.take_census
    census_module.take_census = raise_from_the_script
    try:
        with pytest.raises(StepTimeout) as raised:
            schedule.at_boundary("optimizer steps", 1)
    finally:
        census_module.take_census = original
    assert agent.errors == []
    # Shown from the script's code on: no census frame between the schedule and the handler.
    tb = raised.value.__traceback__
    files = []
    while tb is not None:
        files.append(Path(tb.tb_frame.f_code.co_filename).name)
        tb = tb.tb_next
    assert files[-1] == "test_census_safety.py" and "census.py" not in files


# -- tensors read without the program seeing it -------------------------------------------------


class Wrapper(torch.Tensor):
    """A wrapper subclass, as DTensor or a quantized tensor is: its data is `inner`."""

    calls: ClassVar[list[str]] = []
    inner: torch.Tensor  # type: ignore[assignment]  # shadows torch's Tensor.inner(), as DTensor's fields do

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Wrapper:
        made = torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, dtype=inner.dtype, device=inner.device
        )
        made.inner = inner
        return made

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # torch types it as a plain method
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        cls.calls.append(str(func))
        unwrap = [a.inner if type(a) is Wrapper else a for a in args]
        return func(*unwrap, **(kwargs or {}))


def test_a_wrapper_subclass_is_counted_by_what_it_holds_without_dispatching() -> None:
    wrapped = Wrapper(floats(25))
    Wrapper.calls.clear()
    c = take_census(torch, max_seconds=FULL)
    assert Wrapper.calls == []
    assert holder(c, ":wrapped")["bytes"] == 100
    del wrapped


def test_an_active_torch_function_mode_sees_none_of_the_census_calls() -> None:
    from torch.overrides import TorchFunctionMode

    seen: list[Any] = []

    class Counter(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(func)
            return func(*args, **(kwargs or {}))

    kept = [floats(5)]
    with Counter():
        assert unsafe_because(torch) == "torch function mode"  # the schedule waits
        take_census(torch, max_seconds=FULL)  # and a census taken anyway is not seen
    assert seen == []
    del kept


class Probe(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.reasons: list[str | None] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.reasons.append(unsafe_because(torch))
        return x * 2


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_no_census_while_tracing_or_transforming() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    probe = Probe()
    x = torch.ones(3)
    probe(x)
    torch.jit.trace(probe, (x,), check_trace=False)  # type: ignore[no-untyped-call]
    torch.fx.symbolic_trace(probe)
    torch.func.vmap(probe)(torch.ones(2, 3))

    class Passing(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    with Passing():  # type: ignore[no-untyped-call]
        probe(x)
    assert probe.reasons == [
        None,
        "jit tracing",
        "fx tracing",
        "functorch transform",
        "dispatch mode",
    ]


# -- a census in slices ------------------------------------------------------------------------


def _sliced(**options: Any) -> tuple[Census, int]:
    progress = census_module.CensusProgress()
    for _ in range(10_000):
        c = take_census(torch, progress=progress, find_unreached=False, **options)
        if not c.cost["continues"]:
            return c, progress.slices
    raise AssertionError("the census never ended")


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_a_census_too_big_for_one_pause_goes_on_where_it_stopped(
    stepping_clock: list[int], counted_reads: list[int]
) -> None:
    outside = take_census(torch, find_unreached=False, max_seconds=1e9).cost["objects"]
    records: list[Any] = _records(100_000)
    records[50_000:50_000] = [{"acts": floats(10)} for _ in range(100)]
    kept = [floats(100)]
    whole = take_census(torch, find_unreached=False, max_seconds=1e9).cost["objects"]
    c, slices = _sliced(max_seconds=200 * CLOCK_STEP)
    assert slices > 3
    assert not c.partial and c.cost["stopped_by"] is None and c.cost["slices"] == slices
    # Every record was read once, give or take the batch each slice reads again; the walk
    # outside the collections is made again by every slice.
    again = slices * (outside + 4 * census_limits.CHUNK)
    assert c.cost["objects"] < whole + again, (c.cost, whole, outside)
    assert counted_reads[0] / stepping_clock[0] < 4 * census_limits.CHUNK
    inside = holder(c, ':records[*]["acts"]')
    assert (inside["count"], inside["storages"], inside["bytes"]) == (100, 100, 4000)
    assert holder(c, ":kept")["bytes"] == 400
    held = sum(h["bytes"] + h["grad_bytes"] for h in c.holders)
    assert held == c.tensors["bytes"]  # every storage counted once
    del records, kept


def test_what_changes_between_slices_is_counted_once() -> None:
    # The program runs between slices: what the walk outside collections finds is as of the
    # last slice; a collection's items read by an earlier slice are not counted again.
    gc.collect()  # garbage of earlier tests, walked now and gone later, would inflate `outside`
    outside = take_census(torch, find_unreached=False, max_seconds=FULL).cost["objects"]
    records: list[Any] = [{"acts": floats(1)} for _ in range(5000)]
    kept = [floats(100)]
    progress = census_module.CensusProgress()
    limit = outside + 3000  # the walk outside collections, and part of the records
    first = take_census(torch, progress=progress, find_unreached=False, max_objects=limit)
    assert first.cost["continues"]
    kept.append(floats(100))  # the loop kept one more
    second = take_census(torch, progress=progress, find_unreached=False, max_seconds=FULL)
    if second.cost["continues"]:  # only if the machine stalled for the whole pause
        second = take_census(torch, progress=progress, find_unreached=False, max_seconds=FULL)
    assert not second.cost["continues"]
    assert holder(second, ":kept")["bytes"] == 800
    inside = holder(second, ':records[*]["acts"]')
    assert (inside["count"], inside["bytes"]) == (5000, 20000)
    del records, kept


def test_the_schedule_sends_a_census_in_slices_once_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from memsight.profiler.agent import census_schedule

    monkeypatch.setattr(census_schedule, "SLICES_SHARE", 1.0)
    original = census_module.take_census
    outside = original(torch, find_unreached=False, max_seconds=FULL).cost["objects"]

    def small_slices(torch: Any, **options: Any) -> Census:
        limit = outside + 3000  # the walk outside collections, and part of the records
        return original(torch, **{**options, "max_objects": limit, "max_seconds": FULL})

    monkeypatch.setattr(census_module, "take_census", small_slices)
    sent: list[dict[str, Any]] = []

    class Agent:
        started = time.monotonic()

        def error(self, where: str, exc: BaseException) -> None:
            raise AssertionError(where) from exc

        def event(self, kind: str, **data: Any) -> None:
            sent.append(data)

    records: list[Any] = [{"acts": floats(1)} for _ in range(5000)]
    schedule = census_schedule.CensusSchedule(cast(AgentPort, Agent()), torch, "every-100")
    for step in range(1, 200):
        schedule.at_boundary("optimizer steps", step)
    assert sent, "no census"
    first = sent[0]
    assert first["iteration"] > 100  # begun at step 100, sent when whole
    cost = first["census"]["cost"]
    assert cost["slices"] > 1 and not cost["partial"] and not cost["continues"]
    acts = [h for h in first["census"]["holders"] if h["id"].endswith(':records[*]["acts"]')]
    assert acts and acts[0]["count"] == 5000
    del records


# -- bytes that are true -----------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
def test_sparse_tensors_count_their_parts() -> None:
    dense = torch.zeros(100, 100)
    dense[::7, ::3] = 1.0
    coo = dense.to_sparse()
    csr = dense.to_sparse_csr()
    c = take_census(torch, max_seconds=FULL)
    parts = [coo._indices(), coo._values()]
    assert holder(c, ":coo")["bytes"] == sum(p.untyped_storage().nbytes() for p in parts)
    parts = [csr.crow_indices(), csr.col_indices(), csr.values()]
    assert holder(c, ":csr")["bytes"] == sum(p.untyped_storage().nbytes() for p in parts)
    del dense, coo, csr


def test_tensors_over_one_numpy_buffer_count_it_once() -> None:
    buffer = np.zeros(10_000, dtype=np.float32)
    views = [torch.from_numpy(buffer[start:]) for start in (0, 1000, 5000)]
    c = take_census(torch, max_seconds=FULL)
    assert holder(c, ":views")["bytes"] == 40_000
    assert holder(c, ":views")["count"] == 3
    del buffer, views


def test_tensors_held_by_iterators_storages_and_tensor_attributes_are_named() -> None:
    pending = iter([floats(10), floats(10)])
    mapped = map(torch.neg, [floats(20)])
    storage = floats(30).untyped_storage()
    tagged = floats(1)
    tagged.mask = floats(40)  # type: ignore[attr-defined]
    c = take_census(torch, max_seconds=FULL)
    assert holder(c, ":pending")["bytes"] == 80
    assert holder(c, ":mapped")["bytes"] == 80
    assert holder(c, ":storage")["bytes"] == 120
    assert holder(c, ":tagged")["bytes"] == 4 + 160
    del pending, mapped, storage, tagged


def test_a_memory_mapped_tensor_is_labelled_file_backed(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.ones(2**19)}, path)  # 2 MiB
    loaded = torch.load(path, mmap=True)
    in_ram = torch.ones(2**19)
    c = take_census(torch, max_seconds=FULL)
    mapped = holder(c, ':loaded["w"]')
    assert mapped["bytes"] == 2 * 2**20 and mapped["file_bytes"] == 2 * 2**20
    assert holder(c, ":in_ram")["file_bytes"] == 0
    del loaded, in_ram


def test_the_census_total_is_what_is_truly_held() -> None:
    # A zoo of the above, 4 MB each: the census' total and its holders' sum are within 5 %.
    n = 10**6
    buffer = np.zeros(n, dtype=np.float32)
    zoo = {
        "plain": floats(n),
        "views": [torch.from_numpy(buffer), torch.from_numpy(buffer[n // 2 :])],
        "sparse": torch.eye(1000).to_sparse(),
        "iterator": iter([floats(n)]),
        "storage": floats(n).untyped_storage(),
    }
    truly = 4 * n * 4  # plain, the buffer once, the iterator's, the storage
    truly += cast(torch.Tensor, zoo["sparse"])._indices().untyped_storage().nbytes()
    truly += cast(torch.Tensor, zoo["sparse"])._values().untyped_storage().nbytes()
    c = take_census(torch, max_seconds=FULL)
    held = sum(h["bytes"] for h in c.holders if ":zoo" in h["id"])
    assert abs(held - truly) <= 0.05 * truly, (held, truly)
    del buffer, zoo


# -- where ------------------------------------------------------------------------------------


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)
        self.att_maps: list[torch.Tensor] = []


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])


def test_holders_in_two_instances_of_one_module_say_which() -> None:
    net = Net()
    cast(Block, net.blocks[0]).attn.att_maps.append(floats(10))
    cast(Block, net.blocks[1]).attn.att_maps.append(floats(20))
    c = take_census(torch, max_seconds=FULL)
    first = holder(c, ":net.blocks.0.attn.att_maps")
    second = holder(c, ":net.blocks.1.attn.att_maps")
    assert (first["name"], first["bytes"]) == ("blocks.0.attn.att_maps", 40)
    assert (second["name"], second["bytes"]) == ("blocks.1.attn.att_maps", 80)
    del net


# -- the program under memsight behaves as under python ------------------------------------------

HOSTILE = """
import sys
import time

import numpy as np
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
x = torch.randn(4, 8)
with torch.no_grad():
    for _ in range(6):  # inference batches: censuses at forwards under every-1
        model(x)
time.sleep(1.0)  # the census budget (0.5 % of the run) allows one at the trace's forward
traced = torch.jit.trace(model, x)  # its check runs the model again: no census may enter it
print("traced", tuple(traced(x).shape))
buffer = np.zeros(16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(12):
    loss = model(x).pow(2).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    buffer.resize(16 + step)  # refcheck: nothing else may hold the buffer after a census
print("loss", round(float(loss), 4))
"""


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_tracing_and_a_resized_buffer_behave_as_under_python(tmp_path: Path) -> None:
    import subprocess

    from tests.support import run_memsight, write_script

    write_script(tmp_path, "hostile.py", HOSTILE)
    plain = subprocess.run(
        [sys.executable, "-W", "ignore", "hostile.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode == 0, plain.stderr
    under = run_memsight(["--census", "every-1", "hostile.py"], tmp_path)
    assert under.returncode == plain.returncode, under.stderr
    assert under.stdout == plain.stdout
    events = [e for e in under.profile().events if e.type == "census"]
    # Censuses did run at iterations (the first two whatever the budget).
    assert len([e for e in events if e.data["iterations_are"] != "time"]) >= 2


@functools.cache
def cached_features(n: int) -> torch.Tensor:
    return floats(n)


def test_tensors_an_lru_cache_keeps_are_named_by_the_cached_function() -> None:
    cached_features.cache_clear()
    for n in (10, 20, 30):
        cached_features(n)
    c = take_census(torch, max_seconds=FULL)
    assert holder(c, ":cached_features")["bytes"] == 4 * 60
    cached_features.cache_clear()


def batches_keeping_a_window() -> Iterator[int]:
    window: list[torch.Tensor] = []
    for i in range(100):
        window.append(floats(25))  # kept by the suspended generator's local
        yield i


def test_a_suspended_generators_locals_are_named_though_only_a_loop_holds_it() -> None:
    seen = None
    for i in batches_keeping_a_window():  # the generator is on this frame's value stack only
        if i == 3:
            seen = take_census(torch, max_seconds=FULL)
            break
    assert seen is not None
    assert not seen.partial, seen.cost
    assert holder(seen, ":batches_keeping_a_window:" + str(FIRST_LINE) + ":window")["bytes"] == 400


FIRST_LINE = batches_keeping_a_window.__code__.co_firstlineno
