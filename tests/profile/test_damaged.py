"""A damaged profile says so: in `memsight report` (text, --json's "damaged", --html) with how
much of it was read, and its verdict is about that part, never "no problems" for a whole run.
Damaged is a file cut inside a frame, or a finished (compacted) file that lost its end; a file
whose recorder was killed between two writes is an unfinished run, as before, not damaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsight.profiler.profile.header import FILE_HEADER, FLAG_WHOLE
from memsight.profiler.profile.storage import compact_profile, load_profile
from tests.damaged_files import ROWS, frame_starts, record
from tests.support import run_cli


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    return record(tmp_path / "whole.memsight")


def test_a_finished_run_cut_in_half_says_it_is_damaged_in_text_json_and_html(
    tmp_path: Path, finished: Path
) -> None:
    data = finished.read_bytes()
    cut = tmp_path / "half.memsight"
    cut.write_bytes(data[: len(data) // 2])
    # The text report: damaged, how much was read, and a verdict on that part only
    text = run_cli("report", cut, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "DAMAGED FILE: the file ends inside a frame" in text.stdout
    assert f"of {len(data) // 2:,} bytes" in text.stdout
    assert "none of the rules matched this run" not in text.stdout
    # Cut in half, a compacted file keeps no sample (they are at its end): no verdict at all.
    assert "Nothing judged: no memory sample could be read from the file." in text.stdout
    assert "No problems found" not in text.stdout
    # --json: a "damaged" object; a whole file has "damaged": null
    as_json = run_cli("report", "--json", cut, cwd=tmp_path)
    damaged = json.loads(as_json.stdout)["damaged"]
    assert damaged["file_bytes"] == len(data) // 2
    assert 0 < damaged["read_bytes"] < damaged["file_bytes"]
    assert "inside a frame" in damaged["reason"]
    assert {"samples", "duration_s"} <= set(damaged)
    whole = run_cli("report", "--json", finished, cwd=tmp_path)
    assert json.loads(whole.stdout)["damaged"] is None
    # --html: the page says so
    page = tmp_path / "half.html"
    assert run_cli("report", cut, "--html", page, cwd=tmp_path).returncode == 0
    assert "damaged file: the file ends inside a frame" in page.read_text()
    assert "<strong>Nothing judged.</strong>" in page.read_text()
    assert "No problems found" not in page.read_text()


def test_a_finished_run_missing_its_last_frame_is_judged_on_what_was_read(
    tmp_path: Path, finished: Path
) -> None:
    data = finished.read_bytes()
    assert FILE_HEADER.unpack_from(data)[2] & FLAG_WHOLE
    cut = tmp_path / "no-end.memsight"
    cut.write_bytes(data[: frame_starts(data)[-1]])  # at a frame boundary: no recording_end
    profile = load_profile(cut)
    assert profile.damaged is not None and "end is missing" in profile.damaged.reason
    end = frame_starts(data)[-1]
    assert profile.damaged.read_bytes == profile.damaged.file_bytes == end
    assert profile.ram is not None and len(profile.ram) == ROWS  # every sample read is shown
    done = run_cli("report", "--json", cut, cwd=tmp_path)
    damaged = json.loads(done.stdout)["damaged"]
    assert damaged["samples"] == ROWS and damaged["duration_s"] == pytest.approx(19.99, abs=0.02)


def test_a_run_whose_recorder_was_killed_is_unfinished_not_damaged(tmp_path: Path) -> None:
    # Written as the recorder writes, never compacted, no recording_end: the kill's file
    path = record(tmp_path / "killed.memsight", finished=False)
    profile = load_profile(path)
    assert profile.damaged is None and not profile.complete
    assert "the recording did not finish normally; data ends at the last write" in profile.warnings
    done = run_cli("report", "--json", path, cwd=tmp_path)
    assert json.loads(done.stdout)["damaged"] is None


def test_compaction_marks_a_file_whole_only_when_its_recording_ended(tmp_path: Path) -> None:
    unfinished = record(tmp_path / "unfinished.memsight", finished=False)
    compact_profile(unfinished)  # as after a failed write: the file ends at the gap
    assert not FILE_HEADER.unpack_from(unfinished.read_bytes())[2] & FLAG_WHOLE
    assert load_profile(unfinished).damaged is None
    finished = record(tmp_path / "finished.memsight")
    assert FILE_HEADER.unpack_from(finished.read_bytes())[2] & FLAG_WHOLE
    assert load_profile(finished).damaged is None
