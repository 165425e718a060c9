"""Where the app keeps its files: the profiles of the runs it records, and its crash log."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QStandardPaths


def data_dir() -> Path:
    """The app's own data folder (~/.local/share/memsight/memsight on Linux)."""
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(base or Path.home() / ".memsight")


def recordings_dir() -> Path:
    path = data_dir() / "recordings"
    path.mkdir(parents=True, exist_ok=True)
    return path
