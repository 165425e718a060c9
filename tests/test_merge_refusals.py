"""`memsight merge` refuses inputs that are not the nodes of one job, in one line, exit 2.

The same recording twice (the same file, a copy, a job with one of its own nodes), clocks
further apart than MAX_CLOCK_SPREAD (unless --force) and times that no profile's clock can hold
(an absurd monotonic start): each names the file, leaves no output, prints no traceback.
"""

from __future__ import annotations

import os
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from memsight.profiler.profile.storage import load_profile
from tests.node_files import MS, MiB, node, two_nodes
from tests.support import Completed, one_line, run_cli

START = "2026-11-24T10:00:00.000+00:00"


def _refused(done: Completed, *words: str) -> str:
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) and done.stderr.startswith("memsight: error: "), done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return done.stderr


def test_the_same_file_twice_is_refused_naming_it(tmp_path: Path) -> None:
    a, b = two_nodes(tmp_path)
    before = sorted(os.listdir(tmp_path))
    _refused(run_cli("merge", a, b, a, "-o", "job.memsight", cwd=tmp_path), "is given twice")
    # however spelled: through a link to its folder
    (tmp_path / "same").symlink_to(tmp_path)
    done = run_cli(
        "merge", a, tmp_path / "same" / "b.memsight", b, "-o", "job.memsight", cwd=tmp_path
    )
    _refused(done, "b.memsight is the same file as")
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "same"])


def test_a_copy_of_a_recording_is_the_same_recording(tmp_path: Path) -> None:
    a, b = two_nodes(tmp_path)
    shutil.copy(b, tmp_path / "copy.memsight")
    done = run_cli("merge", a, b, "copy.memsight", "-o", "job.memsight", cwd=tmp_path)
    _refused(done, "copy.memsight is the same recording as", "b.memsight", "pid 10", "node-b")
    assert not (tmp_path / "job.memsight").exists()


def test_a_job_merged_with_one_of_its_own_nodes_is_refused(tmp_path: Path) -> None:
    a, b = two_nodes(tmp_path)
    assert run_cli("merge", a, b, "-o", "ab.memsight", cwd=tmp_path).returncode == 0
    done = run_cli("merge", "ab.memsight", a, "-o", "job.memsight", "--force", cwd=tmp_path)
    _refused(done, "a.memsight is the same recording as ab.memsight")
    assert not (tmp_path / "job.memsight").exists()


@pytest.mark.parametrize(
    ("start", "said"),
    [
        ("1970-11-24T10:00:00.000+00:00", "56 years (20,454 days) before"),
        ("2299-11-24T10:00:00.000+00:00", "273 years (99,711 days) after"),
        ("2026-12-01T10:00:01.000+00:00", "7.0 days after"),
    ],
)
def test_clocks_further_apart_than_a_job_are_refused_unless_forced(
    tmp_path: Path, start: str, said: str
) -> None:
    a = node(tmp_path / "a.memsight", "node-a", START, 5_000 * MS, 0, 300 * MiB)
    b = node(tmp_path / "b.memsight", "node-b", start, 90_000 * MS, 1, 700 * MiB)
    done = run_cli("merge", a, b, "-o", "job.memsight", cwd=tmp_path)
    _refused(done, "b.memsight started", said, "7 days", "--force")
    assert not (tmp_path / "job.memsight").exists()
    forced = run_cli("merge", a, b, "-o", "job.memsight", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    # forced, the other node's times are where its wall clock puts them
    apart = (datetime.fromisoformat(start) - datetime.fromisoformat(START)).total_seconds()
    rank1 = load_profile(tmp_path / "job.memsight").subprocesses[3]
    assert rank1.ram is not None
    assert list(rank1.ram.t) == pytest.approx([apart + s for s in range(3)])


def test_a_week_apart_is_still_one_job(tmp_path: Path) -> None:
    a = node(tmp_path / "a.memsight", "node-a", START, 5_000 * MS, 0, 300 * MiB)
    b = node(tmp_path / "b.memsight", "node-b", "2026-12-01T10:00:00.000+00:00", 7 * MS, 1, MiB)
    done = run_cli("merge", a, b, "-o", "job.memsight", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rank1 = load_profile(tmp_path / "job.memsight").subprocesses[3]
    assert rank1.ram is not None
    assert list(rank1.ram.t) == pytest.approx([7 * 86_400.0 + s for s in range(3)])


@pytest.mark.parametrize(
    ("t0_a", "t0_b", "start_b"),
    [
        # monotonic starts 2**63 ns apart: the shift itself is beyond int64
        (2**62, -(2**62), START),
        # each clock fits, but 273 years on from an absurd monotonic start leave int64
        (5 * 10**18, 5 * 10**18, "2299-11-24T10:00:00.000+00:00"),
        # a start time in year 1: 2025 years before, beyond any profile's clock
        (5_000 * MS, 5_000 * MS, "0001-01-01T00:00:00.000+00:00"),
    ],
)
def test_times_no_profile_clock_can_hold_are_refused_even_forced(
    tmp_path: Path, t0_a: int, t0_b: int, start_b: str
) -> None:
    a = node(tmp_path / "a.memsight", "node-a", START, t0_a, 0, 300 * MiB)
    b = node(tmp_path / "b.memsight", "node-b", start_b, t0_b, 1, 700 * MiB)
    done = run_cli("merge", a, b, "-o", "job.memsight", "--force", cwd=tmp_path)
    _refused(done, "b.memsight: its times cannot be put on the job's clock", "292 years")
    assert sorted(os.listdir(tmp_path)) == ["a.memsight", "b.memsight"]
