"""TreeWatcher on real process trees: children found within milliseconds (short-lived ones
included), their USS read at least twice a second within a CPU budget, their memory counted
in the children total while they live (and no longer once they exit), their role recorded.

The targets are plain Python (no torch): DataLoader workers are recognised by the name torch
gives them, which a target can take itself by writing /proc/self/comm.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.recorder import proctree
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.recorder.sampler import TreeWatcher, _CpuBucket

MiB = 1024 * 1024
pytestmark = pytest.mark.skipif(not proctree.IS_LINUX, reason="reads /proc")


class Rows(TableBuffer):
    """Keeps the rows TreeWatcher writes."""

    def __init__(self) -> None:
        super().__init__(protocol.CHILD_TABLE)
        self.rows: list[tuple[int, ...]] = []

    def add(self, row: tuple[int, ...]) -> None:
        self.rows.append(row)

    def of(self, pid: int) -> np.ndarray:
        return np.array([r for r in self.rows if r[1] == pid], dtype=np.int64).reshape(-1, 6)


class Watched:
    def __init__(self, target: subprocess.Popen[str], watcher: TreeWatcher, rows: Rows) -> None:
        self.target = target
        self.watcher = watcher
        self.rows = rows
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.totals: list[tuple[float, int]] = []

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [data for k, data in self.events if k == kind]


@contextmanager
def watching(source: str, **options: Any) -> Iterator[Watched]:
    """Run `source` with a TreeWatcher on it (and the children total sampled every 5 ms) until
    it exits; the target prints "ready" once set up, before anything is measured."""
    target = subprocess.Popen(
        [sys.executable, "-c", source], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    assert target.stdout is not None and target.stdout.readline().strip() == "ready"
    rows = Rows()
    watched = Watched(target, TreeWatcher(target.pid, rows, lambda *a, **k: None, **options), rows)
    watched.watcher.emit_event = lambda kind, **data: watched.events.append((kind, data))

    def sample_total() -> None:
        while target.poll() is None:
            watched.totals.append((time.monotonic(), watched.watcher.children_total))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample_total, daemon=True)
    watched.watcher.start()
    sampler.start()
    try:
        yield watched
    finally:
        target.kill()
        target.wait()
        target.stdout.close()
        sampler.join(timeout=5)
        watched.watcher.stop()
        watched.watcher.join(timeout=5)


SHORT_LIVED = """
import os, sys, time
print("ready", flush=True)
pids = []
for burst in range(5):
    time.sleep(0.3)
    for _ in range(2):  # like an evaluation loader's two workers, 0.2 s each
        pid = os.fork()
        if pid == 0:
            with open("/proc/self/comm", "w") as f:
                f.write("pt_data_worker")
            b = bytearray(40 << 20)
            for i in range(0, len(b), 4096):
                b[i] = 1
            time.sleep(0.2)
            os._exit(0)
        pids.append(pid)
    for pid in pids[-2:]:
        os.waitpid(pid, 0)
print(" ".join(map(str, pids)), flush=True)
"""


@pytest.mark.slow  # runs a process tree for a few seconds
def test_short_lived_workers_are_all_found_measured_and_counted_in_the_total() -> None:
    with watching(SHORT_LIVED) as w:
        assert w.target.stdout is not None
        pids = [int(p) for p in w.target.stdout.readline().split()]
        w.target.wait()
    assert len(pids) == 10
    started = {data["pid"]: data for data in w.of_type("child_started")}
    assert set(pids) <= set(started)  # every one found (a 0.5 s rescan missed most)
    roles = {data["pid"]: data["role"] for data in w.of_type("child_role")}
    for pid in pids:
        assert len(w.rows.of(pid)), f"child {pid} never measured"
        role = roles.get(pid, started[pid]["role"])
        assert role == protocol.CHILD_ROLE_DATALOADER_WORKER
    # The last child can exit less than a poll before the target: after the target, the
    # recorder checks every child it knows once more (final_check), and so does this test.
    w.watcher.final_check()
    exits = {data["pid"] for data in w.of_type("child_exited")}
    assert set(pids) <= exits
    # Their 40 MiB each count in the total while they live: both at once in most bursts.
    peak = max(total for _, total in w.totals)
    assert peak >= 70 * MiB
    assert w.totals[-1][1] < 10 * MiB or w.target.poll() is not None


LONG_LIVED = """
import os, sys, time
data = {i: (str(i), float(i)) for i in range(300_000)}  # about 60 MiB of small objects
print("ready", flush=True)
pid = os.fork()
if pid == 0:
    for i in range(0, 300_000, 2000):  # read it all over ~1.5 s: copy on access
        for k in range(i, i + 2000):
            data[k]
        time.sleep(0.01)
    time.sleep(2.0)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.slow  # runs a process tree for a few seconds
