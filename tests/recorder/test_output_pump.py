"""The output pump: what the target writes is recorded and copied on to memsight's own
terminal, whole and in order, and a terminal that is slow to show it does not hold the
target's writes up (up to a bounded amount kept in memory)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from memsight.profiler import protocol
from memsight.profiler.recorder import output
from memsight.profiler.recorder.output import OutputPump, StreamChannel

LINE = b"x" * 99 + b"\n"
WAIT_S = 30.0


class Recorded:
    """The frames a pump emits, as the recording's writer receives them."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, frame: bytes) -> None:
        with self.lock:
            self.frames.append(frame)

    def data(self) -> bytes:
        with self.lock:
            frames = list(self.frames)
        out = []
        for frame in frames:
            _, kind, _ = protocol.HEADER.unpack_from(frame)
            _, payload = protocol.unpack_payload(kind, frame[protocol.HEADER.size :])
            out.append(protocol.split_output(payload)[2])
        return b"".join(out)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {WAIT_S:.0f} s")
        time.sleep(0.01)


def _drain(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


class Pipe:
    """memsight's own terminal, played by a pipe: the end the pump writes, the end we read."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()

    def close_write_end(self) -> None:
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1

    def close(self) -> None:
        self.close_write_end()
        if self.read_end >= 0:
            os.close(self.read_end)
            self.read_end = -1


@pytest.fixture
def terminal() -> Iterator[Pipe]:
    pipe = Pipe()
    yield pipe
    pipe.close()


def _writer(fd: int, data: bytes) -> threading.Thread:
    """The target: writes `data` to its end of the channel, then closes it."""

    def write() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 1 << 16]) :]
        os.close(fd)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_output_reaches_the_terminal_and_the_record_whole_and_in_order(
    terminal: Pipe,
) -> None:
    data = b"".join(b"%08d " % i + LINE[9:] for i in range(20_000))  # 2 MB, each line numbered
    pump, recorded, target = _pumping(terminal, data)
    shown = _drain_until_closed(terminal, pump)
    target.join(WAIT_S)
    assert shown == data
    assert recorded.data() == data


def test_a_terminal_that_does_not_keep_up_does_not_hold_up_the_target(
    terminal: Pipe,
) -> None:
    # The terminal is read by no one for now: under plain python the target's writes would
    # wait for it; under memsight the pump goes on reading (and recording), with what the
    # terminal has not taken yet kept for it.
    data = LINE * 20_000  # 2 MB, far past what the pipe standing for the terminal holds
    pump, recorded, target = _pumping(terminal, data)
    target.join(WAIT_S)
    assert not target.is_alive(), "the target's writes waited for the terminal"
    _wait_for(lambda: len(recorded.data()) == len(data), "the whole output recorded")
    assert pump.is_alive(), "the pump ended before the terminal had everything"
    shown = _drain_until_closed(terminal, pump)
    assert shown == data


def test_what_is_kept_for_a_stalled_terminal_is_bounded(
    terminal: Pipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "QUEUED_BYTES", 256 * 1024)
    data = LINE * 40_000  # 4 MB
    pump, recorded, target = _pumping(terminal, data)
    # Past the bound, the pump waits for the terminal, and the target for the pump.
    _wait_for(lambda: len(recorded.data()) >= 256 * 1024, "the bound to be reached")
    target.join(0.5)
    assert target.is_alive()
    bound = 256 * 1024 + output.BATCH_BYTES + 2 * 65536  # queue, a batch, the two pipes
    assert len(recorded.data()) <= bound
    shown = _drain_until_closed(terminal, pump)
    target.join(WAIT_S)
    assert shown == data
    assert recorded.data() == data


def _pumping(terminal: Pipe, data: bytes) -> tuple[OutputPump, Recorded, threading.Thread]:
    """A pump copying a pipe's output to `terminal`, and a target writing `data` into it."""
    channel = StreamChannel(use_pty=False)
    recorded = Recorded()
    pump = OutputPump(channel, protocol.STDOUT, recorded, passthrough_fd=terminal.write_end)
    pump.start()
    target = _writer(channel.child_fd, data)
    channel.child_fd = -1  # the target's now: it closes it when done
    return pump, recorded, target


def _drain_until_closed(terminal: Pipe, pump: OutputPump) -> bytes:
    """Read the terminal until the pump has ended and everything it wrote is read."""
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(_drain(terminal.read_end)), daemon=True)
    reader.start()
    pump.join(WAIT_S)
    assert not pump.is_alive()
    terminal.close_write_end()
    reader.join(WAIT_S)
    return b"".join(chunks)
