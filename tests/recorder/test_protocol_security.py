"""The recorder's socket against hostile clients: loopback only, one-time token, bad frames.

Each test runs a real AgentServer on a real loopback socket and talks to it as a client would;
the handler records what the server lets through.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memsight.profiler import protocol
from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.protocol import TableSchema
from memsight.profiler.recorder import server as server_mod
from memsight.profiler.recorder.server import RECORDER_EVENTS, AgentServer
from memsight.profiler.recorder.session import Recording
from tests.support import ROOT, try_load, wait_until, write_script

TOKEN = "the-one-time-token-of-this-run"
TIMEOUT_S = 10.0


class RecordingHandler:
    """An AgentHandler that keeps everything the server hands it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hellos: list[dict[str, Any]] = []
        self.schemas: list[TableSchema] = []
        self.rows: list[tuple[str, list[tuple[int, ...]]]] = []
        self.events: list[dict[str, Any]] = []
        self.logs: list[tuple[str, dict[str, Any]]] = []

    def on_hello(self, hello: dict[str, Any]) -> int:
        with self._lock:
            self.hellos.append(hello)
        return 0

    def on_schema(self, proc: int, schema: TableSchema) -> None:
        with self._lock:
            self.schemas.append(schema)

    def on_rows(self, proc: int, schema: TableSchema, rows: list[tuple[int, ...]]) -> None:
        with self._lock:
            self.rows.append((schema.name, rows))

    def on_events(self, proc: int, payload: bytes, events: list[dict[str, Any]]) -> None:
        with self._lock:
            self.events.extend(events)

    def on_log(self, kind: str, **data: Any) -> None:
        with self._lock:
            self.logs.append((kind, data))

    def logged(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [data for k, data in self.logs if k == kind]

    def event_types(self) -> list[str]:
        with self._lock:
            return [e["type"] for e in self.events]


@pytest.fixture
def handler() -> RecordingHandler:
    return RecordingHandler()


@pytest.fixture
def server(handler: RecordingHandler) -> Iterator[AgentServer]:
    srv = AgentServer(TOKEN, handler)
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def connect(server: AgentServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S)
    sock.settimeout(TIMEOUT_S)
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    """Block (up to the socket timeout) until the server closes the connection."""
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def events_frame(*types: str) -> bytes:
    return protocol.encode_json_frame(
        protocol.EVENTS, [{"t": i, "type": type_} for i, type_ in enumerate(types)]
    )


@pytest.fixture
def agent(server: AgentServer, handler: RecordingHandler) -> Iterator[socket.socket]:
    """A client that has said hello with the right token."""
    sock = connect(server)
    sock.sendall(protocol.hello_frame(TOKEN, os.getpid()))
    wait_until(lambda: handler.hellos, TIMEOUT_S, "the hello to be accepted")
    try:
        yield sock
    finally:
        sock.close()


def still_delivers(sock: socket.socket, handler: RecordingHandler, marker: str) -> None:
    """Send a valid EVENTS frame and wait until the handler has it."""
    sock.sendall(events_frame(marker))
    wait_until(lambda: marker in handler.event_types(), TIMEOUT_S, f"event {marker!r}")


# -- the listener ------------------------------------------------------------------------------


def test_listener_is_bound_to_loopback_only(server: AgentServer) -> None:
    # Given a running server
    # Then it listens on 127.0.0.1, not on every interface
    assert server.listener.getsockname()[0] == "127.0.0.1"
    assert server.host == "127.0.0.1"
    # And another address of this very machine does not reach it
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", server.port), timeout=TIMEOUT_S).close()


# -- the handshake -----------------------------------------------------------------------------


def test_hello_with_the_right_token_is_accepted_without_the_token(
    agent: socket.socket, server: AgentServer, handler: RecordingHandler
) -> None:
    # Given a client that said hello with the run's token
    # Then the handler has the hello, but never the token itself
    assert server.connected.is_set()
    assert handler.hellos[0]["pid"] == os.getpid()
    assert "token" not in handler.hellos[0]
    assert not handler.logged("connection_rejected")


def test_hello_with_a_wrong_token_is_closed_and_logged(
    server: AgentServer, handler: RecordingHandler
) -> None:
    # Given a client that knows the protocol but not the token
    with connect(server) as sock:
        # When it says hello with a wrong token
        sock.sendall(protocol.hello_frame("guessed-" + TOKEN, os.getpid()))
        # Then the server closes the connection and logs why
        assert closed_by_peer(sock)
    rejected = wait_until(lambda: handler.logged("connection_rejected"), TIMEOUT_S)
    assert "token" in rejected[0]["reason"]
    assert rejected[0]["peer"].startswith("127.0.0.1:")
    assert not handler.hellos
    assert not server.connected.is_set()


def test_the_token_cannot_be_used_by_a_second_connection(
    agent: socket.socket, server: AgentServer, handler: RecordingHandler
) -> None:
    # Given a client already authenticated with the token
    # When a second connection presents the same token
    with connect(server) as second:
        second.sendall(protocol.hello_frame(TOKEN, os.getpid()))
        # Then it is closed and logged
        assert closed_by_peer(second)
    rejected = wait_until(lambda: handler.logged("connection_rejected"), TIMEOUT_S)
    assert "reused" in rejected[0]["reason"]
    assert len(handler.hellos) == 1
    # And the first connection carries on
    still_delivers(agent, handler, "after_reuse_attempt")


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        bytes(range(256)) * 4,
        protocol.encode_frame(protocol.HELLO, b"\x80\x04not json at all"),
        protocol.encode_json_frame(protocol.HELLO, ["not", "an", "object"]),
        protocol.encode_json_frame(protocol.HELLO, {"protocol": 999, "token": TOKEN, "pid": 1}),
        protocol.encode_frame(protocol.HELLO, b'{"protocol": 1, "token": "\\ud800", "pid": 1}'),
        protocol.encode_json_frame(protocol.HELLO, {"protocol": 1, "token": 12345, "pid": 1}),
    ],
    ids=[
        "http-request",
        "binary-noise",
        "hello-not-json",
        "hello-not-object",
        "hello-wrong-version",
        "token-lone-surrogate",
        "token-not-a-string",
    ],
)
def test_a_connection_sending_garbage_instead_of_a_hello_is_dropped(
    server: AgentServer, handler: RecordingHandler, garbage: bytes
) -> None:
    # Given a client that does not speak the protocol
    with connect(server) as sock:
        # When it sends garbage as its first bytes
        sock.sendall(garbage)
        # Then the server drops it and logs the rejection
        assert closed_by_peer(sock)
    wait_until(lambda: handler.logged("connection_rejected"), TIMEOUT_S)
    assert not handler.hellos
    assert not handler.events
    # And the real agent is still served afterwards
    with connect(server) as sock:
        sock.sendall(protocol.hello_frame(TOKEN, os.getpid()))
        wait_until(lambda: handler.hellos, TIMEOUT_S, "the hello to be accepted")
        still_delivers(sock, handler, "served")


