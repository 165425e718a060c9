"""`memsight run --baseline OLD.memsight`: the baseline is read before the script starts.

A baseline that cannot be compared with is a usage error (one line, exit 2) before anything
runs, never exit 3 after the whole run, the status of a real memory regression.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsight.profiler import protocol
from memsight.profiler.gates import GATE_FAILED
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import RAM_TABLE
from memsight.profiler.recorder.blocks import TableBuffer
from tests.support import one_line, run_cli

MARKS_ITS_START = "open('started', 'w').close()\n"


def _baseline(path: Path, peak: int | None) -> Path:
    """A profile whose main process peaked at `peak` bytes (None: no samples at all)."""
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": 1, "script": "t.py"}))
    if peak is not None:
        ram = TableBuffer(RAM_TABLE)
        for s in range(2):
            ram.add((1 + s * 10**9, peak, peak, 0, 1 << 30))
        writer.write(RAM_TABLE.frame())
        writer.write(ram.drain())
    writer.close()
    return path


def _not_a_profile(path: Path) -> Path:
    path.write_bytes(b"not a profile at all")
    return path


def _corrupt(path: Path) -> Path:
    whole = _baseline(path, 50 << 20).read_bytes()
    path.write_bytes(whole[:16] + bytes(b ^ 0x5A for b in whole[16:]))  # every frame broken
    return path


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_not_a_profile, "not a memsight profile"),
        (_corrupt, "base.memsight"),
        (lambda p: _baseline(p, None), "holds no memory peak to compare with"),
    ],
    ids=["not a profile", "corrupt frames", "no samples"],
)
def test_a_baseline_that_cannot_be_compared_with_stops_the_run_before_the_script_starts(
    tmp_path: Path, make: object, problem: str
) -> None:
    assert callable(make)
    make(tmp_path / "base.memsight")
    (tmp_path / "t.py").write_text(MARKS_ITS_START)
    done = run_cli("run", "--baseline", "base.memsight", "t.py", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) and done.stderr.startswith("memsight: error: --baseline: ")
    assert problem in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "started").exists()  # the script never ran
    assert sorted(os.listdir(tmp_path)) == ["base.memsight", "t.py"]  # and no profile


def test_the_baseline_read_before_the_run_is_the_one_compared_after_it(tmp_path: Path) -> None:
    # 1 MiB: any Python process peaks far above it. The script deletes the baseline, so the
    # gate can only have compared with what was read before the script started.
    _baseline(tmp_path / "base.memsight", 1 << 20)
    (tmp_path / "t.py").write_text("import os\nos.remove('base.memsight')\n" + MARKS_ITS_START)
    done = run_cli(
        "run", "-q", "-o", "new.memsight", "--baseline", "base.memsight", "t.py", cwd=tmp_path
    )
    assert done.returncode == GATE_FAILED, done.stderr
    assert (tmp_path / "started").exists()
    failed = [line for line in done.stderr.splitlines() if line.startswith("memsight: check")]
    assert failed and all(line.startswith("memsight: check failed: ") for line in failed)
    assert any("peak RAM, main process grew" in line for line in failed), failed


def test_a_run_below_its_baseline_passes(tmp_path: Path) -> None:
    _baseline(tmp_path / "base.memsight", 1 << 40)  # 1 TiB: no script here comes near it
    (tmp_path / "t.py").write_text(MARKS_ITS_START)
    done = run_cli(
        "run", "-q", "-o", "new.memsight", "--baseline", "base.memsight", "t.py", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "started").exists() and "check failed" not in done.stderr
