"""The app never crashes or hangs on a file: names, counts and numbers a hostile profile can
hold open in bounded time, and whatever a view cannot show becomes a one-line error dialog."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.profiler import protocol
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.blocks import TableBuffer

T0 = 5_000_000_000
BIG = (1 << 63) - 1


def write_profile(
    path: Path,
    run: dict[str, Any] | None = None,
    events: list[dict[str, Any]] | None = None,
    rows: list[tuple[int, ...]] | None = None,
) -> None:
    ram = TableBuffer(protocol.RAM_TABLE)
    for row in rows or [(T0 + i * 10_000_000, 1 << 20, 1 << 20, 0, 1 << 30) for i in range(50)]:
        ram.add(row)
    writer = ProfileWriter(path)
    writer.write(
        protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "t.py", **(run or {})})
    )
    writer.write(protocol.RAM_TABLE.frame())
    writer.write(ram.drain())
    if events:
        writer.write(protocol.encode_json_frame(protocol.EVENTS, events))
    writer.close()


def uncaught(t: int, exc_type: str) -> dict[str, Any]:
    return {"t": t, "type": "exception", "exc_type": exc_type, "uncaught": True, "message": "m"}


HOSTILE: dict[str, dict[str, Any]] = {
    # Before: minutes laying out the name in the findings panel.
    "a 2-million-character exception class": {"events": [uncaught(T0 + 1000, "X" * 2_000_000)]},
    # Before: a line across both plots for each, 13 s and 2 GB for 300,000.
    "100,000 uncaught exceptions": {"events": [uncaught(T0 + i, "E") for i in range(100_000)]},
    # Before: OSError and ValueError from preparing the run again.
    "a script name too long for the system": {"run": {"script": "t" * 100_000 + ".py"}},
    "a script name with a NUL": {"run": {"script": "a\0b.py", "python": "p\0y"}},
    "values at the int64 limits": {"rows": [(T0 + i, BIG - i, BIG, BIG, -BIG) for i in range(50)]},
    "times at the int64 limits": {"rows": [(-BIG + i * 10**17, 1, 1, 1, 1) for i in range(50)]},
    "capacities past int64": {
        "run": {"ram_total_bytes": 10**30, "memory_limit_bytes": 10**20},
        "events": [
            {
                "t": T0,
                "type": "cuda_init",
                "devices": [{"index": 0, "name": "g" * 1_000_000, "total_bytes": 10**40}],
            }
        ],
    },
}


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_profile_opens_in_bounded_time_and_the_window_stays_usable(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "p.memsight"
    write_profile(path, **HOSTILE[kind])
    started = time.perf_counter()
    assert window.open_profile(str(path)), window.error_box and window.error_box.text()
    qtbot.waitUntil(lambda: not window.diagnosis.busy, timeout=30_000)
    window.timeline.zoom_to_fit()
    window.grab()  # draws every view once
    assert time.perf_counter() - started < 10
    assert len(window.windowTitle()) < 1000


def test_a_profile_a_view_cannot_show_gives_an_error_dialog_and_an_empty_window(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.memsight"
    write_profile(path)

    shows = window.contents.set_profile

    def fails(profile: object, running: bool = False) -> None:
        if profile is not None:
            raise ValueError("a view failed")
        shows(None)

    monkeypatch.setattr(window.contents, "set_profile", fails)
    assert not window.open_profile(str(path))
    box = window.error_box
    assert box is not None and box.text() == f"{path}: ValueError: a view failed"
    assert "\n" not in box.text()
    assert window.profile is None and not window.export_action.isEnabled()
    monkeypatch.undo()
    assert window.open_profile(str(path))  # and the next file opens as usual
