"""The hostile-file corpus: mutants of real and synthetic profiles, and files that are not files.

`mutants(seeds, count, seed)` yields (name, bytes) pairs: each is one seed damaged in one way,
the way a disk, a transfer or an attacker could damage it. Half the mutations keep every
checksum valid (they re-frame what they changed), so they reach the decoder, the model and the
rules rather than stopping at the checksum. `special_files(folder)` makes the paths that are
not regular files: a directory, a FIFO, /dev/zero, a symlink loop, an empty file.
"""

from __future__ import annotations

import copy
import json
import os
import random
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memsight.profiler import protocol
from memsight.profiler.profile import overview
from memsight.profiler.profile.header import FILE_HEADER
from memsight.profiler.profile.storage import compact_profile
from tests.hostile import frames

Frame = tuple[int, bytes]  # kind (with the compressed bit), plain payload
Mutation = Callable[[random.Random, bytes], bytes]


def split_frames(data: bytes) -> list[Frame]:
    """The frames of a valid profile, payloads inflated."""
    found: list[Frame] = []
    pos = FILE_HEADER.size
    while pos + protocol.HEADER_SIZE <= len(data):
        length, kind, _crc = protocol.HEADER.unpack_from(data, pos)
        payload = data[pos + protocol.HEADER_SIZE : pos + protocol.HEADER_SIZE + length]
        _, plain = protocol.unpack_payload(kind, payload)
        found.append((kind, plain))
        pos += protocol.HEADER_SIZE + length
    return found


def join_frames(header: bytes, found: list[Frame]) -> bytes:
    out = [header]
    for kind, plain in found:
        out.append(
            protocol.encode_frame(
                kind & ~protocol.COMPRESSED, plain, bool(kind & protocol.COMPRESSED)
            )
        )
    return b"".join(out)


# -- mutations of the bytes as stored (most stop at a checksum or a length) ---------------------


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def flip_bits(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 8))):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def huge_length(rng: random.Random, data: bytes) -> bytes:
    """One frame's length field set to a huge or slightly wrong value."""
    offsets = frame_offsets(data)
    pos = rng.choice(offsets)
    (length,) = struct.unpack_from("<I", data, pos)
    new = rng.choice(
        (
            0xFFFFFFFF,
            protocol.MAX_FILE_PAYLOAD + 1,
            protocol.MAX_FILE_PAYLOAD,
            length + 1,
            max(0, length - 1),
            0,
        )
    )
    return data[:pos] + struct.pack("<I", new) + data[pos + 4 :]


def wrong_version(rng: random.Random, data: bytes) -> bytes:
    version = rng.choice((0, 3, 255, 0xFFFF))
    return data[:8] + struct.pack("<H", version) + data[10:]


def append_garbage(rng: random.Random, data: bytes) -> bytes:
    return data + rng.randbytes(rng.randrange(1, 64))


def zero_tail(rng: random.Random, data: bytes) -> bytes:
    cut = rng.randrange(FILE_HEADER.size, len(data))
    return data[:cut] + bytes(rng.choice((1, 9, 4096, 1 << 20)))


def frame_offsets(data: bytes) -> list[int]:
    offsets, pos = [], FILE_HEADER.size
    while pos + protocol.HEADER_SIZE <= len(data):
        offsets.append(pos)
        pos += protocol.HEADER_SIZE + protocol.HEADER.unpack_from(data, pos)[0]
    return offsets or [FILE_HEADER.size]


# -- mutations that keep every checksum valid (they reach the decoder and the rules) ------------


def _reframed(change: Callable[[random.Random, list[Frame]], None]) -> Mutation:
    def mutate(rng: random.Random, data: bytes) -> bytes:
        found = split_frames(data)
        change(rng, found)
        return join_frames(data[: FILE_HEADER.size], found)

    mutate.__name__ = change.__name__
    return mutate


def _pick(rng: random.Random, found: list[Frame], kinds: set[int] | None = None) -> int:
    indexes = [
        i for i, (k, _) in enumerate(found) if kinds is None or k & ~protocol.COMPRESSED in kinds
    ]
    return rng.choice(indexes) if indexes else rng.randrange(len(found))


@_reframed
def flip_payload_byte(rng: random.Random, found: list[Frame]) -> None:
    i = _pick(rng, found)
    kind, plain = found[i]
    if plain:
        out = bytearray(plain)
        out[rng.randrange(len(out))] = rng.randrange(256)
        found[i] = (kind, bytes(out))


@_reframed
def cut_payload(rng: random.Random, found: list[Frame]) -> None:
    i = _pick(rng, found)
    kind, plain = found[i]
    found[i] = (kind, plain[: rng.randrange(len(plain) + 1)])


