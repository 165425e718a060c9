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

from profiler.agent import heap as heap_module
from profiler.agent.heap import HeapReader
from profiler.profile.model import Profile
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
            # What was freed is now free memory malloc keeps (its trim threshold is 1 GiB).
            assert free >= base_free + 150 * MiB
            run.stdin.write("\n")
            run.stdin.close()
            assert run.wait(timeout=60) == 0
        finally:
            if run.poll() is None:
                run.kill()


class FakeClock:
    """time.monotonic / monotonic_ns / thread_time for heap.py, moved by hand; a read costs
    80 µs of CPU."""

    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 0.0

    def monotonic(self) -> float:
        return self.now

    def monotonic_ns(self) -> int:
        return int(self.now * 1e9)

    def thread_time(self) -> float:
        self.cpu += 40e-6  # called before and after each read
        return self.cpu


def test_while_iterations_end_often_every_reading_is_taken_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The agent thread asks `due` every millisecond or so; the optimizer step hook calls
    # boundary_row at the end of every iteration. Readings between iterations hold no
    # iteration's temporaries, so while iterations come often, all readings are those.
    clock = FakeClock()
    monkeypatch.setattr(heap_module, "time", clock)
    reader = HeapReader(lambda: FakeMallinfo(300 * MiB, 20 * MiB))
    kinds: list[tuple[float, int]] = []

    def run(seconds: float, step_every_s: float | None) -> None:
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

    run(2.0, 0.019)  # a Lightning loop's pace: 96 steps in 1.8 s
    assert {kind for _, kind in kinds} == {1}
    assert 18 <= len(kinds) <= 20  # one per 100 ms: each costs the training thread
    loop_end = clock.now
    run(1.0, None)  # the loop has ended: the periodic readings take over
    after = [t for t, kind in kinds if kind == 0]
    assert after and after[0] - loop_end <= 0.1 + 1e-9
    assert 17 <= len(after) <= 20
    kinds.clear()
    run(2.0, 0.5)  # slow iterations: each is read, and the periodic readings fill the gaps
    between = [t for t, kind in kinds if kind == 1]
    assert len(between) == 4 and len(kinds) >= 28


LOOP = """
import time
import torch

model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.monotonic() + 1.5
while time.monotonic() < end:
    optimizer.zero_grad()
    model(torch.randn(32, 64)).sum().backward()
    optimizer.step()
    time.sleep(0.005)
"""


def test_a_training_loop_is_read_between_its_iterations(tmp_path: Path) -> None:
    # 1.5 s of optimizer steps ~6 ms apart: the heap is read in the step hook every 100 ms,
    # and the agent thread's periodic readings wait until the loop has ended.
    script = write_script(tmp_path, "loop.py", LOOP)
    result = run_memsight([str(script)], tmp_path)
    assert result.returncode == 0, result.stderr
    profile = result.profile()
    heap, steps = profile.table("heap"), profile.steps
    assert heap is not None and steps is not None and len(steps) > 100
    during = (heap.t > steps.t[0]) & (heap.t < steps.t[-1])
    between = heap["between"][during] == 1
    assert between.sum() >= 12, f"{between.sum()} of {during.sum()} readings between iterations"
    assert between.mean() >= 0.9, f"{between.sum()} of {during.sum()} readings between iterations"
