"""Wire format shared by the agent, the recorder and profile files.

A stream is a sequence of frames. Every frame is a 9-byte header followed by its payload::

    u32 payload length | u8 kind | u32 crc32(payload)      (little-endian)

The same frames travel over the loopback socket and are stored in profile files, so a saved
profile is decoded by exactly the code that decodes a live run. See docs/protocol.md.

This module runs inside the profiled process (see profiler/agent): stdlib only, Python 3.9+.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

PROTOCOL_VERSION = 1

# The environment variable that carries the agent's connection details into the target; the
# agent removes it before the target's code runs.
AGENT_ENV = "MEMSIGHT_AGENT"
# The one byte the recorder ever writes to an agent's connection, and only to an agent it
# attached to a running process (`memsight attach`): take every hook out and leave.
DETACH = b"D"

# A child process's role, as the recorder writes it in child_started / child_role events.
CHILD_ROLE_DATALOADER_WORKER = "dataloader-worker"
CHILD_ROLE_OTHER = "other"
# torch (2.5 and newer) names every DataLoader worker process so, in all start methods (fork,
# spawn, forkserver), as its worker loop starts: torch/utils/data/_utils/worker.py calls
# torch.multiprocessing._set_thread_name("pt_data_worker") on the worker's main thread.
DATALOADER_WORKER_NAME = "pt_data_worker"

# What an iteration of the program's loop is, best first (a census event's `iterations_are`;
# profiler/profile/series.py's `iterations`): its optimizer steps, else its backward passes
# (weights updated by hand), else batches of its outermost forward passes (inference).
OPTIMIZER_STEPS = "optimizer steps"
BACKWARD_PASSES = "backward passes"
FORWARD_PASSES = "forward passes"
ITERATION_KINDS = (OPTIMIZER_STEPS, BACKWARD_PASSES, FORWARD_PASSES)

HEADER = struct.Struct("<IBI")
HEADER_SIZE = HEADER.size

# Frame kinds. The high bit marks a zlib-compressed payload.
HELLO = 1  # agent -> recorder, JSON object; authenticates the connection, never stored
RUN = 2  # JSON object: run metadata, written once by the recorder at the start
EVENTS = 3  # JSON array of event objects, each with "t" (monotonic ns) and "type"
SCHEMA = 4  # JSON object declaring a sample table: {"id", "table", "columns": [[name, code]]}
SAMPLES = 5  # u8 table id, u8 encoding, then rows (see the encodings below)
OUTPUT = 6  # u8 stream (1 stdout, 2 stderr), i64 monotonic ns, then the raw bytes
# u32 attachment id, u64 offset, then bytes of a file the recorder stored in the profile (a
# CUDA memory snapshot); written by the recorder only, never sent by the agent. Files that
# hold one carry format version 2.
ATTACHMENT = 7
COMPRESSED = 0x80

KIND_NAMES = {
    HELLO: "hello",
    RUN: "run",
    EVENTS: "events",
    SCHEMA: "schema",
    SAMPLES: "samples",
    OUTPUT: "output",
    ATTACHMENT: "attachment",
}

# Sample block encodings.
ROWS = 0  # row-major rows packed with the table's struct format (what the agent sends)
ROWS_DELTA = 1  # u32 row count, then int64 rows: the first absolute, later ones as deltas
COLUMNS_PACKED = 2  # u32 row count, then zigzag column deltas split into byte planes

# Column type codes (struct format characters). All columns are integers so blocks can be
# delta-encoded; timestamps are monotonic nanoseconds.
COLUMN_CODES = frozenset("qQiIB")

# Every value is stored as a signed 64-bit integer, whatever the column's wire type.
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# Agent-declared tables use ids >= AGENT_TABLE_BASE so they never collide with the recorder's.
AGENT_TABLE_BASE = 64

# A frame larger than this is rejected by the recorder. Agents split output well below it.
MAX_PAYLOAD = 4 * 1024 * 1024
# Profile files may hold larger (compressed) blocks written by the recorder itself.
MAX_FILE_PAYLOAD = 64 * 1024 * 1024

OUTPUT_HEADER = struct.Struct("<Bq")
ATTACHMENT_HEADER = struct.Struct("<IQ")  # attachment id, offset of this chunk's bytes
ATTACHMENT_CHUNK = 4 * 1024 * 1024  # bytes of an attachment per ATTACHMENT frame
STDOUT = 1
STDERR = 2


class ProtocolError(ValueError):
    """A frame or payload that does not follow the format."""


class InflateLimitError(ProtocolError):
    """A compressed payload inflates past the limit it was given. `budget_refusal` is set by a
    caller whose limit was a whole file's budget rather than one frame's."""

    budget_refusal = ""


def encode_frame(kind: int, payload: bytes, compress: bool = False) -> bytes:
    if compress:
        payload = zlib.compress(payload, 1)
        kind |= COMPRESSED
    return HEADER.pack(len(payload), kind, zlib.crc32(payload)) + payload


def encode_json_frame(kind: int, obj: Any, compress: bool = False) -> bytes:
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return encode_frame(kind, data, compress=compress)


def unpack_payload(
    kind: int,
    payload: bytes,
    limit: int = MAX_FILE_PAYLOAD,
    zlib_module: Any = zlib,
) -> Tuple[int, bytes]:
    """Return (base kind, plain payload), inflating compressed payloads within `limit` bytes.

    `zlib_module`: another implementation of zlib's decompressobj() and error (a reader's
    faster one, profile/inflate.py); the standard library's by default."""
    if kind & COMPRESSED:
        inflater = zlib_module.decompressobj()
        try:
            plain = inflater.decompress(payload, limit)
        except (zlib.error, zlib_module.error) as exc:
            raise ProtocolError("compressed payload is corrupt: %s" % exc) from None
        if inflater.unconsumed_tail or (not inflater.eof and len(plain) >= limit):
            raise InflateLimitError("compressed payload inflates beyond %d bytes" % limit)
        if not inflater.eof:
            raise ProtocolError("compressed payload is truncated")
        return kind & ~COMPRESSED, plain
    return kind, payload


