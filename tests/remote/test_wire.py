"""The live stream's handshake and addresses, read strictly."""

from __future__ import annotations

import pytest

from memsight.profiler.commands.connect import build_parser
from memsight.profiler.remote import wire
from memsight.profiler.remote.server import new_token


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("8765", ("127.0.0.1", 8765)),
        ("0", ("127.0.0.1", 0)),
        ("0.0.0.0:8765", ("0.0.0.0", 8765)),
        ("gpu-box:9000", ("gpu-box", 9000)),
        ("[::1]:8765", ("::1", 8765)),
    ],
)
def test_addresses_are_host_and_port_with_loopback_by_default(
    text: str, address: tuple[str, int]
) -> None:
    assert wire.parse_address(text) == address


@pytest.mark.parametrize("text", ["", "x", "65536", ":8765", "host:", "host:-1", "host:8a"])
def test_a_bad_address_says_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match=r"PORT|empty host"):
        wire.parse_address(text)


def test_a_hello_line_reads_back_and_anything_else_is_refused() -> None:
    line = wire.hello_line("tok", 1234, "abcd")
    assert line.endswith(b"\n")
    assert wire.parse_hello(line[:-1]) == ("tok", 1234, "abcd")
    assert wire.parse_hello(wire.hello_line("tok", 0, None)[:-1]) == ("tok", 0, None)
    for bad in (
        b"GET / HTTP/1.1",
        b"MEMSIGHT-STREAM 2 tok 0",
        b"MEMSIGHT-STREAM 1 tok -5",
        b"\xff",
    ):
        with pytest.raises(wire.WireError):
            wire.parse_hello(bad)


def test_a_line_is_read_to_its_end_and_no_further() -> None:
    data = iter([b"O", b"K", b" ", b"x", b"\n", b"rest"])
    assert wire.read_line(lambda _n: next(data)) == b"OK x"
    assert next(data) == b"rest"
    with pytest.raises(wire.WireError):
        wire.read_line(lambda _n: b"")
    with pytest.raises(wire.WireError):
        wire.read_line(lambda _n: b"a")  # never ends: cut at MAX_LINE


def test_every_token_a_server_prints_is_read_back_by_connect_as_written() -> None:
    # The server prints `--token TOKEN` for the user to paste: a token that starts with
    # "-" would be read as an option (one URL-safe base64 token in 64 did).
    parser = build_parser()
    for _ in range(2000):
        token = new_token()
        options = parser.parse_args(["127.0.0.1:8765", "--token", token])
        assert options.token == token
