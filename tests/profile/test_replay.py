from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.profile import codec
from memsight.profiler.profile.replay import ProfileBuilder
from memsight.profiler.profile.storage import ProfileError, compact_profile, load_profile
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import FrameReader, ProtocolError
from memsight.profiler.recorder.blocks import TableBuffer

T0 = 5_000_000_000


def feed_all(builder: ProfileBuilder, frames: list[bytes]) -> None:
    reader = FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
    reader.feed(b"".join(frames))
    for kind, payload in reader.frames():
        builder.feed(kind, payload)
    builder.flush()


def run_frame(**extra: object) -> bytes:
    return protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "train.py", **extra})


def test_rows_survive_delta_blocks_exactly_including_values_near_the_int64_limit() -> None:
    # Given rows spread over many blocks, some with huge values whose running sums overflow
    rng = np.random.default_rng(1)
    buffer = TableBuffer(protocol.RAM_TABLE)
    frames = [run_frame(), protocol.RAM_TABLE.frame()]
    expected = []
    t = T0
    for block in range(40):
        for _ in range(int(rng.integers(0, 30))):  # empty blocks too
            t += int(rng.integers(9_000_000, 11_000_000))
            row = (t, int(rng.integers(0, 2**62)), 2**63 - 1 - block, block, 7)
            buffer.add(row)
            expected.append(row)
        frame = buffer.drain()
        if frame:
            frames.append(frame)
    # When they are replayed
    builder = ProfileBuilder()
    feed_all(builder, frames)
    table = builder.profile.tables["ram"]
    # Then every value is exact and t is seconds since t0
    got = np.array(expected, dtype=np.int64)
    assert len(table) == len(expected)
    for i, name in enumerate(["rss", "rss_peak", "children", "available"], start=1):
        assert np.array_equal(table[name], got[:, i])
    assert np.allclose(table.t, (got[:, 0] - T0) / 1e9)


def test_row_major_blocks_from_the_agent_decode_like_delta_blocks() -> None:
    rows = [(T0 + i * 10_000_000, 0, 100 + i, 200 + i, 300, 400, 50, 7, 0, 0) for i in range(5)]
    packed = b"".join(protocol.GPU_TABLE.row.pack(*r) for r in rows)
    builder = ProfileBuilder()
    feed_all(
        builder, [run_frame(), protocol.GPU_TABLE.frame(), protocol.GPU_TABLE.rows_frame(packed)]
    )
    gpu = builder.profile.gpu
    assert gpu is not None
    assert list(gpu["allocated"]) == [100, 101, 102, 103, 104]
    assert list(gpu.t) == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04])


def test_samples_for_an_undeclared_table_are_refused() -> None:
    builder = ProfileBuilder()
    with pytest.raises(ProtocolError, match="undeclared"):
        builder.feed(protocol.SAMPLES, bytes([9, protocol.ROWS]))


def test_a_block_with_a_partial_row_is_refused() -> None:
    builder = ProfileBuilder()
    builder.feed(protocol.SCHEMA, protocol.GPU_TABLE.frame()[protocol.HEADER_SIZE :])
    with pytest.raises(ProtocolError, match="partial row"):
        builder.feed(protocol.SAMPLES, bytes([protocol.GPU_TABLE.id, protocol.ROWS, 1, 2, 3]))


def test_a_table_cannot_be_redeclared_with_another_layout() -> None:
    builder = ProfileBuilder()
    builder.feed(protocol.SCHEMA, protocol.RAM_TABLE.frame()[protocol.HEADER_SIZE :])
    builder.feed(protocol.SCHEMA, protocol.RAM_TABLE.frame()[protocol.HEADER_SIZE :])  # same: fine
    clash = protocol.TableSchema(protocol.RAM_TABLE.id, "ram", [("t", "q"), ("x", "Q")])
    with pytest.raises(ProtocolError, match="different layout"):
        builder.feed(protocol.SCHEMA, clash.frame()[protocol.HEADER_SIZE :])


def test_events_update_run_info_children_and_completion() -> None:
    events = [
        {"t": T0 + 1_000_000_000, "type": "torch_imported", "version": "2.13.0", "cuda": None},
        {
            "t": T0 + 2_000_000_000,
            "type": "child_started",
            "pid": 42,
            "ppid": 1,
            "name": "w",
            "cmdline": ["python"],
        },
        {"t": T0 + 3_000_000_000, "type": "child_exited", "pid": 42},
        {"t": T0 + 4_000_000_000, "type": "exit", "exit_code": None, "signal": 9},
        {"t": T0 + 4_100_000_000, "type": "recording_end"},
    ]
    builder = ProfileBuilder()
    feed_all(
        builder,
        [run_frame(argv=["--epochs", "2"]), protocol.encode_json_frame(protocol.EVENTS, events)],
    )
    profile = builder.profile
    assert profile.info.torch_version == "2.13.0"
    assert profile.info.signal == 9 and profile.info.exit_code is None
    assert profile.info.end_t == pytest.approx(4.0)
    assert profile.children[42].exited == pytest.approx(3.0)
    assert profile.complete
    assert profile.info.target == "train.py --epochs 2"


