"""The app's recording process: frames on stdout, control on stdin, survives the app."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from profiler.launch.spec import RunSpec, spec_to_json
from profiler.profile.live import LiveProfile
from profiler.profile.storage import load_profile
from tests.support import ROOT, write_script


def start_host(script: Path, out: Path) -> subprocess.Popen[bytes]:
    spec = RunSpec(target=str(script), cwd=str(script.parent))
    host = subprocess.Popen(
        [sys.executable, "-m", "profiler.recorder.host"],
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
        assert host.stdout is not None and host.stdin is not None
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
        [sys.executable, "-m", "profiler.recorder.host"],
        cwd=ROOT,
        input=spec_to_json(spec, tmp_path / "x.memsight").encode() + b"\n",
        capture_output=True,
        timeout=60,
    )
    assert host.returncode == 3
    assert host.stderr.decode().startswith("cannot start")
    assert not (tmp_path / "x.memsight").exists()
