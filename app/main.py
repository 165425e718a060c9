"""Start the desktop app: `memsight` or `memsight FILE` (a script or a saved profile)."""

from __future__ import annotations

import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication

import profiler
from app.mainwindow import MainWindow


def run_gui(argv: list[str]) -> int:
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(
        Qt.HighDpiScaleFactorRoundingPolicy.PassThrough
    )
    app = QApplication.instance() or QApplication([sys.argv[0], *argv[:0]])
    app.setApplicationName("memsight")
    app.setOrganizationName("memsight")
    app.setApplicationVersion(profiler.__version__)
    window = MainWindow()
    window.show()
    if argv:
        window.open_path(argv[0])
    return int(app.exec())
