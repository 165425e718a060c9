"""The app's recording process: frames on stdout, control on stdin, survives the app."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

from memsight.profiler.launch.spec import RunSpec, spec_to_json
from memsight.profiler.profile.live import LiveProfile
from memsight.profiler.profile.storage import load_profile
from tests.processes import kill_quietly, wait_gone
from tests.support import ROOT, write_script


def start_host(script: Path, out: Path) -> subprocess.Popen[bytes]:
    spec = RunSpec(target=str(script), cwd=str(script.parent))
    host = subprocess.Popen(
        [sys.executable, "-m", "memsight.profiler.recorder.host"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert host.stdin is not None
    host.stdin.write(spec_to_json(spec, out).encode() + b"\n")
    host.stdin.flush()
    return host


def test_the_frames_on_stdout_decode_to_the_profile_in_the_file(tmp_path: Path) -> None:
    script = write_script(tmp_path, "t.py", "print('hello'); b = bytearray(20 * 2**20)\n")
    with start_host(script, tmp_path / "t.memsight") as host:  # its pipes closed at the end
        assert host.stdout is not None
        stdout = host.stdout.read()  # stdin stays open, as the app keeps it: closing it means stop
        host.wait(timeout=60)
        live = LiveProfile()
        live.put(stdout)
        live.drain()
        saved = load_profile(tmp_path / "t.memsight")
        assert host.returncode == 0
        assert live.profile.complete and saved.complete
        assert live.profile.sample_count == saved.sample_count > 0
        assert live.profile.output_text() == saved.output_text() == "hello\n"


def test_when_the_app_goes_away_the_run_is_stopped_and_the_file_finished(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, "long.py", "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
    )
    with start_host(script, tmp_path / "long.memsight") as host:  # its pipes closed at the end
        assert isinstance(host.stdout, io.BufferedReader) and host.stdin is not None
        # Wait until the target has started (its output comes through as a frame).
        seen = b""
        while b"up" not in seen:
            chunk = host.stdout.read1(65536)
            assert chunk, "the recording ended early"
            seen += chunk
        host.stdin.close()  # what the OS does when the app is killed
        host.stdout.read()
        assert host.wait(timeout=60) == 0
        profile = load_profile(tmp_path / "long.memsight")
        assert profile.complete
        assert profile.info.signal in (signal.SIGTERM, signal.SIGKILL)


def test_a_target_that_cannot_start_is_reported_on_stderr(tmp_path: Path) -> None:
    spec = RunSpec(target="t.py", cwd=str(tmp_path), python=str(tmp_path / "missing-python"))
    host = subprocess.run(
        [sys.executable, "-m", "memsight.profiler.recorder.host"],
        cwd=ROOT,
        input=spec_to_json(spec, tmp_path / "x.memsight").encode() + b"\n",
        capture_output=True,
        timeout=60,
    )
    assert host.returncode == 3
    assert host.stderr.decode().startswith("cannot start")
    assert not (tmp_path / "x.memsight").exists()


# An app that starts a recording process and dies at once, before that process has taken a
# step, its end of the control pipe held open by a child of its own (as a child that inherited
# the descriptor would hold it): no end of input tells the recording process the app is gone.
APP_DYING_AT_ONCE = """\
import os, subprocess, sys
from memsight.profiler.launch.runtime import recorder_host_command
from memsight.profiler.launch.spec import RunSpec, spec_to_json

script, out = sys.argv[1], sys.argv[2]
spec = RunSpec(target=script, cwd=os.path.dirname(script))
control, request = os.pipe()
host = subprocess.Popen(recorder_host_command(), stdin=control, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
os.write(request, spec_to_json(spec, out).encode() + b"\\n")
holder = subprocess.Popen(["sleep", "300"], pass_fds=(request,), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
print(host.pid, holder.pid, flush=True)
os._exit(0)
"""


def test_the_recording_process_of_an_app_that_died_before_it_started_ends_too(
    tmp_path: Path,
) -> None:
    target = write_script(
        tmp_path,
        "long.py",
        "import os, sys, time\nopen(sys.argv[0] + '.pid', 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\n",
    )
    app = write_script(tmp_path, "app.py", APP_DYING_AT_ONCE)
    started = subprocess.run(
        [sys.executable, str(app), str(target), str(tmp_path / "long.memsight")],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    host, holder = map(int, started.stdout.split())
    pid_file = Path(str(target) + ".pid")
    try:
        wait_gone([host], timeout=30)
        if pid_file.exists():  # the target had started: it ended with the recording
            wait_gone([int(pid_file.read_text())], timeout=10)
    finally:
        kill_quietly(host)
        kill_quietly(holder)
        if pid_file.exists():
            kill_quietly(int(pid_file.read_text()))


def test_control_lines_feed_the_targets_stdin_and_end_it(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, "echo.py", "import sys\nprint(repr(sys.stdin.read()), flush=True)\n"
    )
    with start_host(script, tmp_path / "echo.memsight") as host:
        assert host.stdin is not None and host.stdout is not None
        host.stdin.write(b'stdin "one\\n"\nstdin "two \\u00e9\\n"\neof\n')
        host.stdin.flush()
        host.stdout.read()
        assert host.wait(timeout=60) == 0
    profile = load_profile(tmp_path / "echo.memsight")
    assert profile.output_text() == "'one\\ntwo é\\n'\n"
