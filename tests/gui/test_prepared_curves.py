"""A finished run's main curves made ready outside the GUI thread (app/maincurves.py's
prepare_curves, which app/opening.py runs where it reads a large file) draw exactly what the
timeline draws when it takes the run's rows in itself."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from memsight.app import curvepoints
from memsight.app.curvepoints import CurvePoints
from memsight.app.maincurves import prepare_curves
from memsight.app.mainwindow import MainWindow
from memsight.app.timeline import TimelineView
from memsight.profiler.profile import spanindex
from memsight.profiler.profile.model import Profile, SampleTable
from memsight.profiler.profile.storage import compact_profile
from tests.factories import GPU_RUN_ROWS, MiB, gpu_run, job, profile, ram
from tests.overview_files import small_limits, write_run

__all__ = ["small_limits"]  # a fixture

ROWS = GPU_RUN_ROWS


def a_job() -> Profile:
    ranks = (profile(ram(ROWS / 100, 300 * MiB)), profile(ram(ROWS / 100, 200 * MiB)))
    return job(*ranks, launcher=gpu_run())


def drawn(view: TimelineView) -> dict[str, tuple[Any, ...]]:
    """Every main curve's points and levels, and what each draws of a view's range."""
    view.set_x_range(12.0, 250.0)
    return {
        key: (
            curve.x.tolist(),
            curve.y.tolist(),
            [(factor, xs.tolist(), ys.tolist()) for factor, xs, ys in curve.levels],
            np.asarray(curve.item.xData).tolist(),
            np.asarray(curve.item.yData).tolist(),
        )
        for key, curve in view.curves.items()
    }


@pytest.fixture
def view(qtbot: QtBot) -> TimelineView:
    widget = TimelineView()
    widget.resize(1200, 700)
    qtbot.addWidget(widget)
    widget.show()
    return widget


@pytest.mark.parametrize("run", [gpu_run, a_job], ids=["two-devices", "whole-job"])
def test_prepared_curves_draw_what_the_timeline_draws_itself(
    view: TimelineView, run: Callable[[], Profile]
) -> None:
    shown = run()
    view.set_profile(shown)
    itself = drawn(view)
    assert any(points[2] for points in itself.values())  # thinned, as a day is

    again = run()
    prepared = prepare_curves(again)
    view.set_profile(again, prepared=prepared)

    assert all(view.curves[key].points is points for key, points in prepared.points.items())
    assert drawn(view) == itself
    if shown.subprocesses:  # the whole job: each process' curve, none of the main process' own
        assert not view.curves["rss"].n and view.process_curves
    else:
        assert view.curves["allocated"].n == ROWS  # device 1's rows only


def test_a_job_s_prepared_curves_come_back_whole_after_a_process_is_drawn_alone(
    view: TimelineView,
) -> None:
    shown = a_job()
    view.set_profile(shown)
    itself = drawn(view)

    again = a_job()
    view.set_profile(again, prepared=prepare_curves(again))
    view.select_process(1)  # one rank alone: its own rows, taken in here
    assert view.curves["rss"].n == len(again.subprocesses[1].ram or [])
    view.select_process(None)  # the whole job again: the prepared curves, still whole

    assert drawn(view) == itself


def test_curves_prepared_for_another_run_are_not_used(view: TimelineView) -> None:
    prepared = prepare_curves(gpu_run())
    shown = profile(ram(5.0, 100 * MiB))
    view.set_profile(shown, prepared=prepared)
    assert view.curves["rss"].n == len(shown.ram or []) and not view.curves["allocated"].n


def test_a_large_file_s_rows_are_taken_in_outside_the_gui_thread(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
    small_limits: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "day.memsight"
    write_run(path, rows=ROWS)
    compact_profile(path)
    taken_in: list[tuple[str, int]] = []  # (thread, rows) of each curve's take-in
    extend = CurvePoints.extend

    def spy(self: CurvePoints, x: np.ndarray, y: np.ndarray, source_rows: int) -> bool:
        taken_in.append((threading.current_thread().name, len(x)))
        return extend(self, x, y, source_rows)

    monkeypatch.setattr(curvepoints.CurvePoints, "extend", spy)
    indexed: list[tuple[str, int]] = []  # (thread, spans) of each phase index built
    index_of = spanindex.SpanIndex.of

    def index_spy(spans: SampleTable, kind: int) -> spanindex.SpanIndex:
        indexed.append((threading.current_thread().name, len(spans)))
        return index_of(spans, kind)

    monkeypatch.setattr(spanindex.SpanIndex, "of", staticmethod(index_spy))

    assert window.open_profile(str(path))  # its overview, taken in here
    assert window.reader.reading == str(path)
    qtbot.waitUntil(lambda: window.profile is not None, timeout=30_000)

    assert window.timeline.curves["rss"].n == ROWS
    whole = [thread for thread, rows in taken_in if rows == ROWS]
    assert len(whole) == 4  # the process tree, RSS, its peak and the workers
    assert threading.main_thread().name not in whole
    overview = [thread for thread, rows in taken_in if rows < ROWS]
    assert overview and set(overview) == {threading.main_thread().name}

    # The whole run's phases were indexed there too: panning builds no index here.
    for low in (10.0, 50.0, 90.0):
        window.timeline.set_x_range(low, low + 5.0)
        qtbot.wait(1)
    assert window.profile is not None
    spans = window.profile.spans
    assert spans is not None and len(spans) == ROWS // 2
    whole_indexed = [thread for thread, rows in indexed if rows == len(spans)]
    assert len(whole_indexed) == 2  # forwards and backwards, once each
    assert threading.main_thread().name not in whole_indexed
