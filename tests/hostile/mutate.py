"""A seeded mutator of profile files at the frame level: each mutant is one real profile damaged
in one way a disk, a copy or an attacker could damage it.

Unlike corpus.py, which draws its mutations at random places, this one enumerates the places
that matter: truncation at every kind of boundary (inside the file header, inside a frame
header, at a frame boundary, one byte into a payload, one byte short of a payload's end), bit
flips in every frame, frames reordered and duplicated, and every length and count field a frame
holds inflated (the frame length, a sample block's row count, an output or attachment header,
a JSON array's size), with the checksum recomputed so the decoder sees the lie.
`mutants(seeds, seed)` yields (name, bytes) in a fixed order for a given seed.
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from collections.abc import Iterator

from memsight.profiler import protocol
from memsight.profiler.profile.header import FILE_HEADER

Frame = tuple[int, bytes]  # kind as stored (compressed bit kept), payload as stored

# Values an inflated field is set to: just past what is there, a power of two, the limits.
_U32_LIES = (0xFFFFFFFF, 0x7FFFFFFF, 1 << 24, protocol.MAX_FILE_PAYLOAD + 1)
_U64_LIES = ((1 << 64) - 1, 1 << 62, 1 << 40)


def stored_frames(data: bytes) -> list[tuple[int, Frame]]:
    """(offset, (kind, payload)) of each whole frame of a profile, payloads as stored."""
    found: list[tuple[int, Frame]] = []
    pos = FILE_HEADER.size
    while pos + protocol.HEADER_SIZE <= len(data):
        length, kind, _crc = protocol.HEADER.unpack_from(data, pos)
        start = pos + protocol.HEADER_SIZE
        if start + length > len(data):
            break
        found.append((pos, (kind, data[start : start + length])))
        pos = start + length
    return found


def frame_bytes(kind: int, payload: bytes) -> bytes:
    """A frame with a valid checksum for whatever payload it holds."""
    return protocol.HEADER.pack(len(payload), kind, zlib.crc32(payload)) + payload


def joined(header: bytes, frames: list[Frame]) -> bytes:
    return header + b"".join(frame_bytes(kind, payload) for kind, payload in frames)


def _plain(kind: int, payload: bytes) -> bytes:
    return zlib.decompress(payload) if kind & protocol.COMPRESSED else payload


def _restored(kind: int, plain: bytes) -> bytes:
    return zlib.compress(plain) if kind & protocol.COMPRESSED else plain


def truncations(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The file cut at every kind of boundary of every frame."""
    for cut in (0, 1, 8, FILE_HEADER.size - 1):  # nothing, one byte, the magic, all but one
        yield f"cut-header-{cut}", data[:cut]
    for n, (pos, (_kind, payload)) in enumerate(stored_frames(data)):
        end = pos + protocol.HEADER_SIZE + len(payload)
        cuts = {
            "at-frame": pos,
            "in-frame-header": pos + protocol.HEADER_SIZE // 2,
            "after-frame-header": pos + protocol.HEADER_SIZE,
            "one-into-payload": pos + protocol.HEADER_SIZE + 1,
            "one-short": end - 1,
        }
        for where, cut in cuts.items():
            if FILE_HEADER.size <= cut < len(data):
                yield f"cut-{where}-{n}", data[:cut]


def bit_flips(rng: random.Random, data: bytes, count: int) -> Iterator[tuple[str, bytes]]:
    """One bit flipped in each frame's header and payload, then `count` anywhere."""
    places = []
    for pos, (_kind, payload) in stored_frames(data):
        places.append(pos + rng.randrange(protocol.HEADER_SIZE))
        if payload:
            places.append(pos + protocol.HEADER_SIZE + rng.randrange(len(payload)))
    places += [rng.randrange(len(data)) for _ in range(count)]
    for place in places:
        out = bytearray(data)
        out[place] ^= 1 << rng.randrange(8)
        yield f"flip-{place}", bytes(out)


def reorders(rng: random.Random, data: bytes, count: int) -> Iterator[tuple[str, bytes]]:
    """Frames swapped, moved to the end, duplicated in place and at the end, dropped."""
    header, frames = data[: FILE_HEADER.size], [f for _, f in stored_frames(data)]
    if not frames:
        return
    for n in range(count):
        out = list(frames)
        i, j = rng.randrange(len(out)), rng.randrange(len(out))
        how = ("swap", "last", "dup", "dup-end", "drop", "reverse")[n % 6]
        if how == "swap":
            out[i], out[j] = out[j], out[i]
        elif how == "last":
            out.append(out.pop(i))
        elif how == "dup":
            out.insert(i, out[i])
        elif how == "dup-end":
            out += out[i:]
        elif how == "drop":
            del out[i]
        else:
            out.reverse()
        yield f"{how}-{i}-{j}", joined(header, out)