def test_a_first_frame_that_is_not_a_hello_is_dropped(
    server: AgentServer, handler: RecordingHandler
) -> None:
    # Given a client that skips the handshake
    with connect(server) as sock:
        # When its first frame is a well-formed EVENTS frame
        sock.sendall(events_frame("sneaked_in"))
        # Then it is dropped and nothing reaches the handler
        assert closed_by_peer(sock)
    rejected = wait_until(lambda: handler.logged("connection_rejected"), TIMEOUT_S)
    assert "not a hello" in rejected[0]["reason"]
    assert not handler.events


def test_a_connection_that_never_says_hello_is_dropped_after_the_timeout(
    monkeypatch: pytest.MonkeyPatch, server: AgentServer, handler: RecordingHandler
) -> None:
    # Given a short hello timeout (read when a connection is accepted)
    monkeypatch.setattr(server_mod, "HELLO_TIMEOUT_S", 0.3)
    # When a client connects and stays silent
    with connect(server) as sock:
        # Then the server closes the connection on its own
        assert closed_by_peer(sock)
    rejected = wait_until(lambda: handler.logged("connection_rejected"), TIMEOUT_S)
    assert "no hello" in rejected[0]["reason"]


def test_a_silent_connection_does_not_block_the_real_agent(
    server: AgentServer, handler: RecordingHandler
) -> None:
    # Given a client that connected first and says nothing
    with connect(server) as squatter:
        squatter.sendall(b"\x01\x00")  # half a frame header, then silence
        # When the real agent connects after it
        with connect(server) as sock:
            sock.sendall(protocol.hello_frame(TOKEN, os.getpid()))
            # Then the agent is served at once
            wait_until(lambda: handler.hellos, TIMEOUT_S, "the hello to be accepted")
            still_delivers(sock, handler, "served")


