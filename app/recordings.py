"""Where the app keeps the profiles of the runs it records."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QStandardPaths


def recordings_dir() -> Path:
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    path = Path(base or Path.home() / ".memsight") / "recordings"
    path.mkdir(parents=True, exist_ok=True)
    return path
