"""Comparing runs in the app: another run overlaid on the plots with the numbers of
`memsight compare`, computed off the GUI thread, and, after a re-run of the same script, one
click to compare with the run before."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.profiler.diagnosis import Diagnosis
from memsight.profiler.profile.model import Profile
from tests.factories import MiB, profile, ram, steps
from tests.gui.support import RUN_TIMEOUT_MS, run_to_end


def training(per_step: float) -> Profile:
    levels = 500 * MiB + per_step * np.arange(100)
    return profile(
        ram(12.0, lambda t: (500 * MiB + per_step * 10 * t).astype(np.int64)),
        steps(levels, start=1.0, dt=0.1),
    )


def test_another_run_is_overlaid_with_the_numbers_and_can_be_put_away(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
) -> None:
    window._show_profile(training(0.0), tmp_path / "after.memsight")
    assert window.compare_with(training(4 * MiB), tmp_path / "before.memsight")
    compared(qtbot, window)
    labels = [label.text for _sample, label in window.timeline.ram_plot.legend.items]
    assert "before: process tree" in labels
    assert window.compare_dock.isVisible() or not window.isVisible()
    text = window.compare.text.toPlainText()
    assert "peak RAM, process tree" in text and "*" in text
    assert "Resolved" in text and "growth-per-iteration" in text
    assert "before.memsight" in window.compare.title.text()
    window.stop_comparing()
    labels = [label.text for _sample, label in window.timeline.ram_plot.legend.items]
    assert "before: process tree" not in labels
    assert window.compare.comparison is None


def compared(qtbot: QtBot, window: MainWindow) -> None:
    """Wait for the comparison the window computes in the background."""
    qtbot.waitUntil(lambda: not window.comparing.busy, timeout=RUN_TIMEOUT_MS)
    assert window.compare.comparison is not None


def test_a_shown_run_of_a_new_profile_drops_the_comparison(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    window._show_profile(training(0.0), tmp_path / "a.memsight")
    window.compare_with(training(0.0), tmp_path / "b.memsight")
    compared(qtbot, window)
    window._show_profile(training(0.0), tmp_path / "c.memsight")
    assert window.timeline.other is None and not window.timeline.other_curves


def test_a_comparison_on_its_way_is_dropped_with_the_run_it_was_for(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    window._show_profile(training(0.0), tmp_path / "a.memsight")
    window.compare_with(training(4 * MiB), tmp_path / "b.memsight")
    window._show_profile(training(0.0), tmp_path / "c.memsight")  # before it came back
    assert not window.comparing.busy
    # Once the worker has finished that comparison (one worker: a later job ends after it),
    # what it brings is not shown.
    window.comparing._executor.submit(lambda: None).result(timeout=RUN_TIMEOUT_MS / 1000)
    window.comparing._poll()
    assert window.compare.comparison is None and window.timeline.other is None


def test_the_gui_thread_diagnoses_nothing_and_the_shown_runs_findings_are_reused(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Comparing diagnoses both runs (1.6 s each on a 1 M-sample profile): never on the GUI
    # thread, and the shown run not again when the Findings panel has its final findings.
    from memsight.profiler import comparison
    from memsight.profiler.diagnosis import diagnose as real  # what profiler.comparison calls

    shown = training(0.0)
    window._show_profile(shown, tmp_path / "after.memsight")
    window._diagnose(final=True)
    qtbot.waitUntil(lambda: window.findings.profile is shown and window.findings.final)
    calls: list[tuple[Profile, bool]] = []

    def diagnose(profile: Profile) -> Diagnosis:
        calls.append((profile, threading.current_thread() is threading.main_thread()))
        return real(profile)

    monkeypatch.setattr(comparison, "diagnose", diagnose)
    other = training(4 * MiB)
    assert window.compare_with(other, tmp_path / "before.memsight")
    assert window.comparing.busy  # the call returned before the comparison was made
    compared(qtbot, window)
    assert calls == [(other, False)]
    assert window.compare.comparison is not None
    assert [f.rule for f in window.compare.comparison.findings.resolved] == ["growth-per-iteration"]


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_a_rerun_of_the_same_script_offers_the_previous_run_in_one_click(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nkept = []\nfor i in range(40):\n    kept.append(torch.ones(256, 1024))\n"
    )
    run_to_end(qtbot, window, script)
    assert window.status.compare_previous_button.isHidden()  # nothing before the first run
    script.write_text("import torch\nfor i in range(40):\n    x = torch.ones(256, 1024)\n")
    run_to_end(qtbot, window, script)
    assert not window.status.compare_previous_button.isHidden()
    assert window.compare_previous_action.isEnabled()
    window.status.compare_previous_button.click()
    compared(qtbot, window)
    assert window.compare.comparison is not None
    assert window.compare.comparison.same_script
    assert window.status.compare_previous_button.isHidden()


@pytest.mark.slow  # over 2 s on a quiet 2-core machine
def test_a_profile_dropped_with_shift_is_compared_not_opened(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
    from PySide6.QtGui import QDropEvent

    from memsight.profiler.profile.storage import load_profile
    from tests.support import run_memsight, write_script

    write_script(tmp_path, "t.py", "import torch\nx = torch.ones(1024, 1024)\n")
    assert run_memsight(["t.py"], tmp_path, out=tmp_path / "other.memsight").returncode == 0
    shown = load_profile(tmp_path / "other.memsight")
    window._show_profile(shown, tmp_path / "shown.memsight")
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(tmp_path / "other.memsight"))])

    def drop(modifiers: Qt.KeyboardModifier) -> None:
        event = QDropEvent(
            QPointF(10, 10), Qt.DropAction.CopyAction, data, Qt.MouseButton.NoButton, modifiers
        )
        window.dropEvent(event)

    drop(Qt.KeyboardModifier.ShiftModifier)
    compared(qtbot, window)
    assert window.profile is shown and window.compare.comparison is not None
    drop(Qt.KeyboardModifier.NoModifier)  # a plain drop opens it instead
    assert window.profile is not shown and window.compare.comparison is None
