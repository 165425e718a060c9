"""Profile files: a 16-byte header followed by protocol frames. See docs/profile-format.md.

The recorder appends frames while the run goes on, so a file cut short (the recorder was
killed) still loads up to its last complete frame. Anything else that is wrong with a file is
reported as a ProfileError with a one-line message naming the file; nothing in a file is ever
executed or unpickled.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import stat
import zlib
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from memsight.profiler import protocol
from memsight.profiler.output_path import OutputError, output_target, write_output
from memsight.profiler.profile import codec, inflate, overview
from memsight.profiler.profile.header import (
    ATTACHMENTS_VERSION,
    FILE_HEADER,
    FLAG_WHOLE,
    FORMAT_VERSION,
    MAGIC,
    file_header,
)
from memsight.profiler.profile.model import Damage, Profile
from memsight.profiler.profile.replay import (
    DECODE_CEILING,
    DECODE_FLOOR,
    DECODE_RATIO,
    DecodeBudget,
    ProfileBuilder,
)
from memsight.profiler.protocol import ProtocolError, TableSchema

# Limits on what a file can make the loader allocate (docs/profile-format.md#limits). A real
# recording holds at most 2 GiB of CUDA snapshots (recorder/snapshots.py) and 32 MiB of output
# per stream, plus samples of a few MiB an hour: a file past this size is refused unread.
MAX_PROFILE_FILE_BYTES = 8 << 30


class ProfileError(Exception):
    """A profile file that cannot be read. str() is one line: '<file>: <problem>'."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read a profile file into a Profile, or raise ProfileError.

    The file is mapped, not read whole: its size costs address space, not memory, and the
    attachments in it (up to 2 GiB of CUDA snapshots) are checked and never copied at once.
    """
    path = os.fspath(path)
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise ProfileError(path, "is a directory, not a profile file")
        if not stat.S_ISREG(info.st_mode):
            # A FIFO would block the open and a device such as /dev/zero never ends.
            raise ProfileError(path, "is a pipe or a device, not a profile file")
        if info.st_size > MAX_PROFILE_FILE_BYTES:
            raise ProfileError(path, _too_large(info.st_size))
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                profile = decode_profile(b"", path)
            else:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    profile = decode_profile(data, path)  # type: ignore[arg-type]
    except FileNotFoundError:
        raise ProfileError(path, "no such file") from None
    except IsADirectoryError:
        raise ProfileError(path, "is a directory, not a profile file") from None
    except MemoryError:
        raise ProfileError(path, _OUT_OF_MEMORY) from None
    except (OSError, ValueError) as exc:  # ValueError: mmap of a file that shrank to nothing
        raise ProfileError(path, getattr(exc, "strerror", None) or str(exc)) from None
    profile.source = path
    return profile


_OUT_OF_MEMORY = "not enough memory to load this profile"


def _too_large(size: int) -> str:
    return (
        f"{size:,} bytes is too large for a memsight profile (the limit is "
        f"{MAX_PROFILE_FILE_BYTES >> 30} GiB, far past any recording); not loaded"
    )


def _check_header(data: bytes, name: str) -> None:
    if not data:
        raise ProfileError(name, "empty file, not a memsight profile")
    if len(data) < FILE_HEADER.size:
        if MAGIC.startswith(data[: len(MAGIC)]):
            raise ProfileError(name, f"truncated header ({len(data)} of {FILE_HEADER.size} bytes)")
        raise ProfileError(name, "not a memsight profile")
    magic, version, _flags, _reserved = FILE_HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProfileError(name, "not a memsight profile")
    if version > FORMAT_VERSION:
        raise ProfileError(
            name,
            f"profile format version {version} is newer than this memsight reads "
            f"(up to {FORMAT_VERSION}); upgrade memsight",
        )
    if version < 1:
        raise ProfileError(name, f"invalid profile format version {version}")


class _FrameScan:
    """Walks the frames after the header; `cut_at` is set when the file ends inside one."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = FILE_HEADER.size
        self.index = 0
        self.cut_at: int | None = None

    def __iter__(self) -> Generator[tuple[int, bytes], None, None]:
        view = memoryview(self.data)
        try:
            yield from self._frames(view)
        finally:
            # An error's traceback keeps this frame alive; a mapped file must still close.
            view.release()

    def _frames(self, view: memoryview) -> Generator[tuple[int, bytes], None, None]:
        data, end = self.data, len(self.data)
        header, header_size, crc32 = protocol.HEADER, protocol.HEADER_SIZE, zlib.crc32
        while self.pos < end:
            pos = self.pos
            if end - pos < header_size:
                self.cut_at = pos
                return
            length, kind, crc = header.unpack_from(data, pos)
            if kind == 0 and _all_zero(view, pos):
                self.cut_at = pos  # zeros past the last write, as a power loss leaves
                return
            if length > protocol.MAX_FILE_PAYLOAD:
                raise ProtocolError(f"frame of {length} bytes exceeds the limit")
            start = pos + header_size
            if start + length > end:
                self.cut_at = pos
                return
            payload = view[start : start + length].tobytes()
            if crc32(payload) != crc:
                raise ProtocolError("checksum mismatch")
            yield kind, payload
            self.pos = start + length
            self.index += 1

    def error(self, name: str, exc: BaseException) -> ProfileError:
        if isinstance(exc, MemoryError):
            return ProfileError(name, _OUT_OF_MEMORY)
        if isinstance(exc, protocol.InflateLimitError) and exc.budget_refusal:
            return ProfileError(name, exc.budget_refusal)
        # Some exceptions (a KeyError of an empty key) print as nothing: name their type.
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        return ProfileError(name, f"corrupted at byte {self.pos} (frame {self.index}): {reason}")


