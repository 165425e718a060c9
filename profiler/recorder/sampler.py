"""Sampling threads of the recorder.

HostSampler ticks at the run's interval and reads only cheap counters: the main process's
RSS and high-water mark, system available RAM, and the latest child total. TreeWatcher runs
beside it, finds child processes, tells DataLoader workers from other children, and refreshes
their USS within a CPU budget, so a slow page-table walk never delays a tick.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memsight.profiler import protocol
from memsight.profiler.recorder import proctree
from memsight.profiler.recorder.blocks import TableBuffer

EmitEvent = Callable[..., None]
SYSTEM_EVERY_NS = 100_000_000
UNSEEN_POLLS = 5  # looks at a new pid whose /proc entry is not there yet, one per poll


@dataclass
class _Child:
    ident: proctree.ProcessIdentity
    found: float  # monotonic time it was first seen
    role: str
    due: float  # monotonic time of its next USS refresh
    resident: proctree.ResidentReader | None
    base_rss: int = 0  # RSS when `uss` was read (or when it was found, before any reading)
    uss: int = 0  # the latest USS read from its page tables (0 before the first)
    estimate: int = 0  # uss + the RSS it gained since: what counts in children_total
    measured: bool = False  # its USS was read at least once
    last: float = 0.0  # monotonic time of its latest USS reading
    extra: bool = False  # the next reading is a young child's extra one (spare budget only)
    cmdline: tuple[str, ...] = ()  # as last read (it changes when the child execs)


class _CpuBucket:
    """A token bucket of CPU time: `rate` CPU-seconds per second, at most `burst` saved up.

    Spending may take it below zero; nothing is allowed until it has refilled above zero.
    """

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self._at = time.monotonic()

    def ready(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self._at) * self.rate)
        self._at = now
        return self.tokens > 0.0

    def spend(self, cpu_s: float) -> None:
        self.tokens -= cpu_s

    def ready_at(self) -> float:
        """When it will be above zero again."""
        if self.tokens > 0.0:
            return self._at
        return self._at + (-self.tokens) / self.rate + 1e-4


class TreeWatcher(threading.Thread):
    """Tracks the target's descendants, their memory and their role.

    Finding children: every `poll_s` it reads the last allocated pid (proctree.PidCounter,
    ~1.5 us) and checks each pid allocated since (~10 us each) for a parent in the tree, so a
    child is found within about `poll_s` of its start however short its life (a DataLoader
    worker of a small evaluation may live 30 ms) and however busy the tree. The whole tree is
    rescanned every `scan_s`, and when the new pids cannot be told (the counter wrapped, or
    thousands were allocated at once); rescans cost about 10 us per thread of the tree and are
    paced to `scan_budget` of one core.

    Their memory: each child's USS is read from its page tables (smaps_rollup) every
    `refresh_s`, every `young_refresh_s` during its first `young_s`, earliest due first, as
    long as these reads stay within `budget` of one CPU core, counted in this thread's CPU
    time (a token bucket allowing bursts of `burst_s`); a new child is read at once whatever
    the budget. With large children the budget sets the pace: a read costs about 11 ms per GiB
    of the child's RSS on a small VM. Every `poll_s` in between, each child's RSS is read from
    /proc/PID/statm (~1.2 us): memory it allocated since its last USS reading counts in
    `children_total` at once, and a child that exited (or is a zombie) stops counting.

    Their role ("dataloader-worker" or "other", from the process name) is recorded in
    `child_started` and, when it changes later (a DataLoader worker names itself as its loop
    starts), in a `child_role` event; names of young children are re-read every `name_poll_s`.
    """

    def __init__(
        self,
        pid: int,
        children: TableBuffer,
        emit_event: EmitEvent,
        scan_s: float = 1.0,
        budget: float = 0.05,
        refresh_s: float = 0.4,
        *,
        poll_s: float = 0.02,
        young_s: float = 1.0,
        young_refresh_s: float = 0.1,
        burst_s: float = 0.05,
        scan_budget: float = 0.02,
        name_watch_s: float = 10.0,
        name_poll_s: float = 0.1,
    ) -> None:
        super().__init__(name="memsight-tree", daemon=True)
        self.pid = pid
        self.children_table = children
        self.emit_event = emit_event
        self.scan_s = scan_s
        self.budget = budget
        self.refresh_s = refresh_s
        self.poll_s = poll_s
        self.young_s = young_s
        self.young_refresh_s = young_refresh_s
        self.burst_s = burst_s
        self.scan_budget = scan_budget
        self.name_watch_s = name_watch_s
        self.name_poll_s = name_poll_s
        self.known: dict[int, proctree.ProcessIdentity] = {}
        self.ever_seen: dict[int, proctree.ProcessIdentity] = {}
        # Never one of the target's children: the recorder itself, which is one when the
        # process it records started it (memsight.record).
        self.ignored = {os.getpid()}
        self._children: dict[int, _Child] = {}
        self._total = 0
        self._subtrees: dict[int, int] = {}  # watched pid -> the estimates of its children
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._bucket = _CpuBucket(budget, burst_s)
        # What it costs, in this thread's CPU time (benchmarks and tests read these).
        self.scans = 0
        self.scan_cpu_s = 0.0
        self.refreshes = 0
        self.refresh_cpu_s = 0.0

    @property
    def children_total(self) -> int:
        """The children's memory now: each one's USS plus the RSS it gained since reading it."""
        with self._lock:
            return self._total

    def watch_subtree(self, pid: int) -> None:
        """Keep a total of the children below `pid` (a rank's DataLoader workers), as
        children_total is kept for the whole tree: read it with subtree_total()."""
        with self._lock:
            self._subtrees.setdefault(pid, 0)

    def subtree_total(self, pid: int) -> int:
        with self._lock:
            return self._subtrees.get(pid, 0)

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        counter = proctree.PidCounter()
        try:
            self._loop(counter)
        finally:
            counter.close()
            for child in self._children.values():
                if child.resident is not None:
                    child.resident.close()

    def _loop(self, counter: proctree.PidCounter) -> None:
        next_scan = 0.0  # a full rescan is due
        scan_allowed = 0.0  # pacing of rescans
        next_names = 0.0
        next_poll = 0.0
        rescan = False  # pids were allocated that could not be checked one by one
        unseen: list[tuple[int, int]] = []  # (pid, looks) of new pids not in /proc yet
        while not self._halt.is_set():
            now = time.monotonic()
            new = counter.advance()
            if new is None:
                rescan = True
            elif new or unseen:
                cpu = time.thread_time()
                pending = [pid for pid, _ in unseen]
                still = set(self.discover([*pending, *new]))
                # A pid not in /proc yet is looked at again for UNSEEN_POLLS polls.
                tries = dict(unseen)
                unseen = [
                    (pid, tries.get(pid, 0) + 1)
                    for pid in [*pending, *new]
                    if pid in still and tries.get(pid, 0) + 1 < UNSEEN_POLLS
                ]
                self.scan_cpu_s += time.thread_time() - cpu
            if (rescan or now >= next_scan) and now >= scan_allowed:
                rescan = False
                cpu = time.thread_time()
                self.scan()
                cost = time.thread_time() - cpu
                self.scan_cpu_s += cost
                now = time.monotonic()
                next_scan = now + self.scan_s
                scan_allowed = now + cost / self.scan_budget
            if now >= next_names:
                self._watch_names(now)
                next_names = now + self.name_poll_s
            while self._children:
                pid, child = self._next_refresh()
                if child.due > now or not (not child.measured or self._bucket.ready(now)):
                    break  # a child never read yet is read whatever the budget
                if child.extra and self._bucket.tokens < self.burst_s / 2:
                    child.extra = False  # young children's extra readings wait for spare budget
                    child.due = child.last + self.refresh_s
                    continue
                cpu = time.thread_time()
                self.refresh(pid)
                cost = time.thread_time() - cpu
                self.refresh_cpu_s += cost
                self._bucket.spend(cost)
                now = time.monotonic()
                child.last = now
                child.extra = now - child.found < self.young_s
                child.due = now + (self.young_refresh_s if child.extra else self.refresh_s)
            if now >= next_poll:
                self._track_resident()
                next_poll = now + self.poll_s
            wake = next_poll
            if rescan:
                wake = min(wake, scan_allowed)
            if self._children:
                due = min(child.due for child in self._children.values())
                wake = min(wake, max(due, self._bucket.ready_at()))
            self._halt.wait(max(0.001, wake - time.monotonic()))

    def _next_refresh(self) -> tuple[int, _Child]:
        """The child whose reading is due first; regular readings before young ones' extras."""
        return min(self._children.items(), key=lambda item: (item[1].due, item[1].extra))

    def scan(self) -> dict[int, proctree.ProcessIdentity]:
        """Rescan the tree; report children that appeared or went away."""
        current = proctree.descendants(self.pid)
        t = time.monotonic_ns()
        for pid, ident in current.items():
            self._found(pid, ident, t)
        for pid in [p for p in self.known if p not in current]:
            self._gone(pid, t)
        self.scans += 1
        return current

    def discover(self, pids: list[int]) -> list[int]:
        """Check just-allocated pids for new children; returns those that had no /proc entry
        yet (a process is visible there a moment after its pid is allocated)."""
        found, unseen = proctree.new_descendants(pids, {self.pid, *self.known})
        t = time.monotonic_ns()
        for pid, ident in found.items():
            self._found(pid, ident, t)
        return unseen

    def _found(self, pid: int, ident: proctree.ProcessIdentity, t: int) -> None:
        """Start tracking a child (nothing if it is already tracked)."""
        if pid in self.ignored:
            return
        old = self.known.get(pid)
        if old is not None and old.start == ident.start:
            return
        if old is not None:
            self._gone(pid, t)  # its pid was reused
        resident = proctree.ResidentReader.open(pid)
        role = proctree.child_role(ident.name)
        child = _Child(ident, time.monotonic(), role, due=time.monotonic(), resident=resident)
        child.base_rss = (resident.read() or 0) if resident is not None else 0
        child.cmdline = tuple(proctree.cmdline(pid)[:64])
        self.known[pid] = ident
        self.ever_seen[pid] = ident
        self._children[pid] = child
        self.emit_event(
            "child_started",
            t=t,
            pid=pid,
            ppid=ident.ppid,
            name=ident.name,
            cmdline=list(child.cmdline),
            role=role,
        )

    def _track_resident(self) -> None:
        """Each child's RSS now: what it allocated since its USS was read counts at once."""
        total = 0
        for pid, child in list(self._children.items()):
            if child.resident is None:
                total += child.estimate
                continue
            rss = child.resident.read()
            if rss is None:
                self._gone(pid, time.monotonic_ns())
                continue
            child.estimate = max(child.uss, child.uss + rss - child.base_rss)
            total += child.estimate
        subtrees = self._subtree_totals() if self._subtrees else {}
        with self._lock:
            self._total = total
            self._subtrees = subtrees

    def _subtree_totals(self) -> dict[int, int]:
        """For each watched pid, the estimates of the children below it."""
        with self._lock:
            totals = dict.fromkeys(self._subtrees, 0)
        for child in self._children.values():
            up, steps = child.ident.ppid, 0
            while steps < 64:
                if up in totals:
                    totals[up] += child.estimate
                parent = self._children.get(up)
                if parent is None:
                    break
                up, steps = parent.ident.ppid, steps + 1
        return totals

    def _watch_names(self, now: float) -> None:
        """Re-read the names of young children not yet known as DataLoader workers, and
        their command lines: a child found between its fork and its exec (a spawned Python,
        any program subprocess starts) showed its parent's."""
        for pid, child in list(self._children.items()):
            if child.role != protocol.CHILD_ROLE_OTHER or now - child.found >= self.name_watch_s:
                continue
            if self._check_identity(pid, child):
                child.due, child.extra = now, False  # measure it as it takes up its role
            if pid in self._children:
                self._check_command(pid, child)

    def _check_command(self, pid: int, child: _Child) -> None:
        cmdline = tuple(proctree.cmdline(pid)[:64])
        if cmdline and cmdline != child.cmdline:
            child.cmdline = cmdline
            self.emit_event("child_command", t=time.monotonic_ns(), pid=pid, cmdline=list(cmdline))

    def _check_identity(self, pid: int, child: _Child) -> bool:
        """Re-read a child's name; record a new role. False when it is gone or unchanged."""
        ident = proctree.identity(pid)
        if ident is None or ident.start != child.ident.start:
            self._gone(pid, time.monotonic_ns())
            return False
        role = proctree.child_role(ident.name)
        if ident.name == child.ident.name and role == child.role:
            return False
        child.ident = ident
        self.known[pid] = ident
        changed = role != child.role and child.role != protocol.CHILD_ROLE_DATALOADER_WORKER
        if changed:  # a DataLoader worker stays one, whatever it calls itself later
            child.role = role
            self.emit_event(
                "child_role", t=time.monotonic_ns(), pid=pid, role=role, name=ident.name
            )
        return changed

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
        if self.known.pop(pid, None) is None:
            return
        # Read while it is a zombie (its parent has not collected it yet), if it still is.
        status = proctree.exit_status(pid)
        child = self._children.pop(pid, None)
        if child is not None:
            if child.resident is not None:
                child.resident.close()
            with self._lock:
                self._total = max(0, self._total - child.estimate)
        if status is None:
            self.emit_event("child_exited", t=t, pid=pid)
        else:
            self.emit_event("child_exited", t=t, pid=pid, exit_code=status[0], signal=status[1])

    def refresh(self, pid: int) -> None:
        """Read one child's USS (and name) now; a child found gone is reported gone."""
        child = self._children.get(pid)
        if child is None:
            return
        self._check_identity(pid, child)
        if pid not in self._children:
            return
        memory = proctree.child_memory(pid)
        self.refreshes += 1
        if memory is None:
            self._gone(pid, time.monotonic_ns())
            return
        rss = child.resident.read() if child.resident is not None else None
        child.measured = True
        with self._lock:
            self._total += memory.uss - child.estimate
            child.uss = child.estimate = memory.uss
            child.base_rss = rss if rss is not None else memory.rss
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
        # The job's other processes with an agent (ranks): proc number, reader, their rows
        # go to the procs_ram table (profile/processes.py). Replaced whole, never mutated.
        self._others: tuple[tuple[int, int, proctree.MainProcessReader, list[int]], ...] = ()
        self._others_table: TableBuffer | None = None
        self._others_lock = threading.Lock()

    def add_process(self, proc: int, pid: int, table: TableBuffer) -> None:
        """Sample process `pid` too, every tick, into `table` (procs_ram) as process `proc`."""
        reader = proctree.MainProcessReader.open(pid)
        if reader is None:
            return  # gone already: nothing left to sample
        with self._others_lock:
            self._others_table = table
            self._others = (*self._others, (proc, pid, reader, [0, 0]))
        self.tree.watch_subtree(pid)

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
            for entry in self._others:
                entry[2].close()

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
        if self._others:
            self._sample_others(t)
        return True

    def _sample_others(self, t: int) -> None:
        table = self._others_table
        assert table is not None
        gone = []
        for entry in self._others:
            proc, pid, reader, last = entry
            reading = reader.read()
            if reading is None:
                gone.append(entry)
                continue
            rss, hwm = reading
            peak = hwm if hwm > last[1] else max(rss, last[0])
            last[0], last[1] = rss, hwm
            table.add((t, proc, rss, peak, self.tree.subtree_total(pid), self._available))
        if gone:
            with self._others_lock:
                self._others = tuple(e for e in self._others if e not in gone)
            for entry in gone:
                entry[2].close()
