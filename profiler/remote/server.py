"""Serve a recording's live stream to viewers (`memsight run --serve`).

The stream is read from the profile file as the recorder writes it, never from memory: a
viewer that joins an hour in gets the hour from the file, then the frames as they come, and a
long run costs no more memory served than unserved. Only the part of the file that the writer
has completed is sent (`available()`: the end of its last whole frame, which a failed write
never cuts back past), and the file is opened once at the start, so the compaction that
replaces it when the run ends cannot change what viewers get. The first 16 bytes are the
header of a stream (the newest format version, as a profile written into a pipe says), not
the file's own, which the writer raises in place as the run goes on.

Each viewer has its own thread: a slow one holds up no other, nor the recording.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from memsight.profiler.profile.header import FILE_HEADER, FORMAT_VERSION, file_header
from memsight.profiler.remote import wire

MAX_VIEWERS = 64  # connected at once; more are refused with a reason
DRAIN_S = 30.0  # how long the end of a run waits for connected viewers to get all of it


def new_token() -> str:
    """A fresh viewer token: 128 random bits as hex.

    Hex, not URL-safe base64: one base64 token in 64 starts with "-", and
    `memsight connect … --token -xyz` then reads it as an option.
    """
    return secrets.token_hex(16)


class StreamServer:
    """Serves a profile file, as it is written, to viewers that know `token`.

    Made before the run starts (a port that cannot be had is an error before anything runs);
    `start(path, available)` serves the file once the writer has created it, `available()`
    saying how many of its bytes are whole frames. `notify()` (after each flush of the
    writer) wakes the viewers waiting for more; `end()` says the file is complete, and waits
    for connected viewers to receive all of it.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        """Raises OSError when the address cannot be listened on."""
        self.token = token or new_token()
        self.stream_id = secrets.token_hex(8)
        self._available: Callable[[], int] = lambda: 0
        self._log = log or (lambda _line: None)
        self._file = -1
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((host, port))
        except OSError:
            self.listener.close()
            raise
        self.listener.listen(16)
        self.host, self.port = host, self.listener.getsockname()[1]
        self._changed = threading.Condition()
        self._ended = False
        self._closed = False
        self._viewers: set[threading.Thread] = set()
        self._accepting = threading.Thread(target=self._accept, name="memsight-serve", daemon=True)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def start(self, path: Path, available: Callable[[], int]) -> None:
        self._file = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._available = available
        self._accepting.start()

    def notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def end(self, drain_s: float = DRAIN_S) -> None:
        """The file is complete: viewers get the rest and the end of the stream; wait up to
        `drain_s` for them, then stop serving."""
        with self._changed:
            self._ended = True
            self._changed.notify_all()
        with self._changed:
            viewers = list(self._viewers)
        for viewer in viewers:
            viewer.join(timeout=drain_s)
        self.close()

    def close(self) -> None:
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self._changed:
            reading = bool(self._viewers)
        if not reading and self._file >= 0:  # a viewer still reading: the process's end closes it
            os.close(self._file)
            self._file = -1

    # -- viewers --------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                connection, peer = self.listener.accept()
            except OSError:
                return  # closed
            with self._changed:
                full = len(self._viewers) >= MAX_VIEWERS
                if not full and not self._closed:
                    viewer = threading.Thread(
                        target=self._serve,
                        args=(connection, peer),
                        name="memsight-viewer",
                        daemon=True,
                    )
                    self._viewers.add(viewer)
                    viewer.start()
                    continue
            with contextlib.suppress(OSError):
                connection.sendall(b"NO too many viewers\n")
            connection.close()

    def _serve(self, connection: socket.socket, peer: object) -> None:
        try:
            with connection:
                self._handshake_and_send(connection, peer)
        except (OSError, wire.WireError):
            pass  # the viewer went away, or was not one: it may come back
        finally:
            with self._changed:
                self._viewers.discard(threading.current_thread())

    def _handshake_and_send(self, connection: socket.socket, peer: object) -> None:
        connection.settimeout(wire.HANDSHAKE_TIMEOUT_S)
        try:
            token, offset, stream_id = wire.parse_hello(wire.read_line(connection.recv))
        except wire.WireError as exc:
            connection.sendall(f"NO {exc}\n".encode())
            return
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            self._log(f"refused a viewer from {_peer_text(peer)}: wrong token")
            connection.sendall(b"NO wrong token\n")
            return
        if stream_id is not None and stream_id != self.stream_id:
            connection.sendall(b"NO this server records another run now\n")
            return
        connection.sendall(f"OK {self.stream_id}\n".encode())
        connection.settimeout(None)
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._send_from(connection, offset)

    def _send_from(self, connection: socket.socket, offset: int) -> None:
        header = file_header(FORMAT_VERSION)
        if offset < len(header):
            connection.sendall(wire.chunk(header[offset:]))
            offset = len(header)
        while True:
            with self._changed:
                while True:
                    # "ended" before the size: a size read after the end is the final one.
                    ended = self._ended
                    available = self._available()
                    if offset < available or ended or self._closed:
                        break
                    self._changed.wait(timeout=1.0)
            if offset < available:
                size = min(available - offset, wire.MAX_CHUNK)
                data = os.pread(self._file, size, offset)
                if not data:  # shorter than the writer said: it cannot be; end, never spin
                    return
                connection.sendall(wire.chunk(data))
                offset += len(data)
            elif ended:
                connection.sendall(wire.END)
                return
            else:
                return  # served no more, the run not ended: the viewer's copy is not whole


def _peer_text(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


assert FILE_HEADER.size == 16  # the stream's header replaces the file's 16 bytes
