"""The agent's readings of the C heap (glibc's mallinfo2): live bytes and bytes kept free.

allocator-retention and growth-per-iteration tell a leak from memory malloc keeps by these two
numbers, so they are checked on a real process under `memsight run`: tensors held show as live
bytes, and the same tensors freed move to the bytes malloc keeps free.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from memsight.profiler.agent import heap as heap_module
from memsight.profiler.agent.heap import PERIODIC_WAITS_S, READ_EVERY_S, HeapReader
from memsight.profiler.profile.model import Profile
from tests.support import (
    child_env,
    memsight_command,
    run_memsight,
    try_load,
    wait_until,
    write_script,
)

MiB = 1024 * 1024
pytestmark = [
    pytest.mark.slow,  # records a real PyTorch process
    pytest.mark.skipif(HeapReader.open() is None, reason="the C library has no mallinfo2"),
]

PHASES = """
import ctypes, sys
import torch

libc = ctypes.CDLL("libc.so.6")
libc.mallopt(-3, 32 * 1024 * 1024)  # M_MMAP_THRESHOLD: tensors below 32 MiB come from the heap
libc.mallopt(-1, 1024 * 1024 * 1024)  # M_TRIM_THRESHOLD: nothing given back below 1 GiB free
print("ready", flush=True)
sys.stdin.readline()
held = [torch.ones(4 * 1024 * 1024) for _ in range(10)]  # 10 tensors of 16 MiB
print("held", flush=True)
sys.stdin.readline()
del held
print("freed", flush=True)
sys.stdin.readline()
"""


class FakeMallinfo:
    """The two fields of glibc's struct mallinfo2 that HeapReader.read adds up, and fordblks."""

    def __init__(self, in_use: int, free: int) -> None:
        self.uordblks, self.hblkhd, self.fordblks = in_use, 0, free


