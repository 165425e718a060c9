"""A damaged profile opened in the app says so: the status bar says how much of the file was
read, and the Findings panel's verdict is about that part, never "No problems found" alone."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from tests.damaged_files import record


def test_a_finished_run_cut_in_half_opens_saying_it_is_damaged(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    data = record(tmp_path / "whole.memsight").read_bytes()
    cut = tmp_path / "half.memsight"
    cut.write_bytes(data[: len(data) // 2])
    assert window.open_profile(str(cut))
    qtbot.waitUntil(lambda: not window.diagnosis.busy, timeout=30_000)
    read = window.profile.damaged.read_bytes if window.profile and window.profile.damaged else 0
    assert window.status.state_label.text() == (
        f"Damaged file: read {read:,} of {len(data) // 2:,} bytes"
    )
    header = window.findings.header.text()
    assert "damaged file" in header.lower() and header != "No problems found"
    assert "This file is damaged" in window.findings.details.toPlainText()


def test_a_whole_file_opens_as_before(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    path = record(tmp_path / "whole.memsight")
    assert window.open_profile(str(path))
    qtbot.waitUntil(lambda: not window.diagnosis.busy, timeout=30_000)
    assert window.status.state_label.text() == "Ended: exit code 0"
    assert "damaged" not in window.findings.header.text()


def test_a_damaged_file_with_no_sample_read_says_nothing_was_judged(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    # A compacted profile keeps its samples at the end: cut early, it keeps the run's metadata
    # and no sample, and "No problems found" would read as a verdict on a run not seen at all.
    data = record(tmp_path / "whole.memsight").read_bytes()
    cut = tmp_path / "start.memsight"
    cut.write_bytes(data[: len(data) // 10])
    assert window.open_profile(str(cut))
    qtbot.waitUntil(lambda: not window.diagnosis.busy, timeout=30_000)
    assert window.profile is not None and window.profile.sample_count == 0
    header = window.findings.header.text()
    assert header == "Damaged file: nothing judged, no memory sample could be read"
    details = window.findings.details.toPlainText()
    assert "Nothing judged" in details and "No problems found" not in details
    assert f"of {len(data) // 10:,} bytes: 0 samples over" in details
    assert window.status.ram_label.text() == "RAM —"
    empty = window.timeline.empty
    assert empty.isVisible()
    assert empty.textItem.toPlainText() == "No memory sample could be read from this damaged file"
