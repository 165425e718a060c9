"""Loopback listener for the agents: the target's, and those of the Python processes it
starts (torchrun ranks, spawned workers), one connection each.

The first frame of a connection must be a HELLO carrying the run's token; anything else, a
wrong token, a pid that is connected already (a reused token), a process the handler refuses
(one outside the target's tree), more than MAX_AGENTS at once, or silence past
HELLO_TIMEOUT_S closes the connection. After that, each frame is checked on its own: a
malformed, oversized or forbidden frame is dropped and logged, and the recording goes on.
"""

from __future__ import annotations

import contextlib
import hmac
import select
import selectors
import socket
import threading
import time
from typing import Any, Protocol

from memsight.profiler import protocol
from memsight.profiler.protocol import FrameReader, ProtocolError, TableSchema

HELLO_TIMEOUT_S = 5.0
MAX_HELLO = 64 * 1024
MAX_PENDING = 8  # unauthenticated connections held at once
MAX_LOGGED_REJECTIONS = 100  # frames and connections; past this they are only counted
MAX_VALUE = 2**63 - 1  # sample values are stored as int64
MAX_AGENTS = 512  # processes recorded at once

# Events that only the recorder itself may write.
RECORDER_EVENTS = frozenset(
    {
        "exit",
        "recording_end",
        "child_started",
        "child_exited",
        "child_role",
        "agent_connected",
        "frame_rejected",
        "connection_rejected",
        "warning",
        "output_truncated",
        "attachment",
        "process",
        "agent_disconnected",
        "child_command",
        "detached",
    }
)
RECORDER_TABLES = frozenset({"ram", "children", "nvml"})


class AgentHandler(Protocol):
    def on_hello(self, hello: dict[str, Any]) -> int | str:
        """The process number of an agent that said hello, or why it is refused."""

    def on_schema(self, proc: int, schema: TableSchema) -> None: ...
    def on_rows(self, proc: int, schema: TableSchema, rows: list[tuple[int, ...]]) -> None: ...
    def on_events(self, proc: int, payload: bytes, events: list[dict[str, Any]]) -> None: ...
    def on_log(self, kind: str, **data: Any) -> None: ...


class _Connection:
    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.reader = FrameReader(max_payload=MAX_HELLO)
        self.authenticated = False
        self.deadline = time.monotonic() + HELLO_TIMEOUT_S
        self.schemas: dict[int, TableSchema] = {}
        self.proc = 0  # the handler's number for its process, once authenticated
        self.pid = 0