# -- frames after the handshake ------------------------------------------------------------------


def test_an_oversized_frame_is_rejected_and_the_next_frame_delivered(
    agent: socket.socket, handler: RecordingHandler
) -> None:
    # Given an authenticated connection
    # When it sends a frame longer than the limit, all of its bytes included
    length = protocol.MAX_PAYLOAD + 1
    agent.sendall(protocol.HEADER.pack(length, protocol.EVENTS, 0) + b"[" * length)
    # Then the frame is rejected, and the stream stays in step: the next frame arrives
    still_delivers(agent, handler, "after_oversized")
    rejected = handler.logged("frame_rejected")
    assert len(rejected) == 1
    assert "exceeds the limit" in rejected[0]["reason"]
    assert handler.event_types() == ["after_oversized"]


def test_a_frame_with_a_bad_checksum_is_rejected_and_the_next_delivered(
    agent: socket.socket, handler: RecordingHandler
) -> None:
    # Given an authenticated connection
    # When a frame's checksum does not match its payload
    frame = bytearray(events_frame("tampered"))
    frame[5] ^= 0xFF  # first byte of the crc32 field
    agent.sendall(bytes(frame))
    # Then it is rejected and the next frame is delivered
    still_delivers(agent, handler, "after_bad_crc")
    assert "checksum" in handler.logged("frame_rejected")[0]["reason"]
    assert "tampered" not in handler.event_types()


GPU_ROW = (1, 0, 1, 2, 3, 4, 5, 6, 7, 8)
AGENT_TABLE = TableSchema(protocol.AGENT_TABLE_BASE + 1, "custom", [("t", "q"), ("value", "Q")])

