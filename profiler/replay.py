"""Replay frames into a Profile: the one decoder for live recordings and saved files.

Sample blocks are queued as raw bytes and decoded in batches by flush(), so a file with
hundreds of thousands of small blocks still loads in well under a second.
"""

from __future__ import annotations

import codecs
from typing import Any

import numpy as np

from profiler import protocol
from profiler.model import ChildProcess, DeviceInfo, Event, OutputChunk, Profile, SampleTable
from profiler.protocol import ProtocolError, TableSchema

ROW_DELTA_HEADER = 4  # u32 row count, before the int64 matrix


def encode_row_delta(schema: TableSchema, columns: np.ndarray) -> bytes:
    """Payload of a ROWS_DELTA sample block for `columns`, an int64 array (rows, ncols).

    The first row is stored as-is, each later row as its difference from the row before, so
    slowly changing memory curves compress to a few bytes per sample.
    """
    rows = np.ascontiguousarray(columns, dtype="<i8")
    deltas = np.empty_like(rows)
    deltas[:1] = rows[:1]
    np.subtract(rows[1:], rows[:-1], out=deltas[1:])
    head = bytes([schema.id, protocol.ROWS_DELTA]) + len(rows).to_bytes(4, "little")
    return head + deltas.tobytes()


class ProfileBuilder:
    """Applies frames, in stream order, to a Profile.

    feed() validates and applies one frame; call flush() before reading sample tables.
    Every problem in a frame raises ProtocolError; the caller decides whether that is fatal
    (a file) or one rejected frame (a live socket).
    """

    def __init__(self, profile: Profile | None = None) -> None:
        self.profile = profile if profile is not None else Profile()
        self.schemas: dict[int, TableSchema] = {}
        self._pending: dict[int, list[tuple[int, bytes]]] = {}
        self._t0: int | None = self.profile.info.t0_ns
        self._decoders: dict[int, codecs.IncrementalDecoder] = {}

    # -- frames -----------------------------------------------------------------------------

    def feed(self, kind: int, payload: bytes) -> None:
        kind, payload = protocol.unpack_payload(kind, payload)
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
            self.add_schema(TableSchema.from_json(protocol.decode_json(payload)))
        elif kind == protocol.RUN:
            self._apply_run(protocol.decode_json(payload))
        elif kind == protocol.HELLO:
            raise ProtocolError("a hello frame belongs to the socket handshake only")
        else:
            raise ProtocolError(f"unknown frame kind {kind}")

    def add_schema(self, schema: TableSchema) -> None:
        known = self.schemas.get(schema.id)
        if known is not None:
            if known.columns != schema.columns or known.name != schema.name:
                raise ProtocolError(f"table {schema.id} redeclared with a different layout")
            return
        for other in self.schemas.values():
            if other.name == schema.name:
                raise ProtocolError(f"table name {schema.name!r} declared twice")
        self.schemas[schema.id] = schema
        self.profile.tables[schema.name] = SampleTable(schema.name, [c for c, _ in schema.columns])

    def _queue_samples(self, payload: bytes) -> None:
        table_id, encoding, data = protocol.split_samples(payload)
        schema = self.schemas.get(table_id)
        if schema is None:
            raise ProtocolError(f"samples for undeclared table {table_id}")
        if encoding == protocol.ROWS:
            if len(data) % schema.row.size:
                raise ProtocolError(f"sample block for {schema.name} has a partial row")
        elif encoding == protocol.ROWS_DELTA:
            if len(data) < ROW_DELTA_HEADER:
                raise ProtocolError("sample block is too short")
            rows = int.from_bytes(data[:ROW_DELTA_HEADER], "little")
            if len(data) - ROW_DELTA_HEADER != rows * 8 * len(schema.columns):
                raise ProtocolError(f"sample block for {schema.name} has the wrong size")
        else:
            raise ProtocolError(f"unknown sample encoding {encoding}")
        self._pending.setdefault(table_id, []).append((encoding, data))

    # -- batched sample decoding ------------------------------------------------------------

    def flush(self) -> None:
        """Decode every queued sample block into its table."""
        pending, self._pending = self._pending, {}
        for table_id, blocks in pending.items():
            schema = self.schemas[table_id]
            table = self.profile.tables[schema.name]
            run: list[bytes] = []
            run_encoding = -1
            for encoding, data in blocks:
                if encoding != run_encoding and run:
                    self._append(schema, table, run_encoding, run)
                    run = []
                run_encoding = encoding
                run.append(data)
            if run:
                self._append(schema, table, run_encoding, run)

    def _append(
        self, schema: TableSchema, table: SampleTable, encoding: int, blocks: list[bytes]
    ) -> None:
        ncols = len(schema.columns)
        if encoding == protocol.ROWS:
            dtype = np.dtype([(name, "<" + code) for name, code in schema.columns])
            rec = np.frombuffer(b"".join(blocks), dtype=dtype)
            matrix = np.empty((len(rec), ncols), dtype=np.int64)
            for i, (name, _) in enumerate(schema.columns):
                matrix[:, i] = rec[name]
        else:
            matrix = _decode_row_deltas(blocks, ncols)
        if not len(matrix):
            return
        if self._t0 is None:
            self._t0 = int(matrix[0, 0])
        block: dict[str, np.ndarray] = {
            name: matrix[:, i] for i, (name, _) in enumerate(schema.columns)
        }
        block["t"] = (matrix[:, 0] - self._t0) / 1e9
        table.append(block)

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
        info.pid = _opt_int(obj.get("pid"))
        info.ram_total_bytes = _opt_int(obj.get("ram_total_bytes"))
        info.memory_limit_bytes = _opt_int(obj.get("memory_limit_bytes"))
        info.hooks = bool(obj.get("hooks", True))
        t0 = _opt_int(obj.get("t0_ns"))
        if t0 is not None and self._t0 is None:
            self._t0 = t0
        info.t0_ns = self._t0

    def _apply_event(self, raw: dict[str, Any]) -> None:
        data = {k: v for k, v in raw.items() if k not in ("t", "type")}
        end = data.get("end")
        if isinstance(end, int) and not isinstance(end, bool):
            data["end"] = self._rel(end)  # spans end on the same clock they start on
        event = Event(self._rel(raw["t"]), raw["type"], data)
        self.profile.events.append(event)
        info, kind = self.profile.info, event.type
        if kind == "agent_connected":
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
        elif kind == "child_started":
            pid = _opt_int(data.get("pid"))
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
        elif kind == "recording_end":
            self.profile.complete = True
        elif kind == "warning":
            message = _str(data.get("message"))
            if message:
                self.profile.warnings.append(message)


