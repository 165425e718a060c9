"""While the rules look at a run just shown, the Findings panel says so, never "No run yet"."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from memsight.app import diagnosisworker
from memsight.app.findings import JUDGING
from memsight.app.mainwindow import MainWindow
from memsight.profiler.profile.model import Profile
from tests.damaged_files import record


def test_an_opened_run_says_its_rules_are_running_until_they_answer(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    path = record(tmp_path / "run.memsight")
    assert window.findings.header.text() == "No run yet"
    assert window.open_profile(str(path))
    # The rules answer in a worker thread, through the GUI thread's event loop: not yet.
    assert window.findings.header.text() == JUDGING
    qtbot.waitUntil(lambda: window.findings.header.text() != JUDGING, timeout=30_000)
    assert window.findings.final and window.findings.profile is window.profile


def test_a_diagnosis_that_fails_outside_the_rules_is_said_not_waited_for(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(profile: Profile, threads: int) -> None:
        raise ValueError("a profile no rule expected")

    monkeypatch.setattr(diagnosisworker, "diagnose", broken)
    path = record(tmp_path / "run.memsight")
    assert window.open_profile(str(path))
    qtbot.waitUntil(lambda: window.findings.header.text() != JUDGING, timeout=30_000)
    assert window.findings.header.text() == "No problems found by the rules that ran"
    shown = window.findings.details.toPlainText()
    assert "Rules that could not run" in shown and "a profile no rule expected" in shown


def test_the_app_judges_a_long_run_one_rule_at_a_time(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rules in threads of their own would take every core and the GIL from the GUI thread
    # while the user pans the run just opened (diagnosisworker.APP_RULE_THREADS); the command line,
    # which draws nothing, keeps them (diagnosis.RULE_THREADS).
    from memsight.profiler import diagnosis
    from memsight.profiler.diagnosis.rules import ALL_RULES
    from tests.factories import sample_profile

    monkeypatch.setattr(diagnosis, "PARALLEL_RULES_SAMPLES", 0)  # every run counts as long
    seen: set[str] = set()
    rule = ALL_RULES[0]
    original = rule.check

    def watched(profile: Profile, config: object) -> object:
        seen.add(threading.current_thread().name)
        return original(profile, config)

    monkeypatch.setattr(rule, "check", watched)
    diagnosis.diagnose(sample_profile())
    assert {name.split("_")[0] for name in seen} == {"memsight-rules"}

    seen.clear()
    background = diagnosisworker.BackgroundDiagnosis()
    with qtbot.waitSignal(background.ready, timeout=30_000):
        background.request(sample_profile(), final=True)
    background.shutdown()
    assert len(seen) == 1 and next(iter(seen)).startswith("diagnosis")
