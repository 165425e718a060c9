"""A job of several processes in the app: each process' RSS and GPU memory side by side, a
selector to show one alone, legend entries that hide curves, rank errors on the lane, and
findings that say (and show) which rank they are about."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.app.timeline import TimelineView
from memsight.profiler.profile.model import Profile
from tests.factories import MiB, census, holder, job, profile, ram, steps
from tests.gui.jobfile import T0, write_job
from tests.support import run_memsight

MS = 1_000_000


def two_ranks() -> Profile:
    leaking = profile(
        ram(10.0, lambda t: (300 * MiB + t * 60 * MiB).astype(np.int64)),
        steps(300 * MiB + 60 * MiB * np.arange(80) * 0.1, start=1.0, dt=0.1),
    )
    steady = profile(ram(10.0, 300 * MiB), steps(np.full(80, 300.0 * MiB), start=1.0, dt=0.1))
    return job(leaking, steady)


def choices(view: TimelineView) -> list[str]:
    box = view.process_choice
    return [box.itemText(i) for i in range(box.count())]


def legend(plot: object) -> list[str]:
    return [label.text for _sample, label in plot.legend.items]  # type: ignore[attr-defined]


def drawn(view: TimelineView, label: str) -> bool:
    """Whether the RAM plot's curve under this legend label is shown."""
    for sample, text in view.ram_plot.legend.items:
        if text.text == label:
            return bool(sample.item.isVisible())
    raise AssertionError(f"no legend entry {label!r}")


@pytest.fixture
def view(qtbot: QtBot) -> TimelineView:
    widget = TimelineView()
    qtbot.addWidget(widget)
    widget.resize(1000, 600)
    widget.show()
    return widget


def test_a_job_file_draws_one_curve_per_process_on_each_plot(
    window: MainWindow, tmp_path: Path
) -> None:
    path = tmp_path / "job.memsight"
    write_job(path)
    assert window.open_profile(str(path))
    timeline = window.timeline
    assert legend(timeline.ram_plot) == [
        "Whole job (tree)",
        "pid 1000 (RSS)",
        "rank 0 (RSS)",
        "rank 1 (RSS)",
    ]
    assert legend(timeline.gpu_plot) == ["rank 0 · cuda:0 allocated", "rank 1 · cuda:1 allocated"]
    assert timeline.gpu_shown
    rank0, rank1 = timeline.process_curves[1], timeline.process_curves[2]
    assert rank0.y[-1] == 399 * MiB and rank1.y[-1] == 300 * MiB
    # Each process its own colour.
    pens = {curve.item.opts["pen"].color().name() for curve in timeline.process_curves.values()}
    assert len(pens) == 3
    # The readout names every process' RSS at the pointer.
    readout = timeline.readout_at(0.5)
    assert "pid 1000 50.00 MiB" in readout and "rank 1 300.0 MiB" in readout


def test_the_selector_lists_the_job_and_shows_one_process_alone(view: TimelineView) -> None:
    job_profile = two_ranks()
    view.set_profile(job_profile)
    assert not view.process_choice.isHidden()
    assert choices(view) == ["Whole job", "pid 1000 (target)", "rank 0", "rank 1"]
    assert view.process_choice.currentText() == "Whole job"

    view.process_choice.setCurrentIndex(3)  # rank 1
    assert view.profile is job_profile.subprocesses[2] and not view.process_curves
    assert view.curves["rss"].y[-1] == 300 * MiB  # rank 1's own RSS as the main curve
    labels = legend(view.ram_plot)
    assert "rank 1 (RSS)" in labels and "rank 0 (RSS)" not in labels
    assert "Main process (RSS)" not in labels
    # Its own iterations in the lane: 80 steps of rank 1.
    assert len(view.event_lane.steps.getData()[0]) == 2 * 80

    view.process_choice.setCurrentIndex(0)  # the whole job again
    assert view.profile is job_profile and set(view.process_curves) == {0, 1, 2}
    assert len(view.event_lane.steps.getData()[0]) == 0  # the launcher's: it steps nothing


def test_choosing_a_process_is_announced_for_the_other_panels(
    qtbot: QtBot, view: TimelineView
) -> None:
    job_profile = two_ranks()
    view.set_profile(job_profile)
    with qtbot.waitSignal(view.processChosen) as chosen:
        view.process_choice.setCurrentIndex(2)  # rank 0
    assert chosen.args[0] is job_profile.subprocesses[1]


def test_a_legend_entry_hides_and_shows_its_rank(qtbot: QtBot, view: TimelineView) -> None:
    view.set_profile(two_ranks())
    sample, label = next(
        (s, lb) for s, lb in view.ram_plot.legend.items if lb.text == "rank 1 (RSS)"
    )
    shown_color = label.opts["color"]
    centre = sample.mapToScene(sample.boundingRect().center())
    at = view.graphics.mapFromScene(centre)

    qtbot.mouseClick(view.graphics.viewport(), Qt.MouseButton.LeftButton, pos=at)  # type: ignore[no-untyped-call]
    assert not drawn(view, "rank 1 (RSS)") and drawn(view, "rank 0 (RSS)")
    assert label.opts["color"] != shown_color  # greyed: it reads as hidden
    qtbot.mouseClick(view.graphics.viewport(), Qt.MouseButton.LeftButton, pos=at)  # type: ignore[no-untyped-call]
    assert drawn(view, "rank 1 (RSS)") and label.opts["color"] == shown_color