_ZERO_CHUNK = 1 << 20


def _all_zero(view: memoryview, start: int) -> bool:
    """Whether every byte from `start` on is zero, compared a chunk at a time (no copy of it all)."""
    zeros = bytes(_ZERO_CHUNK)
    for pos in range(start, len(view), _ZERO_CHUNK):
        chunk = view[pos : pos + _ZERO_CHUNK]
        if chunk != zeros[: len(chunk)]:
            return False
    return True


# Files at least this large inflate their sample frames INFLATE_AHEAD frames ahead, in as many
# threads: a day-long run's 177 MB file holds 1.4 GB of samples, 3 s of zlib on one core.
INFLATE_AHEAD = 2
INFLATE_AHEAD_FILE_BYTES = 16 << 20
# ... those of them of at least this many bytes: a recording's own frames (not compacted, after
# a crash) are a few KiB each, 240,000 for a million samples, and a thread's hand-off costs
# more than inflating one where it is read.
INFLATE_AHEAD_MIN_PAYLOAD = 64 << 10

_Frame = tuple[int, bytes, tuple[int, int], Callable[[], tuple[int, bytes]] | None]


def _in_order(scan: _FrameScan, frames: Iterator[tuple[int, bytes]]) -> Iterator[_Frame]:
    """Each frame as (kind, payload, (file offset, index), None): inflated when applied."""
    for kind, payload in frames:
        yield kind, payload, (scan.pos, scan.index), None


def _inflated_ahead(
    scan: _FrameScan, frames: Iterator[tuple[int, bytes]], pool: ThreadPoolExecutor
) -> Iterator[_Frame]:
    """The frames as _in_order gives them, each compressed sample frame with its inflation
    started in `pool` up to INFLATE_AHEAD frames before it is applied."""
    waiting: deque[_Frame] = deque()
    unreadable: Exception | None = None
    try:
        for kind, payload in frames:
            inflated = None
            if (
                kind == protocol.SAMPLES | protocol.COMPRESSED
                and len(payload) >= INFLATE_AHEAD_MIN_PAYLOAD
            ):
                inflated = pool.submit(inflate.unpack_payload, kind, payload).result
            waiting.append((kind, payload, (scan.pos, scan.index), inflated))
            if len(waiting) > INFLATE_AHEAD:
                yield waiting.popleft()
    except _DECODE_ERRORS as exc:
        unreadable = exc  # raised once the frames before it are applied, as in order
    while waiting:
        yield waiting.popleft()
    if unreadable is not None:
        raise unreadable


# What a damaged frame can raise while being decoded, besides ProtocolError.
_DECODE_ERRORS = (ProtocolError, ValueError, TypeError, KeyError, OverflowError, MemoryError)


