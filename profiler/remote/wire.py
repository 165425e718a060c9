"""The live stream's wire format, both ends of it.

A viewer connects and sends one line:

    MEMSIGHT-STREAM 1 TOKEN OFFSET [STREAM_ID]\n

TOKEN is the run's token, OFFSET how many bytes of the stream the viewer has already (0 the
first time; its copy's size when it reconnects), STREAM_ID the id the server gave it before
(so that a reconnection to a server now serving another run is refused, not appended to the
wrong file). The server answers one line, `OK STREAM_ID\n` or `NO REASON\n` (then closes),
and after OK sends the stream from OFFSET on as chunks: a 4-byte little-endian length, then
that many bytes. A chunk of length 0 ends the stream: the run has ended and everything of it
was sent. A connection that ends without it was dropped; the viewer reconnects with its
offset and loses nothing.

The stream itself is a profile file, byte for byte: a file header that says the newest format
version (as a profile written into a pipe does), then the recording's frames in order. A
viewer that writes every byte it gets has a profile.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

MAGIC = "MEMSIGHT-STREAM"
VERSION = 1
MAX_LINE = 512  # bytes: a handshake line is far shorter
CHUNK = struct.Struct("<I")
MAX_CHUNK = 1 << 20  # bytes of the stream per chunk
HANDSHAKE_TIMEOUT_S = 10.0


class WireError(Exception):
    """A line or chunk that breaks the format: the connection is of no use."""


def hello_line(token: str, offset: int, stream_id: str | None) -> bytes:
    parts = [MAGIC, str(VERSION), token, str(offset)]
    if stream_id:
        parts.append(stream_id)
    return (" ".join(parts) + "\n").encode()


def parse_hello(line: bytes) -> tuple[str, int, str | None]:
    """(token, offset, stream id or None) of a viewer's first line; WireError if malformed."""
    try:
        parts = line.decode("ascii").split()
    except UnicodeDecodeError:
        raise WireError("not a memsight viewer") from None
    if len(parts) not in (4, 5) or parts[0] != MAGIC:
        raise WireError("not a memsight viewer")
    if parts[1] != str(VERSION):
        raise WireError(f"stream version {parts[1]} is not served here (this is {VERSION})")
    if not parts[3].isdigit():
        raise WireError("bad offset")
    return parts[2], int(parts[3]), parts[4] if len(parts) == 5 else None


def read_line(receive: Callable[[int], bytes]) -> bytes:
    """One line (without its end) read byte by byte, so nothing after it is consumed."""
    line = b""
    while not line.endswith(b"\n"):
        byte = receive(1)
        if not byte:
            raise WireError("the connection closed before the line ended")
        line += byte
        if len(line) > MAX_LINE:
            raise WireError("line too long")
    return line[:-1]


def chunk(data: bytes) -> bytes:
    return CHUNK.pack(len(data)) + data


END = CHUNK.pack(0)


def parse_address(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """`[HOST:]PORT` (an IPv6 host in brackets: `[::1]:8765`) as (host, port); ValueError with
    the reason when it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = default_host, text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not [HOST:]PORT with PORT from 0 to 65535")
    if not host:
        raise ValueError(f"{text!r} has an empty host")
    return host, int(port)