BAD_FRAMES = {
    "events-not-json": protocol.encode_frame(protocol.EVENTS, b'[{"t": 1, "type": '),
    "events-not-utf8": protocol.encode_frame(protocol.EVENTS, b"\xff\xfe\x00["),
    "events-not-a-list": protocol.encode_json_frame(protocol.EVENTS, {"t": 1, "type": "x"}),
    "event-without-t": protocol.encode_json_frame(protocol.EVENTS, [{"type": "x"}]),
    "event-time-beyond-int64": protocol.encode_json_frame(
        protocol.EVENTS, [{"t": 10**400, "type": "x"}]
    ),
    "events-deeply-nested": protocol.encode_frame(protocol.EVENTS, b"[" * 100_000),
    "compressed-garbage": protocol.encode_frame(
        protocol.EVENTS | protocol.COMPRESSED, b"not zlib data"
    ),
    "zlib-bomb": protocol.encode_frame(
        protocol.EVENTS, b"[" + b" " * (protocol.MAX_PAYLOAD + 1) + b"]", compress=True
    ),
    "samples-undeclared-table": AGENT_TABLE.rows_frame(AGENT_TABLE.row.pack(1, 2)),
    "samples-recorder-table": protocol.RAM_TABLE.rows_frame(
        protocol.RAM_TABLE.row.pack(1, 2, 3, 4, 5)
    ),
    "samples-too-short": protocol.encode_frame(protocol.SAMPLES, b"\x40"),
    "schema-recorder-table-id": protocol.RAM_TABLE.frame(),
    "schema-recorder-table-name": TableSchema(
        protocol.AGENT_TABLE_BASE + 2, "ram", [("t", "q"), ("rss", "Q")]
    ).frame(),
    "schema-bad-column-code": protocol.encode_json_frame(
        protocol.SCHEMA,
        {"id": protocol.AGENT_TABLE_BASE + 3, "table": "evil", "columns": [["t", "q"], ["x", "s"]]},
    ),
    "schema-column-code-not-a-string": protocol.encode_json_frame(
        protocol.SCHEMA,
        {
            "id": protocol.AGENT_TABLE_BASE + 4,
            "table": "evil",
            "columns": [["t", "q"], ["x", ["q"]]],
        },
    ),
    "run-frame": protocol.encode_json_frame(protocol.RUN, {"script": "forged.py", "t0_ns": 0}),
    "output-frame": protocol.output_frame(protocol.STDOUT, 0, b"forged output"),
    "second-hello": protocol.hello_frame(TOKEN, os.getpid()),
    "unknown-kind": protocol.encode_frame(0x3F, b"{}"),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
def test_a_malformed_or_forbidden_frame_is_rejected_while_the_connection_keeps_working(
    agent: socket.socket, handler: RecordingHandler, name: str
) -> None:
    # Given an authenticated connection
    # When it sends one bad frame
    agent.sendall(BAD_FRAMES[name])
    # Then the frame is rejected and logged, and the next frame is still delivered
    still_delivers(agent, handler, "after_" + name)
    assert len(handler.logged("frame_rejected")) == 1
    assert not handler.logged("connection_rejected")
    # And nothing of the bad frame reached the recording
    assert handler.event_types() == ["after_" + name]
    assert not handler.schemas
    assert not handler.rows
    assert len(handler.hellos) == 1


@pytest.mark.parametrize("event_type", sorted(RECORDER_EVENTS))
def test_an_agent_may_not_forge_recorder_only_events(
    agent: socket.socket, handler: RecordingHandler, event_type: str
) -> None:
    # Given an authenticated connection
    # When it sends an event only the recorder may write (alongside an innocent one)
    agent.sendall(events_frame("innocent", event_type))
    # Then the whole frame is rejected, and the next one delivered
    still_delivers(agent, handler, "after_forgery")
    assert repr(event_type) in handler.logged("frame_rejected")[0]["reason"]
    assert handler.event_types() == ["after_forgery"]


def test_declared_agent_tables_deliver_rows_but_cannot_be_redeclared(
    agent: socket.socket, handler: RecordingHandler
) -> None:
    # Given an authenticated connection that declares a table of its own
    agent.sendall(AGENT_TABLE.frame() + protocol.GPU_TABLE.frame())
    wait_until(lambda: len(handler.schemas) == 2, TIMEOUT_S, "both schemas")
    # When it sends rows, then declares the same table again, then a partial row
    agent.sendall(
        AGENT_TABLE.rows_frame(AGENT_TABLE.row.pack(10, 20) + AGENT_TABLE.row.pack(11, 21))
        + AGENT_TABLE.frame()
        + AGENT_TABLE.rows_frame(AGENT_TABLE.row.pack(12, 22)[:-1])
        + protocol.GPU_TABLE.rows_frame(protocol.GPU_TABLE.row.pack(*GPU_ROW))
    )
    # Then the valid rows arrive, and the redeclaration and the partial row are rejected
    wait_until(lambda: len(handler.rows) == 2, TIMEOUT_S, "rows of both tables")
    assert handler.rows == [("custom", [(10, 20), (11, 21)]), ("gpu", [GPU_ROW])]
    reasons = [r["reason"] for r in handler.logged("frame_rejected")]
    assert len(reasons) == 2
    assert "declared twice" in reasons[0]
    assert "malformed" in reasons[1]
    assert len(handler.schemas) == 2


def test_a_sample_value_beyond_int64_is_rejected(
    agent: socket.socket, handler: RecordingHandler
) -> None:
    # Given an authenticated connection with the gpu table declared (u64 columns)
    agent.sendall(protocol.GPU_TABLE.frame())
    wait_until(lambda: handler.schemas, TIMEOUT_S, "the schema")
    # When a row holds a value that no int64 column can store
    huge = list(GPU_ROW)
    huge[2] = 2**64 - 1
    agent.sendall(protocol.GPU_TABLE.rows_frame(protocol.GPU_TABLE.row.pack(*huge)))
    # Then the block is rejected before it reaches the recording, and the next one arrives
    agent.sendall(protocol.GPU_TABLE.rows_frame(protocol.GPU_TABLE.row.pack(*GPU_ROW)))
    wait_until(lambda: handler.rows, TIMEOUT_S, "the valid row")
    assert handler.rows == [("gpu", [GPU_ROW])]
    assert "64-bit" in handler.logged("frame_rejected")[0]["reason"]


def test_rejections_are_logged_up_to_a_cap(
    agent: socket.socket, server: AgentServer, handler: RecordingHandler
) -> None:
    # Given an authenticated connection that floods bad frames
    flood = server_mod.MAX_LOGGED_REJECTIONS + 50
    agent.sendall(protocol.encode_frame(protocol.EVENTS, b"not json") * flood)
    # Then each one is counted, but the log (and so the profile) does not grow without bound
    still_delivers(agent, handler, "after_flood")
    assert server.rejections == flood
    assert len(handler.logged("frame_rejected")) == server_mod.MAX_LOGGED_REJECTIONS


# -- end to end: a rogue client during a real recording ----------------------------------------


def test_a_rogue_client_during_a_run_is_rejected_and_the_run_completes(tmp_path: Path) -> None:
    # Given a real recording of a script that waits for a go-ahead file
    go = tmp_path / "go"
    script = write_script(
        tmp_path,
        "waits.py",
        f"""\
        import os
        import time

        end = time.monotonic() + 30
        while not os.path.exists({str(go)!r}) and time.monotonic() < end:
            time.sleep(0.02)
        print("finished", flush=True)
        """,
    )
    out = tmp_path / "waits.memsight"
    spec = RunSpec(target=str(script), cwd=str(tmp_path), python=sys.executable)
    recording = Recording(spec, out, stdio="capture", new_session=True)
    recording.start()
    try:
        server = recording.server
        assert server is not None
        assert server.listener.getsockname()[0] == "127.0.0.1"
        wait_until(server.connected.is_set, TIMEOUT_S, "the agent to connect")

        # When rogue clients connect to the recorder's port without the token
        for attempt in (
            protocol.hello_frame("no-idea-of-the-token", 1),
            b"\x00garbage\xff" * 10,
        ):
            with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S) as rogue:
                rogue.settimeout(TIMEOUT_S)
                rogue.sendall(attempt)
                # Then each one is dropped
                assert closed_by_peer(rogue)
        go.touch()
        status = recording.wait()
    finally:
        if recording.status is None:
            recording.kill_tree()
            recording.wait()

    # And the run completes normally
    assert status.exit_code == 0 and status.signal is None
    profile = load_profile(out)
    assert profile.complete
    assert profile.info.exit_code == 0
    assert "finished" in profile.output_text()
    # And the profile shows the rejected connections, next to the real agent's
    rejected = [e for e in profile.events if e.type == "connection_rejected"]
    assert len(rejected) == 2
    assert all(e.get("peer", "").startswith("127.0.0.1:") for e in rejected)
    assert len([e for e in profile.events if e.type == "agent_connected"]) == 1