def _refuse_constant(name: str) -> Any:
    raise ValueError("non-finite number %s" % name)


def decode_json(payload: bytes) -> Any:
    """Strict JSON: NaN and Infinity are refused, so whatever is accepted re-encodes."""
    try:
        return json.loads(payload.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError("payload is not valid JSON: %s" % str(exc)[:80]) from None


class FrameReader:
    """Incremental frame parser for a byte stream (socket or file).

    feed() bytes as they arrive; frames() yields (kind, payload) for every complete frame.
    A frame longer than `max_payload` or with a bad checksum raises ProtocolError, or, when
    `lenient`, is skipped (its bytes discarded as they arrive) and its reason appended to
    `rejected`: the length prefix keeps the stream in step either way.
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD, lenient: bool = False) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._skip = 0
        self.max_payload = max_payload
        self.lenient = lenient
        self.rejected: List[str] = []

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buf += data

    @property
    def pending(self) -> int:
        return len(self._buf) - self._pos + self._skip

    def _reject(self, reason: str) -> None:
        if not self.lenient:
            raise ProtocolError(reason)
        self.rejected.append(reason)

    def frames(self) -> Iterator[Tuple[int, bytes]]:
        buf = self._buf
        while len(buf) - self._pos >= HEADER_SIZE:
            length, kind, crc = HEADER.unpack_from(buf, self._pos)
            start = self._pos + HEADER_SIZE
            end = start + length
            if length > self.max_payload:
                self._reject(
                    "frame of %d bytes exceeds the limit of %d" % (length, self.max_payload)
                )
                available = len(buf) - start
                if available >= length:
                    self._pos = end
                else:
                    self._pos = len(buf)
                    self._skip = length - available
                    return
                continue
            if end > len(buf):
                return
            payload = bytes(buf[start:end])
            self._pos = end
            if zlib.crc32(payload) != crc:
                self._reject("frame checksum mismatch")
                continue
            yield kind, payload


class TableSchema:
    """Column layout of one sample table."""

    __slots__ = ("columns", "id", "name", "row")

    def __init__(self, table_id: int, name: str, columns: Sequence[Tuple[str, str]]) -> None:
        self.id = table_id
        self.name = name
        self.columns: List[Tuple[str, str]] = [(str(n), str(c)) for n, c in columns]
        self.row = struct.Struct("<" + "".join(code for _, code in self.columns))

    def to_json(self) -> Dict[str, Any]:
        return {"id": self.id, "table": self.name, "columns": [list(c) for c in self.columns]}

    @classmethod
    def from_json(cls, obj: Any) -> "TableSchema":
        if not isinstance(obj, dict):
            raise ProtocolError("schema is not an object")
        table_id, name, columns = obj.get("id"), obj.get("table"), obj.get("columns")
        if not isinstance(table_id, int) or not 0 < table_id < 256:
            raise ProtocolError("schema has an invalid table id")
        if not isinstance(name, str) or not name.isidentifier():
            raise ProtocolError("schema has an invalid table name")
        if not isinstance(columns, list) or not 0 < len(columns) <= 64:
            raise ProtocolError("schema has an invalid column list")
        parsed = []
        for col in columns:
            if (
                not isinstance(col, list)
                or len(col) != 2
                or not isinstance(col[0], str)
                or not col[0].isidentifier()
                or not isinstance(col[1], str)
                or col[1] not in COLUMN_CODES
            ):
                raise ProtocolError("schema column %r is invalid" % (col,))
            parsed.append((col[0], col[1]))
        if parsed[0] != ("t", "q"):
            raise ProtocolError("the first column of a table must be t (int64 ns)")
        if len({n for n, _ in parsed}) != len(parsed):
            raise ProtocolError("schema repeats a column name")
        return cls(table_id, name, parsed)

    def frame(self) -> bytes:
        return encode_json_frame(SCHEMA, self.to_json())

    def rows_frame(self, packed_rows: bytes) -> bytes:
        """A SAMPLES frame holding rows already packed with `self.row`."""
        return encode_frame(SAMPLES, struct.pack("<BB", self.id, ROWS) + packed_rows)


_Bytes = TypeVar("_Bytes", bytes, memoryview)


def split_samples(payload: _Bytes) -> Tuple[int, int, _Bytes]:
    """(table id, encoding, block) of a SAMPLES payload; the block is a view when the payload
    is one (a reader's large file: no copy)."""
    if len(payload) < 2:
        raise ProtocolError("sample block is too short")
    return payload[0], payload[1], payload[2:]


def output_frame(stream: int, t_ns: int, data: bytes, compress: bool = False) -> bytes:
    return encode_frame(OUTPUT, OUTPUT_HEADER.pack(stream, t_ns) + data, compress=compress)


def split_output(payload: bytes) -> Tuple[int, int, bytes]:
    if len(payload) < OUTPUT_HEADER.size:
        raise ProtocolError("output frame is too short")
    stream, t_ns = OUTPUT_HEADER.unpack_from(payload)
    if stream not in (STDOUT, STDERR):
        raise ProtocolError("output frame names an unknown stream %d" % stream)
    return stream, t_ns, payload[OUTPUT_HEADER.size :]


def attachment_frame(attachment_id: int, offset: int, data: bytes) -> bytes:
    """One chunk of an attachment, zlib-compressed when that makes it smaller."""
    payload = ATTACHMENT_HEADER.pack(attachment_id, offset) + data
    packed = zlib.compress(payload, 1)
    if len(packed) < len(payload):
        return HEADER.pack(len(packed), ATTACHMENT | COMPRESSED, zlib.crc32(packed)) + packed
    return encode_frame(ATTACHMENT, payload)


def split_attachment(payload: bytes) -> Tuple[int, int, bytes]:
    """(attachment id, offset, bytes) of an ATTACHMENT payload (already inflated)."""
    if len(payload) < ATTACHMENT_HEADER.size:
        raise ProtocolError("attachment frame is too short")
    attachment_id, offset = ATTACHMENT_HEADER.unpack_from(payload)
    return attachment_id, offset, payload[ATTACHMENT_HEADER.size :]


def check_events(obj: Any) -> List[Dict[str, Any]]:
    """Validate an EVENTS payload: a list of objects, each with an int "t" and a str "type"."""
    if not isinstance(obj, list):
        raise ProtocolError("events payload is not a list")
    for ev in obj:
        if (
            not isinstance(ev, dict)
            or not isinstance(ev.get("t"), int)
            or not isinstance(ev.get("type"), str)
        ):
            raise ProtocolError("event is missing an integer t or a string type")
        if not INT64_MIN <= ev["t"] <= INT64_MAX:
            raise ProtocolError("event time is out of the signed 64-bit range")
    return obj


def check_hello(obj: Any) -> Dict[str, Any]:
    if not isinstance(obj, dict):
        raise ProtocolError("hello is not an object")
    if obj.get("protocol") != PROTOCOL_VERSION:
        raise ProtocolError("unsupported protocol version %r" % (obj.get("protocol"),))
    if not isinstance(obj.get("token"), str) or not isinstance(obj.get("pid"), int):
        raise ProtocolError("hello lacks a token or pid")
    return obj


def hello_frame(token: str, pid: int, extra: Optional[Dict[str, Any]] = None) -> bytes:
    obj: Dict[str, Any] = {"protocol": PROTOCOL_VERSION, "token": token, "pid": pid}
    if extra:
        obj.update(extra)
    return encode_json_frame(HELLO, obj)


# Tables written by the recorder (sampled from outside the target).
RAM_TABLE = TableSchema(
    1,
    "ram",
    [("t", "q"), ("rss", "Q"), ("rss_peak", "Q"), ("children", "Q"), ("available", "Q")],
)
CHILD_TABLE = TableSchema(
    2,
    "children",
    [("t", "q"), ("pid", "I"), ("rss", "Q"), ("uss", "Q"), ("pss", "Q"), ("swap", "Q")],
)
NVML_TABLE = TableSchema(
    3,
    "nvml",
    [("t", "q"), ("device", "B"), ("used", "Q"), ("total", "Q"), ("process_used", "Q")],
)
# Table written by the agent from torch.cuda's allocator statistics.
GPU_TABLE = TableSchema(
    AGENT_TABLE_BASE,
    "gpu",
    [
        ("t", "q"),
        ("device", "B"),
        ("allocated", "Q"),
        ("allocated_peak", "Q"),
        ("reserved", "Q"),
        ("reserved_peak", "Q"),
        ("active", "Q"),
        ("inactive_split", "Q"),
        ("alloc_retries", "Q"),
        ("ooms", "Q"),
    ],
)

# Tables written by the agent's PyTorch instrumentation (see docs/instrumentation.md). Every
# column is signed so that -1 can mean "not known" (no CUDA, breakdown not measured).
STEP_TABLE = TableSchema(
    AGENT_TABLE_BASE + 1,
    "steps",
    [
        ("t", "q"),
        ("end", "q"),
        ("index", "q"),
        ("optimizer", "q"),  # a name id (see the "name" event)
        ("cleared", "q"),  # CLEARED_* below
        ("rss", "q"),
        ("device", "q"),  # the current CUDA device, -1 without CUDA
        ("allocated", "q"),
        ("reserved", "q"),
        ("allocated_peak", "q"),
        ("reserved_peak", "q"),
        ("active", "q"),
        ("inactive_split", "q"),
        ("alloc_retries", "q"),
        ("ooms", "q"),
        ("params_cpu", "q"),  # breakdown: -1 on steps where it was not measured
        ("params_gpu", "q"),
        ("grads_cpu", "q"),
        ("grads_gpu", "q"),
        ("state_cpu", "q"),
        ("state_gpu", "q"),
    ],
)
SPAN_TABLE = TableSchema(
    AGENT_TABLE_BASE + 2,
    "spans",
    [
        ("t", "q"),
        ("end", "q"),
        ("kind", "q"),  # SPAN_* below
        (
            "id",
            "q",
        ),  # forward: its id; backward: the first forward it went through; link: a forward
        ("module", "q"),  # forward: a name id
        ("flags", "q"),  # forward: FLAG_* below
        ("depth", "q"),  # forward: nesting among outermost modules
    ],
)

# Table written by the agent from the C library's malloc statistics (agent/heap.py).
HEAP_TABLE = TableSchema(
    AGENT_TABLE_BASE + 3,
    "heap",
    [("t", "q"), ("in_use", "Q"), ("free", "Q"), ("between", "B")],
)

CLEARED_NONE, CLEARED_ZERO_GRAD, CLEARED_GRAD_REPLACED, CLEARED_FIRST_STEP = 0, 1, 2, 3
CLEARED_NAMES = {0: None, 1: "zero_grad", 2: "grad_replaced", 3: "first_step"}
SPAN_FORWARD, SPAN_BACKWARD, SPAN_LINK = 0, 1, 2  # a link row: this backward covered forward `id`
FLAG_TRAINING, FLAG_GRAD, FLAG_REQUIRES_GRAD, FLAG_AUTOCAST_CUDA, FLAG_AUTOCAST_CPU = 1, 2, 4, 8, 16
AGENT_TABLES = (GPU_TABLE, STEP_TABLE, SPAN_TABLE, HEAP_TABLE)
