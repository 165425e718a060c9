"""The desktop window, offscreen: run scripts through it, stop them, save and reopen profiles."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from memsight.app.mainwindow import MainWindow
from memsight.profiler.recorder import proctree
from tests.gui.support import (
    RUN_TIMEOUT_MS,
    run_to_end,
    run_until_its_last_tick,
    wait_until_settled,
)
from tests.support import write_script


@pytest.mark.slow  # runs a script through the window (~1 s)
def test_a_script_runs_through_the_window_and_everything_it_recorded_is_shown(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path,
        "small.py",
        """
        import sys, time
        blocks = []
        for i in range(4):
            blocks.append(bytearray(30 * 2**20))
            print("step", i, sys.argv[1:], flush=True)
            time.sleep(0.05)
        print("warning: done", file=sys.stderr)
        """,
    )
    run_to_end(qtbot, window, script, "--lr 0.1")
    profile = window.profile
    assert profile is not None and profile.complete
    item = window.timeline.curves["rss"].item
    x, y = item.xData, item.yData
    assert len(x) == profile.sample_count > 10
    assert profile.ram is not None
    assert np.array_equal(y, profile.ram["rss"].astype(float))
    console = window.console.text.toPlainText()
    assert "step 3 ['--lr', '0.1']" in console and "warning: done" in console
    assert window.status.state_label.text() == "Ended: exit code 0"
    assert window.session.controller is not None
    assert (
        window.error_box is None and window.session.controller.error is None
    )  # the recorder exited cleanly
    assert window.save_action.isEnabled() and window.run_action.isEnabled()
    assert not window.timeline.gpu_shown  # no CUDA: the RAM plot has the room
    assert "no GPU" in window.status.gpu_label.text()


def test_the_first_sample_is_on_screen_right_after_run(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "wait.py", "import time\ntime.sleep(3)\n")
    window.open_script(str(script))
    window.start_run()
    controller = window.session.controller
    assert controller is not None
    # The window redraws straight after launching: the recorder's first sample is taken before
    # the target's interpreter runs a line.
    qtbot.waitUntil(lambda: window.timeline.curves["rss"].item.xData is not None, timeout=2_000)
    assert window.status.state_label.text() == "Running" and window.stop_action.isEnabled()
    window.stop_run()
    qtbot.waitUntil(lambda: not controller.running, timeout=RUN_TIMEOUT_MS)


@pytest.mark.slow  # runs a script through the window (~1 s)
def test_stop_ends_the_whole_process_tree(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "workers.py",
        """
        import multiprocessing as mp, time
        def sleep_forever():
            time.sleep(600)
        if __name__ == "__main__":
            ctx = mp.get_context("fork")
            for _ in range(2):
                ctx.Process(target=sleep_forever).start()
            print("workers started", flush=True)
            time.sleep(600)
        """,
    )
    window.open_script(str(script))
    window.start_run()
    live = window.profile
    assert live is not None
    qtbot.waitUntil(lambda: len(live.children) >= 2, timeout=RUN_TIMEOUT_MS)
    tree = {pid: proctree.identity(pid) for pid in live.children}
    assert all(ident is not None for ident in tree.values())
    window.stop_run()
    wait_until_settled(qtbot, window)
    for pid, before in tree.items():
        now = proctree.identity(pid)
        assert before is not None
        assert now is None or now.start != before.start, f"worker {pid} survived Stop"
    assert window.profile is not None
    assert window.profile.info.signal in (signal.SIGTERM, signal.SIGKILL)
    assert window.status.state_label.text().startswith("Ended: killed by signal")


@pytest.mark.slow  # runs a script through the window (~1 s)
def test_a_saved_profile_reopens_looking_exactly_as_the_run_ended(
    qtbot: QtBot, window: MainWindow, store: QSettings, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "s.py", "b = bytearray(40 * 2**20)\nprint('bye')\n")
    run_to_end(qtbot, window, script)
    saved = tmp_path / "kept.memsight"
    assert window.save_to(str(saved))
    live = window.timeline.curves["tree"].item
    live_x, live_y = live.xData, live.yData
    live_readout = window.timeline.readout_at(0.2)
    live_status = [
        label.text()
        for label in (window.status.state_label, window.status.ram_label, window.status.gpu_label)
    ]

    reopened = MainWindow(store)
    qtbot.addWidget(reopened)
    assert reopened.open_profile(str(saved))
    item = reopened.timeline.curves["tree"].item
    x, y = item.xData, item.yData
    assert np.array_equal(x, live_x) and np.array_equal(y, live_y)
    assert reopened.timeline.readout_at(0.2) == live_readout
    assert [
        label.text()
        for label in (
            reopened.status.state_label,
            reopened.status.ram_label,
            reopened.status.gpu_label,
        )
    ] == live_status
    assert reopened.console.text.toPlainText() == "bye\n"
    assert str(saved.resolve()) in reopened.settings.recent_profiles


@pytest.mark.slow  # runs a script through the window (~1 s)
def test_a_run_is_remembered_among_recent_profiles_once_its_end_is_on_screen(
    qtbot: QtBot, window: MainWindow, store: QSettings, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "s.py", "b = bytearray(20 * 2**20)\n")
    syncs: list[bool] = []
    store_sync = store.sync

    def counted_sync() -> None:
        syncs.append(True)
        store_sync()

    store.sync = counted_sync  # type: ignore[method-assign]
    run_until_its_last_tick(window, script)
    syncs.clear()
    window.session._tick()
    # Not written in the frame that draws the run's end: the disk's wait is not that frame's.
    assert not syncs and not window.timeline.running
    wait_until_settled(qtbot, window)
    qtbot.waitUntil(lambda: bool(syncs), timeout=RUN_TIMEOUT_MS)
    assert window.profile_path is not None
    read_back = QSettings(store.fileName(), QSettings.Format.IniFormat)
    assert str(window.profile_path) in str(read_back.value("recent_profiles"))


@pytest.mark.slow  # runs a script through the window (~1 s)
def test_an_opened_profile_can_be_run_again(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "again.py", "import sys\nprint('args', sys.argv[1:])\n")
    run_to_end(qtbot, window, script, "--lr '0.1 0.2'", env="SEED=7")
    assert window.profile is not None and window.profile_path is not None
    saved = window.profile_path
    window.setup_panel.set_script("", None)  # as a fresh window would be

    assert window.open_profile(str(saved))
    panel = window.setup_panel
    assert Path(panel.script.text()).resolve() == script.resolve()
    assert panel.args.text() == "--lr '0.1 0.2'" and panel.env.toPlainText() == "SEED=7"
    window.start_run()
    wait_until_settled(qtbot, window)
    assert "args ['--lr', '0.1 0.2']" in window.console.text.toPlainText()


def test_a_bad_file_gets_a_one_line_error_dialog(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    bad = tmp_path / "broken.memsight"
    bad.write_bytes(b"MEMSIGHT\x01")
    assert not window.open_profile(str(bad))
    box = window.error_box
    assert box is not None and box.isVisible()
    assert box.text() == f"{bad}: truncated header (9 of 16 bytes)"
    assert box.textFormat() == Qt.TextFormat.PlainText
    box.close()
    assert window.profile is None


def test_opening_a_profile_says_so_while_it_reads_and_not_after(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A day-long run's profile takes seconds to read: the status bar names it and the cursor
    # waits meanwhile; both are gone once it is shown, or refused.
    from memsight.app import mainwindow
    from memsight.profiler.profile.storage import load_profile
    from tests.hostile.frames import small_profile

    seen: list[tuple[str, object]] = []
    real = load_profile

    def load(path: str) -> object:
        cursor = QApplication.overrideCursor()
        seen.append((window.status.currentMessage(), cursor and cursor.shape()))
        return real(path)

    monkeypatch.setattr(mainwindow, "load_profile", load)
    good, bad = tmp_path / "day.memsight", tmp_path / "bad.memsight"
    good.write_bytes(small_profile(rows=20))
    bad.write_bytes(b"MEMSIGHT\x01")
    assert window.open_profile(str(good))
    assert not window.open_profile(str(bad))
    wait = Qt.CursorShape.WaitCursor
    assert seen == [("Opening day.memsight…", wait), ("Opening bad.memsight…", wait)]
    assert window.status.currentMessage() == "" and QApplication.overrideCursor() is None
    assert window.error_box is not None
    window.error_box.close()


def test_invalid_setup_is_explained_before_anything_runs(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "t.py", "import torch\n")
    window.open_script(str(script))
    window.setup_panel.python.setCurrentText("/bin/true")
    window.start_run()
    assert window.session.controller is None
    assert "is not a Python interpreter" in window.setup_panel.problems.text()
    window.setup_panel.python.setCurrentText(sys.executable)
    window.setup_panel.env.setPlainText("NOT A PAIR")
    window.start_run()
    assert window.session.controller is None
    assert window.setup_panel.problems.text() == "Environment line 1 is not KEY=VALUE."
    window.setup_panel.env.setPlainText("")
    window.setup_panel.ram_budget.setText("lots")
    window.start_run()
    assert window.session.controller is None
    assert window.setup_panel.problems.text() == (
        "The RAM budget must be a size such as 6GiB or 512MiB, not 'lots'."
    )


def test_the_setup_of_each_script_is_remembered(
    qtbot: QtBot, window: MainWindow, store: QSettings, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "r.py", "import sys\nprint(sys.argv[1:])\n")
    run_to_end(qtbot, window, script, "--fast", env="SEED=3", ram_budget="6 GiB")
    assert window.profile is not None and window.profile.info.ram_budget_bytes == 6 * 2**30
    later = MainWindow(store)
    qtbot.addWidget(later)
    later.open_script(str(script))
    assert later.setup_panel.args.text() == "--fast"
    assert later.setup_panel.env.toPlainText() == "SEED=3"
    assert later.setup_panel.ram_budget.text() == "6 GiB"
    assert str(script.resolve()) in later.settings.recent_scripts


def test_a_run_that_cannot_start_says_why(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write_script(tmp_path, "ok.py", "pass\n")
    window.open_script(str(script))
    monkeypatch.setattr(
        "memsight.app.runsetup.check_run", lambda spec: []
    )  # let the bad interpreter through
    window.setup_panel.python.setCurrentText(str(tmp_path / "no-such-python"))
    window.start_run()
    qtbot.waitUntil(lambda: not window.session.timer.isActive(), timeout=RUN_TIMEOUT_MS)
    assert window.error_box is not None
    assert window.error_box.text().startswith("cannot start")
    assert "no-such-python" in window.error_box.text()


def test_dropping_a_script_opens_it_for_running(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "dropped.py", "pass\n")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(script))])
    event = QDropEvent(
        QPointF(10, 10),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    window.dropEvent(event)
    assert window.setup_panel.script.text() == str(script)


@pytest.mark.slow  # runs a script through the window (~1 s)
def test_the_readout_gives_exact_values_at_a_time(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path, "v.py", "import time\nb = bytearray(20 * 2**20)\ntime.sleep(0.3)\n"
    )
    run_to_end(qtbot, window, script)
    assert window.profile is not None
    ram = window.profile.ram
    assert ram is not None
    i = len(ram) // 2
    text = window.timeline.readout_at(float(ram.t[i]))
    from memsight.profiler.units import format_bytes

    assert f"main {format_bytes(int(ram['rss'][i]))}" in text
    assert text.startswith(f"t = {ram.t[i]:.3f} s")


def test_a_script_named_relative_to_where_memsight_started_can_run(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_script(tmp_path / "examples", "train.py", "pass\n")
    monkeypatch.chdir(tmp_path)
    window.open_path("examples/train.py")  # `memsight examples/train.py`, run from tmp_path
    spec = window.setup_panel.validate()
    assert spec is not None, window.setup_panel.problems.text()
    assert Path(spec.cwd, spec.target) == tmp_path / "examples" / "train.py"