def decode_profile(data: bytes, name: str = "<memory>") -> Profile:
    """The Profile in a file's bytes (or a mapping of them), or ProfileError.

    What the frames decode to is bounded by DecodeBudget, checked before each inflation.
    A large file's sample frames are inflated INFLATE_AHEAD frames ahead in threads (zlib
    lets go of the GIL), each within the 64 MiB a frame may hold and then held to the budget
    as it is applied: a compression bomb can cost at most INFLATE_AHEAD such frames more
    before it is refused.
    """
    _check_header(data, name)
    budget = DecodeBudget()
    pool = (
        ThreadPoolExecutor(INFLATE_AHEAD, thread_name_prefix="memsight-inflate")
        if len(data) >= INFLATE_AHEAD_FILE_BYTES
        else None
    )
    # What the whole file may decode to, which its tables may be allocated up front.
    most = min(DECODE_CEILING, DECODE_FLOOR + DECODE_RATIO * len(data))
    builder = ProfileBuilder(budget=budget, pool=pool, preallocate_bytes=most)
    profile = builder.profile
    scan = _FrameScan(data)
    frames = iter(scan)
    feed = builder.feed
    at: tuple[int, int] | None = None  # the frame being applied, for an error's message
    try:
        source = _in_order(scan, frames) if pool is None else _inflated_ahead(scan, frames, pool)
        for kind, payload, at, inflated in source:
            if kind & ~protocol.COMPRESSED != protocol.ATTACHMENT:
                budget.stored += protocol.HEADER_SIZE + len(payload)
            feed(kind, payload, inflated)
            at = None  # an error from here on is the scan's own, at the frame it was reading
        builder.flush()
    except _DECODE_ERRORS as exc:
        if at is not None:
            scan.pos, scan.index = at
        raise scan.error(name, exc) from None
    finally:
        frames.close()  # lets go of its view of `data`, which may be a mapping about to close
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if scan.cut_at is not None:
        profile.warnings.append(
            f"the file ends inside a frame at byte {scan.cut_at}: the recording was cut off; "
            "everything before that point is shown"
        )
    if profile.info.t0_ns is None and not profile.tables:
        raise ProfileError(name, "holds no run (no metadata and no samples)")
    whole = bool(FILE_HEADER.unpack_from(data)[2] & FLAG_WHOLE)
    profile.damaged = _damage(scan, whole and not profile.complete, len(data))
    if profile.damaged is not None:
        profile.warnings.append(damage_text(profile.damaged))
    elif not profile.complete and scan.cut_at is None:
        profile.warnings.append(
            "the recording did not finish normally; data ends at the last write"
        )
    return profile


def _damage(scan: _FrameScan, tail_lost: bool, file_bytes: int) -> Damage | None:
    """What is wrong with a file that loaded only in part, or None when nothing is: a file
    that merely ends where its recorder stopped (killed between two writes) is not damaged.
    A frame that fails its checksum is not this: the whole file is refused (ProfileError)."""
    if scan.cut_at is not None:
        reason = f"the file ends inside a frame at byte {scan.cut_at:,}"
    elif tail_lost:
        reason = "the file was written whole after its run, but its end is missing"
    else:
        return None
    return Damage(reason, scan.pos, file_bytes)


def damage_text(damage: Damage) -> str:
    """One line for every place a damaged file is shown."""
    return (
        f"damaged file: {damage.reason}; read {damage.read_bytes:,} of {damage.file_bytes:,} "
        "bytes, and only that part is shown and judged"
    )


def read_frames(path: str | os.PathLike[str]) -> tuple[Profile, list[tuple[int, bytes]]]:
    """A profile file's Profile and its frames, each (kind, payload) inflated, in file order.

    The file is loaded first (load_profile: every check and bound applies), so a file that
    does not load raises ProfileError here too."""
    profile = load_profile(path)
    name = os.fspath(path)
    with open(name, "rb") as f:
        data = f.read()
    frames = []
    scan = _FrameScan(data)
    try:
        for kind, payload in scan:
            frames.append(protocol.unpack_payload(kind, payload, limit=protocol.MAX_FILE_PAYLOAD))
    except _DECODE_ERRORS as exc:
        raise scan.error(name, exc) from None
    return profile, frames


COMPACT_ROWS = 1 << 16
COMPACT_EVENTS = 20_000


