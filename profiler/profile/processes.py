"""The processes of one profile: the target, and every Python process of its tree that ran
memsight's agent (torchrun / DDP ranks, `multiprocessing.spawn` workers, launched scripts).

On disk (docs/profile-format.md#processes) process 0 is the target; its tables and events are
the profile's own, as in every older profile. The rows of processes k >= 1 are in one table
per kind, ``procs_NAME`` (``procs_ram``, ``procs_steps``, ...): the columns of NAME with a
``proc`` column after ``t``. Their events carry ``"proc": k``, and one recorder ``process``
event says who each is (pid, parent, rank). The builder
(profile/replay.py) gathers each into a Profile of its own, so every rule, summary and view
that reads one process reads any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memsight.profiler import protocol

if TYPE_CHECKING:
    from memsight.profiler.profile.model import Profile

# The tables of processes k >= 1: one per kind for all of them, named PREFIX + the kind's name
# (procs_ram, procs_steps, ...), with the kind's columns and a "proc" column after "t".
PROCESS_TABLE_PREFIX = "procs_"
PROC_COLUMN = "proc"
MAX_PROCESSES = 4096  # process numbers past this are refused (a file cannot make a million)
MAX_EXCEPTION_MESSAGE = 2000  # characters of a process' exception message in report --json

ROLE_RANK = "rank"
ROLE_DATALOADER_WORKER = protocol.CHILD_ROLE_DATALOADER_WORKER
ROLE_OTHER = protocol.CHILD_ROLE_OTHER


def shared_table_name(base: str) -> str:
    return PROCESS_TABLE_PREFIX + base


def shared_table_base(name: str, columns: list[str]) -> str | None:
    """The kind of a table of processes k >= 1 ("ram" for procs_ram), else None."""
    if name.startswith(PROCESS_TABLE_PREFIX) and columns[1:2] == [PROC_COLUMN]:
        return name[len(PROCESS_TABLE_PREFIX) :] or None
    return None


def ended_by(exit_code: int | None, signal: int | None, unknown: str) -> str:
    """How a process ended, in words: its signal, else its exit code, else `unknown`."""
    if signal is not None:
        return f"killed by signal {signal}"
    if exit_code is not None:
        return f"exit code {exit_code}"
    return unknown


@dataclass
class ProcessInfo:
    """Who one process of the job is, and how it ended (None: not known)."""

    proc: int  # 0: the target; 1, 2, ...: the others, in the order their agents connected
    pid: int | None = None
    parent: int | None = None  # the parent's pid
    rank: int | None = None  # torch.distributed's global rank (RANK, or init_process_group)
    local_rank: int | None = None
    world_size: int | None = None
    group_rank: int | None = None  # the node's rank (torchrun's GROUP_RANK)
    cmdline: list[str] = field(default_factory=list)
    node: str | None = None  # the host it ran on, where a merged job profile says
    started: float = 0.0  # seconds since the run started: when its agent connected
    ended: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    worker: bool = False  # a DataLoader worker (the recorder saw it name itself one)
    forked: bool | None = None  # started by fork() without exec (None: not said)

    @property
    def role(self) -> str:
        """ "rank", "dataloader-worker" or "other"."""
        if self.rank is not None:
            return ROLE_RANK
        if self.worker:
            return ROLE_DATALOADER_WORKER
        return ROLE_OTHER

    @property
    def label(self) -> str:
        """How views name it: "rank 1", else "pid 4242", with the node of a merged job."""
        name = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid or '?'}"
        return f"{name} on {self.node}" if self.node else name

    @property
    def ended_by(self) -> str:
        """How it ended, in words, as RunInfo.ended_by says it for the target."""
        unknown = "running at the end" if self.ended is None else "ended (status not seen)"
        return ended_by(self.exit_code, self.signal, unknown)

    def apply(self, data: dict[str, Any]) -> None:
        """The fields of a `process` (recorder) or `dist_init` (agent) event."""
        for key in ("pid", "parent", "rank", "local_rank", "world_size", "group_rank"):
            value = data.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                setattr(self, key, value)
        cmdline = data.get("cmdline")
        if isinstance(cmdline, list):
            self.cmdline = [c for c in cmdline if isinstance(c, str)][:256]
        node = data.get("node")
        if isinstance(node, str):
            self.node = node[:200]
        forked = data.get("forked")
        if isinstance(forked, bool):
            self.forked = forked


def job_processes(profile: Profile) -> list[Profile]:
    """The target, then every other process, each as a Profile of its own whose `children`
    (and children table) are the processes below it up to the next process with an agent,
    that one included: a rank's forked DataLoader workers are the rank's, not the launcher's,
    whose children are the ranks (and its own spawned workers, agent or not)."""
    views = [profile, *profile.subprocesses.values()]
    if len(views) == 1:
        return views
    agents = {p.process.pid: p for p in views if p.process.pid is not None}
    owner: dict[int, int] = {}  # child pid -> the pid of the nearest process with an agent
    for pid, child in profile.children.items():
        seen: set[int] = set()
        up = child.ppid
        while up not in agents and up in profile.children and up not in seen:
            seen.add(up)
            up = profile.children[up].ppid
        if up in agents:
            owner[pid] = up
    import numpy as np  # here: the recorder reads this module's names at start, not numpy

    table = profile.table("children")
    result = []
    for view in views:
        mine = {pid for pid, up in owner.items() if up == view.process.pid}
        shown = view.shallow_copy()
        shown.children = {pid: c for pid, c in profile.children.items() if pid in mine}
        if table is not None:
            shown.tables = dict(view.tables)
            shown.tables["children"] = table.rows(np.isin(table["pid"], list(mine)))
        result.append(shown)
    return result


def process_exception(profile: Profile) -> dict[str, Any] | None:
    """The exception that ended a process, as `report --json` lists it: its type, message and
    the line that raised it (the innermost frame of its traceback), else None."""
    last = None
    for event in profile.events_of("exception"):
        if event.get("uncaught"):
            last = event
    if last is None:
        return None
    frames = last.get("traceback")
    innermost = frames[-1] if isinstance(frames, list) and frames else None
    where = innermost if isinstance(innermost, list | tuple) and len(innermost) >= 2 else None
    message = last.get("message")
    return {
        "type": str(last.get("exc_type") or "Exception"),
        "message": message[:MAX_EXCEPTION_MESSAGE] if isinstance(message, str) else "",
        "file": where[0] if where is not None and isinstance(where[0], str) else None,
        "line": where[1] if where is not None and isinstance(where[1], int) else None,
    }
