"""Issue 14 items 3 and 8: a file cannot make the loader use memory out of proportion to its
size, every refusal is one line naming the problem, and a rule that raises is one line, not a
traceback. The CLI runs in a subprocess under an address-space cap (tests/hostile/capped.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from profiler.diagnosis import diagnose
from profiler.profile.storage import MAX_PROFILE_FILE_BYTES, ProfileError, decode_profile
from tests.hostile import frames
from tests.hostile.capped import capped_memsight
from tests.support import one_line


def single_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    assert one_line(stderr), stderr
    return stderr


@pytest.mark.slow
def test_a_compression_bomb_is_refused_with_one_line_under_a_memory_cap(tmp_path: Path) -> None:
    # 4 GiB of output in a file of about 4 MiB: every frame within the per-frame limit.
    path = tmp_path / "bomb.memsight"
    path.write_bytes(frames.bomb_profile(4 << 30))
    assert path.stat().st_size < 8 << 20
    result = capped_memsight("report", path, cwd=tmp_path)
    assert result.returncode == 1
    line = single_error_line(result.stderr)
    assert "inflate" in line and "compression bomb" in line


def test_a_bomb_is_stopped_before_it_is_inflated() -> None:
    with pytest.raises(ProfileError, match="compression bomb"):
        decode_profile(frames.bomb_profile(1 << 30), "bomb.memsight")


def test_a_sparse_file_far_larger_than_any_recording_is_refused_up_front(tmp_path: Path) -> None:
    path = tmp_path / "sparse.memsight"
    with open(path, "wb") as f:
        f.write(frames.small_profile())
        f.truncate(10 << 30)  # 10 GiB, almost all of it a hole
    result = capped_memsight("report", path, cwd=tmp_path)
    assert result.returncode == 1
    line = single_error_line(result.stderr)
    assert "too large" in line and str(MAX_PROFILE_FILE_BYTES >> 30) in line


def test_an_error_under_memory_pressure_names_the_problem() -> None:
    # A MemoryError has no message of its own: the one line must still say what went wrong.
    from profiler.profile.storage import _FrameScan

    scan = _FrameScan(frames.small_profile())
    assert str(scan.error("f", MemoryError())).endswith("not enough memory to load this profile")


# -- item 8: a rule that raises -------------------------------------------------------------------


def renamed_column_profile(tmp_path: Path) -> Path:
    path = tmp_path / "renamed.memsight"
    path.write_bytes(frames.small_profile(frames.renamed_ram_schema(), rows=400))
    return path


def test_a_rule_that_raises_is_named_and_the_others_still_run(tmp_path: Path) -> None:
    from profiler.profile.storage import load_profile

    diagnosis = diagnose(load_profile(renamed_column_profile(tmp_path)))
    assert diagnosis.failed, "the renamed column should make at least one rule fail"
    for rule, error in diagnosis.failed.items():
        assert "\n" not in error and error, rule


@pytest.mark.slow
def test_report_shows_a_failed_rule_in_one_line_in_text_and_json(tmp_path: Path) -> None:
    path = renamed_column_profile(tmp_path)
    text = capped_memsight("report", path, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "Traceback" not in text.stderr + text.stdout
    assert text.stderr == ""
    failed = [line for line in text.stdout.splitlines() if "could not run" in line]
    assert failed and all("rule " in line for line in failed)
    as_json = capped_memsight("report", "--json", path, cwd=tmp_path)
    assert as_json.returncode == 0 and as_json.stderr == ""
    data = json.loads(as_json.stdout)
    assert data["failed_rules"] and all(isinstance(v, str) for v in data["failed_rules"].values())
    assert len(failed) == len(data["failed_rules"])
    assert os.path.exists(path)
