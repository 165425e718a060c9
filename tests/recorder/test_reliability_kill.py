"""How runs end: SIGKILL of the target or of memsight, Ctrl+C, Stop, exit codes and signals.

Everything here is real: `memsight run` (or a Recording) in a subprocess, real signals, the
profile file read back from disk while it is being written. Waits poll a condition against a
deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.recorder.session import Recording
from tests.processes import PtyProcess, is_running, kill_quietly, killpg_quietly, wait_gone
from tests.support import (
    memsight_command,
    run_cli,
    seconds_since_t0,
    wait_for_samples,
    wait_until,
    write_script,
)

# Real runs killed, interrupted and stopped mid-way.
pytestmark = pytest.mark.slow

# How close to the moment of death the last sample on disk must be (docs/architecture.md, Reliability).
MAX_LOSS_S = 0.5

HOLD_MEMORY_AND_SLEEP = """\
import time

blocks = [bytearray(8 * 1024 * 1024) for _ in range(4)]  # 32 MiB, touched
print("ready", flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    time.sleep(0.02)
"""


@contextmanager
def memsight_run(tmp_path: Path, script: Path, out: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`memsight run -o OUT SCRIPT` in a session of its own; whatever is left is killed after."""
    proc = subprocess.Popen(
        memsight_command("run", "-o", out, script),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            killpg_quietly(proc.pid)  # memsight and the target share its process group
        proc.communicate(timeout=10)
        # The target may have outlived memsight; kill it only if it is still in that group.
        for pid in _group_members(proc.pid):
            kill_quietly(pid)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.getpgid(int(entry)) == pgid:
                    members.append(int(entry))
            except OSError:
                continue
    return members


# -- SIGKILL of the target ---------------------------------------------------------------------


def test_sigkill_of_the_target_ends_memsight_by_sigkill_with_samples_up_to_the_kill(
    tmp_path: Path,
) -> None:
    # Given a recorded script that holds memory and sleeps, with >= 1 s of samples on disk
    script = write_script(tmp_path, "hold.py", HOLD_MEMORY_AND_SLEEP)
    out = tmp_path / "hold.memsight"
    with memsight_run(tmp_path, script, out) as proc:
        target = wait_for_samples(out, 1.0).info.pid
        assert target is not None and target != proc.pid

        # When the target is SIGKILLed, as the OOM killer does
        killed_ns = time.monotonic_ns()
        os.kill(target, signal.SIGKILL)
        proc.communicate(timeout=20)

    # Then memsight ends as the target did, by signal 9 (a shell shows 137 for both)
    assert proc.returncode == -signal.SIGKILL
    # And the profile is complete and says how the run ended
    profile = load_profile(out)
    assert profile.complete
    assert profile.info.signal == signal.SIGKILL
    assert profile.info.exit_code is None
    assert profile.info.ended_by == "killed by signal 9"
    # And the samples reach the moment of the kill, with no hole on the way
    ram = profile.ram
    assert ram is not None and len(ram) > 10
    killed_at = seconds_since_t0(profile, killed_ns)
    assert killed_at - MAX_LOSS_S <= ram.t[-1] <= killed_at + 0.1
    assert ram.t[0] < MAX_LOSS_S
    assert float(np.diff(ram.t).max()) < MAX_LOSS_S
    assert ram["rss"].max() >= 32 * 1024 * 1024


# -- SIGKILL of memsight itself ------------------------------------------------------------------


def test_sigkill_of_the_recorder_leaves_a_loadable_profile(tmp_path: Path) -> None:
    # Given a recording with samples on disk
    script = write_script(tmp_path, "hold.py", HOLD_MEMORY_AND_SLEEP)
    out = tmp_path / "hold.memsight"
    with memsight_run(tmp_path, script, out) as proc:
        target = wait_for_samples(out, 0.6).info.pid
        assert target is not None

        # When memsight itself is SIGKILLed mid-run
        killed_ns = time.monotonic_ns()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

        # Then the file on disk loads, marked as cut off, with samples up to the kill
        profile = load_profile(out)
        assert not profile.complete
        assert profile.warnings
        assert profile.info.exit_code is None and profile.info.signal is None
        assert profile.info.ended_by == "unknown (recording cut off)"
        ram = profile.ram
        assert ram is not None and len(ram) > 10
        killed_at = seconds_since_t0(profile, killed_ns)
        assert killed_at - MAX_LOSS_S <= ram.t[-1] <= killed_at + 0.1

        # And the target did not outlive its recorder (tests/recorder/test_lifetime.py)
        wait_gone([target])


# -- Ctrl+C in a real terminal -------------------------------------------------------------------


def press_ctrl_c_once_ready(script: Path, out: Path, cwd: Path) -> tuple[int, bytes]:
    """`memsight run -o OUT SCRIPT` in a real terminal; Ctrl+C once the target printed "ready".

    Returns memsight's exit status and everything the terminal showed."""
    term = PtyProcess(memsight_command("run", "-o", out, script), cwd=cwd)
    try:
        term.wait_for_output(b"ready")
        term.send(b"\x03")
        code = term.wait()
    finally:
        term.close()
    return code, term.output


def test_ctrl_c_interrupts_the_target_and_memsight_ends_by_sigint_too(tmp_path: Path) -> None:
    # Given `memsight run` in a terminal, with the target looping
    script = write_script(tmp_path, "loop.py", HOLD_MEMORY_AND_SLEEP)
    out = tmp_path / "loop.memsight"

    # When the user presses Ctrl+C
    code, shown = press_ctrl_c_once_ready(script, out, tmp_path)

    # Then the target got a KeyboardInterrupt, whose traceback was shown
    assert b"Traceback" in shown
    assert b"KeyboardInterrupt" in shown
    # And memsight ends by SIGINT as the target did (a shell shows 130 for both)
    assert code == -signal.SIGINT
    # And the profile is complete and records the signal and the traceback
    profile = load_profile(out)
    assert profile.complete
    assert profile.info.signal == signal.SIGINT
    assert "KeyboardInterrupt" in profile.output_text()


def test_ctrl_c_handled_by_the_target_gives_its_own_exit_status(tmp_path: Path) -> None:
    # Given a target that catches KeyboardInterrupt and exits 0
    script = write_script(
        tmp_path,
        "graceful.py",
        """\
        import sys
        import time

        try:
            print("ready", flush=True)
            end = time.monotonic() + 60
            while time.monotonic() < end:
                time.sleep(0.02)
        except KeyboardInterrupt:
            print("saving a checkpoint", flush=True)
            sys.exit(0)
        sys.exit(3)  # never interrupted
        """,
    )
    out = tmp_path / "graceful.memsight"

    # When the user presses Ctrl+C
    code, shown = press_ctrl_c_once_ready(script, out, tmp_path)

    # Then memsight exits with the target's own status
    assert b"saving a checkpoint" in shown
    assert code == 0
    profile = load_profile(out)
    assert profile.complete
    assert profile.info.exit_code == 0
    assert profile.info.signal is None


# -- Stop ends the whole process tree ------------------------------------------------------------

FORK_TWO_SLEEPERS = """\
import multiprocessing
import signal
import time

IGNORE_SIGTERM = {ignore}


def sleep_forever():
    while True:
        time.sleep(1)


if __name__ == "__main__":
    if IGNORE_SIGTERM:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the workers
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=sleep_forever) for _ in range(2)]
    for worker in workers:
        worker.start()
    print("workers started", flush=True)
    sleep_forever()
"""


@contextmanager
def recording_of(script: Path, out: Path) -> Iterator[Recording]:
    """A Recording in a session of its own (as the GUI runs it), cleaned up whatever happens."""
    spec = RunSpec(target=str(script), cwd=str(script.parent), python=sys.executable)
    recording = Recording(spec, out, stdio="capture", new_session=True)
    recording.start()
    try:
        yield recording
    finally:
        if recording.status is None:
            recording.kill_tree()
            recording.wait()


@pytest.mark.parametrize("ignore_sigterm", [False, True], ids=["plain", "ignoring-sigterm"])
def test_stop_kills_the_target_and_every_worker_it_forked(
    tmp_path: Path, ignore_sigterm: bool
) -> None:
    # Given a target that forked two workers which sleep forever
    script = write_script(tmp_path, "workers.py", FORK_TWO_SLEEPERS.format(ignore=ignore_sigterm))
    out = tmp_path / "workers.memsight"
    with recording_of(script, out) as recording:
        assert recording.tree is not None and recording.pid is not None
        watcher = recording.tree
        workers = wait_until(
            lambda: list(watcher.known) if len(watcher.known) >= 2 else None,
            timeout=15.0,
            what="the recording to see both workers",
        )
        assert workers is not None
        tree = [recording.pid, *workers]
        assert all(is_running(pid) for pid in tree)

        # When the user presses Stop
        recording.stop(grace_s=1.0)
        status = recording.wait()

    # Then no process of the tree is left, orphaned workers included
    wait_gone(tree)
    expected = signal.SIGKILL if ignore_sigterm else signal.SIGTERM
    assert status.signal == expected
    # And the profile loads, complete, with the workers in it
    profile = load_profile(out)
    assert profile.complete
    assert profile.info.signal == expected
    assert set(workers) <= set(profile.children)


# -- exit status ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "returncode", "exit_code", "signum"),
    [
        ("print('done')\n", 0, 0, None),
        ("import sys\nsys.exit(7)\n", 7, 7, None),
        ("raise RuntimeError('boom')\n", 1, 1, None),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", -15, None, 15),
    ],
    ids=["clean-exit", "sys-exit-7", "uncaught-exception", "sigterm"],
)
def test_memsight_exits_with_the_targets_status_and_records_it(
    tmp_path: Path, source: str, returncode: int, exit_code: int | None, signum: int | None
) -> None:
    # Given a target that ends in a known way
    script = write_script(tmp_path, "ending.py", source)
    out = tmp_path / "ending.memsight"

    # When it runs under memsight
    result = run_cli("run", "-o", out, script, cwd=tmp_path)

    # Then memsight ends as the target did: its exit code, or death by the same signal
    assert result.returncode == returncode, result.stderr
    # And the profile records the exit code or the signal
    profile = load_profile(out)
    assert profile.complete
    assert profile.info.exit_code == exit_code
    assert profile.info.signal == signum