def _decode_row_deltas(blocks: list[bytes], ncols: int) -> np.ndarray:
    """Decode concatenated ROWS_DELTA blocks with one cumulative sum.

    Each block's first row is absolute. A cumulative sum over all rows adds the previous
    blocks' totals to every row; subtracting that running offset per block restores the
    values. int64 arithmetic wraps, and the wrap cancels exactly in the subtraction.
    """
    counts = np.fromiter(
        (int.from_bytes(b[:ROW_DELTA_HEADER], "little") for b in blocks),
        dtype=np.int64,
        count=len(blocks),
    )
    total = int(counts.sum())
    if total == 0:
        return np.empty((0, ncols), dtype=np.int64)
    joined = b"".join(b[ROW_DELTA_HEADER:] for b in blocks)
    deltas = np.frombuffer(joined, dtype="<i8").reshape(total, ncols)
    with np.errstate(over="ignore"):
        sums = np.cumsum(deltas, axis=0, dtype=np.int64)
        ends = np.cumsum(counts)
        starts = ends - counts
        offsets = np.zeros((len(blocks), ncols), dtype=np.int64)
        nonempty = counts > 0
        first = starts[nonempty]
        offsets[nonempty] = np.where((first > 0)[:, None], sums[np.maximum(first - 1, 0)], 0)
        return sums - np.repeat(offsets, counts, axis=0)


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
