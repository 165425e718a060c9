"""A job of several processes in the app: each process' RSS on the RAM plot, a selector to
show one alone, and findings that say (and show) which rank they are about."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.mainwindow import MainWindow
from app.timeline import TimelineView
from profiler.profile.model import Profile
from tests.factories import MiB, job, profile, ram, steps


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


def legend_labels(view: TimelineView) -> list[str]:
    return [label.text for _sample, label in view.ram_plot.legend.items]


def test_the_whole_job_shows_every_process_rss_and_a_selector(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_profile(two_ranks())
    assert not view.process_choice.isHidden()
    assert choices(view) == ["Whole job", "pid 1000 (target)", "rank 0 (RSS)", "rank 1 (RSS)"]
    assert {"rank 0 (RSS)", "rank 1 (RSS)"} <= set(legend_labels(view))
    rank0 = view.process_curves[1]
    assert rank0.n == 1000 and rank0.y[-1] == pytest.approx(300 * MiB + 9.99 * 60 * MiB)


def test_choosing_a_rank_draws_it_alone_with_its_own_iterations(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = TimelineView()
    qtbot.addWidget(view)
    job_profile = two_ranks()
    view.set_profile(job_profile)
    with qtbot.waitSignal(view.processChosen) as chosen:
        view.process_choice.setCurrentIndex(3)  # rank 1
    assert chosen.args[0] is job_profile.subprocesses[2]
    assert view.profile is job_profile.subprocesses[2] and not view.process_curves
    assert view.curves["rss"].y[-1] == 300 * MiB  # rank 1's own RSS as the main curve
    assert "rank 0 (RSS)" not in legend_labels(view)
    view.process_choice.setCurrentIndex(0)  # the whole job again
    assert view.profile is job_profile and set(view.process_curves) == {1, 2}


def test_a_single_process_run_has_no_selector(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = TimelineView()
    qtbot.addWidget(view)
    view.set_profile(profile(ram(5.0, 100 * MiB)))
    assert view.process_choice.isHidden() and not view.process_curves


def test_a_finding_of_a_rank_names_it_and_shows_that_rank(
    qtbot,
    window: MainWindow,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    job_profile = two_ranks()
    window._show_profile(job_profile, tmp_path / "job.memsight")
    qtbot.waitUntil(lambda: window.findings.list.count() > 0, timeout=30_000)
    texts = [window.findings.list.item(i).text() for i in range(window.findings.list.count())]
    growth = next(i for i, text in enumerate(texts) if "rank 0: RAM grows" in text)
    window.findings.list.setCurrentRow(growth)
    assert window.timeline.profile is job_profile.subprocesses[1]
    assert window.timeline.process_choice.currentText() == "rank 0 (RSS)"
