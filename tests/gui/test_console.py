"""The console holds a bounded tail of the output: the last lines, each cut when very long
(with a note saying so), so that no output can make the window slow or eat its memory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from memsight.app.console import MAX_CHARS, MAX_LINE_CHARS, MAX_LINES, ConsoleView
from memsight.app.mainwindow import MainWindow
from memsight.profiler import protocol
from memsight.profiler.profile.model import OutputChunk, Profile
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.blocks import TableBuffer
from tests.gui.support import run_to_end
from tests.support import write_script

T0 = 5_000_000_000


def write_profile(path: Path, *outputs: bytes) -> None:
    ram = TableBuffer(protocol.RAM_TABLE)
    ram.add((T0, 1 << 20, 1 << 20, 0, 1 << 30))
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": T0, "script": "t.py"}))
    writer.write(protocol.RAM_TABLE.frame())
    writer.write(ram.drain())
    for i, data in enumerate(outputs):
        writer.write(protocol.output_frame(protocol.STDOUT, T0 + i, data))
    writer.close()


def lines_of(console: ConsoleView) -> list[str]:
    return console.text.toPlainText().split("\n")


def test_a_huge_line_is_cut_with_a_note_and_the_file_opens_at_once(
    window: MainWindow, tmp_path: Path
) -> None:
    path = tmp_path / "p.memsight"
    write_profile(path, b"start " + b"x" * (40 << 20) + b"\nafter\n")
    started = time.perf_counter()
    assert window.open_profile(str(path))
    took = time.perf_counter() - started
    lines = lines_of(window.console)
    assert lines[0].startswith("start xxx") and "[line cut: longer than" in lines[0]
    assert len(lines[0]) < MAX_LINE_CHARS + 100
    assert lines[1] == "after"
    # Before: every character went into the widget (24 s and 2.6 GB for 60 MiB).
    assert took < 5, took


def test_only_the_last_lines_are_kept_and_the_console_says_so(
    window: MainWindow, tmp_path: Path
) -> None:
    path = tmp_path / "p.memsight"
    count = 3 * MAX_LINES
    write_profile(path, "".join(f"line {i}\n" for i in range(count)).encode())
    assert window.open_profile(str(path))
    lines = lines_of(window.console)
    assert lines[0].startswith(f"… {count - MAX_LINES:,} earlier lines not shown")
    assert lines[1] == f"line {count - MAX_LINES}"
    assert lines[-2] == f"line {count - 1}" and lines[-1] == ""
    assert window.console.text.document().blockCount() <= MAX_LINES + 2


def test_live_output_of_one_long_line_in_many_pieces_stays_bounded(qtbot: QtBot) -> None:
    console = ConsoleView()
    qtbot.addWidget(console)
    profile = Profile()
    console.set_profile(profile)
    for i in range(300):  # 300 pieces of 10,000 characters: one 3 MB line, as a run sends it
        profile.output.append(OutputChunk(i, protocol.STDOUT, "y" * 10_000))
        console.refresh()
    profile.output.append(OutputChunk(300, protocol.STDERR, "\r\nnext line\n"))
    console.refresh()
    lines = lines_of(console)
    assert (
        lines[0]
        == "y" * MAX_LINE_CHARS + f" … [line cut: longer than {MAX_LINE_CHARS:,} characters]"
    )
    assert lines[1:] == ["next line", ""]
    assert console.text.document().characterCount() <= MAX_CHARS


def test_the_console_never_holds_more_than_its_character_bound(qtbot: QtBot) -> None:
    console = ConsoleView()
    qtbot.addWidget(console)
    profile = Profile()
    console.set_profile(profile)
    long_line = "z" * (MAX_LINE_CHARS - 1) + "\n"
    for i in range(4):
        profile.output.append(OutputChunk(i, protocol.STDOUT, long_line * (MAX_LINES // 4)))
        console.refresh()
    assert console.text.document().characterCount() <= MAX_CHARS
    assert lines_of(console)[-2] == long_line.strip()


@pytest.mark.slow  # a real run
def test_a_run_printing_a_3_mib_line_keeps_the_window_responsive(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path,
        "long_line.py",
        """
        import sys
        sys.stdout.write("a" * (3 << 20))
        sys.stdout.write("\\nthe end\\n")
        """,
    )
    run_to_end(qtbot, window, script)
    lines = lines_of(window.console)
    assert "[line cut: longer than" in lines[0] and "the end" in lines
    # Before: 21 s in one frame. Each frame now handles a bounded amount of text.
    assert max(window.session.frame_ms) < 1000, max(window.session.frame_ms)


def test_a_script_waiting_for_input_says_so_and_brings_the_console_to_the_front(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(
        tmp_path,
        "ask.py",
        "name = input('name? ')\nprint('hello', name, flush=True)\n"
        "total = 0\nfor i in range(400_000_000):\n    total += i\n",
    )
    window.open_script(str(script))
    window.show()
    qtbot.waitExposed(window)
    window.contents_dock.raise_()  # the console behind another tab, as a user may leave it
    window.start_run()
    qtbot.waitUntil(lambda: window.session.waiting_for_input, timeout=60_000)
    qtbot.waitUntil(window.console.isVisible)
    assert window.console.waiting.isVisible()
    assert window.status.state_label.text() == "Running: waiting for input"
    window.console.input.setText("Ada")
    window.console.input.returnPressed.emit()
    # Answered, the script works on: the sign goes, the run goes on.
    qtbot.waitUntil(lambda: not window.console.waiting.isVisible(), timeout=60_000)
    window._update_status()
    assert window.status.state_label.text() == "Running"
    assert window.session.running
    window.stop_run()
    qtbot.waitUntil(lambda: not window.session.running, timeout=60_000)
    assert not window.console.waiting.isVisible()
