"""An authenticated agent still cannot make the recording unloadable or stop the recorder."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from memsight.profiler import protocol
from memsight.profiler.recorder.server import AgentServer


class Recorder:
    def __init__(self) -> None:
        self.hellos: list[dict[str, Any]] = []
        self.schemas: list[protocol.TableSchema] = []
        self.rows: list[tuple[int, ...]] = []
        self.logs: list[tuple[str, dict[str, Any]]] = []

    def on_hello(self, hello: dict[str, Any]) -> int:
        self.hellos.append(hello)
        return 0

    def on_schema(self, proc: int, schema: protocol.TableSchema) -> None:
        self.schemas.append(schema)

    def on_rows(self, proc: int, schema: protocol.TableSchema, rows: list[tuple[int, ...]]) -> None:
        self.rows += rows

    def on_events(self, proc: int, payload: bytes, events: list[dict[str, Any]]) -> None: ...

    def on_log(self, kind: str, **data: Any) -> None:
        self.logs.append((kind, data))


def session(frames: list[bytes], hello_extra: dict[str, Any] | None = None) -> Recorder:
    """Send a hello and `frames`, then close; return what the recorder saw."""
    recorder = Recorder()
    server = AgentServer("tok", recorder)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(protocol.hello_frame("tok", 1, hello_extra) + b"".join(frames))
        assert server.agent_gone.wait(10)
    finally:
        server.close()
    return recorder


def test_a_second_table_with_a_taken_name_is_rejected() -> None:
    twin = protocol.TableSchema(65, "gpu", protocol.GPU_TABLE.columns)
    recorder = session([protocol.GPU_TABLE.frame(), twin.frame()])
    assert [s.id for s in recorder.schemas] == [protocol.GPU_TABLE.id]
    assert any("declared twice" in d["reason"] for _, d in recorder.logs)


def test_sample_values_beyond_int64_are_rejected() -> None:
    huge = protocol.GPU_TABLE.row.pack(1, 0, 2**64 - 1, 0, 0, 0, 0, 0, 0, 0)
    fine = protocol.GPU_TABLE.row.pack(2, 0, 5, 0, 0, 0, 0, 0, 0, 0)
    recorder = session(
        [
            protocol.GPU_TABLE.frame(),
            protocol.GPU_TABLE.rows_frame(huge),
            protocol.GPU_TABLE.rows_frame(fine),
        ]
    )
    assert [r[0] for r in recorder.rows] == [2]


@pytest.mark.parametrize("kind", ["warning", "output_truncated", "exit", "recording_end"])
def test_events_only_the_recorder_writes_are_refused_from_the_agent(kind: str) -> None:
    frame = protocol.encode_json_frame(protocol.EVENTS, [{"t": 1, "type": kind, "message": "x"}])
    recorder = session([frame])
    assert any(kind in d["reason"] for k, d in recorder.logs if k == "frame_rejected")


def test_only_known_hello_fields_of_the_right_type_are_recorded() -> None:
    recorder = session(
        [], {"t": "later", "type_": 1, "python_version": "3.11.7", "executable": 5, "nan": 1.5}
    )
    assert recorder.hellos == [{"pid": 1, "python_version": "3.11.7"}]


def test_non_finite_numbers_in_agent_events_are_rejected() -> None:
    frame = protocol.encode_frame(protocol.EVENTS, b'[{"t":1,"type":"x","v":NaN}]')
    recorder = session([frame])
    assert any("non-finite" in d["reason"] for k, d in recorder.logs if k == "frame_rejected")