def compact_profile(path: str | os.PathLike[str]) -> None:
    """Rewrite a finished profile with large blocks, for a smaller file that loads fast.

    While recording, samples go out in small blocks every fraction of a second so a crash
    loses almost nothing. Once the recording is closed, the same content is rewritten as
    large COLUMNS_PACKED blocks and large event batches and put in place atomically: the
    decoded profile is identical, and a failure leaves the original file as it was.
    """
    path = os.fspath(path)
    try:
        target = output_target(path)
    except OutputError:
        return
    if not target.exists:  # a device or a FIFO was written into: nothing to read back
        return
    with open(path, "rb") as f:
        data = f.read()
    _check_header(data, path)
    frames: list[bytes] = [file_header()]
    attachments = False
    schemas: dict[int, TableSchema] = {}
    blocks: dict[int, list[tuple[int, bytes]]] = {}
    events: list[Any] = []
    declared_at: dict[int, int] = {}  # table id -> the index in `frames` of its schema
    run_at: int | None = None  # the index in `frames` of the RUN frame
    scan = _FrameScan(data)
    try:
        for kind, payload in scan:
            base, plain = protocol.unpack_payload(kind, payload)
            if base == protocol.SAMPLES:
                table_id, encoding, block = protocol.split_samples(plain)
                codec.check_block(schemas[table_id], encoding, block)
                blocks.setdefault(table_id, []).append((encoding, block))
            elif base == protocol.EVENTS:
                events.extend(protocol.check_events(protocol.decode_json(plain)))
            else:
                if base == protocol.SCHEMA:
                    schema = TableSchema.from_json(protocol.decode_json(plain))
                    schemas[schema.id] = schema
                    declared_at.setdefault(schema.id, len(frames))
                elif base == protocol.ATTACHMENT:
                    if protocol.split_attachment(plain)[0] == overview.OVERVIEW_ID:
                        continue  # a file compacted before: its overview is made anew
                    attachments = True
                elif base == protocol.RUN and run_at is None:
                    run_at = len(frames)
                frames.append(protocol.encode_frame(kind, payload))
    except _DECODE_ERRORS as exc:
        raise scan.error(path, exc) from None
    version = FILE_HEADER.unpack_from(data)[1]
    # Whole only when the recording's end is in it: a run whose writing failed ends at the gap.
    ended = any(event.get("type") == "recording_end" for event in events)
    with_overview = ended and overview.needs_overview(
        sum(codec.block_rows(schemas[table_id], *block) for block in table_blocks)
        for table_id, table_blocks in blocks.items()
    )
    overview_tables: list[tuple[TableSchema, Any]] = []
    for table_id, table_blocks in blocks.items():
        schema = schemas[table_id]
        matrix = codec.decode_sequence(schema, table_blocks)
        kept = overview.overview_rows(schema, matrix) if with_overview else None
        if kept is not None:
            overview_tables.append((schema, kept))
        # The schema says how many rows follow: a reader allocates the table once and
        # decodes each block into its place (ProfileBuilder._place).
        frames[declared_at[table_id]] = protocol.encode_json_frame(
            protocol.SCHEMA, {**schema.to_json(), "rows": len(matrix)}
        )
        for start in range(0, len(matrix), COMPACT_ROWS):
            packed = codec.encode_columns_packed(schema, matrix[start : start + COMPACT_ROWS])
            frames.append(protocol.encode_frame(protocol.SAMPLES, packed, compress=True))
    if with_overview:
        run = frames[run_at] if run_at is not None else None
        stored = overview.overview_file(run, overview_tables, events, version)
        # Right after the RUN frame, where a reader finds it without scanning the file
        # (overview.read_overview). No event describes it: the profile it decodes to is the
        # same with it and without it.
        at = 1 if run_at is None else run_at + 1
        frames[at:at] = overview.overview_frames(stored)
        attachments = True
    for start in range(0, len(events), COMPACT_EVENTS):
        batch = events[start : start + COMPACT_EVENTS]
        frames.append(protocol.encode_json_frame(protocol.EVENTS, batch, compress=True))
    if attachments:
        version = max(version, ATTACHMENTS_VERSION)
    frames[0] = file_header(version, flags=FLAG_WHOLE if ended else 0)
    # By the one output rule (profiler/output_path.py): a temporary beside the file (a
    # symlink's target, not the link) replaces it atomically.
    write_output(target, frames)


def read_attachment(
    path: str | os.PathLike[str], attachment_id: int, size: int, sha256: str | None = None
) -> Iterator[bytes]:
    """The bytes of one attachment of a profile file, chunk by chunk, in order.

    The file is mapped, not read whole. The chunks must join up from offset 0 to `size`
    bytes (and match `sha256`, when given); otherwise ProfileError says the attachment is
    damaged. Nothing is unpickled: the bytes are only passed on.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _check_header(data[: FILE_HEADER.size], name)
            scan = _FrameScan(data)  # type: ignore[arg-type]
            frames = iter(scan)
            digest = hashlib.sha256()
            done = 0
            try:
                for kind, payload in frames:
                    if kind & ~protocol.COMPRESSED != protocol.ATTACHMENT:
                        continue
                    _, plain = protocol.unpack_payload(kind, payload)
                    found, offset, chunk = protocol.split_attachment(plain)
                    if found != attachment_id:
                        continue
                    if offset != done or done + len(chunk) > size:
                        raise ProtocolError(f"attachment {attachment_id} has a chunk out of place")
                    digest.update(chunk)
                    done += len(chunk)
                    yield chunk
            except _DECODE_ERRORS as exc:
                raise scan.error(name, exc) from None
            finally:
                frames.close()  # lets go of its view of the mapping before the mapping closes
    except FileNotFoundError:
        raise ProfileError(name, "no such file") from None
    except (OSError, ValueError) as exc:  # mmap of an empty file raises ValueError
        raise ProfileError(name, getattr(exc, "strerror", None) or str(exc)) from None
    if done != size:
        raise ProfileError(
            name, f"attachment {attachment_id} is incomplete ({done} of {size} bytes)"
        )
    if sha256 is not None and digest.hexdigest() != sha256:
        raise ProfileError(name, f"attachment {attachment_id} is damaged (checksum mismatch)")
