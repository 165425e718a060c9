"""Receive a served live stream (`memsight connect`, File → Connect… in the app).

StreamClient keeps the connection: it connects, passes every byte of the stream to its sink
in order, and when the connection drops reconnects with the offset it has reached, so the
sink sees each byte once, whatever happens in between. StreamCopy is the usual sink: it
writes the bytes to a local profile file and hands the frames to a LiveProfile for a view.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from memsight.profiler import protocol
from memsight.profiler.launch.spec import RunSpec, default_profile_name
from memsight.profiler.output_path import unused_path
from memsight.profiler.profile.header import FILE_HEADER
from memsight.profiler.profile.live import LiveProfile
from memsight.profiler.remote import wire

CONNECT_TIMEOUT_S = 10.0
RETRY_S = 300.0  # after a drop, how long to keep trying to reconnect
FIRST_RETRY_S = 0.25
LONGEST_RETRY_S = 5.0


class StreamError(Exception):
    """The stream cannot be received: one line says why."""


class Fatal(StreamError):
    """Trying again will not help: the receiving ends."""


class Refused(Fatal):
    """The server said no (a wrong token, another run)."""


class CopyFailed(Fatal):
    """The local copy cannot be written (a full disk, a folder that went away)."""


class StreamClient:
    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        retry_s: float = RETRY_S,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.host, self.port, self.token = host, port, token
        self.retry_s = retry_s
        self.offset = 0  # bytes of the stream received
        self.stream_id: str | None = None
        self.ended = False  # the server sent the end: the run is over and all of it is here
        self.reconnections = 0
        self._say = say or (lambda _line: None)
        self._stop = threading.Event()
        self._socket: socket.socket | None = None

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def stop(self) -> None:
        """From another thread: stop receiving (receive() returns)."""
        self._stop.set()
        sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def receive(self, sink: Callable[[bytes], None]) -> None:
        """Pass the stream to `sink` until it ends (or stop()); raise StreamError when it cannot
        be had: the first connection fails, the server refuses, or a dropped connection cannot
        be made again within retry_s."""
        self._receive_once(sink)  # a first failure is the user's to see at once
        lost_at: float | None = None
        delay = FIRST_RETRY_S
        while not self.ended and not self._stop.is_set():
            if lost_at is None:
                lost_at, delay = time.monotonic(), FIRST_RETRY_S
                self._say(f"the connection to {self.address} was lost; reconnecting")
            if self._stop.wait(delay):
                return
            try:
                self._receive_once(sink)
            except Fatal:
                raise
            except StreamError as exc:
                if time.monotonic() - lost_at > self.retry_s:
                    raise StreamError(
                        f"gave up reconnecting to {self.address} after {self.retry_s:g} s: {exc}"
                    ) from None
                delay = min(delay * 2, LONGEST_RETRY_S)
                continue
            lost_at = None  # it connected again (and has ended, or dropped once more)

    def _receive_once(self, sink: Callable[[bytes], None]) -> None:
        """One connection: from the offset reached to its end or its drop (which returns)."""
        try:
            sock = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise StreamError(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        self._socket = sock
        try:
            with sock:
                sock.sendall(wire.hello_line(self.token, self.offset, self.stream_id))
                try:
                    answer = wire.read_line(sock.recv).decode("utf-8", "replace")
                except wire.WireError:
                    raise StreamError(f"{self.address} is not serving a memsight run") from None
                verdict, _, rest = answer.partition(" ")
                if verdict == "NO":
                    raise Refused(f"{self.address} refused the connection: {rest}")
                if verdict != "OK" or not rest:
                    raise StreamError(f"{self.address} is not serving a memsight run")
                if self.stream_id is not None:
                    self.reconnections += 1
                    self._say(f"reconnected to {self.address} at byte {self.offset:,}")
                self.stream_id = rest
                sock.settimeout(None)
                self._chunks(sock, sink)
        except OSError:
            return  # dropped: receive() reconnects
        finally:
            self._socket = None

    def _chunks(self, sock: socket.socket, sink: Callable[[bytes], None]) -> None:
        while not self._stop.is_set():
            head = _exactly(sock, wire.CHUNK.size)
            if head is None:
                return
            (size,) = wire.CHUNK.unpack(head)
            if size == 0:
                self.ended = True
                return
            if size > wire.MAX_CHUNK:
                raise StreamError(f"{self.address} sent a chunk of {size:,} bytes")
            data = _exactly(sock, size)
            if data is None:
                return  # cut inside a chunk: that chunk comes again after the reconnection
            try:
                sink(data)
            except OSError as exc:
                raise CopyFailed(f"cannot write the copy: {exc.strerror or exc}") from None
            self.offset += size


def _exactly(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes, or None when the connection ends first."""
    parts, got = [], 0
    while got < size:
        part = sock.recv(min(size - got, 1 << 16))
        if not part:
            return None
        parts.append(part)
        got += len(part)
    return b"".join(parts)


