"""Issue 14 items 3 and 8: a file cannot make the loader use memory out of proportion to its
size, every refusal is one line naming the problem, and a rule that raises is one line, not a
traceback. The CLI runs in a subprocess under an address-space cap (tests/hostile/capped.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsight.profiler.diagnosis import diagnose
from memsight.profiler.profile.storage import (
    MAX_PROFILE_FILE_BYTES,
    ProfileError,
    decode_profile,
    load_profile,
)
from tests.hostile import frames
from tests.hostile.capped import capped_memsight, capped_python
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
    from memsight.profiler.profile.storage import _FrameScan

    scan = _FrameScan(frames.small_profile())
    assert str(scan.error("f", MemoryError())).endswith("not enough memory to load this profile")


# -- item 8: a rule that raises -------------------------------------------------------------------


def test_a_table_of_the_recorder_with_a_renamed_column_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    # Before: loaded, then a 20-line traceback from the rules and a KeyError from the summary.
    path = tmp_path / "renamed.memsight"
    path.write_bytes(frames.small_profile(frames.renamed_ram_schema()))
    with pytest.raises(ProfileError, match="table 'ram' lacks its column 'rss'"):
        load_profile(path)


# A rule that raises, whatever makes it: the first rule's check replaced by one that fails.
BREAK_A_RULE = """
import sys
from memsight.profiler.diagnosis.rules import ALL_RULES
def broken(profile, config):
    raise KeyError("rss\\nsecond line")
ALL_RULES[0].check = broken
from memsight.profiler.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_rule_that_raises_is_named_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memsight.profiler.diagnosis.rules import ALL_RULES

    path = tmp_path / "p.memsight"
    path.write_bytes(frames.small_profile(rows=400))
    ran: list[str] = []
    for rule in ALL_RULES[1:]:
        check = rule.check

        def counted(
            profile: object, config: object, check: object = check, rule: object = rule
        ) -> object:
            ran.append(rule.RULE_ID)  # type: ignore[attr-defined]
            return check(profile, config)  # type: ignore[operator]

        monkeypatch.setattr(rule, "check", counted)

    def broken(profile: object, config: object) -> object:
        raise KeyError("rss\nsecond line")

    monkeypatch.setattr(ALL_RULES[0], "check", broken)
    diagnosis = diagnose(load_profile(path))
    assert diagnosis.failed == {ALL_RULES[0].RULE_ID: "KeyError: 'rss\\nsecond line'"}
    assert ran == [rule.RULE_ID for rule in ALL_RULES[1:]]


@pytest.mark.slow
def test_report_shows_a_failed_rule_in_one_line_in_text_and_json(tmp_path: Path) -> None:
    from memsight.profiler.diagnosis.rules import ALL_RULES

    path = tmp_path / "p.memsight"
    path.write_bytes(frames.small_profile(rows=400))
    rule = ALL_RULES[0].RULE_ID
    text = capped_python(BREAK_A_RULE, "report", str(path), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert text.stderr == ""  # before: the rule's traceback
    failed = [line for line in text.stdout.splitlines() if "could not run" in line]
    assert len(failed) == 1 and f"rule {rule} could not run" in failed[0]
    as_json = capped_python(BREAK_A_RULE, "report", "--json", str(path), cwd=tmp_path)
    assert as_json.returncode == 0 and as_json.stderr == ""
    assert json.loads(as_json.stdout)["failed_rules"] == {rule: "KeyError: 'rss\\nsecond line'"}