@_reframed
def drop_or_repeat_frame(rng: random.Random, found: list[Frame]) -> None:
    i = _pick(rng, found)
    if rng.random() < 0.5 and len(found) > 1:
        del found[i]
    else:
        found.insert(rng.randrange(len(found) + 1), found[i])


@_reframed
def swap_frames(rng: random.Random, found: list[Frame]) -> None:
    i, j = rng.randrange(len(found)), rng.randrange(len(found))
    found[i], found[j] = found[j], found[i]


@_reframed
def compression_bomb(rng: random.Random, found: list[Frame]) -> None:
    """Frames that each inflate to up to 64 MiB of zeros or text, up to gigabytes in all."""
    kind = rng.choice((protocol.OUTPUT, protocol.EVENTS, protocol.SAMPLES, protocol.RUN))
    size = rng.choice((protocol.MAX_FILE_PAYLOAD, protocol.MAX_FILE_PAYLOAD + 1, 8 << 20))
    body = (
        protocol.OUTPUT_HEADER.pack(1, frames.T0) + b"A" * size
        if kind == protocol.OUTPUT
        else bytes(size)
    )
    bomb = (kind | protocol.COMPRESSED, body)
    for _ in range(rng.choice((1, 4, 16))):
        found.insert(rng.randrange(1, len(found) + 1), bomb)


@_reframed
def nested_json(rng: random.Random, found: list[Frame]) -> None:
    depth = rng.choice((100, 1000, 100_000))
    kind = rng.choice((protocol.EVENTS, protocol.RUN, protocol.SCHEMA))
    body = (
        b'{"a":' * depth + b"1" + b"}" * depth
        if rng.random() < 0.5
        else b"[" * depth + b"]" * depth
    )
    found.insert(rng.randrange(len(found) + 1), (kind, body))


_ODD_VALUES: list[Any] = [
    float("nan"),
    float("inf"),
    -1,
    -(1 << 63),
    (1 << 63),
    1 << 64,
    10**400,
    -0.0,
    1e308,
    "",
    "x" * 100_000,
    None,
    [],
    {},
    True,
    [[[[[]]]]],
]


