"""Opens profile files with the app's own open path, as File > Open does, and writes what
happened to each as JSON: `python -m tests.hostile.open_in_app LIST OUT`.

Each file goes through MainWindow.open_profile (load_profile, then every view and the rules in
the background); an error dialog is the expected refusal. An exception that escapes is counted;
a segfault ends this process, so each file's name is written before it is opened.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.hostile.capped import peak_rss_bytes

if TYPE_CHECKING:
    from PySide6.QtWidgets import QMessageBox  # noqa: TID251


def main(argv: list[str]) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings  # noqa: TID251 - drives the app, as File > Open
    from PySide6.QtWidgets import QApplication  # noqa: TID251

    import memsight.app.mainwindow as mainwindow  # noqa: TID251

    listing, out = Path(argv[0]), Path(argv[1])
    files = json.loads(listing.read_text())
    application = QApplication([])
    scratch = Path(tempfile.mkdtemp())
    mainwindow.recordings_dir = lambda: scratch  # type: ignore[attr-defined]
    window = mainwindow.MainWindow(QSettings(str(scratch / "s.ini"), QSettings.Format.IniFormat))
    window.resize(1200, 800)
    window.show()
    results: list[dict[str, Any]] = []
    progress = out.with_suffix(".current")
    for name, path in files:
        progress.write_text(name)  # names the file that was being opened if this process dies
        started = time.perf_counter()
        result: dict[str, Any] = {"name": name}
        try:
            window.error_box = None
            opened = window.open_profile(path)
            deadline = time.monotonic() + 30
            # A file with a stored overview is shown from it and read whole behind it.
            while (
                window.reader.reading is not None or window.diagnosis.busy
            ) and time.monotonic() < deadline:
                application.processEvents()
                time.sleep(0.005)
            if opened and window.profile is None and error_shown(window) is not None:
                opened = False  # its overview was shown, the whole file was refused
            window.grab()  # draws every view once
            box: QMessageBox | None = window.error_box  # set by open_profile
            result["outcome"] = "opened" if opened else "refused"
            if box is not None:
                result["message"] = box.text()[:300]
                result["bad_message"] = "\n" in box.text() or box.text().endswith(": ")
                box.close()
        except BaseException as exc:  # what escapes the app's open path
            result["outcome"] = "crashed"
            result["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        result["seconds"] = round(time.perf_counter() - started, 3)
        results.append(result)
    progress.unlink()
    out.write_text(json.dumps({"results": results, "peak_rss_bytes": peak_rss_bytes()}))
    window.close()
    return 0


def error_shown(window: Any) -> QMessageBox | None:
    """The window's error dialog, read afresh (a wait in between may have set it)."""
    box: QMessageBox | None = window.error_box
    return box


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
