"""A script blocked on input() is seen from outside, through /proc, and only then."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memsight.profiler.launch import stdin_wait
from memsight.profiler.launch.stdin_wait import reads_descriptor, waits_for_stdin

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/syscall").exists() or not stdin_wait._read_calls(),
    reason="no /proc/PID/syscall, or a machine whose read calls are not known",
)

DEADLINE_S = 60.0


def until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def asking(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A script that asks for a line, then works (a busy loop) until it is sent one more."""
    script = tmp_path / "ask.py"
    script.write_text(
        "import sys\n"
        "name = input('name? ')\n"
        "print('hello', name, flush=True)\n"
        "total = 0\n"
        "for i in range(300_000_000):\n"
        "    total += i\n"
    )
    with subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as process:
        yield process
        process.kill()


def test_a_script_blocked_on_input_is_seen_waiting_and_no_more_once_answered(
    asking: subprocess.Popen[bytes],
) -> None:
    assert until(lambda: waits_for_stdin(asking.pid))
    assert asking.stdin is not None and asking.stdout is not None
    asking.stdin.write(b"Ada\n")
    asking.stdin.flush()
    assert asking.stdout.readline() == b"name? hello Ada\n"
    # Busy in its loop now: never seen waiting (each look is of a running thread).
    assert not any(waits_for_stdin(asking.pid) for _ in range(50))


def test_a_sleeping_script_is_not_waiting_for_input(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == b"up\n"
        # Asleep in a system call, but not a read of stdin.
        syscall = Path(f"/proc/{process.pid}/syscall")
        assert until(lambda: syscall.read_text() != "running\n")
        assert not waits_for_stdin(process.pid)
        process.kill()


def test_a_process_that_is_gone_is_not_waiting() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert not waits_for_stdin(process.pid)


def test_only_a_read_of_descriptor_0_counts() -> None:
    read = min(stdin_wait._read_calls())
    assert reads_descriptor(f"{read} 0x0 0x7ffd1000 0x2000 0x0 0x0 0x0 0x7ffd0ff8 0x7f00aa")
    assert not reads_descriptor(f"{read} 0x3 0x7ffd1000 0x2000 0x0 0x0 0x0 0x7ffd0ff8 0x7f0")
    assert not reads_descriptor("running")
    assert not reads_descriptor("-1 0x7ffd0ff8 0x7f00aa")
    assert not reads_descriptor("")
    not_a_read = next(n for n in range(500) if n not in stdin_wait._read_calls())
    assert not reads_descriptor(f"{not_a_read} 0x0 0x0 0x0 0x0 0x0 0x0 0x0 0x0")
