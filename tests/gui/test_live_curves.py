"""A long live run costs each frame what one view holds, not the whole run: while the run
goes on pyqtgraph is handed the points near the view, a view moved back gets its points at
once, and the finished run is whole."""

from __future__ import annotations

import numpy as np

from app.timeline import FOLLOW_WINDOW_S, TimelineView
from profiler.profile.model import Profile
from profiler.profile.series import MAIN_RSS
from tests.factories import MiB, profile, ram

RATE_HZ = 1000  # samples a second, as at --interval-ms 1
MINUTES = 10
BLOCK_S = 10.0  # what arrives between two refreshes, in seconds of the run


def _grow(live: Profile, start: float) -> None:
    """Append BLOCK_S seconds of samples, as the recorder's frames do while the run goes on."""
    block = ram(BLOCK_S, lambda t: (100 + t % 50) * MiB, interval=1 / RATE_HZ)
    rows = {name: block[name] for name in block.column_names}
    rows["t"] = rows["t"] + start
    live.tables["ram"].append(rows)


def test_a_ten_minute_run_at_1_khz_hands_pyqtgraph_a_view_not_the_run(qtbot) -> None:  # type: ignore[no-untyped-def]
    live = profile(ram(1.0, 100 * MiB, interval=1 / RATE_HZ))
    live.complete = False
    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(1200, 600)
    view.set_profile(live, running=True)
    t = 1.0
    while t < MINUTES * 60:
        _grow(live, t)
        t += BLOCK_S
        view.refresh()  # as the window's timer does while the run grows

    curve = view.curves[MAIN_RSS.key]
    held = len(curve.item.xData)
    assert curve.n == len(live.ram) > 590_000
    # The followed view is one minute wide: what pyqtgraph holds stays within a few minutes.
    assert held <= 4 * FOLLOW_WINDOW_S * RATE_HZ + 2 * BLOCK_S * RATE_HZ, held
    low = view.lane.getViewBox().viewRange()[0][0]
    assert curve.item.xData[0] <= low and curve.item.xData[-1] >= t - 1.0

    view.lane.setXRange(10.0, 20.0, padding=0)  # the user pans back to the start
    assert curve.item.xData[0] <= 10.0 and curve.item.xData[-1] >= t - 1.0

    view.set_running(False)  # the run ended: drawn from its levels, in view at once
    assert curve.levels and curve.item.xData[0] <= 10.0 and curve.item.xData[-1] >= 20.0
    view.zoom_to_fit()
    drawn = curve.item.xData
    assert float(np.min(drawn)) <= 0.01 and float(np.max(drawn)) >= t - 1.0  # all of it
    assert len(drawn) < curve.n / 100  # from a level: the min and max of blocks of rows
