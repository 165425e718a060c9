"""A session of the app that ends without Quit leaves a trace, and the next start says so
(app/crashlog.py): sessions are real processes here, ended by a real signal."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memsight.app.crashlog import CrashLog, ended_message
from tests.processes import wait_for_setting
from tests.support import MEMSIGHT, ROOT, child_env, run_memsight, wait_until, write_script

# A session of the app's crash log in a process of its own, ended by `end`.
SESSION = """
import os, signal, sys, time
from pathlib import Path
from memsight.app.crashlog import CrashLog
log = CrashLog(Path(sys.argv[1]))
log.start()
end = sys.argv[2]
if end == "quit":
    log.end()
elif end == "exception":
    raise RuntimeError("a slot nobody caught")
else:
    os.kill(os.getpid(), getattr(signal, end))
    time.sleep(10)
"""


def session(folder: Path, end: str) -> int:
    """Run one session ending by `end`: "quit", "exception", or a signal's name."""
    done = subprocess.run(
        [sys.executable, "-c", SESSION, str(folder), end],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.returncode


def test_a_session_that_quits_leaves_nothing_to_tell(tmp_path: Path) -> None:
    assert session(tmp_path, "quit") == 0
    assert CrashLog(tmp_path).take_ended() == []
    assert not list(tmp_path.glob("*.running"))


@pytest.mark.parametrize("crash", ["SIGSEGV", "SIGABRT"])
def test_a_crash_leaves_every_threads_stack_and_the_next_start_says_where(
    tmp_path: Path, crash: str
) -> None:
    assert session(tmp_path, crash) == -getattr(signal, crash)
    log = (tmp_path / "crash.log").read_text()
    assert "Fatal Python error" in log and 'File "<string>"' in log
    [ended] = CrashLog(tmp_path).take_ended()
    assert ended.traced
    message = ended_message([ended], tmp_path / "crash.log")
    assert message.startswith(f"memsight ended unexpectedly last time (pid {ended.pid}")
    assert message.endswith(f"what it left is in {tmp_path / 'crash.log'}")
    assert CrashLog(tmp_path).ended_sessions() == []  # told once


def test_an_uncaught_exception_is_in_the_log(tmp_path: Path) -> None:
    assert session(tmp_path, "exception") == 1
    assert "RuntimeError: a slot nobody caught" in (tmp_path / "crash.log").read_text()


def test_a_killed_session_is_told_with_no_trace(tmp_path: Path) -> None:
    assert session(tmp_path, "SIGKILL") == -signal.SIGKILL
    ended = CrashLog(tmp_path).take_ended()
    assert [s.traced for s in ended] == [False]
    assert ended_message(ended, tmp_path / "crash.log").endswith(
        "with no trace (killed, or the system shut down)"
    )


def test_sessions_running_beside_this_one_are_not_ended(tmp_path: Path) -> None:
    beside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f"session-{beside.pid}.running").write_text("2026-11-27 10:00:00\n")
        assert CrashLog(tmp_path).take_ended() == []
    finally:
        beside.kill()
        beside.wait()


def profile_and_home(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A recorded profile for the app to open, a private home, and the app's environment
    there (offscreen Qt, config and data under that home)."""
    script = write_script(tmp_path, "hello.py", "print('hello')\n")
    profile = tmp_path / "run.memsight"
    assert run_memsight([str(script)], tmp_path, out=profile).returncode == 0
    home = tmp_path / "home"
    env = child_env(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            "QT_QPA_PLATFORM": "offscreen",
        }
    )
    return profile, home, env


@pytest.mark.slow  # starts the app twice and records a run for it to open
def test_the_app_after_a_crash_says_so_at_its_next_start(tmp_path: Path) -> None:
    profile, home, env = profile_and_home(tmp_path)
    first = subprocess.Popen([*MEMSIGHT, str(profile)], env=env, stderr=subprocess.PIPE)
    wait_for_setting(first, home, str(profile.resolve()))
    first.send_signal(signal.SIGSEGV)
    assert first.wait(30) == -signal.SIGSEGV
    assert first.stderr is not None
    first.stderr.close()
    [log] = home.glob("data/**/crash.log")
    assert "Fatal Python error: Segmentation fault" in log.read_text()

    second = subprocess.Popen([*MEMSIGHT, str(profile)], env=env, stderr=subprocess.PIPE)
    try:
        # Its session marker: written once what the last session left has been told.
        marker = log.parent / f"session-{second.pid}.running"
        wait_until(marker.exists, 30, str(marker))
        wait_for_setting(second, home, str(profile.resolve()))
    finally:
        second.terminate()
        _, err = second.communicate(timeout=30)
    assert f"memsight: memsight ended unexpectedly last time (pid {first.pid}" in err.decode()
    assert str(log) in err.decode()


@pytest.mark.slow  # starts the app twice and records a run for it to open
@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGHUP])
def test_the_app_ended_by_sigterm_or_sighup_ends_as_quit_does(
    tmp_path: Path, ending: signal.Signals
) -> None:
    # `kill`, a logout, a closed terminal: the window closes as on Quit (its state saved), the
    # exit status is 0, and the next start has nothing to report.
    profile, home, env = profile_and_home(tmp_path)
    first = subprocess.Popen([*MEMSIGHT, str(profile)], env=env, stderr=subprocess.PIPE)
    wait_for_setting(first, home, str(profile.resolve()))
    first.send_signal(ending)
    _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err.decode()
    settings = (home / "config" / "memsight" / "memsight.conf").read_text()
    assert "geometry" in settings  # saved by the window's close, as on Quit
    assert not list(home.glob("data/**/*.running"))

    second = subprocess.Popen([*MEMSIGHT, str(profile)], env=env, stderr=subprocess.PIPE)
    try:
        marker = next(iter(home.glob("data/**/crash.log"))).parent / f"session-{second.pid}.running"
        wait_until(marker.exists, 30, str(marker))
    finally:
        second.terminate()
        _, err = second.communicate(timeout=30)
    assert "ended unexpectedly" not in err.decode()


@pytest.mark.slow  # starts the app on a recorded run
def test_a_sigterm_while_the_window_is_still_being_built_ends_it_as_quit_does(
    tmp_path: Path,
) -> None:
    # The session's marker is written before the window is built and the file opened: a
    # `kill` from then on ends the app as Quit does, not with Python's default, which left
    # the marker behind to be reported at the next start as a session that ended unexpectedly.
    profile, home, env = profile_and_home(tmp_path)
    first = subprocess.Popen([*MEMSIGHT, str(profile)], env=env, stderr=subprocess.PIPE)
    wait_until(lambda: bool(list(home.glob("data/**/session-*.running"))), 30, "the marker")
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err.decode()
    assert not list(home.glob("data/**/*.running"))
