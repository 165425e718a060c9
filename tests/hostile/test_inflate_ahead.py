"""Inflating a large file's sample frames ahead, in threads, changes nothing a file loads to.

storage.decode_profile inflates compressed sample frames a few frames before it applies them
when the file is large (INFLATE_AHEAD_FILE_BYTES). Here every file is loaded both ways, the
threshold moved so that the small seeds take the threaded path too: a file that loads gives
the same tables, events and warnings, and a file that is refused is refused with the same
line, naming the same frame.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.profile import codec, inflate, replay, storage
from memsight.profiler.profile.header import file_header
from memsight.profiler.profile.storage import ProfileError, decode_profile
from tests.hostile import corpus, frames, mutate

MUTANTS = 400


def _outcome(data: bytes) -> tuple[str, Any]:
    try:
        profile = decode_profile(data, "f.memsight")
    except ProfileError as exc:
        return "refused", str(exc)
    tables = {
        name: (len(table), [float(np.nansum(table[c])) for c in table.column_names])
        for name, table in profile.tables.items()
    }
    return "loaded", (tables, len(profile.events), profile.warnings, profile.damaged)


def _both_ways(data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    with monkeypatch.context() as m:
        m.setattr(storage, "INFLATE_AHEAD_FILE_BYTES", 1 << 62)
        in_order = _outcome(data)
    with monkeypatch.context() as m:
        m.setattr(storage, "INFLATE_AHEAD_FILE_BYTES", 0)
        m.setattr(storage, "INFLATE_AHEAD_MIN_PAYLOAD", 0)
        m.setattr(replay, "VIEW_BYTES", 0)
        ahead = _outcome(data)
    return in_order, ahead


def test_mutants_load_or_are_refused_alike_with_frames_inflated_ahead(
    recorded_seeds: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    mutants = mutate.sample(recorded_seeds + corpus.synthetic_seeds(), MUTANTS)
    differ = []
    outcomes = set()
    for name, data in mutants:
        in_order, ahead = _both_ways(data, monkeypatch)
        outcomes.add(in_order[0])
        if in_order != ahead:
            differ.append((name, in_order, ahead))
    assert not differ
    assert outcomes == {"loaded", "refused"}


def _sample_frame(rows: int, rss: int) -> bytes:
    block = np.zeros((rows, len(protocol.RAM_TABLE.columns)), dtype=np.int64)
    block[:, 0] = frames.T0 + np.arange(rows) * 10_000_000
    block[:, 1] = rss
    # Compressed as hard as zlib can (the recorder uses level 1): about a thousand to one.
    payload = zlib.compress(codec.encode_columns_packed(protocol.RAM_TABLE, block), 9)
    kind = protocol.SAMPLES | protocol.COMPRESSED
    return protocol.HEADER.pack(len(payload), kind, zlib.crc32(payload)) + payload


def test_a_bomb_among_sample_frames_inflated_ahead_is_refused_at_its_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Constant samples compress about a thousand to one: of eight frames of 1M rows (40 MB
    # each inflated), the one that takes the file past its budget (64 MiB and 256 times the
    # bytes read) is refused with the budget's line, both ways.
    frame = _sample_frame(1_000_000, 2**30)
    assert 256 * len(frame) < 40 << 20  # inflates past what the budget grows by per frame
    data = frames.small_profile(rows=3) + frame * 8
    in_order, ahead = _both_ways(data, monkeypatch)
    assert in_order == ahead
    assert in_order[0] == "refused"
    assert in_order[1].startswith("f.memsight: its compressed frames inflate past ")
    assert "(a compression bomb?); not loaded" in in_order[1]


@pytest.mark.parametrize("rows", [157, 0, 100, 156, 158, 10**6, 2**62, -1, "157", None])
def test_a_declared_row_count_that_is_wrong_changes_nothing_loaded(
    rows: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The count lets a large file allocate each table once and decode blocks into their
    # places; a count that is wrong (too few, too many, absurd, not a number) falls back to
    # joining the blocks, and what loads is the same.
    run = frames.run_frame()
    schema = protocol.encode_json_frame(
        protocol.SCHEMA, {**protocol.RAM_TABLE.to_json(), "rows": rows}
    )
    matrix = frames.ram_matrix(157, rss=3 << 20)
    matrix[:, 1] += np.arange(157, dtype=np.int64) * 4096
    samples = [
        protocol.encode_frame(
            protocol.SAMPLES,
            codec.encode_columns_packed(protocol.RAM_TABLE, matrix[a:b]),
            compress=True,
        )
        for a, b in ((0, 100), (100, 150), (150, 157))
    ]
    data = b"".join([file_header(), run, schema, *samples])
    in_order, ahead = _both_ways(data, monkeypatch)
    assert in_order == ahead
    assert in_order[0] == "loaded"
    with monkeypatch.context() as m:
        m.setattr(storage, "INFLATE_AHEAD_FILE_BYTES", 0)
        m.setattr(storage, "INFLATE_AHEAD_MIN_PAYLOAD", 0)
        ram = decode_profile(data, "f.memsight").tables["ram"]
    assert np.array_equal(ram["rss"], matrix[:, 1])
    assert np.allclose(ram.t, (matrix[:, 0] - frames.T0) / 1e9)


def test_a_compacted_file_declares_its_tables_row_counts(recorded_seeds: list[bytes]) -> None:
    declared = {}
    for kind, payload in corpus.split_frames(recorded_seeds[0]):
        if kind & ~protocol.COMPRESSED == protocol.SCHEMA:
            obj = protocol.decode_json(payload)
            declared[obj["table"]] = obj.get("rows")
    profile = decode_profile(recorded_seeds[0], "f.memsight")
    sampled = {name: len(table) for name, table in profile.tables.items() if len(table)}
    assert "ram" in sampled
    assert {name: declared[name] for name in sampled} == sampled


def test_the_standard_librarys_zlib_loads_every_mutant_as_isal_does(
    recorded_seeds: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ISA-L inflates when installed (profile/inflate.py); without it the standard library's
    # zlib reads the same files to the same profiles. Only the reason a corrupt deflate
    # stream gives, after "compressed payload is corrupt", is each library's own.
    assert inflate.ZLIB is not zlib  # isal is a dependency: this test compares the two
    monkeypatch.setattr(inflate, "SMALL_PAYLOAD", 0)  # every payload, small ones too
    differ = []
    for name, data in mutate.sample(recorded_seeds + corpus.synthetic_seeds(), MUTANTS):
        isal_outcome = _outcome(data)
        with monkeypatch.context() as m:
            m.setattr(inflate, "ZLIB", zlib)
            stdlib_outcome = _outcome(data)
        if isal_outcome != stdlib_outcome and not (
            isal_outcome[0] == stdlib_outcome[0] == "refused"
            and _before_reason(isal_outcome[1]) == _before_reason(stdlib_outcome[1])
        ):
            differ.append((name, isal_outcome, stdlib_outcome))
    assert not differ


def _before_reason(message: str) -> str:
    return message.split("compressed payload is corrupt:")[0]
