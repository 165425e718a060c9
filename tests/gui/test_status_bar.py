"""The status bar's sampling figure: the samples of an ended run, the rate of a running one,
and beside either the rate asked for when the recorder fell behind it (sampling_pace)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

import memsight.app.statusbar as statusbar
from memsight.app.mainwindow import MainWindow
from memsight.app.statusbar import RunStatusBar
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.summary import sampling_behind_text, sampling_pace
from tests.factories import GiB, MiB, profile, table

HALF_A_FULL_HD_SCREEN = 960


def ram_rows(t: np.ndarray) -> dict[str, np.ndarray]:
    n = len(t)
    return {
        "t": t,
        "rss": np.full(n, 100 * MiB),
        "rss_peak": np.full(n, 100 * MiB),
        "children": np.zeros(n, dtype=np.int64),
        "available": np.full(n, 8 * GiB),
    }


def run_of(t: np.ndarray, interval_ms: float = 1.0) -> Profile:
    return profile(table("ram", t, rss=100 * MiB, rss_peak=100 * MiB), interval_ms=interval_ms)


def busy_run() -> Profile:
    """Asked for 1 ms, given one sample every 1.25 ms for 2.5 s."""
    run = run_of(0.00125 * np.arange(2000))
    run.info.end_t = 2.5
    return run


def test_an_ended_run_that_fell_behind_shows_its_rate_and_the_asked_one(qtbot: QtBot) -> None:
    bar = RunStatusBar()
    qtbot.addWidget(bar)
    bar.show_status(busy_run(), running=False)
    assert bar.rate_label.text() == "2,000 samples · 800 samples/s (asked 1000)"
    sentence = sampling_behind_text(sampling_pace(busy_run()))
    assert sentence is not None
    assert bar.rate_label.tooltip_text().endswith(f"Sampling: {sentence}")
    kept_up = run_of(0.01 * np.arange(300), interval_ms=10)
    kept_up.info.end_t = 3.0
    bar.show_status(kept_up, running=False)
    assert bar.rate_label.text() == "300 samples"
    assert bar.rate_label.note == ""


def test_a_running_figure_is_the_rate_of_the_last_second_with_the_asked_one_when_behind(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(statusbar, "monotonic", lambda: clock[0])
    bar = RunStatusBar()
    qtbot.addWidget(bar)
    run = run_of(0.001 * np.arange(2000))  # kept up for 2 s
    bar.show_status(run, running=True, elapsed=2.0)
    assert bar.rate_label.text() == ""  # counted from the first second on
    clock[0] += 1.0
    bar.show_status(run, running=True, elapsed=3.0)
    assert bar.rate_label.text() == "1000 samples/s" and bar.rate_label.note == ""
    assert run.ram is not None
    run.ram.append(ram_rows(2.0 + 0.002 * np.arange(1, 1001)))  # then one every 2 ms
    clock[0] += 0.5
    bar.show_status(run, running=True, elapsed=3.5)
    assert bar.rate_label.text() == "1000 samples/s"  # not before a second has passed
    clock[0] += 0.5
    bar.show_status(run, running=True, elapsed=4.0)
    assert bar.rate_label.text() == "500 samples/s (asked 1000)"
    assert bar.rate_label.note.startswith("Sampling: asked every 1 ms, got 500 samples/s")
    run.info.end_t = 4.001  # it ended: the figure is the whole run's
    bar.show_status(run, running=False)
    assert bar.rate_label.text() == "3,000 samples · 750 samples/s (asked 1000)"


def test_an_opened_profile_that_fell_behind_says_so_in_a_window_that_fits_half_a_screen(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    window.resize(900, 600)
    qtbot.waitUntil(lambda: window.width() == 900)
    window._show_profile(busy_run(), tmp_path / "busy.memsight")
    assert window.status.rate_label.text().endswith("800 samples/s (asked 1000)")
    assert window.minimumSizeHint().width() <= HALF_A_FULL_HD_SCREEN
    assert window.width() == 900


def test_a_new_run_shows_dashes_and_waits_until_its_first_sample(
    window: MainWindow, tmp_path: Path
) -> None:
    # The run shown before peaked at 100 MiB; the new one has no sample yet: nothing of the
    # old run stays in the status bar or in the plot's range.
    before = run_of(0.01 * np.arange(100))
    window._show_profile(before, tmp_path / "before.memsight")
    assert window.status.ram_label.text() == "RAM 100.0 MiB · peak 100.0 MiB"
    starting = profile(table("ram", []), interval_ms=10.0)
    window._show_profile(starting, tmp_path / "starting.memsight", running=True)
    assert window.status.ram_label.text() == "RAM —"
    view = window.timeline
    assert view.empty.isVisible()
    assert view.empty.textItem.toPlainText() == "Waiting for the first sample…"
    assert not view.ram_plot.getAxis("left").style["showValues"]

    assert starting.ram is not None
    starting.ram.append(ram_rows(np.array([0.01, 0.02])))
    window._on_samples()
    window._update_status()
    assert window.status.ram_label.text().startswith("RAM 100.0 MiB")
    assert not view.empty.isVisible()

    # A run that ends with no sample at all says so, not "Waiting".
    empty = profile(table("ram", []), interval_ms=10.0)
    window._show_profile(empty, tmp_path / "empty.memsight")
    assert window.status.ram_label.text() == "RAM —"
    assert view.empty.textItem.toPlainText() == "This run recorded no memory samples"


def test_the_last_field_keeps_off_the_right_edge_of_a_maximized_window(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    # Maximized, the status bar has no size grip, which otherwise keeps the text off the edge.
    window.showMaximized()
    qtbot.waitUntil(window.isMaximized)
    window._show_profile(busy_run(), tmp_path / "busy.memsight")
    label = window.status.rate_label
    qtbot.waitUntil(lambda: label.isVisible() and label.width() >= label.sizeHint().width())
    text_right = label.mapTo(window, label.contentsRect().topRight()).x()
    assert window.width() - text_right >= statusbar.RIGHT_MARGIN