def _lied_payloads(kind: int, plain: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """The plain payload of one frame with one of its length or count fields inflated."""
    base = kind & ~protocol.COMPRESSED
    if base == protocol.SAMPLES and len(plain) >= 6:
        for lie in (*_U32_LIES, struct.unpack_from("<I", plain, 2)[0] + 1):
            yield f"rows-{lie}", plain[:2] + struct.pack("<I", lie) + plain[6:]
        yield "table-id", bytes([rng.randrange(256)]) + plain[1:]
        yield "encoding", plain[:1] + bytes([rng.randrange(3)]) + plain[2:]
    elif base == protocol.OUTPUT and len(plain) >= protocol.OUTPUT_HEADER.size:
        for lie in ((1 << 63) - 1, -(1 << 63)):
            yield f"output-t-{lie}", plain[:1] + struct.pack("<q", lie) + plain[9:]
    elif base == protocol.ATTACHMENT and len(plain) >= protocol.ATTACHMENT_HEADER.size:
        for lie in _U64_LIES:
            yield f"attachment-offset-{lie}", plain[:4] + struct.pack("<Q", lie) + plain[12:]
    elif base in (protocol.EVENTS, protocol.RUN, protocol.SCHEMA):
        try:
            value = json.loads(plain)
        except ValueError:
            return
        if isinstance(value, list) and value:
            yield "events-times-1000", json.dumps(value * 1000).encode()
            for field, lie in (("t", 1 << 62), ("t", -(1 << 62)), ("end", 1 << 62)):
                changed = [dict(e, **{field: lie}) if isinstance(e, dict) else e for e in value]
                yield f"event-{field}-{lie}", json.dumps(changed).encode()
        if isinstance(value, dict):
            for field, lie in (
                ("t0_ns", -(1 << 62)),
                ("interval_ms", 1e-300),
                ("interval_ms", 1e300),
                ("id", 255),
                ("columns", [["t", "q"]] * 200),
            ):
                yield f"{field}-{lie!s:.12}", json.dumps(dict(value, **{field: lie})).encode()


def inflations(rng: random.Random, data: bytes) -> Iterator[tuple[str, bytes]]:
    """Every length and count field of every frame inflated, checksums valid, one at a time."""
    header, located = data[: FILE_HEADER.size], stored_frames(data)
    frames = [f for _, f in located]
    for n, (pos, (kind, payload)) in enumerate(located):
        # The frame's own length: the checksum then covers the wrong bytes, or none at all.
        for lie in (*_U32_LIES, len(payload) + 1, len(payload) * 2 + 64):
            lied = data[:pos] + struct.pack("<I", lie) + data[pos + 4 :]
            yield f"length-{lie}-{n}", lied
        for what, plain in _lied_payloads(kind, _plain(kind, payload), rng):
            out = list(frames)
            out[n] = (kind, _restored(kind, plain))
            yield f"{what}-{n}", joined(header, out)
        # A sample block whose later rows jump by the extremes of int64 (values, not lengths).
        if kind & ~protocol.COMPRESSED == protocol.SAMPLES:
            block = bytearray(_plain(kind, payload))
            if len(block) >= 6 + 16:
                for offset in range(6, len(block) - 8, max(8, (len(block) - 6) // 4)):
                    block[offset : offset + 8] = struct.pack("<q", rng.choice((-1, 1)) << 62)
                out = list(frames)
                out[n] = (kind, _restored(kind, bytes(block)))
                yield f"extreme-values-{n}", joined(header, out)


def mutants(seeds: list[bytes], seed: int = 2026) -> Iterator[tuple[str, bytes]]:
    """Every mutant of every seed, in a fixed order for a given `seed`."""
    rng = random.Random(seed)
    for s, data in enumerate(seeds):
        families = (
            truncations(data),
            bit_flips(rng, data, 40),
            reorders(rng, data, 30),
            inflations(rng, data),
        )
        for family in families:
            for name, mutant in family:
                yield f"s{s}-{name}", mutant


def sample(seeds: list[bytes], count: int, seed: int = 2026) -> list[tuple[str, bytes]]:
    """`count` of the mutants, drawn evenly (the same ones for the same seeds and `seed`)."""
    every = list(mutants(seeds, seed))
    if len(every) <= count:
        return every
    step = len(every) / count
    return [every[int(i * step)] for i in range(count)]
