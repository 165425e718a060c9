"""One job profile from the profiles the nodes of a multi-node job wrote (`memsight merge`).

Each node runs its own `memsight run ... torchrun --nnodes K ...` and records its own tree on
its own monotonic clock. The first input's run is the job's: its target stays process 0, its
processes keep their numbers. Every process of every other input (its target included)
becomes a process of the job with the next free number, its `process` event naming the node
(the input's hostname), its rows moved into the procs_ tables (profile/processes.py), its
events tagged with its new number.

Clocks: input i's times are shifted onto input 0's monotonic clock by the difference of their
wall-clock starts (RunInfo.start_time, taken right after t0_ns): shift_i = (W_i - W_0) -
(t0_i - t0_0). The start times have millisecond precision, so the alignment is exact to about
1 ms between two inputs, plus whatever the machines' wall clocks disagree by (NTP keeps it to
milliseconds on a LAN; memsight cannot measure it). The `merge` event records both.

Refused (MergeRefused): the same recording twice (same host, pid and start: a copy of a file,
or a job merged with one of its own nodes), wall-clock starts more than MAX_CLOCK_SPREAD apart
(clocks of machines that were not in sync, or files of different jobs) unless forced, and
inputs whose times would not fit the int64 clock of a profile once shifted (an absurd
monotonic start), even forced.

Left out of the other inputs: their output (the job's output is the first input's), their
CUDA snapshots, the recorder's own view of their children (the `children` and `nvml` tables,
child events: pids of different machines would mix) and their own `merge` events. Their
processes' ends are kept (as `process_exit` events). A merged profile can be merged again:
a process that already names its node keeps it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.output_path import OutputTarget, write_output
from memsight.profiler.profile import codec
from memsight.profiler.profile.header import PROCESSES_VERSION, file_header
from memsight.profiler.profile.model import TIME_COLUMNS, Profile
from memsight.profiler.profile.processes import (
    PROC_COLUMN,
    ProcessInfo,
    shared_table_base,
    shared_table_name,
)
from memsight.profiler.profile.storage import read_frames
from memsight.profiler.protocol import TableSchema

ALIGNMENT_ERROR_MS = 1.0  # two start times rounded to the millisecond
# The nodes of one job start within minutes of each other; a week covers a job queued on one
# node long after another, and refuses clocks set years apart (a dead RTC battery, no NTP).
MAX_CLOCK_SPREAD = timedelta(days=7)
_INT64 = (-(2**63), 2**63 - 1)  # a profile's clock: int64 nanoseconds, about ±292 years
_FIRST_SHARED_ID = 200  # ids for procs_ tables the first input lacks
# A node's recorder-only views of its own machine, meaningless beside another machine's pids.
_LOCAL_TABLES = frozenset({"children", "nvml"})
_LOCAL_EVENTS = frozenset(
    {
        "child_started",
        "child_role",
        "recording_end",
        "connection_rejected",
        "frame_rejected",
        "attachment",
        "cuda_snapshot",
        "merge",  # an input merged before: the output's one merge event says what was done
    }
)


class MergeError(Exception):
    """An input that cannot be merged: one line, naming the file."""


class MergeRefused(MergeError):
    """Inputs that are not the nodes of one job (a usage error): one line, naming the file."""


@dataclass(frozen=True)
class MergedInput:
    path: str
    hostname: str
    shift_ns: int  # added to every time of this input
    first_proc: int  # the job's number for its target; its process k is first_proc + k


@dataclass
class MergeResult:
    inputs: list[MergedInput]  # the first is the reference clock (shift 0, process 0)
    warnings: list[str]  # what could not be carried over, one line each


def merge_profiles(
    paths: list[str], out: str | os.PathLike[str] | OutputTarget, force: bool = False
) -> MergeResult:
    """Write the job profile of `paths` (at least one) to `out`; what each input became.
    `force` merges inputs whose wall-clock starts are more than MAX_CLOCK_SPREAD apart."""
    loaded = [read_frames(path) for path in paths]
    profiles = [profile for profile, _ in loaded]
    base = profiles[0]
    starts = [_start_time(p, path) for p, path in zip(profiles, paths, strict=True)]
    _refuse_the_same_recording_twice(profiles, starts, paths)
    t0s = [p.info.t0_ns or 0 for p in profiles]
    merged: list[MergedInput] = []
    next_proc = max([0, *base.subprocesses]) + 1
    writer = _JobWriter(loaded[0][1])
    for index in range(1, len(paths)):
        apart = starts[index] - starts[0]
        if abs(apart) > MAX_CLOCK_SPREAD and not force:
            raise MergeRefused(
                f"{paths[index]} started {_distance_text(apart)} "
                f"{'after' if apart > timedelta(0) else 'before'} {paths[0]} by their wall "
                f"clocks, more than the {MAX_CLOCK_SPREAD.days} days a job's nodes can be apart: "
                "check the machines' clocks, or merge anyway with --force"
            )
        shift = _nanoseconds(apart) - (t0s[index] - t0s[0])
        if not _INT64[0] <= shift <= _INT64[1]:
            raise _off_the_clock(paths[index], shift)
        entry = MergedInput(paths[index], profiles[index].info.hostname, shift, next_proc)
        writer.add_node(profiles[index], loaded[index][1], entry)
        merged.append(entry)
        next_proc += max([0, *profiles[index].subprocesses]) + 1
    first = MergedInput(paths[0], base.info.hostname, 0, 0)
    writer.events(
        [
            {
                "t": t0s[0],
                "type": "merge",
                "inputs": [
                    {"file": m.path, "hostname": m.hostname, "offset_ns": m.shift_ns}
                    for m in [first, *merged]
                ],
                "alignment_error_ms": ALIGNMENT_ERROR_MS,
            },
            *(
                {"t": t0s[0], "type": "process", "proc": k, "node": base.info.hostname}
                for k, process in _processes(base)
                if process.node is None  # a merged profile's processes keep their nodes
            ),
        ]
    )
    writer.write(out)
    return MergeResult([first, *merged], writer.warnings)


def _processes(profile: Profile) -> list[tuple[int, ProcessInfo]]:
    return [(0, profile.process), *((k, p.process) for k, p in profile.subprocesses.items())]


def _start_time(profile: Profile, path: str) -> datetime:
    try:
        start = datetime.fromisoformat(profile.info.start_time)
    except ValueError:
        start = None
    if start is None or start.tzinfo is None:  # a wall clock of no known zone aligns nothing
        raise MergeError(f"{path}: the profile has no start time to align its clock by")
    return start


def _refuse_the_same_recording_twice(
    profiles: list[Profile], starts: list[datetime], paths: list[str]
) -> None:
    """One recording (host, pid, start) given twice would put each of its processes in the
    job twice: a copy of a file, or a merged job with one of its own nodes."""
    seen: dict[tuple[str, int | None, datetime], str] = {}
    for profile, start, path in zip(profiles, starts, paths, strict=True):
        key = (profile.info.hostname, profile.info.pid, start)
        if key in seen:
            raise MergeRefused(
                f"{path} is the same recording as {seen[key]} (host {key[0] or '?'}, pid "
                f"{key[1]}, started {profile.info.start_time}): give each node's profile once"
            )
        seen[key] = path


def _off_the_clock(path: str, shift_ns: int) -> MergeRefused:
    shift = _distance_text(timedelta(microseconds=shift_ns // 1000))
    return MergeRefused(
        f"{path}: its times cannot be put on the job's clock: shifted by {shift} onto the "
        "first profile's clock, they would fall outside the 292 years either way that a "
        "profile's clock holds (its start time or its monotonic start is wrong)"
    )


def _distance_text(delta: timedelta) -> str:
    days = abs(delta) / timedelta(days=1)
    if days >= 365:
        return f"{days / 365.25:,.0f} years ({days:,.0f} days)"
    if days >= 1:
        return f"{days:.1f} days"
    return f"{abs(delta).total_seconds():,.3f} s"


def _nanoseconds(delta: timedelta) -> int:
    # Exact, unlike float seconds: a float holds today's epoch in ns only to 256 ns.
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1_000


def _shifted(t: int, entry: MergedInput) -> int:
    """A time of `entry` on the job's clock; MergeRefused when it leaves the int64 clock."""
    moved = t + entry.shift_ns
    if not _INT64[0] <= moved <= _INT64[1]:
        raise _off_the_clock(entry.path, entry.shift_ns)
    return moved


