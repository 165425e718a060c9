"""The file pickers open large enough to read, their columns fitted to what they list."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QFileSystemModel, QTreeView
from pytestqt.qtbot import QtBot

from memsight.app import filedialogs
from memsight.app.mainwindow import MainWindow


def test_the_open_dialog_shows_whole_sizes_and_dates(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    big = folder / "train-20261127-203737.memsight"
    with big.open("wb") as file:  # sparse: a size with many digits, no disk used
        file.truncate(123_456_789_012)
    os.utime(big, (1_795_000_000, 1_795_000_000))
    (folder / "a.py").write_text("pass\n")
    window.resize(1600, 1000)
    dialog = filedialogs.file_dialog(window, "Open profile or script", str(folder))
    qtbot.addWidget(dialog)
    model = dialog.findChild(QFileSystemModel)
    listing = dialog.findChild(QTreeView)
    assert model is not None and listing is not None
    with qtbot.waitSignal(model.directoryLoaded, timeout=10_000):
        dialog.show()
    # Big enough for the four columns, inside the window it belongs to.
    assert dialog.width() >= filedialogs.PREFERRED_SIZE.width()
    assert dialog.height() >= filedialogs.PREFERRED_SIZE.height()
    header = listing.header()
    qtbot.waitUntil(lambda: model.rowCount(model.index(str(folder))) == 2)
    # Fitted once the folder was read: no size, type or date ends in "…".
    for column in range(1, header.count()):
        assert header.sectionSize(column) >= listing.sizeHintForColumn(column), column
    name = listing.sizeHintForColumn(0)
    assert header.sectionSize(0) >= min(name, listing.viewport().width() // 3)


def test_over_a_small_window_the_dialog_stays_inside_it(qtbot: QtBot, window: MainWindow) -> None:
    window.resize(900, 600)
    dialog = filedialogs.file_dialog(window, "Open", str(Path.home()))
    qtbot.addWidget(dialog)
    assert dialog.width() <= max(900 * filedialogs.SHARE_OF_WINDOW, dialog.sizeHint().width())
    assert dialog.height() <= max(600 * filedialogs.SHARE_OF_WINDOW, dialog.sizeHint().height())


def test_the_name_takes_the_rest_whatever_width_was_remembered(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    (tmp_path / "a.py").write_text("pass\n")
    window.resize(900, 600)
    dialog = filedialogs.file_dialog(window, "Open", str(tmp_path))
    qtbot.addWidget(dialog)
    listing = dialog.findChild(QTreeView)
    assert listing is not None
    dialog.show()
    header = listing.header()
    header.resizeSection(0, 2000)  # what a dialog last used in a wide window brings back
    filedialogs.fit_columns(listing)
    widths = sum(header.sectionSize(c) for c in range(header.count()))
    assert widths <= listing.viewport().width()  # the date is in view, not past the edge
