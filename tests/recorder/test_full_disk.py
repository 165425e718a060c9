"""A profile written to a filesystem that fills up (issue 14, item 7).

A real small filesystem (tmpfs with size=, mounted here; CI runs as root) is filled with a
file; space comes back when that file is deleted.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsight.profiler import protocol
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.profile.writer import ProfileWriter
from tests.support import memsight_command, wait_until, write_script

RUN_FRAME = protocol.encode_json_frame(protocol.RUN, {"script": "disk.py", "t0_ns": 1000})


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted after the test."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", os.fspath(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.decode()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", os.fspath(folder)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of the filesystem; delete the returned file to give them back."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def event_frame(i: int) -> bytes:
    return protocol.encode_json_frame(protocol.EVENTS, [{"t": 2000 + i, "type": "mark", "i": i}])


def test_a_failed_write_keeps_the_file_loadable_and_resumes_when_space_comes_back(
    small_fs: Path,
) -> None:
    warnings: list[str] = []
    writer = ProfileWriter(small_fs / "p.memsight", warn=warnings.append)
    writer.write(RUN_FRAME)
    for i in range(10):
        writer.write(event_frame(i))
    writer.flush()
    filler = fill(small_fs)
    for i in range(10, 400):  # far more than the few bytes left
        writer.write(event_frame(i))
        writer.flush()
    assert writer.failing and len(warnings) == 1 and "cannot write" in warnings[0]
    # Up to the gap: the file ends at a whole frame.
    marks = [e for e in load_profile(small_fs / "p.memsight").events if e.type == "mark"]
    assert 10 <= len(marks) < 400
    filler.unlink()
    writer.write(event_frame(400))
    writer.close()
    assert "writing the profile again" in warnings[-1]
    marks = [e for e in load_profile(small_fs / "p.memsight").events if e.type == "mark"]
    assert len(marks) == 401


def test_past_the_memory_bound_the_file_ends_at_the_gap(small_fs: Path) -> None:
    warnings: list[str] = []
    writer = ProfileWriter(small_fs / "p.memsight", warn=warnings.append, max_pending_bytes=4096)
    writer.write(RUN_FRAME)
    writer.flush()
    filler = fill(small_fs)
    for i in range(200):
        writer.write(event_frame(i))
        writer.flush()
    assert writer.dropped and "gave up" in warnings[-1]
    filler.unlink()
    writer.write(event_frame(999))
    writer.close()
    profile = load_profile(small_fs / "p.memsight")
    assert all(e.data.get("i") != 999 for e in profile.events if e.type == "mark")


@pytest.mark.slow
def test_run_on_a_full_disk_warns_and_exits_with_the_targets_code(
    small_fs: Path, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "t.py", "print('hello')\nraise SystemExit(3)\n")
    fill(small_fs)
    done = subprocess.run(
        memsight_command("run", "-q", "-o", small_fs / "p.memsight", script),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert b"hello" in done.stdout
    assert b"cannot write the profile" in done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.slow
def test_space_that_runs_out_and_comes_back_leaves_a_whole_profile(
    small_fs: Path, tmp_path: Path
) -> None:
    # The script waits for the disk to be full and to be freed again, printing all along.
    script = write_script(
        tmp_path,
        "t.py",
        """\
        import os, sys, time
        go = sys.argv[1]
        i = 0
        end = time.monotonic() + 30
        while not os.path.exists(go) and time.monotonic() < end:
            print("line", i, "x" * 200, flush=True)
            i += 1
            time.sleep(0.01)
        print("after the gap", flush=True)
        """,
    )
    go, log = tmp_path / "go", tmp_path / "stderr"
    out = small_fs / "p.memsight"
    with open(log, "wb") as stderr, open(tmp_path / "stdout", "wb") as stdout:
        proc = subprocess.Popen(
            memsight_command("run", "-q", "-o", out, script, go),
            cwd=tmp_path,
            stdout=stdout,
            stderr=stderr,
        )
        try:
            wait_until(lambda: out.exists() and out.stat().st_size > 0, 30, "the profile")
            filler = fill(small_fs)
            wait_until(lambda: b"cannot write" in log.read_bytes(), 30, "the warning")
            filler.unlink()
            wait_until(lambda: b"writing the profile again" in log.read_bytes(), 30, "resume")
            go.touch()
            assert proc.wait(timeout=60) == 0
        finally:
            proc.kill()
            proc.wait()
    profile = load_profile(out)
    text = "".join(chunk.text for chunk in profile.output)
    assert "after the gap" in text and "line 0 " in text
    assert {"exit", "recording_end"} <= {e.type for e in profile.events}