class _JobWriter:
    """The output's frames: the first input's as they are, then each node's, rewritten."""

    def __init__(self, base_frames: list[tuple[int, bytes]]) -> None:
        self.frames: list[bytes] = []
        self.shared: dict[str, TableSchema] = {}  # procs_ tables by kind
        self.used_ids: set[int] = set()
        self.warnings: list[str] = []
        for kind, payload in base_frames:
            if kind == protocol.SCHEMA:
                schema = TableSchema.from_json(protocol.decode_json(payload))
                self.used_ids.add(schema.id)
                columns = [c for c, _ in schema.columns]
                kind_name = shared_table_base(schema.name, columns)
                if kind_name is not None:
                    self.shared[kind_name] = schema
            self.frames.append(protocol.encode_frame(kind, payload, compress=len(payload) > 1024))

    def add_node(
        self, profile: Profile, frames: list[tuple[int, bytes]], entry: MergedInput
    ) -> None:
        schemas: dict[int, TableSchema] = {}
        refused: set[str] = set()  # tables whose rows the job's tables cannot hold
        events: list[dict[str, Any]] = [self._node_process(profile, entry)]
        agents = {sub.process.pid: k for k, sub in profile.subprocesses.items()}
        for kind, payload in frames:
            if kind == protocol.SCHEMA:
                schema = TableSchema.from_json(protocol.decode_json(payload))
                schemas[schema.id] = schema
            elif kind == protocol.SAMPLES:
                table_id, encoding, data = protocol.split_samples(payload)
                schema = schemas[table_id]
                if schema.name not in _LOCAL_TABLES:
                    matrix = codec.decode_sequence(schema, [(encoding, data)])
                    if not self._rows(schema, matrix, entry):
                        refused.add(schema.name)
            elif kind == protocol.EVENTS:
                for event in protocol.check_events(protocol.decode_json(payload)):
                    moved = self._event(event, entry, agents)
                    if moved is not None:
                        events.append(moved)
        self.events(events)
        for name in sorted(refused):
            self.warnings.append(
                f"{entry.path}: table {name!r} left out: its columns differ from the job's "
                "(profiles recorded by different memsight versions)"
            )

    def _node_process(self, profile: Profile, entry: MergedInput) -> dict[str, Any]:
        """The `process` event of a node's target, which becomes a process of the job."""
        info, process = profile.info, profile.process
        head = ["-m", info.module] if info.module else [info.script or "?"]
        # It started when its own recorder saw it start (its agent's hello), as process 0 did
        started = (info.t0_ns or 0) + round(process.started * 1e9)
        event: dict[str, Any] = {
            "t": _shifted(started, entry),
            "type": "process",
            "proc": entry.first_proc,
            "pid": info.pid,
            "cmdline": [info.python, *head, *info.argv],
            "node": process.node or entry.hostname,
        }
        for key in ("rank", "local_rank", "world_size", "group_rank"):
            value = getattr(process, key)
            if value is not None:
                event[key] = value
        return event

    def _event(
        self, event: dict[str, Any], entry: MergedInput, agents: dict[int | None, int]
    ) -> dict[str, Any] | None:
        kind = event["type"]
        if kind in _LOCAL_EVENTS:
            return None
        proc = entry.first_proc + int(event.get("proc", 0))
        moved = dict(event, t=_shifted(int(event["t"]), entry), proc=proc)
        if isinstance(event.get("end"), int):
            moved["end"] = _shifted(event["end"], entry)
        if kind == "child_exited":  # the end of one of its processes, if it ran an agent
            sub = agents.get(event.get("pid"))
            if sub is None:
                return None
            moved.update(type="process_exit", proc=entry.first_proc + sub)
        elif kind == "exit":  # its target's own end
            moved["type"] = "process_exit"
        elif kind == "process":
            moved.setdefault("node", entry.hostname)  # a merged input's processes keep theirs
            if int(event.get("proc", 0)) == 0:
                return None  # said by _node_process, with what its run metadata knows
        return moved

    def _rows(self, schema: TableSchema, matrix: np.ndarray, entry: MergedInput) -> bool:
        """Append a node's rows to the job's procs_ table of their kind; False: it cannot
        hold them (another column layout)."""
        if not len(matrix):
            return True
        names = [c for c, _ in schema.columns]
        matrix = matrix.copy()
        for i, name in enumerate(names):
            if name in TIME_COLUMNS:
                # Both ends checked first: numpy would wrap an int64 that overflows.
                _shifted(int(matrix[:, i].min()), entry)
                _shifted(int(matrix[:, i].max()), entry)
                matrix[:, i] += entry.shift_ns
        kind_name = shared_table_base(schema.name, names)
        if kind_name is None:  # the node's target's own table: process first_proc
            kind_name = schema.name
            column = np.full((len(matrix), 1), entry.first_proc, dtype=np.int64)
            matrix = np.hstack([matrix[:, :1], column, matrix[:, 1:]])
            columns = [schema.columns[0], (PROC_COLUMN, "I"), *schema.columns[1:]]
        else:
            matrix[:, 1] += entry.first_proc
            columns = list(schema.columns)
        shared = self._shared(kind_name, columns)
        if shared is None:
            return False
        self.frames.append(
            protocol.encode_frame(
                protocol.SAMPLES, codec.encode_columns_packed(shared, matrix), compress=True
            )
        )
        return True

    def _shared(self, kind_name: str, columns: list[tuple[str, str]]) -> TableSchema | None:
        shared = self.shared.get(kind_name)
        if shared is None:
            table_id = _FIRST_SHARED_ID
            while table_id in self.used_ids:
                table_id += 1
            if table_id > 255:
                return None
            self.used_ids.add(table_id)
            shared = self.shared[kind_name] = TableSchema(
                table_id, shared_table_name(kind_name), columns
            )
            self.frames.append(shared.frame())
        return shared if shared.columns == columns else None

    def events(self, events: list[dict[str, Any]]) -> None:
        for start in range(0, len(events), 20_000):
            batch = events[start : start + 20_000]
            self.frames.append(protocol.encode_json_frame(protocol.EVENTS, batch, compress=True))

    def write(self, out: str | os.PathLike[str] | OutputTarget) -> None:
        # By the one output rule (profiler/output_path.py): a regular file is replaced
        # atomically, a device or FIFO written into; OutputError or OSError otherwise.
        write_output(out, [file_header(PROCESSES_VERSION), *self.frames])
