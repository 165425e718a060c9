"""File → Attach to Process…: a running Python process recorded live, then left running."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from memsight.app.attachdialog import AttachDialog
from memsight.app.mainwindow import MainWindow
from memsight.profiler.profile.storage import load_profile
from tests.gui.support import RUN_TIMEOUT_MS, wait_until_settled
from tests.support import child_env, way_in, write_script

pytestmark = pytest.mark.slow  # a real process, a debugger

LOOP = """\
import os, time
import torch
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print("ready", flush=True)
while not os.path.exists("stop"):
    loss = model(torch.randn(16, 32)).sum()
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.005)
"""


@pytest.fixture
def looping(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    write_script(tmp_path, "loop.py", LOOP)
    process = subprocess.Popen(
        [sys.executable, "loop.py"],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    yield process
    (tmp_path / "stop").write_text("")
    process.wait(timeout=60)
    process.stdout.close()


def test_the_dialog_lists_the_users_python_processes_not_memsights_own(
    qtbot: QtBot, window: MainWindow, looping: subprocess.Popen[str]
) -> None:
    dialog = AttachDialog(window)
    qtbot.addWidget(dialog)
    assert not dialog.attach_button.isEnabled()  # nothing chosen yet
    assert dialog.choose(looping.pid)
    assert dialog.attach_button.isEnabled()
    rows = [dialog.proxy.index(r, 2).data() for r in range(dialog.proxy.rowCount())]
    assert any("loop.py" in row for row in rows)
    assert not dialog.choose(0)
    dialog.filter.setText("no such program anywhere")
    assert dialog.proxy.rowCount() == 0


@pytest.mark.skipif(
    not way_in(),
    reason="before Python 3.14 gdb is memsight's way into a running process: it is not "
    "installed, or cannot call functions in a process on this machine",
)
def test_an_attached_process_shows_live_and_goes_on_after_stop(
    qtbot: QtBot, window: MainWindow, looping: subprocess.Popen[str]
) -> None:
    assert window.attach_to(looping.pid)
    live = window.profile
    assert live is not None
    qtbot.waitUntil(
        lambda: any(e.type == "agent_connected" for e in live.events) and live.sample_count > 50,
        timeout=RUN_TIMEOUT_MS,
    )
    assert not window.console.input.isEnabled()  # its stdin is its own
    assert "attached" in window.windowTitle()
    window.stop_run()  # detaches
    wait_until_settled(qtbot, window)
    assert looping.poll() is None  # it goes on
    assert window.profile_path is not None
    saved = load_profile(window.profile_path)
    assert saved.info.attached and saved.info.detached
    assert saved.info.ended_by == "detached; the process went on"
    assert window.error_box is None
