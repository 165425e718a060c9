"""The event lane: a mark's tooltip saying what happened once."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QApplication

from app.timeline import TimelineView
from profiler.profile.model import Event, Profile
from tests.factories import MiB, job, oom_event, profile, ram

END = 5.0


def out_of_memory_run() -> Profile:
    """A run that ends as a recorded OOM does: the OOM seen in the forward, then seen again
    uncaught at the top level (one exception, one id), an error while handling it, and the
    exit, a few milliseconds apart."""
    oom = oom_event("cpu", t=END - 0.012)
    oom.data.update(exc_id=1, uncaught=False, where="forward")
    again = Event(END - 0.011, "exception", {**oom.data, "uncaught": True, "where": "uncaught"})
    error = Event(
        END - 0.008,
        "exception",
        {"exc_id": 2, "exc_type": "builtins.ValueError", "uncaught": True, "oom": None},
    )
    exit_event = Event(END - 0.004, "exit", {"exit_code": 1, "signal": None})
    growing = ram(END, lambda t: (200 * MiB + t * 120 * MiB).astype(np.int64))
    return profile(growing, events=[oom, again, error, exit_event], exit_code=1)


def test_the_oom_marks_tooltip_says_what_happened_once(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(900, 500)
    view.show()
    qtbot.waitExposed(view)
    view.set_profile(out_of_memory_run())  # the whole run: its two sightings under one mark
    QApplication.processEvents()
    oom = next(spot for spot in view.marks.points() if str(spot.data()).startswith("OOM"))
    box = view.lane.getViewBox()
    at = view.graphics.mapFromScene(box.mapViewToScene(oom.pos()))
    qtbot.mouseMove(view.graphics.viewport(), at)
    qtbot.waitUntil(lambda: bool(box.toolTip()))
    tip = box.toolTip()  # every mark under the pointer: at this zoom, the run's last moments
    assert tip.count("OOM: RuntimeError") == 1, tip
    assert f"OOM: RuntimeError\nat {END - 0.012:.3f} s" in tip
    assert "error: ValueError" in tip and "exit: exit code 1" in tip and "others" not in tip


def test_a_ranks_exception_seen_twice_is_one_mark(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_profile(job(out_of_memory_run()))
    marks = [str(spot.data()) for spot in view.marks.points()]
    assert marks.count("rank 0: OOM: RuntimeError") == 1, marks
    assert "rank 0: error: ValueError" in marks