def heap_rows(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    profile: Profile | None = try_load(path)
    heap = profile.table("heap") if profile is not None else None
    if heap is None or not len(heap):
        return None
    return heap["in_use"].astype(np.int64), heap["free"].astype(np.int64)


def test_held_tensors_are_live_bytes_and_freed_ones_bytes_malloc_keeps(tmp_path: Path) -> None:
    script = write_script(tmp_path, "phases.py", PHASES)
    out = tmp_path / "run.memsight"
    command = memsight_command("run", "-q", "--out", out, script)
    with subprocess.Popen(
        command, cwd=tmp_path, env=child_env(), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    ) as run:  # fmt: skip
        assert run.stdin is not None and run.stdout is not None
        try:
            assert run.stdout.readline() == "ready\n"
            # Readings start once torch is imported: the level before anything is held.
            rows = wait_until(lambda: heap_rows(out), 30, "a heap reading")
            assert rows is not None
            base_in_use, base_free = int(rows[0][-1]), int(rows[1][-1])
            count = len(rows[0])

            run.stdin.write("\n")
            run.stdin.flush()
            assert run.stdout.readline() == "held\n"

            def held() -> bool:
                rows = heap_rows(out)
                return rows is not None and int(rows[0][-1]) >= base_in_use + 150 * MiB

            wait_until(held, 30, "the held tensors in the live bytes")

            run.stdin.write("\n")
            run.stdin.flush()
            assert run.stdout.readline() == "freed\n"

            def freed() -> int | None:
                """The bytes malloc keeps free, once the live bytes are back to the base."""
                rows = heap_rows(out)
                if rows is None or len(rows[0]) <= count:
                    return None
                return int(rows[1][-1]) if rows[0][-1] <= base_in_use + 16 * MiB else None

            free = wait_until(freed, 30, "the freed tensors to leave the live bytes")
            assert free is not None
            # What was freed is now free memory malloc keeps (its trim threshold is 1 GiB).
            assert free >= base_free + 150 * MiB
            run.stdin.write("\n")
            run.stdin.close()
            assert run.wait(timeout=60) == 0
        finally:
            if run.poll() is None:
                run.kill()


READ_CPU_S = 40e-6


class FakeClock:
    """time.monotonic / monotonic_ns / thread_time for heap.py, moved by hand; a read costs
    READ_CPU_S of CPU (thread_time is read before and after it)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 0.0

    def monotonic(self) -> float:
        return self.now

    def monotonic_ns(self) -> int:
        return int(self.now * 1e9)

    def thread_time(self) -> float:
        self.cpu += READ_CPU_S
        return self.cpu


def _clocked_reader(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeClock, HeapReader]:
    """A reader of a 300 MiB heap (20 MiB free) on a FakeClock that the test moves."""
    clock = FakeClock()
    monkeypatch.setattr(heap_module, "time", clock)
    return clock, HeapReader(lambda: FakeMallinfo(300 * MiB, 20 * MiB))


def _loop(
    reader: HeapReader, clock: FakeClock, seconds: float, step_every_s: float | None
) -> list[tuple[float, int]]:
    """(time, between) of the readings taken while a loop runs for `seconds` with an
    iteration ending every `step_every_s` (None: no loop). The agent thread asks `due` every
    millisecond or so; the loop calls boundary_row at the end of every iteration."""
    kinds: list[tuple[float, int]] = []
    end = clock.now + seconds
    next_step = clock.now
    while clock.now < end:
        if step_every_s is not None and clock.now >= next_step:
            next_step += step_every_s
            row = reader.boundary_row()
            if row is not None:
                kinds.append((clock.now, row[3]))
        if reader.due(clock.now):
            kinds.append((clock.now, reader.row()[3]))
        clock.now = round(clock.now + 0.001, 6)
    return kinds


def test_while_iterations_end_often_every_reading_is_taken_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Readings between iterations hold no iteration's temporaries, so while iterations come
    # often, all readings are those; and at a Lightning loop's pace (19 ms a step) a reading
    # costs less than its share of a step, so every iteration is read.
    clock, reader = _clocked_reader(monkeypatch)
    kinds = _loop(reader, clock, 2.0, 0.019)
    assert {kind for _, kind in kinds} == {1}
    assert len(kinds) == 106  # every step of the 2 s
    loop_end = clock.now
    kinds = _loop(reader, clock, 1.0, None)  # the loop has ended: the periodic readings take over
    after = [t for t, kind in kinds if kind == 0]
    assert after and after[0] - loop_end <= 0.1 + 1e-9
    assert 17 <= len(after) <= 20
    kinds = _loop(reader, clock, 2.0, 0.5)  # slow iterations: each is read, the periodic
    between = [t for t, kind in kinds if kind == 1]  # readings fill the gaps
    assert len(between) == 4 and len(kinds) >= 28


def test_fast_iterations_are_read_within_their_share_of_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 1 ms steps: a reading (40 us) costs more than its share of one step, so the first
    # iterations are read while the floor lasts, then about one step in 8; never more than
    # the floor plus the share of the loop's time.
    clock, reader = _clocked_reader(monkeypatch)
    kinds = _loop(reader, clock, 4.0, 0.001)
    assert {kind for _, kind in kinds} == {1}
    allowed = heap_module.BOUNDARY_FLOOR_S + heap_module.BOUNDARY_SHARE * 4.0
    assert READ_CPU_S * len(kinds) <= allowed + READ_CPU_S
    assert READ_CPU_S * len(kinds) >= 0.95 * allowed
    # The floor: (nearly) every one of the first 100 steps is read (the fake loop's rounding
    # skips a step now and then).
    assert sum(1 for t, _ in kinds if t < 100.1) >= 95
    # The rest are spread evenly over the loop: no gap far beyond the share's pace.
    gaps = np.diff([t for t, _ in kinds[200:]])
    assert gaps.max() <= 0.01


@pytest.mark.parametrize("fast, slow", [(0.001, 0.003), (0.005, 0.02), (0.019, 0.06)])
def test_a_slower_machine_reads_no_fewer_iterations(
    monkeypatch: pytest.MonkeyPatch, fast: float, slow: float
) -> None:
    # The same loop on a busy machine: each iteration takes longer, a reading costs the same
    # CPU. The readings per iteration do not fall (they fell with a pace in seconds).
    per_iteration = []
    for step in (fast, slow):
        clock, reader = _clocked_reader(monkeypatch)
        iterations = 300
        kinds = _loop(reader, clock, iterations * step, step)
        per_iteration.append(sum(1 for _, kind in kinds if kind == 1) / iterations)
    assert per_iteration[1] >= per_iteration[0]
    assert per_iteration[0] >= 0.1


LOOP = """
import time
import torch

model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(250):
    optimizer.zero_grad()
    model(torch.randn(32, 64)).sum().backward()
    optimizer.step()
    time.sleep(0.005)
"""


def test_a_training_loop_is_read_between_its_iterations(tmp_path: Path) -> None:
    # 250 optimizer steps ~6 ms apart on a quiet machine (a count, not a time: a busy machine
    # makes fewer steps in a second, and the readings are paced per iteration): the heap is
    # read in the step hook, every step while the floor lasts and then within its share of
    # the loop's time, and the agent thread's periodic readings wait while iterations end
    # often.
    script = write_script(tmp_path, "loop.py", LOOP)
    result = run_memsight([str(script)], tmp_path)
    assert result.returncode == 0, result.stderr
    profile = result.profile()
    heap, steps = profile.table("heap"), profile.steps
    assert heap is not None and steps is not None and len(steps) == 250
    during = (heap.t > steps.t[0]) & (heap.t < steps.t[-1])
    between = heap["between"][during] == 1
    said = f"{between.sum()} of {during.sum()} readings between iterations, {len(steps)} steps"
    # Enough for the growth rule's line (20 iterations), and a pace per iteration: one in
    # ten steps at least (a reading costs ~100 us, its share of a 6 ms step 30 us).
    assert between.sum() >= max(20, len(steps) // 10), said
    # A periodic reading comes only after PERIODIC_WAITS_S without an iteration's end, and
    # READ_EVERY_S after the last one: none while steps come fast, a few in each long gap (a
    # busy machine stretches 6 ms steps to 100 ms and more; a census makes a gap too). Readings
    # can race a step's end by a moment: a slack of one in twenty steps.
    ends = np.asarray(steps["end"], dtype=float)
    periodic = np.asarray(heap.t[during][~between], dtype=float)
    allowed = sum(
        0 if gap < PERIODIC_WAITS_S else 1 + int((gap - PERIODIC_WAITS_S) / READ_EVERY_S)
        for gap in np.diff(ends)
    )
    inside = int(((periodic > ends[0]) & (periodic < ends[-1])).sum())
    assert inside <= allowed + len(steps) // 20, f"{said}; {inside} periodic, {allowed} allowed"
