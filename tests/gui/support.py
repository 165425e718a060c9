"""Helpers for the window tests: run a script through the window and wait for it to settle,
show a timeline on screen, and the scripts more than one test runs."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.app.timeline import TimelineView
from memsight.profiler.profile.model import Profile
from tests.load import deadline

# How long a test waits for a run through the window, stretched under --cpu-hogs (read when the
# test modules are imported, after tests/conftest.py has declared the load).
RUN_TIMEOUT_MS = round(deadline(60_000))

# A training loop that never clears its gradients: one missing-zero-grad finding, nothing else.
NO_ZERO_GRAD = """
import torch
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(12):
    model(torch.randn(4, 8)).pow(2).mean().backward()
    optimizer.step()
"""


def run_to_end(
    qtbot: QtBot,
    window: MainWindow,
    script: Path,
    args: str = "",
    env: str = "",
    ram_budget: str = "",
) -> None:
    window.open_script(str(script))
    window.setup_panel.args.setText(args)
    window.setup_panel.env.setPlainText(env)
    window.setup_panel.ram_budget.setText(ram_budget)
    window.start_run()
    assert window.session.controller is not None, window.setup_panel.problems.text()
    wait_until_settled(qtbot, window)


def run_until_its_last_tick(window: MainWindow, script: Path) -> None:
    """Run `script` through the window with no tick after the first until the run has ended:
    the test then calls the tick that takes in the run's samples and its end together
    (`window.session._tick()`), as one does whose last samples arrive with the end."""
    window.open_script(str(script))
    window.start_run()
    controller = window.session.controller
    assert controller is not None, window.setup_panel.problems.text()
    window.session.timer.stop()
    assert controller.wait(RUN_TIMEOUT_MS / 1000)


def wait_until_settled(qtbot: QtBot, window: MainWindow) -> None:
    """Until the run has ended, the window has drawn its end and the findings are final."""
    controller = window.session.controller
    assert controller is not None
    qtbot.waitUntil(
        lambda: (
            not controller.running
            and not window.session.timer.isActive()
            and not window.diagnosis.busy
        ),
        timeout=RUN_TIMEOUT_MS,
    )


def shown_timeline(qtbot: QtBot, profile: Profile, width: int, height: int) -> TimelineView:
    """A TimelineView of `profile` on screen at this size, laid out and exposed."""
    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(width, height)
    view.show()
    qtbot.waitExposed(view)
    view.set_profile(profile)
    return view
