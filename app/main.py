"""Start the desktop app: `memsight` or `memsight FILE` (a script or a saved profile)."""

from __future__ import annotations

import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QApplication

import profiler
from app.mainwindow import MainWindow
from profiler import resources

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256)


def app_icon() -> QIcon:
    icon = QIcon()
    for size in ICON_SIZES:
        icon.addFile(str(resources.path(f"icons/memsight-{size}.png")))
    return icon


def run_gui(argv: list[str]) -> int:
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(
        Qt.HighDpiScaleFactorRoundingPolicy.PassThrough
    )
    app = QApplication.instance() or QApplication([sys.argv[0], *argv[:0]])
    app.setApplicationName("memsight")
    app.setOrganizationName("memsight")
    app.setApplicationVersion(profiler.__version__)
    QGuiApplication.setDesktopFileName("memsight")  # matches resources/memsight.desktop
    QApplication.setWindowIcon(app_icon())
    window = MainWindow()
    window.show()
    if argv:
        window.open_path(argv[0])
    return int(app.exec())
