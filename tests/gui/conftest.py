from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

import app.mainwindow as mainwindow
from app.mainwindow import MainWindow


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
    qtbot, store: QSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MainWindow]:
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    monkeypatch.setattr(mainwindow, "recordings_dir", lambda: recordings)
    win = MainWindow(store)
    qtbot.addWidget(win)
    win.resize(1200, 800)
    win.show()
    yield win
    if win.session.controller is not None and win.session.controller.running:
        win.session.controller.kill()
        assert win.session.controller.wait(20)
