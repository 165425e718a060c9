"""Sampling threads of the recorder.

HostSampler ticks at the run's interval and reads only cheap counters: the main process's
RSS and high-water mark, system available RAM, and the latest child total. TreeWatcher runs
beside it, finds child processes and refreshes their USS within a CPU budget, so a slow
page-table walk never delays a tick.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from profiler.recorder import proctree
from profiler.recorder.blocks import TableBuffer

EmitEvent = Callable[..., None]
SYSTEM_EVERY_NS = 100_000_000


class TreeWatcher(threading.Thread):
    """Tracks the target's descendants and their memory.

    Descendants are rescanned every `scan_s`. USS refreshes (one child at a time, round robin)
    are spaced so that they take at most `budget` of one CPU core.
    """

    def __init__(
        self,
        pid: int,
        children: TableBuffer,
        emit_event: EmitEvent,
        scan_s: float = 0.5,
        budget: float = 0.02,
        min_refresh_s: float = 0.1,
    ) -> None:
        super().__init__(name="memsight-tree", daemon=True)
        self.pid = pid
        self.children_table = children
        self.emit_event = emit_event
        self.scan_s = scan_s
        self.budget = budget
        self.min_refresh_s = min_refresh_s
        self.known: dict[int, proctree.ProcessIdentity] = {}
        self.ever_seen: dict[int, proctree.ProcessIdentity] = {}
        self._uss: dict[int, int] = {}
        self._order: list[int] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()

    @property
    def children_total(self) -> int:
        with self._lock:
            return sum(self._uss.values())

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        next_scan = 0.0
        next_refresh = 0.0
        cursor = 0
        while not self._halt.is_set():
            now = time.monotonic()
            if now >= next_scan:
                self.scan()
                next_scan = now + self.scan_s
            if now >= next_refresh and self._order:
                cursor %= len(self._order)
                pid = self._order[cursor]
                cursor += 1
                started = time.monotonic()
                self.refresh(pid)
                cost = time.monotonic() - started
                next_refresh = started + max(
                    self.min_refresh_s / len(self._order), cost / self.budget
                )
            wake = min(next_scan, next_refresh if self._order else next_scan)
            self._halt.wait(max(0.0, wake - time.monotonic()))

    def scan(self) -> dict[int, proctree.ProcessIdentity]:
        """Rescan the tree; report children that appeared or went away."""
        current = proctree.descendants(self.pid)
        t = time.monotonic_ns()
        for pid, ident in current.items():
            old = self.known.get(pid)
            if old is not None and old.start == ident.start:
                continue
            if old is not None:
                self._gone(pid, t)
            self.known[pid] = ident
            self.ever_seen[pid] = ident
            self._order.append(pid)
            self.emit_event(
                "child_started",
                t=t,
                pid=pid,
                ppid=ident.ppid,
                name=ident.name,
                cmdline=proctree.cmdline(pid)[:64],
            )
            self.refresh(pid)
        for pid in [p for p in self.known if p not in current]:
            self._gone(pid, t)
        return current

    def final_check(self) -> list[proctree.ProcessIdentity]:
        """After the target exited: record which children are gone; return those still alive.

        A scan of descendants no longer works here (orphans now belong to init), so each
        known child is checked by pid and start time.
        """
        t = time.monotonic_ns()
        alive = []
        for pid, ident in list(self.known.items()):
            now = proctree.identity(pid)
            if now is not None and now.start == ident.start:
                alive.append(ident)
            else:
                self._gone(pid, t)
        return alive

    def _gone(self, pid: int, t: int) -> None:
        self.known.pop(pid, None)
        if pid in self._order:
            self._order.remove(pid)
        with self._lock:
            self._uss.pop(pid, None)
        self.emit_event("child_exited", t=t, pid=pid)

    def refresh(self, pid: int) -> None:
        memory = proctree.child_memory(pid)
        if memory is None:
            return
        with self._lock:
            self._uss[pid] = memory.uss
        self.children_table.add(
            (time.monotonic_ns(), pid, memory.rss, memory.uss, memory.pss, memory.swap)
        )


class HostSampler(threading.Thread):
    """Samples the main process and system RAM every `interval_s` into the ram table.

    rss_peak is the highest RSS known to have occurred since the previous sample: the kernel's
    high-water mark when it rose in between (so a spike that came and went between two ticks
    still shows its height), otherwise the larger of the two readings.
    """

    def __init__(
        self,
        pid: int,
        interval_s: float,
        ram: TableBuffer,
        tree: TreeWatcher,
    ) -> None:
        super().__init__(name="memsight-sampler", daemon=True)
        self.interval_s = interval_s
        self.ram_table = ram
        self.tree = tree
        self.main = proctree.MainProcessReader(pid)
        self.system = proctree.SystemMemoryReader()
        self._halt = threading.Event()
        self._last_rss = 0
        self._last_hwm = 0
        self.samples = 0
        self.missed_ticks = 0
        self._available = 0
        self._next_system = 0
        self.on_gone: Callable[[], Any] | None = None

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            deadline = time.monotonic()
            while not self._halt.is_set():
                if not self.sample():
                    break
                deadline += self.interval_s
                now = time.monotonic()
                if deadline < now:
                    skipped = int((now - deadline) / self.interval_s) + 1
                    self.missed_ticks += skipped
                    deadline += skipped * self.interval_s
                # time.sleep, not Event.wait: on a VM every wakeup costs tens of microseconds of
                # CPU, and Event.wait adds Python-level locking on top of it.
                time.sleep(max(0.0, deadline - now))
        finally:
            self.main.close()
            self.system.close()

    def sample(self) -> bool:
        t = time.monotonic_ns()
        reading = self.main.read()
        if reading is None:
            return False
        rss, hwm = reading
        peak = hwm if hwm > self._last_hwm else max(rss, self._last_rss)
        self._last_rss, self._last_hwm = rss, hwm
        if t >= self._next_system:  # system RAM moves slowly: read it every 100 ms
            self._available = self.system.read()[1]
            self._next_system = t + SYSTEM_EVERY_NS
        self.ram_table.add((t, rss, peak, self.tree.children_total, self._available))
        self.samples += 1
        return True
