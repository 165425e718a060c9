"""Start the desktop app: `memsight` or `memsight FILE` (a script or a saved profile)."""

from __future__ import annotations

import ctypes.util
import importlib
import os
import signal
import sys
from collections.abc import Callable, Mapping

from PySide6.QtCore import QSocketNotifier, Qt
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QApplication

from memsight import profiler
from memsight.app.crashlog import CrashLog, ended_message
from memsight.app.mainwindow import MainWindow
from memsight.app.recordings import data_dir
from memsight.profiler import resources

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256)


def app_icon() -> QIcon:
    icon = QIcon()
    for size in ICON_SIZES:
        icon.addFile(str(resources.path(f"icons/memsight-{size}.png")))
    return icon


# What Qt's X11 platform plugin loads beside Qt itself, by the Debian/Ubuntu package that
# has it. Without one of them Qt aborts with "Could not load the Qt platform plugin xcb".
X11_LIBRARIES = {
    "xcb-cursor": "libxcb-cursor0",
    "xcb-icccm": "libxcb-icccm4",
    "xcb-image": "libxcb-image0",
    "xcb-keysyms": "libxcb-keysyms1",
    "xcb-randr": "libxcb-randr0",
    "xcb-render-util": "libxcb-render-util0",
    "xcb-shape": "libxcb-shape0",
    "xkbcommon-x11": "libxkbcommon-x11-0",
}


def missing_x11_packages(
    environ: Mapping[str, str], find: Callable[[str], str | None] = ctypes.util.find_library
) -> list[str]:
    """The packages of X11 libraries the app will need and this system lacks (Linux, X11)."""
    if not sys.platform.startswith("linux"):
        return []
    platform = environ.get("QT_QPA_PLATFORM", "")
    if platform and not platform.startswith("xcb"):
        return []  # offscreen, wayland, ...: Qt will not load the X11 plugin
    if not platform and environ.get("WAYLAND_DISPLAY") and not environ.get("DISPLAY"):
        return []
    return [package for library, package in X11_LIBRARIES.items() if find(library) is None]


def use_small_pages() -> None:
    """numpy's large arrays in the app in 4 KiB pages, not the 2 MiB huge pages numpy asks
    Linux for (arrays of 4 MiB and more, where the kernel grants them on request).

    The first write to a huge page zeroes all 2 MiB of it. A running timeline's curves grow
    in step, so at 1 kHz the next huge pages of their sixteen columns came due in the same
    frame every few seconds: 4-7 ms added to it. In small pages the same zeroing is spread
    over the frames; converting a day-long run's 69 MB column took the same time either way.
    The switch is numpy's own (numpy 2: numpy._core; 1.x: numpy.core), and the setting its
    NUMPY_MADVISE_HUGEPAGE=0 makes, set here and not in the environment, which the profiled
    scripts started from the app inherit."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            switch = getattr(importlib.import_module(module), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if callable(switch):
            switch(False)
            return


def run_gui(argv: list[str]) -> int:
    use_small_pages()
    missing = missing_x11_packages(os.environ)
    if missing:
        sys.stderr.write(
            "memsight: the desktop app needs system libraries this machine lacks: "
            f"{', '.join(missing)} (Debian/Ubuntu: sudo apt-get install {' '.join(missing)}); "
            "`memsight run` and `memsight report` work without them\n"
        )
        return 1
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(
        Qt.HighDpiScaleFactorRoundingPolicy.PassThrough
    )
    app = QApplication.instance() or QApplication([sys.argv[0], *argv[:0]])
    app.setApplicationName("memsight")
    app.setOrganizationName("memsight")
    app.setApplicationVersion(profiler.__version__)
    QGuiApplication.setDesktopFileName("memsight")  # matches resources/memsight.desktop
    QApplication.setWindowIcon(app_icon())
    # A session before this one that ended without Quit: said on stderr and in the window.
    crash_log = CrashLog(data_dir())
    message = ended_message(crash_log.take_ended(), crash_log.path)
    if message:
        sys.stderr.write(f"memsight: {message}\n")
        sys.stderr.flush()
    ending_signals = catch_ending_signals()
    crash_log.start()
    window = MainWindow()
    window.show()
    if message:
        window.status.showMessage(message, 60_000)
    if argv:
        window.open_path(argv[0])
    # Not before: opening a file flushes the window system (QApplication.sync), which can
    # deliver the notifier's event, and a close there, before exec(), left the app running
    # with no window.
    terminate_on_signals(window, ending_signals)
    status = int(app.exec())
    crash_log.end()
    return status


def catch_ending_signals() -> int:
    """SIGTERM and SIGHUP (`kill`, a logout, a closed terminal) end the app as Quit does:
    without this Python's default ends it at once, the window's state unsaved, and the next
    start would report a session that ended unexpectedly. Caught from before the session's
    marker is written: one that comes while the window is still being built (opening a file
    takes a while) waits in the pipe, and ends the app at the event loop's first turn. Qt's
    event loop runs no Python while it waits, so the signal wakes it through that pipe
    (signal.set_wakeup_fd). Returns the pipe's read end, for terminate_on_signals."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda *_: None)  # the wakeup byte does the work
    return read_end


def terminate_on_signals(window: MainWindow, read_end: int) -> None:
    """The window ends as Quit does once a signal caught by catch_ending_signals comes, or
    has come; connected just before the event loop runs (app.exec)."""
    notifier = QSocketNotifier(read_end, QSocketNotifier.Type.Read, window)

    def woken() -> None:
        os.read(read_end, 512)
        window.terminate()

    notifier.activated.connect(woken)