def test_wrongly_typed_event_fields_are_ignored_not_trusted() -> None:
    events = [{"t": T0, "type": "exit", "exit_code": "zero", "signal": [1]}]
    builder = ProfileBuilder()
    feed_all(builder, [run_frame(), protocol.encode_json_frame(protocol.EVENTS, events)])
    assert builder.profile.info.exit_code is None
    assert builder.profile.info.signal is None


def test_live_decoding_in_small_pieces_equals_loading_the_file(tmp_path: Path) -> None:
    # Given the same frames written to a file and fed live in small increments
    buffer = TableBuffer(protocol.RAM_TABLE)
    frames = [run_frame(), protocol.RAM_TABLE.frame()]
    for i in range(200):
        buffer.add((T0 + i * 10_000_000, 1000 + i * i, 1000 + i * i, 0, 5))
        if i % 7 == 0:
            frames.append(buffer.drain())
    frames.append(buffer.drain())
    frames.append(protocol.output_frame(protocol.STDOUT, T0 + 5, "héllo\n".encode()))
    path = tmp_path / "p.memsight"
    writer = ProfileWriter(path)
    live = ProfileBuilder()
    reader = FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
    for frame in frames:
        writer.write(frame)
        reader.feed(frame)
        for kind, payload in reader.frames():
            live.feed(kind, payload)
        live.flush()
    writer.close()
    loaded = load_profile(path)
    # Then both profiles hold the same samples and output
    assert np.array_equal(loaded.tables["ram"]["rss"], live.profile.tables["ram"]["rss"])
    assert np.array_equal(loaded.tables["ram"].t, live.profile.tables["ram"].t)
    assert loaded.output_text() == live.profile.output_text() == "héllo\n"


def test_a_character_split_between_two_output_frames_is_decoded_whole() -> None:
    text = "naïve ✓\n".encode()
    cut = text.index("✓".encode()) + 1
    builder = ProfileBuilder()
    feed_all(
        builder,
        [
            run_frame(),
            protocol.output_frame(protocol.STDOUT, T0, text[:cut]),
            protocol.output_frame(protocol.STDOUT, T0 + 1, text[cut:]),
        ],
    )
    assert builder.profile.output_text() == "naïve ✓\n"


def test_an_event_with_fields_of_the_wrong_shape_cannot_break_loading() -> None:
    events = [
        {"t": T0, "type": "cuda_init", "devices": None},
        {"t": T0, "type": "cuda_init", "devices": 5},
        {"t": T0, "type": "child_started", "pid": "x"},
        {"t": T0, "type": "child_exited", "pid": [1]},
        {"t": T0, "type": "warning", "message": 3},
        {"t": T0, "type": "torch_imported", "version": {"a": 1}},
    ]
    builder = ProfileBuilder()
    feed_all(builder, [run_frame(), protocol.encode_json_frame(protocol.EVENTS, events)])
    assert builder.profile.info.devices == []
    assert builder.profile.children == {}
    assert builder.profile.warnings == []


def test_a_file_whose_tail_is_zero_filled_loads_up_to_the_last_write(tmp_path: Path) -> None:
    path = tmp_path / "p.memsight"
    writer = ProfileWriter(path)
    buffer = TableBuffer(protocol.RAM_TABLE)
    for i in range(10):
        buffer.add((T0 + i, 1, 1, 0, 1))
    for frame in (run_frame(), protocol.RAM_TABLE.frame(), buffer.drain()):
        writer.write(frame)
    writer.close()
    with open(path, "ab") as f:
        f.write(bytes(8192))
    profile = load_profile(path)
    assert profile.sample_count == 10
    assert any("cut off" in w for w in profile.warnings)


def test_a_truncated_compressed_payload_is_refused() -> None:
    import zlib

    data = zlib.compress(b"[]" * 1000)[:-6]
    with pytest.raises(ProtocolError, match="truncated"):
        protocol.unpack_payload(protocol.EVENTS | protocol.COMPRESSED, data)


@pytest.mark.parametrize("rows", [1, 2, 1000])
def test_packed_columns_round_trip_any_int64_values(rows: int) -> None:
    rng = np.random.default_rng(rows)
    matrix = rng.integers(-(2**63), 2**63 - 1, size=(rows, 5), dtype=np.int64, endpoint=True)
    matrix[:, 0] = np.sort(matrix[:, 0])
    schema = protocol.RAM_TABLE
    payload = codec.encode_columns_packed(schema, matrix)
    table_id, encoding, data = protocol.split_samples(payload)
    codec.check_block(schema, encoding, data)
    assert (table_id, encoding) == (schema.id, protocol.COLUMNS_PACKED)
    assert np.array_equal(codec.decode_blocks(schema, encoding, [data]), matrix)