def test_a_rank_error_is_marked_on_the_whole_job_lane_with_its_rank(
    window: MainWindow, tmp_path: Path
) -> None:
    path = tmp_path / "job.memsight"
    oom = {
        "t": T0 + 500 * MS,
        "type": "exception",
        "proc": 2,
        "exc_type": "torch.OutOfMemoryError",
        "oom": True,
        "uncaught": True,
        "message": "CUDA out of memory",
    }
    write_job(path, events=[oom])
    assert window.open_profile(str(path))
    timeline = window.timeline
    marks = [spot.data() for spot in timeline.marks.points()]
    assert "rank 1: OOM: OutOfMemoryError" in marks
    lines = [label.text for label in timeline.event_lane.labels.entries]
    assert "rank 1: OOM" in lines  # short, beside its line; the mark's tip has the type
    timeline.select_process(1)  # rank 0 alone: rank 1's error is not its own
    assert not [spot.data() for spot in timeline.marks.points()]


def test_a_single_process_run_has_no_selector_and_its_usual_legend(view: TimelineView) -> None:
    view.set_profile(profile(ram(5.0, 100 * MiB)))
    assert view.process_choice.isHidden() and not view.process_curves
    assert legend(view.ram_plot) == [
        "Main process, peak between samples",
        "Process tree",
        "Workers (USS)",
        "Main process (RSS)",
    ]


def test_a_finding_of_a_rank_names_it_and_shows_that_rank(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
) -> None:
    job_profile = two_ranks()
    window._show_profile(job_profile, tmp_path / "job.memsight")
    qtbot.waitUntil(lambda: window.findings.list.count() > 0, timeout=30_000)
    texts = [window.findings.list.item(i).text() for i in range(window.findings.list.count())]
    growth = next(i for i, text in enumerate(texts) if "rank 0: RAM grows" in text)
    window.findings.list.setCurrentRow(growth)
    assert window.timeline.profile is job_profile.subprocesses[1]
    assert window.timeline.process_choice.currentText() == "rank 0"
    assert window.timeline._highlights  # the evidence, shaded on rank 0's own curves


def test_the_contents_tab_follows_the_chosen_process(window: MainWindow, tmp_path: Path) -> None:
    rank = profile(
        ram(5.0, 300 * MiB),
        events=[census(2.0, 10, holder("kept", "local", 10 * MiB))],
    )
    job_profile = job(rank)
    window._show_profile(job_profile, tmp_path / "job.memsight")
    assert window.contents.census.count() == 0  # the launcher takes no census
    window.timeline.select_process(1)
    assert window.contents.profile is rank and window.contents.census.count() == 1
    window.timeline.select_process(None)
    assert window.contents.profile is job_profile


@pytest.mark.slow
def test_a_real_torchrun_job_opens_with_a_curve_per_rank(
    window: MainWindow, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    script = Path(__file__).parents[1] / "clients" / "scripts" / "ddp_gloo.py"
    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)]
    result = run_memsight(torchrun, tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    path = result.profile_path
    assert window.open_profile(str(path))
    timeline = window.timeline
    assert choices(timeline)[:2] == ["Whole job", f"{timeline.job.process.label} (target)"]  # type: ignore[union-attr]
    assert {"rank 0", "rank 1"} <= set(choices(timeline))
    assert {"rank 0 (RSS)", "rank 1 (RSS)"} <= set(legend(timeline.ram_plot))
    timeline.process_choice.setCurrentIndex(choices(timeline).index("rank 1"))
    assert timeline.profile is not None and timeline.profile.process.rank == 1
    assert timeline.profile.iterations == 30


def test_a_live_run_that_becomes_a_job_draws_only_curves_the_legend_names(
    view: TimelineView,
) -> None:
    # A launcher with a worker child, live: drawn as one process (RSS, peak, workers)...
    launcher = profile(ram(2.0, 100 * MiB, children=300 * MiB))
    view.set_profile(launcher, running=True)
    assert len(view.curves["children"].item.xData) > 0
    # ...until its first rank connects: then every curve with points is one the legend names
    # (the workers' green curve no longer stays behind, unnamed).
    rank = profile(ram(2.0, 400 * MiB))
    ranked = job(rank, launcher=launcher)
    assert ranked is launcher
    view.refresh()
    named = {id(sample.item) for sample, _label in view.ram_plot.legend.items}
    with_points = [
        item
        for item in view.ram_plot.listDataItems()
        if item.isVisible() and item.xData is not None and len(item.xData)
    ]
    assert with_points and all(id(item) in named for item in with_points)
    assert "Whole job (tree)" in legend(view.ram_plot)


def test_the_status_bar_of_a_job_shows_the_jobs_ram(window: MainWindow, tmp_path: Path) -> None:
    # torchrun's own RSS is the least of a job: the status bar shows the process tree's.
    launcher = profile(ram(2.0, 100 * MiB, children=800 * MiB))
    ranked = job(profile(ram(2.0, 400 * MiB)), launcher=launcher)
    window._show_profile(ranked, tmp_path / "job.memsight")
    assert window.status.ram_label.text() == "Job RAM 900.0 MiB · peak 900.0 MiB"
