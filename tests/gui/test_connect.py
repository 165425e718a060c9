"""File → Connect…: a run served by `memsight run --serve` shown live, its copy kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from memsight.app.connectdialog import ConnectDialog
from memsight.app.mainwindow import MainWindow
from memsight.profiler.profile.storage import load_profile
from tests.gui.support import RUN_TIMEOUT_MS, wait_until_settled
from tests.load import deadline
from tests.served import Served, served_run

pytestmark = pytest.mark.slow  # a real served run


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with served_run(tmp_path) as run:
        yield run


def test_a_served_run_shows_live_and_its_end_arrives_with_a_copy_kept(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
    served: Served,
) -> None:
    host, port = served.host_and_port
    assert window.watch_served_run(host, port, served.token)
    live = window.profile
    assert live is not None
    qtbot.waitUntil(lambda: live.sample_count >= 30, timeout=RUN_TIMEOUT_MS)
    # Live as a local run, but its stdin is where it runs: no input line here.
    assert window.session.running and not window.console.input.isEnabled()
    assert f"{host}:{port}" in window.windowTitle()
    (tmp_path / "stop").write_text("")
    wait_until_settled(qtbot, window)
    assert served.process.wait(timeout=deadline(60)) == 3
    shown = window.profile
    assert shown is not None and shown.info.exit_code == 3
    original = load_profile(tmp_path / "served.memsight")
    assert shown.sample_count == original.sample_count
    assert window.profile_path is not None
    copy = load_profile(window.profile_path)
    assert copy.sample_count == original.sample_count and copy.info.exit_code == 3
    assert window.error_box is None


def test_a_wrong_token_says_so_and_the_served_run_goes_on(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
    served: Served,
) -> None:
    host, port = served.host_and_port
    window.watch_served_run(host, port, "wrong")
    qtbot.waitUntil(lambda: window.error_box is not None, timeout=RUN_TIMEOUT_MS)
    assert window.error_box is not None
    assert "wrong token" in window.error_box.text() + window.error_box.informativeText()
    assert served.process.poll() is None  # still recording


def test_the_dialog_reads_the_address_and_says_what_is_wrong(
    qtbot: QtBot, window: MainWindow
) -> None:
    dialog = ConnectDialog(window.store, window)
    qtbot.addWidget(dialog)
    dialog.address.setText("gpu-box:99999")
    dialog.token.setText("t")
    dialog.accept()
    assert dialog.result() != ConnectDialog.DialogCode.Accepted
    assert "65535" in dialog.problem.text()
    dialog.address.setText("127.0.0.1:8765")
    dialog.token.setText("")
    dialog.accept()
    assert "Token" in dialog.problem.text()
    dialog.token.setText("abc")
    dialog.accept()
    assert dialog.result() == ConnectDialog.DialogCode.Accepted
    assert (dialog.host, dialog.port, dialog.token_text) == ("127.0.0.1", 8765, "abc")
    # The address is offered again next time.
    assert ConnectDialog(window.store, window).address.text() == "127.0.0.1:8765"