@pytest.mark.parametrize("threaded", [False, True])
def test_packed_blocks_decode_in_order_whether_in_threads_or_not(
    threaded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A day-long run's tables decode their blocks in threads; each block lands in its place.
    monkeypatch.setattr(codec, "PARALLEL_DECODE_BYTES", 0 if threaded else 2**62)
    rng = np.random.default_rng(7)
    schema = protocol.RAM_TABLE
    parts = []
    for rows in (1, 500, 37, 2000, 3):
        part = rng.integers(-(2**40), 2**40, size=(rows, 5), dtype=np.int64)
        part[:, 0] = np.sort(part[:, 0])
        parts.append(part)
    blocks = []
    for part in parts:
        _, encoding, data = protocol.split_samples(codec.encode_columns_packed(schema, part))
        blocks.append(data)
    decoded = codec.decode_blocks(schema, encoding, blocks)
    assert np.array_equal(decoded, np.concatenate(parts))


@pytest.mark.parametrize("shape", [(1, 5), (7, 5), (8, 3), (1000, 5), (999, 21)])
def test_large_packed_blocks_decode_a_chunk_of_a_column_at_a_time(
    shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chunks of 8 values: columns cut mid-way and across their ends, one chunk or many,
    # sums that wrap past int64 (any values, as the round trip above) carried across chunks.
    monkeypatch.setattr(codec, "DECODE_CHUNK_VALUES", 8)
    rows, ncols = shape
    schema = protocol.TableSchema(
        100, "wide", [("t", "q"), *[(f"c{i}", "q") for i in range(ncols - 1)]]
    )
    rng = np.random.default_rng(rows * ncols)
    matrix = rng.integers(-(2**63), 2**63 - 1, size=(rows, ncols), dtype=np.int64, endpoint=True)
    _, encoding, data = protocol.split_samples(codec.encode_columns_packed(schema, matrix))
    assert np.array_equal(
        codec.decode_blocks(schema, encoding, [data, data]), np.vstack([matrix] * 2)
    )


def test_compaction_keeps_the_decoded_profile_and_shrinks_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.memsight"
    writer = ProfileWriter(path)
    ram = TableBuffer(protocol.RAM_TABLE)
    writer.write(run_frame())
    writer.write(protocol.RAM_TABLE.frame())
    rss = 100 * 2**20
    for i in range(20_000):
        rss += (i % 7 - 3) * 4096
        ram.add((T0 + i * 10_000_000, rss, rss + 4096, 0, 2**33))
        if i % 20 == 19:
            writer.write(ram.drain())
            writer.write(
                protocol.encode_json_frame(
                    protocol.EVENTS, [{"t": T0 + i * 10_000_000, "type": "step", "index": i}]
                )
            )
    writer.write(protocol.output_frame(protocol.STDOUT, T0 + 1, b"done\n"))
    writer.write(
        protocol.encode_json_frame(
            protocol.EVENTS, [{"t": T0 + 2 * 10**11, "type": "recording_end"}]
        )
    )
    writer.close()
    before, size = load_profile(path), path.stat().st_size

    compact_profile(path)

    after = load_profile(path)
    assert path.stat().st_size < size / 2
    for column in protocol.RAM_TABLE.columns:
        assert np.array_equal(before.tables["ram"][column[0]], after.tables["ram"][column[0]])
    assert [(e.t, e.type, e.data) for e in before.events] == [
        (e.t, e.type, e.data) for e in after.events
    ]
    assert after.output_text() == "done\n" and after.complete and after.info == before.info
    assert not list(tmp_path.glob("*.compacting"))


def test_compaction_of_a_damaged_file_leaves_it_untouched(tmp_path: Path) -> None:
    path = tmp_path / "p.memsight"
    writer = ProfileWriter(path)
    writer.write(run_frame())
    writer.write(protocol.encode_frame(protocol.EVENTS, b"not json"))
    writer.close()
    original = path.read_bytes()
    with pytest.raises(ProfileError):
        compact_profile(path)
    assert path.read_bytes() == original


def test_a_character_cut_at_the_very_end_of_the_output_is_not_lost() -> None:
    builder = ProfileBuilder()
    feed_all(
        builder,
        [
            run_frame(),
            protocol.output_frame(protocol.STDOUT, T0, "ok ✓".encode()[:-1]),
            protocol.encode_json_frame(protocol.EVENTS, [{"t": T0 + 1, "type": "recording_end"}]),
        ],
    )
    assert builder.profile.output_text() == "ok \ufffd"