# -- end to end: a misbehaving agent inside a real recording -----------------------------------

# Stands in for the target's interpreter: it reads the agent's connection details the way the
# agent does, authenticates, sends each bad frame followed by a marker event, then waits. It
# runs with -S (no site module), so memsight's own agent does not start in it first.
HOSTILE_AGENT = """\
#!{python} -S
import json, os, socket, sys, time
sys.path.insert(0, {root!r})
from memsight.profiler import protocol

config = json.loads(os.environ["MEMSIGHT_AGENT"])
sock = socket.create_connection((config["host"], config["port"]))
sock.sendall(protocol.hello_frame(config["token"], os.getpid()) + protocol.GPU_TABLE.frame())
with open({frames!r}) as f:
    frames = json.load(f)
for i, frame in enumerate(frames):
    sock.sendall(bytes.fromhex(frame))
    marker = [{{"t": time.monotonic_ns(), "type": "marker", "after": i}}]
    sock.sendall(protocol.encode_json_frame(protocol.EVENTS, marker))
open({sent!r}, "w").close()
end = time.monotonic() + 30
while not os.path.exists({go!r}) and time.monotonic() < end:
    time.sleep(0.02)
sock.close()
"""


def _gpu_row(*values: int) -> bytes:
    return protocol.GPU_TABLE.rows_frame(protocol.GPU_TABLE.row.pack(*values))


