"""Read process and system memory from outside the target.

On Linux everything comes straight from /proc through file descriptors kept open between
reads (a pread of /proc/PID/statm costs about a microsecond). Elsewhere psutil does the work.

Children are measured by USS (pages only they hold), so the tree total
``main RSS + sum(child USS)`` never counts a copy-on-write page twice. USS needs a walk of the
child's page tables (/proc/PID/smaps_rollup: about 11 ms per GiB of the child's RSS on a
2-core VM, 4-6 ms for a 500 MiB DataLoader worker), so callers refresh it on a CPU budget
rather than every tick.

Descendants are found through /proc/PID/task/TID/children (a few files per process of the
tree) rather than by reading every process's stat; /proc/loadavg's last allocated pid tells
cheaply which pids were handed out since the last look, and checking only those finds a new
child within milliseconds without rescanning the tree.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import psutil

from memsight.profiler import protocol

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
IS_LINUX = sys.platform.startswith("linux") and os.path.isdir("/proc/self")


@dataclass
class ChildMemory:
    rss: int
    uss: int
    pss: int
    swap: int


# What a child process is, as recorded in `child_started` / `child_role` events.


def child_role(name: str) -> str:
    """The role of a child process from its name (/proc/PID/comm)."""
    if name == protocol.DATALOADER_WORKER_NAME:
        return protocol.CHILD_ROLE_DATALOADER_WORKER
    return protocol.CHILD_ROLE_OTHER


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    ppid: int
    name: str
    start: int  # start time in clock ticks since boot; tells a reused pid apart


class ProcFile:
    """A /proc file kept open and re-read from offset 0."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)

    def read(self) -> bytes:
        return os.pread(self.fd, 16384, 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class MainProcessReader:
    """RSS and peak RSS (VmHWM) of the target's main process.

    Both come from one read of /proc/PID/status per sample: every system call counts at
    100 samples a second.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._status: ProcFile | None = None
        self._proc: psutil.Process | None = None
        # Why the last read gave None ("" while reads work): a run with no sample says why.
        self.failure = ""
        if IS_LINUX:
            self._status = ProcFile(f"/proc/{pid}/status")
        else:
            self._proc = psutil.Process(pid)

    @classmethod
    def open(cls, pid: int) -> MainProcessReader | None:
        """A reader for `pid`, or None if it is already gone (a short child whose hello came
        after its end)."""
        try:
            return cls(pid)
        except (OSError, psutil.Error):
            return None

    def read(self) -> tuple[int, int] | None:
        """(rss, high-water mark) in bytes, or None once the process is gone."""
        try:
            if self._status is not None:
                status = self._status.read()
                at = status.find(b"VmRSS:")
                if at < 0:  # a zombie has no memory lines: the process has exited
                    self.failure = f"/proc/{self.pid}/status has no memory lines (it exited)"
                    return None
                rss = int(status[at + 6 : status.index(b"kB", at)]) * 1024
                at = status.find(b"VmHWM:")
                hwm = int(status[at + 6 : status.index(b"kB", at)]) * 1024 if at >= 0 else rss
                return rss, max(hwm, rss)
            assert self._proc is not None
            info = self._proc.memory_info()
            peak = getattr(info, "peak_wset", 0) or info.rss
            return info.rss, max(peak, info.rss)
        except (OSError, ValueError, psutil.Error) as exc:
            self.failure = f"reading the memory of pid {self.pid}: {type(exc).__name__}: {exc}"
            return None

    def close(self) -> None:
        if self._status is not None:
            self._status.close()


class ResidentReader:
    """Resident set size of one process, from /proc/PID/statm kept open (about 1.2 us).

    The open file stays bound to the process it was opened for: once that process is gone
    a read fails (or, for a zombie, shows no memory) even if its pid is reused.
    """

    def __init__(self, pid: int) -> None:
        self._statm: ProcFile | None = None
        self._proc: psutil.Process | None = None
        if IS_LINUX:
            self._statm = ProcFile(f"/proc/{pid}/statm")
        else:
            self._proc = psutil.Process(pid)

    @classmethod
    def open(cls, pid: int) -> ResidentReader | None:
        """A reader for `pid`, or None if it is already gone."""
        try:
            return cls(pid)
        except (OSError, psutil.Error):
            return None

    def read(self) -> int | None:
        """RSS in bytes, or None once the process has exited."""
        try:
            if self._statm is not None:
                resident = int(self._statm.read().split()[1]) * PAGE_SIZE
            else:
                assert self._proc is not None
                resident = int(self._proc.memory_info().rss)
        except (OSError, ValueError, IndexError, psutil.Error):
            return None
        return resident if resident > 0 else None  # a zombie has no memory left

    def close(self) -> None:
        if self._statm is not None:
            self._statm.close()


class SystemMemoryReader:
    """Total and available system RAM."""

    def __init__(self) -> None:
        self._meminfo = ProcFile("/proc/meminfo") if IS_LINUX else None

    def read(self) -> tuple[int, int]:
        if self._meminfo is not None:
            data = self._meminfo.read()
            return _meminfo_field(data, b"MemTotal:"), _meminfo_field(data, b"MemAvailable:")
        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)

    def close(self) -> None:
        if self._meminfo is not None:
            self._meminfo.close()


def _meminfo_field(data: bytes, key: bytes) -> int:
    at = data.find(key)
    if at < 0:
        return 0
    return int(data[at + len(key) : data.index(b"kB", at)]) * 1024


class PidCounter:
    """The pids allocated anywhere since the last look (Linux).

    The last field of /proc/loadavg is the most recently allocated pid of our pid namespace:
    one pread of a kept-open file (about 1.5 us), so it can be polled every few milliseconds.
    Pids are handed out in increasing order until they wrap around at pid_max, so the pids
    between two readings are exactly the processes and threads created in between.
    """

    # More new pids than this at once: a full rescan instead (checking them costs ~10 us each;
    # a rescan is paced, so a burst just under this is still better checked one by one).
    MAX_RANGE = 4096

    def __init__(self) -> None:
        self._loadavg: ProcFile | None = None
        self._last: int | None = None
        if IS_LINUX:
            try:
                self._loadavg = ProcFile("/proc/loadavg")
            except OSError:
                self._loadavg = None

    def advance(self) -> range | None:
        """The pids allocated since the previous call: an empty range when none, None when
        that cannot be told (the first call, a wrap-around, too many to check one by one, or
        no counter on this system) and the whole tree must be rescanned."""
        if self._loadavg is None:
            return None
        try:
            last = int(self._loadavg.read().rstrip().rpartition(b" ")[2])
        except (OSError, ValueError):
            return None
        previous, self._last = self._last, last
        if previous is None or last < previous or last - previous > self.MAX_RANGE:
            return None
        return range(previous + 1, last + 1)

    def close(self) -> None:
        if self._loadavg is not None:
            self._loadavg.close()


def new_descendants(
    candidates: range | list[int], tree: set[int]
) -> tuple[dict[int, ProcessIdentity], list[int]]:
    """Which of the just-allocated pids `candidates` are processes descending from `tree`.

    Each candidate costs one read of /proc/PID/stat (about 10 us), whatever the size of the
    tree. Pids are checked in order of allocation, so a child's own new child is found in the
    same pass. Threads have pids too: a thread of a process in the tree reports that process's
    parent as its own, so a match is kept only if it leads its thread group. Returns the
    processes found and the pids that had no /proc entry yet (a process is visible there a
    moment after its pid is allocated: look at those again on the next pass).
    """
    if not IS_LINUX:
        return {}, []
    found: dict[int, ProcessIdentity] = {}
    unseen: list[int] = []
    parents = set(tree)
    for pid in candidates:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # not there yet, or caught mid-creation (ESRCH): look again
            unseen.append(pid)
            continue
        ident = _parse_stat(pid, stat)
        if ident is None:
            unseen.append(pid)  # unreadable as yet (or a zombie: a few more looks cost little)
            continue
        if ident.ppid not in parents or not _leads_thread_group(pid):
            continue
        found[pid] = ident
        parents.add(pid)
    return found, unseen


def _leads_thread_group(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read(512)
    except OSError:
        return False
    at = status.find(b"Tgid:")
    return at >= 0 and int(status[at + 5 : status.index(b"\n", at)]) == pid


def _has_children_files() -> bool:
    return IS_LINUX and os.path.exists(f"/proc/self/task/{os.getpid()}/children")


HAS_CHILDREN_FILES = _has_children_files()  # needs CONFIG_PROC_CHILDREN, set by most distros


def descendants(pid: int) -> dict[int, ProcessIdentity]:
    """Every live descendant of `pid`, keyed by pid (zombies left out)."""
    if not IS_LINUX:
        return _descendants_psutil(pid)
    if HAS_CHILDREN_FILES:
        return _descendants_children_files(pid)
    return _descendants_proc_walk(pid)


def _descendants_children_files(pid: int) -> dict[int, ProcessIdentity]:
    """Walk down from `pid` through each thread's children file: the cost grows with the
    tree's threads (about 10 us per thread), not with every process on the machine."""
    found: dict[int, ProcessIdentity] = {}
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    listed = f.read().split()
            except OSError:
                continue
            for raw in listed:
                child = int(raw)
                if child in found:
                    continue
                ident = identity(child)
                if ident is not None:
                    found[child] = ident
                    stack.append(child)
    return found


def _descendants_proc_walk(pid: int) -> dict[int, ProcessIdentity]:
    """Read every process's parent from /proc/*/stat (about 1.2 ms on a machine running
    140 processes)."""
    parents: dict[int, list[ProcessIdentity]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        ident = identity(int(entry))
        if ident is not None:
            parents.setdefault(ident.ppid, []).append(ident)
    found: dict[int, ProcessIdentity] = {}
    stack = [pid]
    while stack:
        for child in parents.get(stack.pop(), ()):
            if child.pid not in found:
                found[child.pid] = child
                stack.append(child.pid)
    return found


def identity(pid: int) -> ProcessIdentity | None:
    """Parent, name and start time of a live process, or None (gone, or a zombie)."""
    if not IS_LINUX:
        try:
            proc = psutil.Process(pid)
            return ProcessIdentity(pid, proc.ppid(), proc.name(), int(proc.create_time() * 100))
        except psutil.Error:
            return None
    stat = _read_stat(pid)
    return _parse_stat(pid, stat) if stat is not None else None


def _read_stat(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read()
    except OSError:
        return None


def _parse_stat(pid: int, stat: bytes) -> ProcessIdentity | None:
    """Parent, name and start time from /proc/PID/stat; None for a zombie."""
    # The name sits in parentheses and may itself contain spaces or parentheses.
    open_at, close_at = stat.find(b"("), stat.rfind(b")")
    rest = stat[close_at + 2 :].split()
    if open_at < 0 or close_at < 0 or len(rest) < 20 or rest[0] == b"Z":
        return None
    name = stat[open_at + 1 : close_at].decode("utf-8", "replace")
    return ProcessIdentity(pid=pid, ppid=int(rest[1]), name=name, start=int(rest[19]))


def exit_status(pid: int) -> tuple[int | None, int | None] | None:
    """(exit code, signal) of a zombie (exited, not yet reaped by its parent), else None.

    The kernel keeps the wait status in /proc/PID/stat (field 52, Linux 3.5+) until the parent
    collects it: a child seen between its exit and its parent's wait tells how it ended."""
    stat = _read_stat(pid) if IS_LINUX else None
    if stat is None:
        return None
    rest = stat[stat.rfind(b")") + 2 :].split()
    if len(rest) < 50 or rest[0] != b"Z":
        return None
    status = int(rest[49])
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return None


def ancestors_include(pid: int, wanted: set[int], limit: int = 64) -> bool:
    """Whether `pid` or one of its ancestors (up to `limit` generations) is in `wanted`."""
    for _ in range(limit):
        if pid in wanted:
            return True
        ident = identity(pid)
        if ident is None or ident.ppid <= 1:
            return False
        pid = ident.ppid
    return False


def _descendants_psutil(pid: int) -> dict[int, ProcessIdentity]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return {}
    found = {child.pid: identity(child.pid) for child in children}
    return {pid: ident for pid, ident in found.items() if ident is not None}


def cmdline(pid: int) -> list[str]:
    try:
        if IS_LINUX:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read()
            return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        return list(psutil.Process(pid).cmdline())
    except (OSError, psutil.Error):
        return []


def child_memory(pid: int) -> ChildMemory | None:
    """RSS, USS, PSS and swap of one process, or None if it is gone."""
    if IS_LINUX:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                data = f.read()
        except OSError:
            return None
        fields: dict[bytes, int] = {}
        for line in data.splitlines()[1:]:
            key, _, rest = line.partition(b":")
            value = rest.split()
            if value:
                fields[key] = int(value[0]) * 1024
        uss = fields.get(b"Private_Clean", 0) + fields.get(b"Private_Dirty", 0)
        return ChildMemory(
            rss=fields.get(b"Rss", 0),
            uss=uss,
            pss=fields.get(b"Pss", 0),
            swap=fields.get(b"Swap", 0),
        )
    try:
        full = psutil.Process(pid).memory_full_info()
    except psutil.Error:
        return None
    return ChildMemory(
        rss=int(full.rss),
        uss=int(getattr(full, "uss", full.rss)),
        pss=int(getattr(full, "pss", 0)),
        swap=int(getattr(full, "swap", 0)),
    )


def memory_limit() -> int | None:
    """The cgroup (v2 or v1) memory limit of this process, if one is set."""
    if not IS_LINUX:
        return None
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates = [f"/sys/fs/cgroup{path}/memory.max", "/sys/fs/cgroup/memory.max"]
        elif "memory" in controllers.split(","):
            candidates = [f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"]
        else:
            continue
        for candidate in candidates:
            try:
                with open(candidate) as f:
                    value = f.read().strip()
            except OSError:
                continue
            if value.isdigit() and int(value) < (1 << 60):
                return int(value)
    return None
