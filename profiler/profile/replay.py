"""Replay frames into a Profile: the one decoder for live recordings and saved files.

Sample blocks are queued as raw bytes and decoded in batches by flush(), so many small live
blocks decode in a few vectorised steps; events not tied to run metadata are only appended.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.profile import codec, inflate
from memsight.profiler.profile.halves import in_halves
from memsight.profiler.profile.model import (
    TIME_COLUMNS,
    ChildProcess,
    DeviceInfo,
    Event,
    OutputChunk,
    Profile,
    RunInfo,
    SampleTable,
)
from memsight.profiler.profile.processes import (
    MAX_PROCESSES,
    PROC_COLUMN,
    ProcessInfo,
    shared_table_base,
)
from memsight.profiler.protocol import ProtocolError, TableSchema

# A process' agent says hello this long after its start at most (an interpreter starting on a
# busy machine); a start said to be earlier is on another clock, and its hello's time is used.
MAX_START_TO_HELLO_S = 5.0

# The most processes of a job one pid is looked up among: the latest to have had it. A pid
# reused this often by the agent's processes of one run does not happen; a file that says so
# cannot make each event that names the pid search them all.
MAX_PID_REUSE = 64

# Events that update run metadata or children; all others are only appended.
_SPECIAL_EVENTS = frozenset(
    {
        "agent_connected",
        "torch_imported",
        "cuda_init",
        "exit",
        "child_started",
        "child_exited",
        "recording_end",
        "warning",
        "name",
        "process",
        "process_exit",
        "dist_init",
        "child_role",
        "child_command",
        "child_reaped",
        "os_exit",
        "agent_disconnected",
        "detached",
    }
)


# What the frames of one file may decode to (docs/profile-format.md#limits). Samples, events and
# metadata together: DECODE_FLOOR, plus DECODE_RATIO times the bytes of the frames read so far,
# never more than DECODE_CEILING. Real recordings decode to 1.5 to 11 times their size (13 times
# for their most compressible frame); a run whose every sample is constant reaches about 230
# times in its sample blocks, hence 256. The target's output, which can compress 1000 to 1, has
# its own bound instead: the recorder keeps at most 32 MiB per stream (recorder/output.py), and
# DECODE_OUTPUT_LIMIT allows twice that for both. Attachments are checked, never kept.
DECODE_FLOOR = 64 << 20
DECODE_RATIO = 256
DECODE_CEILING = 4 << 30
DECODE_OUTPUT_LIMIT = 128 << 20
# Events, metadata and schemas (JSON) have a tighter share of that: each event becomes Python
# objects of about ten times its JSON and costs microseconds to apply, so the 64 MiB floor
# alone let a file of 3 MiB decode to 1.2 million events (18 s, 900 MiB). Real recordings hold
# events of at most a third of their size, compressed 2 to 9 to 1.
DECODE_EVENTS_FLOOR = 8 << 20
DECODE_EVENTS_RATIO = 16
_JSON_KINDS = frozenset({protocol.EVENTS, protocol.RUN, protocol.SCHEMA})
VIEW_BYTES = 64 << 10  # sample payloads at least this large are queued as views
PARALLEL_SECONDS = 1 << 21  # time columns this long are converted on two threads


class _Target:
    """A table's columns allocated whole from the row count its schema declares, filled
    by its blocks in file order (ProfileBuilder._place)."""

    def __init__(self, by_column: np.ndarray) -> None:
        self.by_column = by_column  # (columns, rows)
        self.filled = 0  # rows placed so far
        self.lost = False  # a block did not fit or was not packed: joined at flush instead


def _seconds(ns: np.ndarray, t0: int) -> np.ndarray:
    """Nanosecond times as seconds since t0: the difference in exact integers, then divided,
    in one new array (no temporary: a day-long run's times are 70 MB a column), a long
    column in two halves on two threads."""
    seconds = np.empty(len(ns), dtype=np.float64)

    def convert(start: int, stop: int) -> None:
        part = seconds[start:stop]
        np.subtract(ns[start:stop], t0, out=part, dtype=np.int64, casting="unsafe")
        np.divide(part, 1e9, out=part)

    in_halves(len(ns), convert, PARALLEL_SECONDS)
    return seconds


class DecodeBudget:
    """What the frames of one file may still decode to, given the bytes of the frames read so far.

    A compressed frame is inflated at most to what is left, so a compression bomb is refused
    before its memory is allocated, however many frames it is split into.
    """

    def __init__(self) -> None:
        self.stored = 0  # bytes of the non-attachment frames read so far
        self.decoded = 0  # what they decoded to, output aside
        self.output = 0  # the output they decoded to
        self.json = 0  # the part of `decoded` that is JSON (events, metadata, schemas)

    @property
    def allowed(self) -> int:
        return min(DECODE_CEILING, DECODE_FLOOR + DECODE_RATIO * self.stored)

    @property
    def json_allowed(self) -> int:
        return min(self.allowed, DECODE_EVENTS_FLOOR + DECODE_EVENTS_RATIO * self.stored)

    def left(self, kind: int) -> int:
        if kind == protocol.OUTPUT:
            return max(0, DECODE_OUTPUT_LIMIT - self.output)
        left = self.allowed - self.decoded
        if kind in _JSON_KINDS:
            left = min(left, self.json_allowed - self.json)
        return max(0, left)

    def spend(self, kind: int, size: int) -> None:
        if kind == protocol.OUTPUT:
            self.output += size
        else:
            self.decoded += size
            if kind in _JSON_KINDS:
                self.json += size

    def json_refused(self, kind: int) -> bool:
        """Whether what is left for `kind` is the JSON share's, not the whole budget's."""
        return kind in _JSON_KINDS and self.json_allowed - self.json < self.allowed - self.decoded

    def refusal(self, kind: int) -> str:
        if kind == protocol.OUTPUT:
            return (
                f"its output frames inflate past {DECODE_OUTPUT_LIMIT:,} bytes, more than a "
                "recording holds (a compression bomb?); not loaded"
            )
        if self.json_refused(kind):
            return (
                f"its events and metadata inflate past {self.json_allowed:,} bytes, more than "
                f"a recording of {self.stored:,} bytes holds (a compression bomb?); not loaded"
            )
        return (
            f"its compressed frames inflate past {self.allowed:,} bytes, more than a recording "
            f"of {self.stored:,} bytes holds (a compression bomb?); not loaded"
        )


# The recorder's own tables, which every summary reads: a file may add columns to them (the
# format only grows) but never lack one, which no recording of any version does.
_RECORDER_TABLES = {
    schema.name: schema
    for schema in (protocol.RAM_TABLE, protocol.CHILD_TABLE, protocol.NVML_TABLE)
}


class ProfileBuilder:
    """Applies frames, in stream order, to a Profile.

    feed() validates and applies one frame; call flush() before reading sample tables.
    Every problem in a frame raises ProtocolError; the caller decides whether that is fatal
    (a file) or one rejected frame (a live socket).
    """

    def __init__(
        self,
        profile: Profile | None = None,
        budget: DecodeBudget | None = None,
        pool: Executor | None = None,
        preallocate_bytes: int = 0,
    ) -> None:
        self.profile = profile if profile is not None else Profile()
        # Bounds what all the frames of a file decode to together (DecodeBudget above).
        self.budget = budget
        # Where packed sample blocks are decoded as they are queued (a large file's), rather
        # than all at flush(): while the next frames are inflated and read.
        self.pool = pool
        # With a pool, tables whose row count the file declares (a compacted file's schemas)
        # are allocated whole at their first block, up to this many bytes in all (what the
        # file's size lets it decode to), and each block is decoded into its place: a
        # day-long run's 1.4 GB of columns is then written once, never copied.
        self._preallocate_bytes = preallocate_bytes
        self._row_counts: dict[int, int] = {}
        self._targets: dict[int, _Target] = {}
        self.schemas: dict[int, TableSchema] = {}
        self._shared: dict[int, str] = {}  # table id -> kind, for the procs_ tables
        self._announced: set[int] = set()  # processes whose first `process` event was seen
        self._pending: dict[int, list[codec.Queued]] = {}
        self._t0: int | None = self.profile.info.t0_ns
        self._decoders: dict[int, codecs.IncrementalDecoder] = {}
        # pid -> the job's processes (k >= 1) that had it, the latest last (_index_pid).
        self._pids: dict[int, list[Profile]] = {}

    # -- frames -----------------------------------------------------------------------------

    def feed(
        self,
        kind: int,
        payload: bytes,
        inflated: Callable[[], tuple[int, bytes]] | None = None,
    ) -> None:
        """Apply one frame. `inflated`, for a compressed frame, gives what
        inflate.unpack_payload(kind, payload) returned (or raises what it raised) for this
        payload, inflated ahead of time in another thread: it is held to the budget as an
        inflation here would be (see storage.decode_profile)."""
        kind, payload = self._unpack(kind, payload, inflated)
        if kind == protocol.SAMPLES:
            self._queue_samples(payload)
        elif kind == protocol.EVENTS:
            for raw in protocol.check_events(protocol.decode_json(payload)):
                self._apply_event(raw)
        elif kind == protocol.OUTPUT:
            stream, t_ns, data = protocol.split_output(payload)
            # A character split across two reads of the pipe is decoded whole.
            decoder = self._decoders.get(stream)
            if decoder is None:
                decoder = self._decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
            text = decoder.decode(data)
            if text:
                self.profile.output.append(OutputChunk(self._rel(t_ns), stream, text))
        elif kind == protocol.SCHEMA:
            declared = protocol.decode_json(payload)
            schema = TableSchema.from_json(declared)
            self.add_schema(schema)
            rows = declared.get("rows")  # a compacted file's count of the table's rows
            if type(rows) is int and rows >= 0 and self.pool is not None:
                self._row_counts.setdefault(schema.id, rows)
        elif kind == protocol.RUN:
            self._apply_run(protocol.decode_json(payload))
        elif kind == protocol.ATTACHMENT:
            # A stored file's bytes (a CUDA memory snapshot): only checked here, never kept in
            # the model; storage.read_attachment reads them back from the file on demand.
            protocol.split_attachment(payload)
        elif kind == protocol.HELLO:
            raise ProtocolError("a hello frame belongs to the socket handshake only")
        else:
            raise ProtocolError(f"unknown frame kind {kind}")

    def _unpack(
        self,
        kind: int,
        payload: bytes,
        inflated: Callable[[], tuple[int, bytes]] | None = None,
    ) -> tuple[int, bytes]:
        base = kind & ~protocol.COMPRESSED
        budget = self.budget
        if budget is None or base == protocol.ATTACHMENT:
            return inflated() if inflated is not None else inflate.unpack_payload(kind, payload)
        left = budget.left(base)
        if not kind & protocol.COMPRESSED and len(payload) > left:
            raise self._refused(budget, base)
        limit = min(left, protocol.MAX_FILE_PAYLOAD)
        try:
            if inflated is None:
                kind, payload = inflate.unpack_payload(kind, payload, limit)
            else:
                # Inflated within the frame limit: more than `limit` is what inflating here
                # would have refused.
                kind, payload = inflated()
                if len(payload) > limit:
                    raise protocol.InflateLimitError(
                        f"compressed payload inflates beyond {limit} bytes"
                    )
        except protocol.InflateLimitError:
            if left < protocol.MAX_FILE_PAYLOAD:
                raise self._refused(budget, base) from None
            raise
        budget.spend(base, len(payload))
        return kind, payload

    @staticmethod
    def _refused(budget: DecodeBudget, kind: int) -> protocol.InflateLimitError:
        refused = protocol.InflateLimitError(budget.refusal(kind))
        if not budget.json_refused(kind):  # that one is said as the corruption of its frame
            refused.budget_refusal = budget.refusal(kind)
        return refused

    def add_schema(self, schema: TableSchema) -> None:
        known = self.schemas.get(schema.id)
        if known is not None:
            if known.columns != schema.columns or known.name != schema.name:
                raise ProtocolError(f"table {schema.id} redeclared with a different layout")
            return
        for other in self.schemas.values():
            if other.name == schema.name:
                raise ProtocolError(f"table name {schema.name!r} declared twice")
        columns = [c for c, _ in schema.columns]
        base = shared_table_base(schema.name, columns)
        required = _RECORDER_TABLES.get(base or schema.name)  # procs_ram too
        if required is not None:
            names = {name for name, _ in schema.columns}
            missing = [name for name, _ in required.columns if name not in names]
            if missing:
                raise ProtocolError(f"table {schema.name!r} lacks its column {missing[0]!r}")
        self.schemas[schema.id] = schema
        if base is not None:  # rows of processes k >= 1, split among them in flush()
            self._shared[schema.id] = base
        else:
            self.profile.tables[schema.name] = SampleTable(schema.name, columns)

    def _queue_samples(self, payload: bytes) -> None:
        # A large block is a view, not a copy (a day-long run's are 1.4 GB); a small one (a
        # recording's own, a few KiB) is sliced: cheaper to check than a view.
        data: bytes | memoryview
        if len(payload) >= VIEW_BYTES:
            table_id, encoding, data = protocol.split_samples(memoryview(payload))
        else:
            table_id, encoding, data = protocol.split_samples(payload)
        schema = self.schemas.get(table_id)
        if schema is None:
            raise ProtocolError(f"samples for undeclared table {table_id}")
        codec.check_block(schema, encoding, data)
        queue = self._pending.setdefault(table_id, [])
        if encoding != protocol.COLUMNS_PACKED or self.pool is None:
            self._lose_target(table_id)
            queue.append((encoding, data))
            return
        place = self._place(table_id, len(schema.columns), codec.packed_rows(data))
        if place is not None:
            decoding = self.pool.submit(codec.decode_packed_into, data, place)
        else:
            self._lose_target(table_id)
            decoding = self.pool.submit(codec.decode_packed, len(schema.columns), data)
        queue.append((codec.DECODED, decoding.result))

    def _place(self, table_id: int, ncols: int, rows: int) -> np.ndarray | None:
        """The part of the table's preallocated columns the next `rows` rows go to, or None
        when the table has none (no declared count, or more than the file allows) or they
        do not fit in what is left of it."""
        target = self._targets.get(table_id)
        if target is None:
            declared = self._row_counts.pop(table_id, None)
            if declared is None or declared * ncols * 8 > self._preallocate_bytes:
                return None
            self._preallocate_bytes -= declared * ncols * 8
            target = self._targets[table_id] = _Target(np.empty((ncols, declared), np.int64))
        if target.lost or target.filled + rows > target.by_column.shape[1]:
            return None
        place = target.by_column[:, target.filled : target.filled + rows]
        target.filled += rows
        return place

    def _lose_target(self, table_id: int) -> None:
        """The table's blocks no longer all fit its preallocated columns: it is joined from
        its blocks at flush() (the blocks decoded in place are views of it)."""
        self._row_counts.pop(table_id, None)
        target = self._targets.get(table_id)
        if target is not None:
            target.lost = True

    # -- batched sample decoding ------------------------------------------------------------

    def flush(self) -> None:
        """Decode every queued sample block into its table."""
        pending, self._pending = self._pending, {}
        targets, self._targets = self._targets, {}
        for table_id, blocks in pending.items():
            schema = self.schemas[table_id]
            target = targets.get(table_id)
            if target is not None and not target.lost:
                for _, decoded in blocks:  # each placed in it: wait for them
                    decoded()  # type: ignore[operator]
                matrix = target.by_column[:, : target.filled].T
            else:
                matrix = codec.decode_sequence(schema, blocks)
            if not len(matrix):
                continue
            if self._t0 is None:
                self._t0 = int(matrix[0, 0])
            columns = {
                name: _seconds(matrix[:, i], self._t0) if name in TIME_COLUMNS else matrix[:, i]
                for i, (name, _) in enumerate(schema.columns)
            }
            base = self._shared.get(table_id)
            if base is None:
                # The matrix was decoded for this table alone: its columns are handed over.
                self.profile.tables[schema.name].append_owned(columns)
            else:
                self._split(base, columns)

    def _split(self, base: str, columns: dict[str, Any]) -> None:
        """Rows of a procs_ table, each to its process' table `base`."""
        procs = columns.pop(PROC_COLUMN)
        # Grouped by one stable sort, not one pass over the rows per process: a block of many
        # rows over thousands of processes costs a sort, never rows x processes.
        order = np.argsort(procs, kind="stable")
        found, firsts = np.unique(procs[order], return_index=True)
        ends = [*firsts[1:].tolist(), len(order)]
        for proc, first, end in zip(found.tolist(), firsts.tolist(), ends, strict=True):
            if not 1 <= proc <= MAX_PROCESSES:
                raise ProtocolError(f"rows of process {proc}")
            mine = order[first:end]
            tables = self._process(proc).tables
            table = tables.get(base)
            if table is None:
                table = tables[base] = SampleTable(base, list(columns))
            table.append({name: values[mine] for name, values in columns.items()})

    # -- metadata and events ----------------------------------------------------------------

    def _rel(self, t_ns: int) -> float:
        if self._t0 is None:
            self._t0 = t_ns
        return (t_ns - self._t0) / 1e9

    def _apply_run(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise ProtocolError("run metadata is not an object")
        info = self.profile.info
        info.script = _opt_str(obj.get("script"))
        info.module = _opt_str(obj.get("module"))
        info.argv = _str_list(obj.get("argv"))
        info.cwd = _str(obj.get("cwd"))
        info.python = _str(obj.get("python"))
        info.interval_ms = _num(obj.get("interval_ms")) or 0.0
        info.start_time = _str(obj.get("start_time"))
        info.hostname = _str(obj.get("hostname"))
        info.memsight_version = _str(obj.get("memsight_version"))
        info.pid = self.profile.process.pid = _opt_int(obj.get("pid"))
        info.ram_total_bytes = _opt_int(obj.get("ram_total_bytes"))
        info.memory_limit_bytes = _opt_int(obj.get("memory_limit_bytes"))
        info.hooks = bool(obj.get("hooks", True))
        info.attached = obj.get("attached") is True
        info.attached_at = _opt_str(obj.get("attached_at"))
        info.ram_budget_bytes = _opt_int(obj.get("ram_budget_bytes"))
        t0 = _opt_int(obj.get("t0_ns"))
        if t0 is not None and self._t0 is None:
            self._t0 = t0
        info.t0_ns = self._t0

    def _apply_event(self, raw: dict[str, Any]) -> None:
        t0 = self._t0 if self._t0 is not None else raw["t"]
        self._t0 = t0
        kind = raw.pop("type")
        t = (raw.pop("t") - t0) / 1e9
        end = raw.get("end")
        if end.__class__ is int:
            raw["end"] = (end - t0) / 1e9  # spans end on the clock they start on
        event = Event(t, kind, raw)
        proc = raw.get("proc", 0)
        if proc.__class__ is not int or not 0 <= proc <= MAX_PROCESSES:
            raise ProtocolError(f"an event of process {proc!r}")
        profile = self._process(proc) if kind != "process" else self.profile
        profile.events.append(event)
        if kind not in _SPECIAL_EVENTS:
            return
        data = raw
        info, kind = profile.info, event.type
        if kind == "process":
            sub = self._process(proc)
            sub.process.apply(data)
            if proc not in self._announced:  # the recorder's, at its hello: it started then
                self._announced.add(proc)
                sub.process.started = self._start_of(data, event.t)
            sub.info.pid = sub.process.pid
            if proc:
                self._index_pid(sub)
            if proc:  # the target's own argv is the run's
                sub.info.argv = sub.process.cmdline[1:]
                child = self.profile.children.get(sub.process.pid or -1)
                if child is not None and sub.process.cmdline:
                    child.cmdline = list(sub.process.cmdline)  # read after its exec
                if child is not None and child.exited is None:
                    # The recorder saw it fork before its interpreter started and said hello.
                    started = sub.process.started
                    if started - MAX_START_TO_HELLO_S <= child.first_seen < started:
                        sub.process.started = child.first_seen
        elif kind == "child_command":  # read again after the child's exec
            child = self.profile.children.get(_opt_int(data.get("pid")) or -1)
            cmdline = _str_list(data.get("cmdline"))
            if child is not None and cmdline:
                child.cmdline = cmdline[:256]
        elif kind == "child_reaped":  # its parent, `profile`, collected its status
            reaped = self._by_pid(_opt_int(data.get("pid")), event.t)
            if reaped is not None and reaped.process.parent in (None, profile.process.pid):
                self._ended(reaped, event.t, data)
        elif kind == "os_exit":  # the process' own word, just before it ends
            if proc:
                self._ended(profile, event.t, data)
                if data.get("name") == protocol.DATALOADER_WORKER_NAME:
                    profile.process.worker = True
        elif kind == "agent_disconnected":  # its connection closed: it ended by then
            if proc:
                self._ended(profile, event.t, {})
        elif kind == "process_exit":  # a node's process, in a merged job (profile/merge.py)
            self._ended(profile, event.t, data)
        elif kind == "dist_init":
            profile.process.apply({k: data.get(k) for k in ("rank", "world_size")})
        elif kind == "child_role":
            self._worker(_opt_int(data.get("pid")), data.get("role"))
        elif kind == "agent_connected":
            info.python_version = _str(data.get("python_version")) or info.python_version
        elif kind == "torch_imported":
            info.torch_version = _opt_str(data.get("version"))
            info.cuda_version = _opt_str(data.get("cuda"))
        elif kind == "cuda_init":
            devices = data.get("devices")
            info.devices = [
                DeviceInfo(
                    _opt_int(d.get("index")) or 0,
                    _str(d.get("name")),
                    _opt_int(d.get("total_bytes")) or 0,
                )
                for d in (devices if isinstance(devices, list) else [])
                if isinstance(d, dict)
            ]
        elif kind == "exit":
            info.exit_code = _opt_int(data.get("exit_code"))
            info.signal = _opt_int(data.get("signal"))
            info.end_t = event.t
            process = profile.process
            process.exit_code, process.signal, process.ended = info.exit_code, info.signal, event.t
        elif kind == "child_started":
            pid = _opt_int(data.get("pid"))
            self._worker(pid, data.get("role"))
            if pid is not None:
                self.profile.children[pid] = ChildProcess(
                    pid=pid,
                    ppid=_opt_int(data.get("ppid")) or 0,
                    name=_str(data.get("name")),
                    cmdline=_str_list(data.get("cmdline")),
                    first_seen=event.t,
                    last_seen=event.t,
                )
        elif kind == "child_exited":
            child = self.profile.children.get(_opt_int(data.get("pid")) or -1)
            if child is not None:
                child.exited = event.t
                child.last_seen = event.t
            self._process_ended(_opt_int(data.get("pid")), event.t, data)
        elif kind == "recording_end":
            if self.profile.complete:  # said again (a repeated frame): all done the first time
                return
            self.profile.complete = True
            for sub in self.profile.subprocesses.values():
                sub.complete = True
            for stream, decoder in self._decoders.items():  # a character cut at the very end
                tail = decoder.decode(b"", final=True)
                if tail:
                    self.profile.output.append(OutputChunk(event.t, stream, tail))
        elif kind == "name":
            name_id, name = _opt_int(data.get("id")), data.get("name")
            if name_id is not None and isinstance(name, str):
                profile.names[name_id] = name
        elif kind == "detached" and profile is self.profile:
            info.detached = True
            info.end_t = event.t  # the recording's end; the process went on
        elif kind == "warning":
            message = _str(data.get("message"))
            if message:
                self.profile.warnings.append(message)

    # -- the job's other processes (profile/processes.py) -------------------------------------

    def _process(self, proc: int) -> Profile:
        """The profile of process `proc`: the target's for 0, else one made on first use."""
        if proc == 0:
            return self.profile
        sub = self.profile.subprocesses.get(proc)
        if sub is None:
            main = self.profile.info
            sub = Profile(
                info=RunInfo(
                    t0_ns=main.t0_ns,
                    interval_ms=main.interval_ms,
                    hostname=main.hostname,
                    memsight_version=main.memsight_version,
                    hooks=main.hooks,
                ),
                process=ProcessInfo(proc),
                complete=self.profile.complete,
                source=self.profile.source,
            )
            self.profile.subprocesses[proc] = sub
        return sub

    def _start_of(self, data: dict[str, Any], t: float) -> float:
        """When a process started: as its agent said (a fork child: the fork), else at `t`."""
        started = _opt_int(data.get("started_ns"))
        if started is None or self._t0 is None:
            return t
        said = (started - self._t0) / 1e9
        # Within moments of its hello, on this run's clock (a merged node's is not).
        return said if t - MAX_START_TO_HELLO_S <= said <= t else t

    def _index_pid(self, sub: Profile) -> None:
        """Files `sub` under its pid, so an event naming a pid costs a few lookups, not one
        per process of the job (thousands, in a hostile file, times every event)."""
        pid = sub.process.pid
        if pid is None:
            return
        having = self._pids.setdefault(pid, [])
        if all(other is not sub for other in having):
            having.append(sub)
            del having[:-MAX_PID_REUSE]

    def _by_pid(self, pid: int | None, t: float | None = None) -> Profile | None:
        """The job's process that had `pid` at `t` (None: the running one); pids are reused."""
        if pid is None:
            return None
        found = None
        for sub in self._pids.get(pid, ()):
            process = sub.process
            if process.pid != pid:
                continue
            if t is None and process.ended is None:
                return sub
            later = found is None or process.started >= found.process.started
            if t is not None and process.started <= t and later:
                found = sub
        return found

    def _worker(self, pid: int | None, role: Any) -> None:
        sub = self._by_pid(pid)
        if sub is not None and role == protocol.CHILD_ROLE_DATALOADER_WORKER:
            sub.process.worker = True

    def _process_ended(self, pid: int | None, t: float, data: dict[str, Any]) -> None:
        """A child exited: if it ran the agent, its process ends there (with its status, when
        the recorder read it)."""
        sub = self._by_pid(pid, t)
        if sub is not None:
            self._ended(sub, t, data)

    @staticmethod
    def _ended(sub: Profile, t: float, data: dict[str, Any]) -> None:
        """One sighting of a process' end. Several sources tell it, in any order (its own
        os._exit, its connection closing, the recorder's look at it, its parent's wait): it
        ended at the earliest, and its status is the one a source read, never unset again."""
        process = sub.process
        if process.ended is None or t < process.ended:
            process.ended = sub.info.end_t = max(t, process.started)
        exit_code, signal = _opt_int(data.get("exit_code")), _opt_int(data.get("signal"))
        if exit_code is not None or signal is not None:
            process.exit_code = sub.info.exit_code = exit_code if signal is None else None
            process.signal = sub.info.signal = signal


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_list(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
