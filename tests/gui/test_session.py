"""RunSession on its own, without a window: what it tells the views about a run, in order."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from memsight.app.diagnosisworker import BackgroundDiagnosis
from memsight.app.session import RunSession
from memsight.profiler.launch.spec import RunSpec
from tests.gui.support import RUN_TIMEOUT_MS
from tests.support import write_script


def _spec(script: Path) -> RunSpec:
    return RunSpec(
        target=str(script), cwd=str(script.parent), python=sys.executable, env=dict(os.environ)
    )


@pytest.fixture
def session(qtbot: QtBot) -> Iterator[RunSession]:
    diagnosis = BackgroundDiagnosis()
    made = RunSession(diagnosis)
    yield made
    made.kill()
    diagnosis.shutdown()


@pytest.mark.slow  # runs a script (~1 s)
def test_a_run_is_reported_started_refreshed_and_finished(
    qtbot: QtBot, session: RunSession, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "s.py", "b = bytearray(20 * 2**20)\nprint('done')\n")
    heard: list[str] = []
    session.started.connect(lambda profile, path: heard.append(f"started {path.name}"))
    session.refreshed.connect(lambda: heard.append("refreshed"))
    session.finished.connect(lambda status: heard.append(f"finished {status.exit_code}"))
    session.failed.connect(lambda title, message: heard.append(f"failed {title}"))

    assert session.start(_spec(script), tmp_path / "run.memsight")
    assert session.running and heard[0] == "started run.memsight"
    qtbot.waitUntil(lambda: not session.timer.isActive(), timeout=RUN_TIMEOUT_MS)

    running: bool = session.running  # again, now that the run has ended
    assert not running
    assert "refreshed" in heard and heard[-1] == "finished 0"
    assert session.profile is not None and session.profile.output_text() == "done\n"
    assert session.frame_ms, "each tick is timed"


def test_a_run_that_cannot_be_launched_fails_without_starting(
    qtbot: QtBot, session: RunSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_interpreter() -> list[str]:
        return [str(tmp_path / "gone" / "python")]

    monkeypatch.setattr("memsight.app.controller.recorder_host_command", no_interpreter)
    failures: list[tuple[str, str]] = []
    session.failed.connect(lambda title, message: failures.append((title, message)))
    started: list[object] = []
    session.started.connect(lambda *args: started.append(args))

    assert not session.start(_spec(tmp_path / "s.py"), tmp_path / "run.memsight")
    assert not session.running and not session.timer.isActive() and not started
    assert [title for title, _ in failures] == ["Cannot start the run"]
