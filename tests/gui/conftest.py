from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

import memsight.app.mainwindow as mainwindow
from memsight.app.mainwindow import MainWindow


@pytest.fixture(autouse=True)
def collect_what_the_test_left() -> Iterator[None]:
    """Collect garbage once the test's windows are closed, so that whatever they leave behind
    warns within this test, under its filters, and not in whichever test runs next."""
    yield
    gc.collect()


@pytest.fixture
def store(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def window(
    qtbot: QtBot, store: QSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MainWindow]:
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    monkeypatch.setattr(mainwindow, "recordings_dir", lambda: recordings)
    win = MainWindow(store)

    def end_the_run() -> None:
        # Before pytest-qt closes the window: a run still going (a test that failed midway)
        # would make closeEvent ask "Stop the run and quit?", a modal nobody answers.
        controller = win.session.controller
        if controller is not None and controller.running:
            controller.kill()
            assert controller.wait(20)

    qtbot.addWidget(win, before_close_func=lambda _: end_the_run())
    win.resize(1200, 800)
    win.show()
    yield win
    end_the_run()