class StreamCopy:
    """A sink that writes the stream into a profile file and, given one, into a LiveProfile.

    The file is opened on the first bytes (the caller may choose its name by then); the live
    profile gets frames only, the stream's 16-byte header left out, as the recorder gives its
    live views.
    """

    def __init__(self, path: Path, live: LiveProfile | None = None) -> None:
        self.path = path
        self.live = live
        self.received = 0
        self._fd: int | None = None

    def __call__(self, data: bytes) -> None:
        if self._fd is None:
            self._fd = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666
            )
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        if self.live is not None:
            header_left = max(FILE_HEADER.size - self.received, 0)
            if len(data) > header_left:
                self.live.put(data[header_left:])
        self.received += len(data)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


class CopyNamedByRun:
    """A sink that names its copy after the served run: it holds the first bytes until the
    run's first frame (RUN, with the script's name) has come, then writes everything into
    `out`, or into SCRIPT-YYYYMMDD-HHMMSS.memsight in `folder` (`~1`, `~2`… when taken), and
    into `live` when given. `opened(path)` is called once the copy's name is known."""

    def __init__(
        self,
        out: Path | None,
        folder: Path,
        now: datetime,
        opened: Callable[[Path], None],
        live: LiveProfile | None = None,
    ) -> None:
        self.out = out
        self.folder = folder
        self.now = now
        self.opened = opened
        self.live = live
        self.copy: StreamCopy | None = None
        self._held = b""

    def __call__(self, data: bytes) -> None:
        if self.copy is None:
            self._held += data
            run = _first_run_frame(self._held)
            if run is None:
                return
            path = self.out or _default_path(self.folder, run, self.now)
            self.copy = StreamCopy(path, self.live)
            self.opened(path)
            data, self._held = self._held, b""
        self.copy(data)

    def close(self) -> Path | None:
        if self.copy is None:
            return None
        self.copy.close()
        return self.copy.path


def _first_run_frame(stream: bytes) -> dict[str, Any] | None:
    reader = protocol.FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
    reader.feed(stream[FILE_HEADER.size :])
    for kind, payload in reader.frames():
        base, plain = protocol.unpack_payload(kind, payload)
        if base == protocol.RUN:
            run = protocol.decode_json(plain)
            return run if isinstance(run, dict) else {}
        return {}  # not a RUN first: name the copy without it
    return None


def _default_path(folder: Path, run: dict[str, Any], now: datetime) -> Path:
    """As `memsight run` names its profile (default_profile_name), from the served RUN."""
    module, script = run.get("module"), run.get("script")
    if isinstance(module, str) and module:
        spec = RunSpec(target=module, module=True, cwd="", python="")
    else:
        spec = RunSpec(
            target=script if isinstance(script, str) and script else "remote", cwd="", python=""
        )
    return unused_path(folder / default_profile_name(spec, now))