HOSTILE_FRAMES = [
    *BAD_FRAMES.values(),
    events_frame("exit"),  # forged recorder event
    _gpu_row(1, 0, 2**64 - 1, 0, 0, 0, 0, 0, 0, 0),  # a value no int64 column can hold
    # Valid for the socket, odd for the decoder: must not make the profile unreadable
    protocol.encode_json_frame(protocol.EVENTS, [{"t": 1, "type": "cuda_init", "devices": 5}]),
    protocol.encode_json_frame(protocol.EVENTS, [{"t": 1, "type": "torch_imported", "cuda": []}]),
    protocol.encode_json_frame(protocol.EVENTS, [{"t": -(2**63), "type": "epoch", "n": {"a": []}}]),
]


def test_a_misbehaving_agent_cannot_stop_or_spoil_the_recording(tmp_path: Path) -> None:
    # Given a recording whose "target" is a hostile agent sending bad frames
    sent, go = tmp_path / "sent", tmp_path / "go"
    fake_python = tmp_path / "hostile-python"
    frames = tmp_path / "frames.json"
    frames.write_text(json.dumps([frame.hex() for frame in HOSTILE_FRAMES]))
    fake_python.write_text(
        HOSTILE_AGENT.format(
            python=sys.executable, root=str(ROOT), frames=str(frames), sent=str(sent), go=str(go)
        )
    )
    fake_python.chmod(0o755)
    out = tmp_path / "hostile.memsight"
    spec = RunSpec(target="unused.py", cwd=str(tmp_path), python=str(fake_python))
    recording = Recording(spec, out, stdio="capture", new_session=True)
    recording.start()
    try:
        # When every frame has been sent
        wait_until(sent.exists, TIMEOUT_S, "the hostile agent to send its frames")
        # Then the recording still streams to disk: the last marker reaches the file while the
        # run goes on
        last = len(HOSTILE_FRAMES) - 1

        def last_marker_on_disk() -> bool:
            profile = try_load(out)
            return profile is not None and any(
                e.type == "marker" and e.get("after") == last for e in profile.events
            )

        wait_until(last_marker_on_disk, TIMEOUT_S, "the last marker in the file")
        go.touch()
        status = recording.wait()
    finally:
        if recording.status is None:
            recording.kill_tree()
            recording.wait()

    # And the run completes, and the profile loads with every marker
    assert status.exit_code == 0
    profile = load_profile(out)
    assert profile.complete
    assert [e.get("after") for e in profile.events_of("marker")] == list(range(len(HOSTILE_FRAMES)))
    # And the bad frames were rejected, not recorded
    assert len(list(profile.events_of("frame_rejected"))) == len(BAD_FRAMES) + 2
    assert [e.type for e in profile.events].count("exit") == 1
    assert profile.info.exit_code == 0
    assert profile.gpu is None


def test_agents_still_waiting_to_be_accepted_when_the_target_ends_are_read_to_their_end(
    handler: RecordingHandler,
) -> None:
    """A busy machine: the target and its short fork children connected, sent everything and
    ended while the server thread had not run yet. settle() (the recorder's wait at the
    target's end) waits for them to be accepted and read, rather than closing the listener
    on frames their processes sent."""
    srv = AgentServer(TOKEN, handler)
    try:
        for pid in range(1000, 1010):  # in the listen backlog: nothing accepts them yet
            sock = socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT_S)
            sock.sendall(protocol.hello_frame(TOKEN, pid) + events_frame(f"ended-{pid}"))
            sock.close()
        starter = threading.Timer(0.2, srv.start)  # the server thread gets the CPU late
        starter.start()
        assert srv.settle(TIMEOUT_S)
        starter.join()
        assert sorted(hello["pid"] for hello in handler.hellos) == list(range(1000, 1010))
        assert sorted(handler.event_types()) == [f"ended-{pid}" for pid in range(1000, 1010)]
    finally:
        srv.close()


def test_settle_returns_at_once_when_no_agent_ever_connected(handler: RecordingHandler) -> None:
    srv = AgentServer(TOKEN, handler)
    srv.start()
    try:
        assert srv.settle(0.0)  # a zero budget: only true when there is nothing to wait for
    finally:
        srv.close()