class AgentServer(threading.Thread):
    def __init__(self, token: str, handler: AgentHandler, host: str = "127.0.0.1") -> None:
        super().__init__(name="memsight-server", daemon=True)
        self.token = token
        self.handler = handler
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind((host, 0))
        # A program may fork dozens of workers at once, each connecting as it starts.
        self.listener.listen(socket.SOMAXCONN)
        self.listener.setblocking(False)
        self.host, self.port = self.listener.getsockname()[:2]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        # close() writes here to end a select() that waits without a timeout.
        self._wake_recv, self._wake_send = socket.socketpair()
        self.selector.register(self._wake_recv, selectors.EVENT_READ)
        self.connected = threading.Event()  # an agent said hello
        self.agent_gone = threading.Event()  # ... and no agent is connected any more
        self.rejections = 0
        self._agents: dict[int, _Connection] = {}  # authenticated, by pid
        self._halt = threading.Event()
        self._conns: dict[socket.socket, _Connection] = {}
        self._closing = False

    def ask_agents_to_detach(self) -> None:
        """The one thing ever written to an agent (attached ones only): protocol.DETACH. Each
        agent takes its hooks out, sends what it holds and closes its connection."""
        for conn in list(self._agents.values()):
            with contextlib.suppress(OSError):
                conn.sock.send(protocol.DETACH)

    def settle(self, timeout: float) -> bool:
        """Wait, at most `timeout` seconds, until every agent that connected has been read to
        its end: those accepted and those still in the listen backlog. Once the target has
        exited, a connection the server has not accepted yet (a busy machine, dozens of
        short fork children) still holds frames that its process sent before it ended;
        closing the listener would lose them. Returns at once when none ever connected."""
        deadline = time.monotonic() + timeout
        while True:
            if not self._conns and not self._backlog():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def _backlog(self) -> bool:
        """Whether a connection waits in the listen backlog (the server thread accepts it)."""
        try:
            readable, _, _ = select.select([self.listener], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def close(self) -> None:
        self._halt.set()
        self._closing = True  # connections dropped from here on were not ended by their agent
        with contextlib.suppress(OSError):
            self._wake_send.send(b"x")
        if self.is_alive():
            self.join(timeout=2.0)
        for conn in list(self._conns.values()):
            self._drop(conn)
        self.selector.close()
        self.listener.close()
        self._wake_send.close()
        self._wake_recv.close()

    def run(self) -> None:
        while not self._halt.is_set():
            # Sleep until a socket is readable or the next hello deadline: no idle wakeups.
            deadlines = [c.deadline for c in self._conns.values() if not c.authenticated]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            for key, _ in self.selector.select(timeout=timeout):
                if key.fileobj is self._wake_recv:
                    continue
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    conn = self._conns.get(key.fileobj)  # type: ignore[call-overload]
                    if conn is not None:
                        self._read(conn)
            now = time.monotonic()
            for conn in list(self._conns.values()):
                if not conn.authenticated and now > conn.deadline:
                    self._reject_connection(conn, f"no hello within {HELLO_TIMEOUT_S:.0f} s")

    def _accept(self) -> None:
        try:
            sock, addr = self.listener.accept()
        except OSError:
            return
        peer = f"{addr[0]}:{addr[1]}"
        pending = [c for c in self._conns.values() if not c.authenticated]
        if len(pending) >= MAX_PENDING:
            # Make room by dropping the oldest silent peer: idle connections must not be able
            # to lock the real agent out.
            oldest = min(pending, key=lambda c: c.deadline)
            self._reject_connection(oldest, "too many connections waiting for a hello")
        sock.setblocking(False)
        conn = _Connection(sock, peer)
        self._conns[sock] = conn
        self.selector.register(sock, selectors.EVENT_READ)

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(1 << 18)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.reader.feed(data)
        try:
            for kind, payload in conn.reader.frames():
                if not conn.authenticated:
                    self._authenticate(conn, kind, payload)
                    if not conn.authenticated:
                        return
                else:
                    self._handle(conn, kind, payload)
        except ProtocolError as exc:
            self._reject_connection(conn, str(exc))
            return
        for reason in conn.reader.rejected:
            self._log_rejection(reason)
        conn.reader.rejected.clear()

    def _authenticate(self, conn: _Connection, kind: int, payload: bytes) -> None:
        if kind != protocol.HELLO:
            self._reject_connection(conn, "first frame is not a hello")
            return
        hello = protocol.check_hello(protocol.decode_json(payload))
        if not hmac.compare_digest(
            # surrogatepass: a JSON string may hold lone surrogates that strict UTF-8 refuses
            hello["token"].encode("utf-8", "surrogatepass"),
            self.token.encode(),
        ):
            self._reject_connection(conn, "wrong token")
            return
        pid = hello["pid"]
        if pid in self._agents:
            self._reject_connection(conn, f"token reused: pid {pid} is connected already")
            return
        if len(self._agents) >= MAX_AGENTS:
            self._reject_connection(conn, f"more than {MAX_AGENTS} processes at once")
            return
        proc = self.handler.on_hello(_hello_fields(hello))
        if isinstance(proc, str):
            self._reject_connection(conn, proc)
            return
        conn.authenticated = True
        conn.proc, conn.pid = proc, pid
        self._agents[pid] = conn
        conn.reader.max_payload = protocol.MAX_PAYLOAD
        conn.reader.lenient = True
        self.agent_gone.clear()
        self.connected.set()

    def _handle(self, conn: _Connection, kind: int, payload: bytes) -> None:
        try:
            kind, payload = protocol.unpack_payload(kind, payload, limit=protocol.MAX_PAYLOAD)
            if kind == protocol.EVENTS:
                events = protocol.check_events(protocol.decode_json(payload))
                for event in events:
                    if event["type"] in RECORDER_EVENTS:
                        raise ProtocolError(f"agent may not send {event['type']!r} events")
                self.handler.on_events(conn.proc, payload, events)
            elif kind == protocol.SAMPLES:
                table_id, encoding, data = protocol.split_samples(payload)
                schema = conn.schemas.get(table_id)
                if schema is None:
                    raise ProtocolError(f"samples for undeclared table {table_id}")
                if encoding != protocol.ROWS or len(data) % schema.row.size:
                    raise ProtocolError("sample block is malformed")
                rows = list(schema.row.iter_unpack(data))
                if any(value > protocol.INT64_MAX for row in rows for value in row):
                    raise ProtocolError("sample value does not fit in a signed 64-bit integer")
                self.handler.on_rows(conn.proc, schema, rows)
            elif kind == protocol.SCHEMA:
                schema = TableSchema.from_json(protocol.decode_json(payload))
                if schema.id < protocol.AGENT_TABLE_BASE or schema.name in RECORDER_TABLES:
                    raise ProtocolError(f"agent may not declare table {schema.name!r}")
                if schema.id in conn.schemas or any(
                    other.name == schema.name for other in conn.schemas.values()
                ):
                    raise ProtocolError(f"table {schema.id} ({schema.name}) declared twice")
                conn.schemas[schema.id] = schema
                self.handler.on_schema(conn.proc, schema)
            else:
                raise ProtocolError(
                    f"agent may not send {protocol.KIND_NAMES.get(kind, kind)!r} frames"
                )
        except ProtocolError as exc:
            self._log_rejection(str(exc))

    def _log_rejection(self, reason: str) -> None:
        self._count_rejection("frame_rejected", reason=reason)

    def _reject_connection(self, conn: _Connection, reason: str) -> None:
        self._count_rejection("connection_rejected", reason=reason, peer=conn.peer)
        self._drop(conn)

    def _count_rejection(self, kind: str, **data: Any) -> None:
        """Log a rejection, up to MAX_LOGGED_REJECTIONS of them: a flood cannot grow the file."""
        self.rejections += 1
        if self.rejections <= MAX_LOGGED_REJECTIONS:
            self._log(kind, **data)

    def _drop(self, conn: _Connection) -> None:
        if self._conns.pop(conn.sock, None) is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()
        if conn.authenticated:
            self._agents.pop(conn.pid, None)
            if not self._closing:  # its process closed it, or ended (a SIGKILL closes it too)
                self._log("agent_disconnected", proc=conn.proc, pid=conn.pid)
            if not self._agents:
                self.agent_gone.set()

    def _log(self, kind: str, **data: Any) -> None:
        self.handler.on_log(kind, **data)


def _hello_fields(hello: dict[str, Any]) -> dict[str, Any]:
    """The hello's descriptive fields that are recorded, each only with its expected type."""
    fields: dict[str, Any] = {"pid": hello["pid"]}
    for key in ("python_version", "executable"):
        value = hello.get(key)
        if isinstance(value, str):
            fields[key] = value[:1000]
    for key in ("rank", "local_rank", "world_size", "group_rank", "parent"):
        value = hello.get(key)  # torchrun's environment; the agent's parent pid
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
            fields[key] = value
    started = hello.get("started_ns")
    if isinstance(started, int) and not isinstance(started, bool) and 0 <= started < 2**63:
        fields["started_ns"] = started
    if isinstance(hello.get("forked"), bool):
        fields["forked"] = hello["forked"]
    cmdline = hello.get("cmdline")
    if isinstance(cmdline, list):
        fields["cmdline"] = [a[:1000] for a in cmdline[:64] if isinstance(a, str)]
    return fields