def test_a_workers_uss_is_read_at_least_twice_a_second() -> None:
    with watching(LONG_LIVED) as w:
        w.target.wait()
    [child] = [data["pid"] for data in w.of_type("child_started")]
    readings = w.rows.of(child)
    gaps = np.diff(readings[:, 0]) / 1e9
    assert len(readings) >= 8
    assert float(np.median(gaps)) <= 0.45
    assert float(np.percentile(gaps, 90)) <= 0.6  # a loaded 2-core machine delays some
    uss = readings[:, 3]
    assert int(uss.max()) - int(uss[0]) > 30 * MiB  # the copy shows, reading by reading
    assert w.watcher.refreshes >= len(readings)
    # The budget holds: USS readings took at most its share of the time, plus the first ones.
    elapsed = (readings[-1, 0] - readings[0, 0]) / 1e9
    assert w.watcher.refresh_cpu_s <= w.watcher.budget * elapsed + 0.1


RENAMES = """
import os, sys, time
print("ready", flush=True)
pid = os.fork()
if pid == 0:
    time.sleep(0.4)  # a spawned worker imports torch and unpickles its dataset first
    with open("/proc/self/comm", "w") as f:
        f.write("pt_data_worker")
    time.sleep(0.6)
    with open("/proc/self/comm", "w") as f:
        f.write("renamed")  # a worker_init_fn's setproctitle: still a DataLoader worker
    time.sleep(0.3)
    os._exit(0)
helper = os.fork()
if helper == 0:
    time.sleep(1.3)
    os._exit(0)
os.waitpid(pid, 0)
os.waitpid(helper, 0)
"""


@pytest.mark.slow  # runs a process tree for a second or more
def test_a_child_that_names_itself_a_dataloader_worker_gets_that_role() -> None:
    with watching(RENAMES) as w:
        w.target.wait()
    started = w.of_type("child_started")
    assert len(started) == 2 and all(data["role"] == protocol.CHILD_ROLE_OTHER for data in started)
    [changed] = w.of_type("child_role")  # once, and never back
    assert changed["role"] == protocol.CHILD_ROLE_DATALOADER_WORKER
    assert changed["name"] == protocol.DATALOADER_WORKER_NAME
    worker = changed["pid"]
    assert worker in {data["pid"] for data in started}
    assert len(w.rows.of(worker)) >= 2  # read when found, and again as it took the role


# The parent sees its child exit without reaping it (WNOWAIT), says when on stdout, keeps the
# zombie for 1.5 s and then reaps it: the times are the script's own, whatever the machine's load.
EXITS = """
import os, time
print("ready", flush=True)
pid = os.fork()
if pid == 0:
    b = bytearray(60 << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    time.sleep(0.3)
    os._exit(0)
os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # a zombie from here: it must stop counting
print("exited", time.monotonic(), flush=True)
time.sleep(1.5)
os.waitpid(pid, 0)
print("reaped", time.monotonic(), flush=True)
time.sleep(0.2)
"""


@pytest.mark.slow  # runs a process tree for a second or more
def test_an_exited_child_stops_counting_at_once_even_before_it_is_reaped() -> None:
    with watching(EXITS) as w:
        w.target.wait()
        assert w.target.stdout is not None
        said = dict(line.split() for line in w.target.stdout.read().splitlines())
    [child] = w.of_type("child_started")
    [gone] = w.of_type("child_exited")
    assert gone["pid"] == child["pid"]
    assert max(total for _, total in w.totals) >= 55 * MiB
    last_counted = max(t for t, total in w.totals if total > 0)
    exited, reaped = float(said["exited"]), float(said["reaped"])
    # Counted until it exited, and no longer once a zombie: its parent held it 1.5 s more.
    assert exited - 0.5 < last_counted < reaped


def test_the_cpu_bucket_allows_bursts_then_its_rate() -> None:
    bucket = _CpuBucket(rate=0.05, burst=0.05)
    now = time.monotonic()
    assert bucket.ready(now)
    bucket.spend(0.08)  # one expensive reading may overdraw it
    assert not bucket.ready(now)
    assert bucket.ready_at() == pytest.approx(now + 0.03 / 0.05, abs=1e-3)
    assert bucket.ready(now + 0.61)
    assert bucket.ready(now + 100) and bucket.tokens == pytest.approx(0.05)  # capped