def _odd_json(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        if rng.random() < 0.6:
            value[key] = _odd_value(rng)
        else:
            value[key] = _odd_json(value[key], rng)
    elif isinstance(value, list) and value:
        i = rng.randrange(len(value))
        value[i] = _odd_value(rng) if rng.random() < 0.4 else _odd_json(value[i], rng)
    else:
        return _odd_value(rng)
    return value


def _odd_value(rng: random.Random) -> Any:
    # A copy: a later mutation that reaches into a shared list would change the constant, and
    # could put it inside itself (a value json cannot write).
    return copy.deepcopy(rng.choice(_ODD_VALUES))


@_reframed
def odd_json_values(rng: random.Random, found: list[Frame]) -> None:
    """NaN, infinities, negative, huge and wrongly typed numbers in metadata, events, schemas."""
    i = _pick(rng, found, {protocol.RUN, protocol.EVENTS, protocol.SCHEMA})
    kind, plain = found[i]
    try:
        value = json.loads(plain)
    except ValueError:
        return
    for _ in range(rng.choice((1, 2, 4))):
        value = _odd_json(value, rng)
    found[i] = (kind, json.dumps(value).encode())  # allow_nan: writes NaN and Infinity


@_reframed
def odd_sample_values(rng: random.Random, found: list[Frame]) -> None:
    """Sample rows with negative, extreme or backwards values, blocks with wrong row counts."""
    i = _pick(rng, found, {protocol.SAMPLES})
    kind, plain = found[i]
    if len(plain) < 6:
        return
    out = bytearray(plain)
    if rng.random() < 0.3:  # the row count
        struct.pack_into(
            "<I", out, 2, rng.choice((0, 1, 0xFFFFFFFF, struct.unpack_from("<I", out, 2)[0] + 1))
        )
    else:
        for _ in range(rng.choice((1, 3, 10))):
            pos = rng.randrange(2, len(out))
            out[pos : pos + 8] = struct.pack("<q", rng.choice((-1, -(1 << 63), (1 << 63) - 1, 0)))[
                : len(out) - pos
            ]
    found[i] = (kind, bytes(out))


@_reframed
def foreign_frame(rng: random.Random, found: list[Frame]) -> None:
    """A hello, an unknown kind, a schema for another table or an attachment out of place."""
    choices: list[Frame] = [
        (protocol.HELLO, b'{"token":"x"}'),
        (rng.choice((0, 8, 9, 0x7F)), b"{}"),
        (
            protocol.SCHEMA,
            json.dumps(
                {"id": rng.randrange(256), "table": "ram", "columns": [["t", "q"]]}
            ).encode(),
        ),
        (protocol.ATTACHMENT, struct.pack("<IQ", 1, rng.choice((0, 1 << 62))) + b"x" * 10),
        (
            protocol.SAMPLES,
            bytes([rng.randrange(256), rng.randrange(4)]) + rng.randbytes(rng.randrange(40)),
        ),
        (
            protocol.OUTPUT,
            bytes([rng.randrange(256)]) + rng.randbytes(8) + "\x1b]0;title\x07\u202e".encode(),
        ),
    ]
    found.insert(rng.randrange(len(found) + 1), rng.choice(choices))


MUTATIONS: list[Mutation] = [
    truncate,
    flip_bits,
    huge_length,
    wrong_version,
    append_garbage,
    zero_tail,
    flip_payload_byte,
    cut_payload,
    drop_or_repeat_frame,
    swap_frames,
    compression_bomb,
    nested_json,
    odd_json_values,
    odd_json_values,
    odd_sample_values,
    foreign_frame,
]


def mutants(seeds: list[bytes], count: int, seed: int = 14) -> Iterator[tuple[str, bytes]]:
    """`count` mutants of the seeds, the same ones for the same `seed`."""
    rng = random.Random(seed)
    for n in range(count):
        mutation = MUTATIONS[n % len(MUTATIONS)]
        original = rng.choice(seeds)
        yield f"{n:04d}-{mutation.__name__}", mutation(rng, original)


def synthetic_seeds() -> list[bytes]:
    """Small valid profiles of every table and frame kind, for when no recording is at hand."""
    events = protocol.encode_json_frame(
        protocol.EVENTS,
        [
            {"t": frames.T0 + 1000, "type": "mode", "mode": "train"},
            {
                "t": frames.T0 + 2000,
                "type": "exception",
                "exc_type": "ValueError",
                "uncaught": True,
                "message": "m",
            },
            {"t": frames.T0 + 9000, "type": "exit", "code": 1},
            {"t": frames.T0 + 9001, "type": "recording_end"},
        ],
    )
    output = protocol.output_frame(1, frames.T0 + 500, b"epoch 1 loss 0.5\n", compress=True)
    base = frames.small_profile(rows=200)
    job = frames.small_profile(rows=20) + frames.job_frames()  # a torchrun job's processes
    seeds = [base, base + events + output, frames.small_profile(rows=3) + events, job]
    return [*seeds, with_overview(frames.small_profile(rows=2_000) + events + output)]


def with_overview(data: bytes) -> bytes:
    """A finished profile compacted with a stored overview (profile/overview.py), which a
    profile of this size would not get: so that mutants reach the app's reading of one."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "seed.memsight"
        path.write_bytes(data)
        limits = overview.OVERVIEW_MIN_ROWS, overview.OVERVIEW_BINS
        overview.OVERVIEW_MIN_ROWS, overview.OVERVIEW_BINS = 1_000, 64
        try:
            compact_profile(path)
        finally:
            overview.OVERVIEW_MIN_ROWS, overview.OVERVIEW_BINS = limits
        assert overview.read_overview(path) is not None
        return path.read_bytes()


def special_files(folder: Path) -> list[tuple[str, Path]]:
    """Paths that are not profile files at all, made in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, Path]] = []
    directory = folder / "a-directory.memsight"
    directory.mkdir(exist_ok=True)
    made.append(("directory", directory))
    fifo = folder / "a-fifo.memsight"
    if not fifo.exists():
        os.mkfifo(fifo)
    made.append(("fifo", fifo))
    made.append(("dev-zero", Path("/dev/zero")))
    loop = folder / "loop.memsight"
    if not loop.is_symlink():
        os.symlink(loop, loop)
    made.append(("symlink-loop", loop))
    empty = folder / "empty.memsight"
    empty.write_bytes(b"")
    made.append(("empty", empty))
    header_only = folder / "header-only.memsight"
    header_only.write_bytes(FILE_HEADER.pack(b"MEMSIGHT", 1, 0, 0))
    made.append(("header-only", header_only))
    missing = folder / "missing.memsight"
    made.append(("missing", missing))
    return made


def write_corpus(folder: Path, seeds: list[bytes], count: int) -> list[tuple[str, Path]]:
    """The special files and `count` mutants, written to `folder`."""
    written = special_files(folder / "special")
    for name, data in mutants(seeds, count):
        path = folder / f"{name}.memsight"
        path.write_bytes(data)
        written.append((name, path))
    return written
