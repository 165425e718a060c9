"""The end of the script is an event: `script_end`, sent when the main module returned,
called sys.exit or raised, once its non-daemon threads ended, before the atexit handlers and
the interpreter's teardown (which the rules must never judge as part of the run).

Each script writes time.monotonic_ns() where its own work ends, and its atexit handler or
thread writes its times too, so the mark's place is checked against the script's clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memsight.profiler.profile.model import Profile
from tests.support import run_memsight, seconds_since_t0, write_script

pytestmark = pytest.mark.slow

SCRIPT = """
import atexit, os, sys, threading, time

def note(name):
    with open(name, "w") as f:
        f.write(str(time.monotonic_ns()))

def slow_handler():  # the script's own: runs after the mark
    note("atexit_began")
    time.sleep(0.5)

atexit.register(slow_handler)
how = sys.argv[1]
if how == "thread":
    def work():
        time.sleep(0.8)
        note("thread_ended")
    threading.Thread(target=work).start()
note("main_ended")
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise ValueError("the script failed")
if how == "os_exit":
    sys.stdout.flush()
    os._exit(4)
"""


def _ends(profile: Profile) -> list[float]:
    return [e.t for e in profile.events_of("script_end")]


def _when(profile: Profile, folder: Path, name: str) -> float:
    return seconds_since_t0(profile, int((folder / name).read_text()))


@pytest.mark.parametrize(
    "how, returncode", [("return", 0), ("exit", 3), ("raise", 1), ("thread", 0)]
)
def test_the_script_end_is_marked_before_the_atexit_handlers(
    how: str, returncode: int, tmp_path: Path
) -> None:
    write_script(tmp_path, "script.py", SCRIPT)
    result = run_memsight(["script.py", how], tmp_path)
    assert result.returncode == returncode, result.stderr
    profile = result.profile()
    [end] = _ends(profile)
    mark = next(profile.events_of("script_end"))
    assert mark.get("uncaught") is (how == "raise")
    # After the script's last line (and its non-daemon thread), before its atexit handler.
    assert _when(profile, tmp_path, "main_ended") <= end
    if how == "thread":
        assert _when(profile, tmp_path, "thread_ended") <= end
    assert end <= _when(profile, tmp_path, "atexit_began")
    exit_event = next(profile.events_of("exit"))
    assert end < exit_event.t - 0.4  # the handler's half second comes after the mark
    if how == "raise":
        # The error that ended the script is reported before the mark.
        [error] = [e for e in profile.events_of("exception") if e.get("uncaught")]
        assert error.get("exc_type") == "builtins.ValueError" and error.t <= end


def test_os_exit_marks_the_end_too(tmp_path: Path) -> None:
    write_script(tmp_path, "script.py", SCRIPT)
    result = run_memsight(["script.py", "os_exit"], tmp_path)
    assert result.returncode == 4, result.stderr
    profile = result.profile()
    [end] = _ends(profile)
    assert _when(profile, tmp_path, "main_ended") <= end
    assert not (tmp_path / "atexit_began").exists()  # os._exit skips atexit, as before
