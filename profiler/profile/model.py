"""The in-memory profile: run metadata, events, output and sample tables.

A Profile is built only by profiler.profile.replay.ProfileBuilder, from the same frames whether they
arrive live from a recording or are read back from a file.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from memsight.profiler.profile.columns import ColumnStore
from memsight.profiler.profile.processes import ProcessInfo, ended_by

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


# Columns holding times: seconds since the run started (float64) in a loaded profile.
TIME_COLUMNS = frozenset({"t", "end"})


class SampleTable:
    """Named columns of equal length that grow by appending blocks of rows.

    Time columns (`t`, and `end` for spans) hold seconds since the run started (float64); all
    others hold int64 values. Accessors return views of the filled part, valid until the next
    append.
    """

    def __init__(self, name: str, columns: Iterable[str]) -> None:
        self.name = name
        self.column_names: list[str] = list(columns)
        self._store = ColumnStore(
            {c: np.float64 if c in TIME_COLUMNS else np.int64 for c in self.column_names}
        )

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, column: str) -> bool:
        return column in self.column_names

    def append(self, block: dict[str, np.ndarray]) -> None:
        self._store.append(block, len(block["t"]))

    def append_owned(self, block: dict[str, np.ndarray]) -> None:
        """append(), for arrays nobody will write to: an empty table takes them as its
        columns without copying them (a profile's tables as a file is loaded)."""
        if not self._store.adopt(block):
            self.append(block)

    @property
    def t(self) -> FloatArray:
        return self._store.column("t")

    def __getitem__(self, column: str) -> np.ndarray:
        return self._store.column(column)

    def snapshot(self) -> SampleTable:
        """The rows so far, sharing memory with this table; later appends do not show in it."""
        table = SampleTable(self.name, self.column_names)
        table._store = self._store.frozen()
        return table

    def until(self, end: float) -> SampleTable:
        """The rows at or before time `end`: this table itself when none is later, its first
        rows as views when the rows are in time order, else a copy of those rows."""
        t = self.t
        if not len(t) or bool(np.all(t <= end)):
            return self
        if bool(np.all(t[1:] >= t[:-1])):
            table = SampleTable(self.name, self.column_names)
            table._store = self._store.prefix(int(np.searchsorted(t, end, side="right")))
            return table
        return self.rows(t <= end)

    def where(self, column: str, value: int) -> SampleTable:
        """A new table with the rows whose `column` equals `value` (e.g. one device, one pid)."""
        return self.rows(self[column] == value)

    def rows(self, mask: np.ndarray) -> SampleTable:
        """A new table with the rows where the boolean `mask` is true."""
        sub = SampleTable(self.name, self.column_names)
        sub.append({c: self[c][mask] for c in self.column_names})
        return sub


@dataclass(slots=True)
class Event:
    """Something that happened at time `t` (seconds since the run started)."""

    t: float
    type: str
    data: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


@dataclass
class ChildProcess:
    pid: int
    ppid: int
    name: str
    cmdline: list[str]
    first_seen: float
    last_seen: float
    exited: float | None = None

    @property
    def label(self) -> str:
        return f"{self.name} (pid {self.pid})"


@dataclass
class OutputChunk:
    t: float
    stream: int  # protocol.STDOUT or protocol.STDERR
    text: str


@dataclass
class DeviceInfo:
    index: int
    name: str
    total_bytes: int


@dataclass
class RunInfo:
    script: str | None = None
    module: str | None = None
    argv: list[str] = field(default_factory=list)
    cwd: str = ""
    python: str = ""
    python_version: str = ""
    interval_ms: float = 0.0
    start_time: str = ""  # ISO 8601 wall-clock time of the launch
    t0_ns: int | None = None  # monotonic clock at the launch; every t is relative to it
    hostname: str = ""
    memsight_version: str = ""
    pid: int | None = None
    ram_total_bytes: int | None = None
    memory_limit_bytes: int | None = None  # cgroup limit, when one is set
    ram_budget_bytes: int | None = None  # the user's own limit for the run (`--ram-budget`)
    torch_version: str | None = None
    cuda_version: str | None = None
    devices: list[DeviceInfo] = field(default_factory=list)
    exit_code: int | None = None
    signal: int | None = None
    end_t: float | None = None
    hooks: bool = True
    # `memsight attach`: the recording began with the process already running, at
    # `attached_at` (wall clock, ISO 8601); what it did before was not seen. `detached`: the
    # recording ended with the process still running (Ctrl+C, --duration).
    attached: bool = False
    attached_at: str | None = None
    detached: bool = False

    @property
    def target(self) -> str:
        """What was run, the way a user would type it."""
        head = f"-m {self.module}" if self.module else (self.script or "?")
        return " ".join([head, *self.argv])

    @property
    def ended_by(self) -> str:
        if self.attached and self.exit_code is None and self.signal is None:
            if self.detached:
                return "detached; the process went on"
            if self.end_t is not None:  # not the process' child: its status was its parent's
                return "the process exited (its exit status is not known to an attach)"
        return ended_by(self.exit_code, self.signal, "unknown (recording cut off)")

    @property
    def not_seen_text(self) -> str | None:
        """For a recording attached to a running process: that its earlier part was not seen."""
        if not self.attached:
            return None
        return (
            f"attached to pid {self.pid} at {(self.attached_at or '?').replace('T', ' ')}: "
            "what the process did before was not seen"
        )


@dataclass(frozen=True)
class Damage:
    """What is wrong with a damaged profile file, and how much of it was read."""

    reason: str  # one line: where and how the file is damaged
    read_bytes: int  # the file's bytes up to the end of the last frame read
    file_bytes: int


@dataclass
class Profile:
    info: RunInfo = field(default_factory=RunInfo)
    # Set when the file is damaged, not merely unfinished (profile/storage.py): what was read.
    damaged: Damage | None = None
    events: list[Event] = field(default_factory=list)
    tables: dict[str, SampleTable] = field(default_factory=dict)
    output: list[OutputChunk] = field(default_factory=list)
    children: dict[int, ChildProcess] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    names: dict[int, str] = field(
        default_factory=dict
    )  # ids used in table rows (modules, optimizers)
    complete: bool = False  # the recorder closed the file normally
    source: str | None = None  # file the profile was loaded from or is being written to
    # Which process of the job this is (profile/processes.py): the target is process 0.
    process: ProcessInfo = field(default_factory=lambda: ProcessInfo(0))
    # The job's other processes that ran the agent (ranks, spawned workers), by number: each
    # a Profile of its own on the same clock. Empty for a single-process run.
    subprocesses: dict[int, Profile] = field(default_factory=dict)

    def table(self, name: str) -> SampleTable | None:
        return self.tables.get(name)

    @property
    def ram(self) -> SampleTable | None:
        return self.tables.get("ram")

    @property
    def gpu(self) -> SampleTable | None:
        table = self.tables.get("gpu")
        return table if table is not None and len(table) else None

    @property
    def steps(self) -> SampleTable | None:
        """One row per optimizer step (see docs/instrumentation.md)."""
        table = self.tables.get("steps")
        return table if table is not None and len(table) else None

    @property
    def spans(self) -> SampleTable | None:
        """Forward and backward passes (kind 0 / 1) and backward-forward links (kind 2)."""
        table = self.tables.get("spans")
        return table if table is not None and len(table) else None

    @property
    def iterations(self) -> int:
        steps = self.steps
        return len(steps) if steps is not None else 0

    def name(self, name_id: int) -> str:
        return self.names.get(int(name_id), "?")

    @property
    def sample_count(self) -> int:
        ram = self.ram
        return len(ram) if ram is not None else 0

    @property
    def duration(self) -> float:
        if self.info.end_t is not None:
            return self.info.end_t
        last = 0.0
        for table in self.tables.values():
            if len(table):
                last = max(last, float(table.t[-1]))
        if self.events:
            last = max(last, self.events[-1].t)
        return last

    def snapshot(self) -> Profile:
        """The profile as it stands, safe to read in another thread while this one grows.

        Cheap: sample columns are shared as views, lists and dicts are copied shallowly.
        """
        return Profile(
            info=copy.copy(self.info),
            events=list(self.events),
            tables={name: table.snapshot() for name, table in self.tables.items()},
            output=list(self.output),
            children=dict(self.children),
            warnings=list(self.warnings),
            names=dict(self.names),
            complete=self.complete,
            damaged=self.damaged,
            source=self.source,
            process=copy.copy(self.process),
            subprocesses={k: sub.snapshot() for k, sub in self.subprocesses.items()},
        )

    def shallow_copy(self) -> Profile:
        """A new Profile sharing this one's tables, events and the rest (to swap a field)."""
        return copy.copy(self)

    def events_of(self, *types: str) -> Iterator[Event]:
        wanted = set(types)
        return (e for e in self.events if e.type in wanted)

    def output_text(self, stream: int | None = None) -> str:
        return "".join(c.text for c in self.output if stream is None or c.stream == stream)
