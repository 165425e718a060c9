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

from profiler.agent.heap import HeapReader
from profiler.profile.model import Profile
from tests.support import child_env, memsight_command, try_load, wait_until, write_script

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
