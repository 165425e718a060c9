"""The guided panel: findings from a real run, evidence on the timeline, fixes to copy."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from memsight.app.findings import finding_html, no_problems_html
from memsight.app.mainwindow import MainWindow
from memsight.profiler.diagnosis import Diagnosis, Evidence, Finding, get_fix
from memsight.profiler.profile.model import Profile
from tests.factories import sample_profile
from tests.gui.support import NO_ZERO_GRAD, run_to_end
from tests.support import write_script


@pytest.mark.slow  # a PyTorch run
def test_a_finding_from_a_run_is_listed_highlighted_and_its_fix_copyable(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    # The window active, as a user's is: the console's input line has the keyboard during the
    # run, and its end must not hand it to the Findings list (whose focus selects a finding).
    qtbot.waitActive(window)
    run_to_end(qtbot, window, write_script(tmp_path, "nozero.py", NO_ZERO_GRAD))
    panel = window.findings
    assert panel.final and panel.list.count() == 1
    selected_at_the_end = panel.selected  # a local: mypy narrows it, not panel.selected
    assert selected_at_the_end is None
    assert "1 warning" in panel.header.text()
    overview = panel.details.toPlainText()  # nothing selected yet: what was found, in short
    assert panel.diagnosis.findings[0].evidence.text in overview and "Select a finding" in overview
    panel.list.setCurrentRow(0)
    finding = panel.selected
    assert finding is not None and finding.rule == "missing-zero-grad"
    shown = panel.details.toPlainText()
    assert finding.evidence.text in shown and "Copy this snippet" in shown

    regions = window.timeline._highlights
    assert len(regions) == 3  # RAM, GPU and the event lane
    low, high = regions[0][1].getRegion()
    assert (low, high) == (finding.evidence.start_s, finding.evidence.end_s)
    view_low, view_high = window.timeline.lane.getViewBox().viewRange()[0]
    assert view_low <= low and high <= view_high

    with qtbot.waitSignal(panel.message) as copied:
        panel.details.anchorClicked.emit(QUrl("copy:0"))
    assert QGuiApplication.clipboard().text().strip() == get_fix(finding.fixes[0]).after.strip()
    assert copied.args[0].startswith("Copied the snippet")  # and the status bar says so
    # The snippet's lines are never wrapped back to column 0: the panel scrolls sideways
    assert "<pre style='white-space:pre'>" in finding_html(finding)

    panel.list.setCurrentRow(-1)
    assert window.timeline._highlights == []


def test_a_clean_run_says_no_problems_with_its_key_numbers(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "clean.py", "data = bytearray(20 * 2**20)\nprint('ok')\n")
    run_to_end(qtbot, window, script)
    panel = window.findings
    assert panel.list.count() == 0
    assert panel.header.text() == "No problems found"
    shown = panel.details.toPlainText()
    assert "No problems found" in shown and "Peak RAM, main process" in shown


def test_a_run_still_going_says_up_to_when_it_was_judged() -> None:
    # The status bar runs ahead of the last look the rules took: the panel names its time
    # for what it is, never as the run's duration.
    profile = sample_profile()
    going = no_problems_html(profile, final=False)
    assert "Judged up to" in going and "Duration" not in going
    assert "Duration" in no_problems_html(profile, final=True)


def test_text_from_the_target_is_shown_as_text_never_as_markup(window: MainWindow) -> None:
    payload = "<img src=x onerror=alert(1)><b>bold</b>"
    finding = Finding(
        "out-of-memory",
        "critical",
        f"The run ran out of RAM in {payload}",
        "explanation",
        Evidence(f"{payload}: the allocator could not provide 1 GiB", 0.0, 1.0, "ram"),
        ("smaller-batch",),
    )
    assert window.profile is None
    from memsight.profiler.profile.model import Profile

    window.findings.set_diagnosis(Profile(), Diagnosis([finding]), final=True)
    window.findings.list.setCurrentRow(0)
    html = window.findings.details.toHtml()
    assert "<b>bold</b>" not in html and "<img" not in html
    assert payload in window.findings.details.toPlainText()


@pytest.mark.slow  # a PyTorch run
def test_findings_appear_while_the_run_is_still_going(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path,
        "forever.py",
        NO_ZERO_GRAD.replace("range(12)", "range(100_000)")
        + "    __import__('time').sleep(0.02)\n",
    )
    window.open_script(str(script))
    window.start_run()
    qtbot.waitUntil(lambda: window.findings.list.count() == 1, timeout=30_000)
    assert window.session.controller is not None and window.session.controller.running
    assert not window.findings.final and "run in progress" in window.findings.header.text()
    window.stop_run()
    qtbot.waitUntil(lambda: window.findings.final, timeout=30_000)
    assert window.findings.list.count() == 1


def test_a_failed_runs_panel_shows_the_error_never_no_problems(window: MainWindow) -> None:
    from memsight.profiler.diagnosis import diagnose
    from memsight.profiler.profile.model import Event
    from tests.factories import profile

    error = {
        "exc_id": 1,
        "exc_type": "builtins.SyntaxError",
        "message": "'(' was never closed (bad.py, line 1)",
        "traceback": [],
        "uncaught": True,
        "oom": None,
    }
    failed = profile(events=[Event(0.05, "exception", error)], exit_code=1)
    failed.info.script = "bad.py"
    window.findings.set_diagnosis(failed, diagnose(failed), final=True)
    panel = window.findings
    assert panel.header.text() == "1 finding: 1 critical"
    panel.list.setCurrentRow(0)
    shown = panel.details.toPlainText()
    assert "No problems found" not in shown
    assert "SyntaxError: '(' was never closed at bad.py:1" in shown


def test_a_cpu_runs_fixes_in_the_panel_are_cpu_code(window: MainWindow) -> None:
    import numpy as np

    from memsight.profiler.diagnosis import diagnose
    from tests.factories import MiB, oom_event, profile, steps

    levels = 800 * MiB + 3 * MiB * np.arange(240)
    run = profile(steps(levels), events=[oom_event("cpu", t=30.0, requested=2**30)], exit_code=1)
    diagnosis = diagnose(run)
    window.findings.set_diagnosis(run, diagnosis, final=True)
    panel = window.findings
    for row, finding in enumerate(diagnosis.findings):
        panel.list.setCurrentRow(row)
        shown = panel.details.toPlainText()
        assert finding.title in shown
        for cuda in (".cuda(", "torch.cuda", '"cuda"'):
            assert cuda not in shown, (finding.rule, cuda)
    panel.list.setCurrentRow(0)
    panel.details.anchorClicked.emit(QUrl("copy:0"))  # the snippet copied is the CPU one
    assert "ru_maxrss" in QGuiApplication.clipboard().text()


def test_the_end_of_a_run_hands_the_keyboard_to_no_finding(
    qtbot: QtBot, window: MainWindow
) -> None:
    # During a run the console's input line has the keyboard; when the run ends it closes.
    # Qt would pass the focus on to the next widget, the Findings list, whose focus makes its
    # first finding current: the panel would show that finding, not the overview.
    qtbot.waitActive(window)
    finding = Finding(
        "missing-zero-grad", "warning", "Gradients are never cleared", "explanation",
        Evidence("optimizer steps 2 to 12", 1.0, 3.0, None), ("zero-grad-set-to-none",),
    )  # fmt: skip
    window.findings.set_diagnosis(Profile(), Diagnosis([finding]), final=False)
    window.console.set_input_open(True)
    qtbot.waitUntil(window.console.input.hasFocus)
    window.console.set_input_open(False)
    QApplication.processEvents()
    assert window.findings.selected is None
    assert "Select a finding" in window.findings.details.toPlainText()


def test_a_fixs_code_fits_the_panel_however_narrow_and_rewraps_as_it_widens(
    qtbot: QtBot, window: MainWindow
) -> None:
    from memsight.app.codewrap import CONTINUATION

    finding = Finding(
        "growth-per-iteration",
        "warning",
        "RAM grows by 2 MiB every iteration",
        "explanation",
        Evidence("+2 MiB per iteration", 0.0, 1.0, "ram"),
        ("detach-for-logging", "del-and-scope"),
    )
    window.findings.set_diagnosis(Profile(), Diagnosis([finding]), final=True)
    window.show()
    qtbot.waitExposed(window)
    details = window.findings.details
    longest = max(len(line) for fix in finding.fixes for line in get_fix(fix).after.split("\n"))

    def fits() -> bool:
        """Every line of the details is as wide as the panel at most: no sideways scroll."""
        block = details.document().begin()
        while block.isValid():
            layout = block.layout()
            for i in range(layout.lineCount()):
                if layout.lineAt(i).naturalTextWidth() > details.viewport().width():
                    return False
            block = block.next()
        return details.horizontalScrollBar().maximum() == 0

    window.findings_dock.setMinimumWidth(0)
    window.resizeDocks([window.findings_dock], [260], Qt.Orientation.Horizontal)
    window.findings.list.setCurrentRow(0)
    qtbot.waitUntil(lambda: window.findings._code_columns < longest)
    assert fits()
    narrow = details.toPlainText()
    assert CONTINUATION in narrow
    # The copied snippet is the code as written, never the wrapped lines.
    details.anchorClicked.emit(QUrl("copy:0"))
    assert QGuiApplication.clipboard().text() == get_fix(finding.fixes[0]).after + "\n"
    # Wider, the code is shown again at the new width: fewer lines are continued.
    window.resizeDocks([window.findings_dock], [900], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: window.findings._code_columns > longest)
    assert fits()
    assert CONTINUATION not in details.toPlainText()
