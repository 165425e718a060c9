"""Opening a large profile: its stored overview is on screen at once, and the whole run takes
its place once read behind it (app/opening.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.profiler.profile.header import FILE_HEADER
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.storage import compact_profile, load_profile
from tests.overview_files import small_limits, write_run

__all__ = ["small_limits"]  # a fixture

READ_TIMEOUT_MS = 30_000


def window_profile(window: MainWindow) -> Profile | None:
    """The window's profile, read afresh (a wait in between changes it)."""
    return window.profile


def large_profile(folder: Path, name: str = "day.memsight") -> Path:
    path = folder / name
    write_run(path)
    compact_profile(path)
    return path


def test_a_large_profile_shows_its_overview_then_the_whole_run(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, small_limits: None
) -> None:
    path = large_profile(tmp_path)
    whole = load_profile(path)
    assert whole.ram is not None

    assert window.open_profile(str(path))

    # At once: the run on the timeline, from its overview, with the whole file being read.
    assert window.reader.reading == str(path)
    shown = window.timeline.profile
    assert shown is not None and shown.ram is not None and 0 < len(shown.ram) < len(whole.ram)
    assert window.profile is None and not window.save_action.isEnabled()
    assert "Reading day.memsight" in window.status.currentMessage()
    low, high = window.timeline.x_range()
    assert low <= 0.0 and high >= whole.duration  # the whole run in view
    # The user looks closer while it reads.
    window.timeline.set_x_range(20.0, 30.0)

    qtbot.waitUntil(lambda: window.profile is not None, timeout=READ_TIMEOUT_MS)

    profile = window_profile(window)
    assert profile is not None and profile.ram is not None
    assert len(profile.ram) == len(whole.ram) and window.timeline.profile is profile
    assert not window.reader.reading and window.status.currentMessage() == ""
    assert window.timeline.x_range() == (20.0, 30.0)  # the view stays where it was moved
    item = window.timeline.curves["rss"].item
    assert len(item.xData) > 0 and float(np.max(item.xData)) > 20.0
    assert window.save_action.isEnabled()
    assert str(path.resolve()) in window.settings.recent_profiles
    qtbot.waitUntil(lambda: window.findings.final, timeout=READ_TIMEOUT_MS)


def test_another_file_opened_while_one_is_read_is_the_one_shown(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, small_limits: None
) -> None:
    first = large_profile(tmp_path, "first.memsight")
    second = tmp_path / "second.memsight"
    write_run(second, rows=3_000, seed=1)
    compact_profile(second)
    assert window.open_profile(str(first))
    pending = window.reader._pending
    assert pending is not None
    job = pending[0]

    assert window.open_profile(str(second))  # small: read at once

    job.exception()  # the first file's read, dropped, has ended
    qtbot.wait(200)  # more than the reader's polls
    profile = window.profile
    assert profile is not None and profile.ram is not None and len(profile.ram) == 3_000
    assert window.reader.reading is None
    assert str(first.resolve()) not in window.settings.recent_profiles


def test_a_file_whose_overview_reads_but_whose_rest_is_damaged_says_so(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, small_limits: None
) -> None:
    path = large_profile(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) - 100] ^= 0xFF  # inside the last events frame
    path.write_bytes(bytes(data))
    assert FILE_HEADER.unpack_from(data)[0] == b"MEMSIGHT"

    assert window.open_profile(str(path))
    assert window.timeline.profile is not None  # its overview

    qtbot.waitUntil(lambda: window.error_box is not None, timeout=READ_TIMEOUT_MS)
    box = window.error_box
    assert box is not None and "checksum mismatch" in box.text()
    assert box.text().startswith(f"{path}: corrupted")
    box.close()
    assert window.profile is None and window.timeline.profile is None
