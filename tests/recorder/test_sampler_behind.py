"""Peaks stay true when the sampler falls behind: a spike that came and went while the
sampler could not take a sample still has its full height in the next row's rss_peak (the
kernel's high-water mark, VmHWM), however many ticks were missed."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.recorder import proctree
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.recorder.sampler import HostSampler, TreeWatcher
from tests.support import wait_until

MiB = 1024 * 1024

SPIKE = """
import sys
print("ready", flush=True)
sys.stdin.readline()
b = bytearray(200 * 1024 * 1024)
for i in range(0, len(b), 4096):
    b[i] = 1
del b
print("freed", flush=True)
sys.stdin.readline()
"""


class GatedReader:
    """The main-process reader, held at a gate the test closes: the sampler cannot take a
    sample (as on a machine too busy to run it) until the gate opens again."""

    def __init__(self, inner: proctree.MainProcessReader) -> None:
        self.inner = inner
        self.open = threading.Event()
        self.open.set()
        self.held = threading.Event()  # the sampler waits at the closed gate

    def read(self) -> tuple[int, int] | None:
        if not self.open.is_set():
            self.held.set()
            self.open.wait()
        return self.inner.read()

    def close(self) -> None:
        self.inner.close()


class Rows(TableBuffer):
    """The ram table's rows, kept as the sampler adds them."""

    def __init__(self) -> None:
        super().__init__(protocol.RAM_TABLE)
        self.kept: list[tuple[int, ...]] = []

    def add(self, row: tuple[int, ...]) -> None:
        self.kept.append(row)


@pytest.mark.slow  # a real process allocates, touches and frees 200 MiB (~1 s)
def test_a_spike_while_the_sampler_was_held_keeps_its_height_in_the_next_peak() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", SPIKE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as target:
        assert target.stdin is not None and target.stdout is not None
        sampler = None
        try:
            assert target.stdout.readline() == "ready\n"
            rows = Rows()
            tree = TreeWatcher(target.pid, TableBuffer(protocol.CHILD_TABLE), lambda *a, **k: None)
            sampler = HostSampler(target.pid, 0.001, rows, tree)  # asked: every 1 ms
            gate = GatedReader(sampler.main)
            sampler.main = gate  # type: ignore[assignment]
            sampler.start()
            wait_until(lambda: sampler.samples >= 5, what="the first samples")
            gate.open.clear()
            wait_until(gate.held.is_set, what="the sampler to wait at the gate")
            held_at = len(rows.kept)
            target.stdin.write("spike\n")
            target.stdin.flush()
            assert target.stdout.readline() == "freed\n"  # allocated, touched and freed
            gate.open.set()
            wait_until(lambda: len(rows.kept) >= held_at + 3, what="samples after the spike")
        finally:
            if sampler is not None:
                sampler.stop()
                sampler.join(timeout=5)
            target.stdin.write("\n")
            target.stdin.close()
            target.wait(timeout=10)
    ram = np.array(rows.kept)
    rss, peak = ram[:, 1], ram[:, 2]
    assert sampler.missed_ticks > 0  # it fell behind the 1 ms it was asked for
    # No sample saw the spike itself: every reading of RSS is far below its height...
    assert int(rss.max() - rss.min()) < 100 * MiB
    # ...yet the first row after the gate opened has all of it, and so has the run's peak.
    assert int(peak[held_at] - rss.min()) > 195 * MiB
    assert int(peak.max()) == int(peak[held_at])
    assert (peak >= rss).all()
