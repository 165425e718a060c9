from __future__ import annotations

import struct
import zlib

import pytest

from memsight.profiler import protocol
from memsight.profiler.protocol import FrameReader, ProtocolError, TableSchema


def test_a_frame_round_trips_through_the_reader_fed_one_byte_at_a_time() -> None:
    frames = [
        protocol.encode_frame(protocol.EVENTS, b'[{"t":1,"type":"x"}]'),
        protocol.encode_frame(protocol.OUTPUT, b"\x01" + bytes(8) + b"hello"),
        protocol.encode_frame(protocol.EVENTS, b"[]" * 300, compress=True),
    ]
    reader = FrameReader()
    got: list[tuple[int, bytes]] = []
    for byte in b"".join(frames):
        reader.feed(bytes([byte]))
        got.extend(reader.frames())
    assert [protocol.unpack_payload(k, p) for k, p in got] == [
        (protocol.EVENTS, b'[{"t":1,"type":"x"}]'),
        (protocol.OUTPUT, b"\x01" + bytes(8) + b"hello"),
        (protocol.EVENTS, b"[]" * 300),
    ]
    assert reader.pending == 0


def test_a_strict_reader_refuses_a_frame_over_the_limit() -> None:
    reader = FrameReader(max_payload=10)
    reader.feed(protocol.encode_frame(protocol.EVENTS, b"x" * 11))
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        list(reader.frames())


def test_a_lenient_reader_skips_oversized_and_corrupt_frames_and_keeps_in_step() -> None:
    big = protocol.encode_frame(protocol.EVENTS, b"x" * 100)
    bad = bytearray(protocol.encode_frame(protocol.EVENTS, b"abc"))
    bad[-1] ^= 0xFF
    good = protocol.encode_frame(protocol.EVENTS, b"[]")
    reader = FrameReader(max_payload=50, lenient=True)
    stream = big + bytes(bad) + good
    got: list[tuple[int, bytes]] = []
    for i in range(0, len(stream), 7):  # oversized frame arrives in pieces and is skipped
        reader.feed(stream[i : i + 7])
        got.extend(reader.frames())
    assert got == [(protocol.EVENTS, b"[]")]
    assert len(reader.rejected) == 2
    assert "exceeds the limit" in reader.rejected[0]
    assert "checksum" in reader.rejected[1]


def test_a_compressed_payload_that_inflates_past_the_limit_is_refused() -> None:
    bomb = zlib.compress(b"\0" * 10_000_000)
    with pytest.raises(ProtocolError, match="inflates beyond"):
        protocol.unpack_payload(protocol.SAMPLES | protocol.COMPRESSED, bomb, limit=1_000_000)


def test_corrupt_compressed_data_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="corrupt"):
        protocol.unpack_payload(protocol.EVENTS | protocol.COMPRESSED, b"not zlib")


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"id": 0, "table": "x", "columns": [["t", "q"]]}, "table id"),
        ({"id": 300, "table": "x", "columns": [["t", "q"]]}, "table id"),
        ({"id": 5, "table": "no spaces", "columns": [["t", "q"]]}, "table name"),
        ({"id": 5, "table": "x", "columns": []}, "column list"),
        ({"id": 5, "table": "x", "columns": [["t", "d"]]}, "invalid"),
        ({"id": 5, "table": "x", "columns": [["a", "q"]]}, "first column"),
        ({"id": 5, "table": "x", "columns": [["t", "q"], ["t", "q"]]}, "repeats"),
        ([1, 2], "not an object"),
    ],
)
def test_invalid_schemas_are_refused(schema: object, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        TableSchema.from_json(schema)


def test_a_schema_survives_its_json_form() -> None:
    again = TableSchema.from_json(protocol.GPU_TABLE.to_json())
    assert again.columns == protocol.GPU_TABLE.columns
    assert again.row.size == protocol.GPU_TABLE.row.size


@pytest.mark.parametrize(
    "payload",
    [b"{}", b'[{"type":"x"}]', b'[{"t":"1","type":"x"}]', b'[{"t":1,"type":3}]', b"[1]"],
)
def test_events_without_an_integer_time_and_a_string_type_are_refused(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        protocol.check_events(protocol.decode_json(payload))


def test_hello_must_carry_the_current_protocol_version_a_token_and_a_pid() -> None:
    assert protocol.check_hello({"protocol": 1, "token": "t", "pid": 3})["pid"] == 3
    for bad in ({"protocol": 2, "token": "t", "pid": 3}, {"protocol": 1, "pid": 3}, "x"):
        with pytest.raises(ProtocolError):
            protocol.check_hello(bad)


def test_output_frames_name_their_stream_and_time() -> None:
    frame = protocol.output_frame(protocol.STDERR, 123, b"oops")
    reader = FrameReader()
    reader.feed(frame)
    ((kind, payload),) = list(reader.frames())
    assert kind == protocol.OUTPUT
    assert protocol.split_output(payload) == (protocol.STDERR, 123, b"oops")
    with pytest.raises(ProtocolError, match="unknown stream"):
        protocol.split_output(struct.pack("<Bq", 9, 0))
