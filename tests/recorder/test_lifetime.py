"""The target's life is tied to its recorder's (issue 14, item 1).

Real `memsight run` subprocesses: memsight is killed or signalled, and the target (a script
that writes its pid and what it receives to files) must end with it, or receive the signal
exactly once, as it would under plain python.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.processes import PtyProcess, is_running, kill_quietly, killpg_quietly, wait_gone
from tests.support import memsight_command, wait_until, write_script

pytestmark = pytest.mark.slow

# Writes its pid, then one line per signal it receives; handles SIGQUIT and SIGUSR1 so that
# neither ends it.
RECORD_SIGNALS = """\
import os, signal, sys, time

def note(signum, _frame):
    with open(sys.argv[2], "a") as f:
        f.write(signal.Signals(signum).name + "\\n")

for sig in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, note)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
end = time.monotonic() + 60
while time.monotonic() < end:
    time.sleep(0.02)
"""


@contextmanager
def recorded(
    tmp_path: Path, source: str = RECORD_SIGNALS, *extra: str, plain: bool = False
) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """memsight run (or, `plain`, python) of `source`, in a session of its own:
    (memsight, target pid, log)."""
    script = write_script(tmp_path, "target.py", source)
    pid_file, log = tmp_path / "pid", tmp_path / "signals"
    args: list[str | Path] = [script, pid_file, log, *extra]
    proc = subprocess.Popen(
        [sys.executable, *map(str, args)]
        if plain
        else memsight_command("run", "-q", "-o", tmp_path / "p.memsight", *args),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    target = 0
    try:
        wait_until(pid_file.exists, 30, "the target to start")
        target = int(pid_file.read_text())
        yield proc, target, log
    finally:
        kill_quietly(target or None)
        killpg_quietly(proc.pid)
        proc.wait(timeout=10)


def received(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_target_dies_when_memsight_is_killed(tmp_path: Path) -> None:
    with recorded(tmp_path) as (memsight, target, _log):
        memsight.kill()
        memsight.wait(timeout=10)
        wait_gone([target], timeout=5)


@pytest.mark.parametrize("signum", [signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2])
def test_signals_sent_to_memsight_reach_the_target_once(
    tmp_path: Path, signum: signal.Signals
) -> None:
    with recorded(tmp_path) as (memsight, target, log):
        memsight.send_signal(signum)
        wait_until(lambda: received(log), 10, "the target to receive the signal")
        assert memsight.poll() is None  # memsight went on recording
        assert is_running(target)
        memsight.send_signal(signal.SIGINT)  # and the run still ends normally
        memsight.wait(timeout=15)
        assert received(log) == [signum.name]


def test_ctrl_backslash_in_a_terminal_reaches_a_target_that_handles_it_once(
    tmp_path: Path,
) -> None:
    script = write_script(tmp_path, "target.py", RECORD_SIGNALS)
    pid_file, log = tmp_path / "pid", tmp_path / "signals"
    term = PtyProcess(
        memsight_command("run", "-q", "-o", tmp_path / "p.memsight", script, pid_file, log),
        cwd=tmp_path,
    )
    target = 0
    try:
        wait_until(pid_file.exists, 30, "the target to start")
        target = int(pid_file.read_text())
        term.send(b"\x1c")  # Ctrl+\
        wait_until(lambda: received(log), 10, "the target to receive SIGQUIT")
        assert is_running(target)
        term.send(b"\x03")  # Ctrl+C ends the run as usual
        term.wait(timeout=15)
        assert received(log) == ["SIGQUIT"]
    finally:
        kill_quietly(target or None)
        term.close()


# Notes every signal in argv[3] (comma-separated names) and SIGTERM, which also ends it. Python
# runs pending handlers in signal-number order, so a second copy of a signal that arrived
# before the SIGTERM is noted before it.
NOTE_SIGNALS_UNTIL_TERM = """\
import os, signal, sys, time

def note(signum, _frame):
    with open(sys.argv[2], "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
    if signum == signal.SIGTERM:
        sys.exit(0)

for name in sys.argv[3].split(",") + ["SIGTERM"]:
    signal.signal(signal.Signals[name], note)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
end = time.monotonic() + 60
while time.monotonic() < end:
    time.sleep(0.02)
"""


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGHUP, signal.SIGUSR1], ids=lambda s: s.name
)
@pytest.mark.parametrize("under", ["python", "memsight"])
def test_a_signal_sent_to_the_process_group_outside_a_terminal_reaches_the_target_once(
    tmp_path: Path, signum: signal.Signals, under: str
) -> None:
    # As a job runner or `kill -INT -PGID` sends it: to every process of the group, memsight
    # included, in a session with no terminal. Under plain python the target gets it once.
    source, plain = NOTE_SIGNALS_UNTIL_TERM, under == "python"
    with recorded(tmp_path, source, signum.name, plain=plain) as (proc, _target, log):
        os.killpg(proc.pid, signum)
        wait_until(lambda: received(log), 10, "the target to receive the signal")
        # A copy passed on late by memsight would come before the SIGTERM that ends the run.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        notes = received(log)
        assert notes[: notes.index("SIGTERM")] == [signum.name]
