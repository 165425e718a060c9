"""Every string from the target is shown as the literal string it is, in every widget.

Qt renders tooltips and labels in their automatic format as rich text when they look like
HTML (Qt::mightBeRichText), pyqtgraph's line labels are format strings, and a window title
hides "[*]": a profile whose strings carry such markup must show them as written
(docs/architecture.md, Reliability)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import Qt as QtGuiNamespace
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from memsight.app.eventlane import mark_tip
from memsight.app.mainwindow import MainWindow
from memsight.profiler import protocol
from memsight.profiler.diagnosis.contents import census_label, censuses
from memsight.profiler.launch.preflight import Problem
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.blocks import TableBuffer
from tests.factories import holder

T0 = 5_000_000_000
PAYLOADS = ["<img src=x>", "<b>bold</b>", "&lt;", "{0}", "[*]"]
PAYLOAD = "".join(PAYLOADS)
NAME_PAYLOAD = PAYLOAD.replace("/", "")  # as much of it as a file name can hold


def shown(text: str) -> str:
    """What Qt shows for a tooltip: rich text when it looks like markup, else the text."""
    if QtGuiNamespace.mightBeRichText(text):
        document = QTextDocument()
        document.setHtml(text)
        text = document.toPlainText()
    return re.sub(r"\s+", " ", text.replace("\u00a0", " "))


def _labelled(line: object) -> bool:
    return getattr(line, "label", None) is not None


def write_profile(path: Path, text: str, cwd: Path) -> None:
    """A finished run whose target-made strings all carry `text`: script and argv, a child, a
    device, an uncaught exception, a census holder and the output."""
    ram = TableBuffer(protocol.RAM_TABLE)
    for i in range(50):
        ram.add((T0 + i * 10_000_000, 100 << 20, 100 << 20, 0, 1 << 30))
    census = {"holders": [holder(f"batch{text}", "local", 4 << 20, owner=f"train{text}")]}
    events = [
        {"t": T0 + 1, "type": "cuda_init",
         "devices": [{"index": 0, "name": f"GPU{text}", "total_bytes": 8 << 30}]},
        {"t": T0 + 2, "type": "child_started", "pid": 77, "ppid": 1, "name": f"worker{text}",
         "cmdline": ["python", text]},
        {"t": T0 + 100_000_000, "type": "census", "iterations_are": f"steps{text}",
         "iteration": 5, "census": census},
        {"t": T0 + 400_000_000, "type": "exception", "exc_id": 1,
         "exc_type": f"builtins.Evil{text}", "message": f"boom{text}", "uncaught": True,
         "traceback": [{"file": str(cwd / f"train{text.replace('/', '')}.py"), "line": 3,
                        "function": f"main{text}", "source": f"x = 1{text}"}]},
        {"t": T0 + 500_000_000, "type": "exit", "exit_code": 1},
        {"t": T0 + 500_000_000, "type": "recording_end"},
    ]  # fmt: skip
    run = {
        "t0_ns": T0, "script": f"train{text.replace('/', '')}.py", "argv": [text, "--lr"], "cwd": str(cwd),
        "hostname": f"host{text}", "interval_ms": 10, "start_time": "2026-11-22T10:15:00",
    }  # fmt: skip
    writer = ProfileWriter(path)
    for frame in (
        protocol.encode_json_frame(protocol.RUN, run),
        protocol.RAM_TABLE.frame(),
        ram.drain(),
        protocol.output_frame(protocol.STDOUT, T0 + 3, f"out{text}\n".encode()),
        protocol.output_frame(protocol.STDERR, T0 + 4, f"err{text}\n".encode()),
        protocol.encode_json_frame(protocol.EVENTS, events),
    ):
        writer.write(frame)
    writer.close()


@pytest.fixture
def opened(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> MainWindow:
    (tmp_path / f"train{NAME_PAYLOAD}.py").write_text("x = 1\n")  # the run can be prepared again
    path = tmp_path / "p.memsight"
    write_profile(path, PAYLOAD, tmp_path)
    assert window.open_profile(str(path))
    qtbot.waitUntil(lambda: window.findings.list.count() > 0 and not window.diagnosis.busy)
    return window


def test_findings_list_and_details_show_the_literal_text(opened: MainWindow) -> None:
    findings = opened.findings
    item = findings.list.item(0)
    assert PAYLOAD in item.text()
    assert PAYLOAD in shown(item.toolTip())  # rendered as HTML before: an image, bold text
    findings.list.setCurrentRow(0)
    assert PAYLOAD in findings.details.toPlainText()
    assert findings.header.textFormat() == Qt.TextFormat.PlainText


def test_contents_table_and_its_tooltips_show_the_literal_text(opened: MainWindow) -> None:
    contents = opened.contents
    cell = contents.model.item(0, 0)
    assert f"batch{PAYLOAD}" in cell.text()
    assert f"batch{PAYLOAD}" in shown(cell.toolTip())
    census = censuses(opened.profile)[0]  # type: ignore[arg-type]
    assert contents.census.itemText(0) == census_label(census)
    assert f"steps{PAYLOAD}" in contents.census.itemText(0)


def test_timeline_labels_and_tooltips_show_the_literal_text(opened: MainWindow) -> None:
    timeline = opened.timeline
    # The line at the uncaught exception (drawn as plain text), and the device's capacity: a
    # format string to pyqtgraph, where "{0}" raised IndexError and stopped the profile opening.
    labels = [label.text for label in timeline.event_lane.labels.entries]
    assert any(f"Evil{PAYLOAD}" in label for label in labels), labels
    limits = [line.label.toPlainText() for _, line in timeline._limit_lines if _labelled(line)]
    assert any(f"GPU{PAYLOAD} capacity" in label for label in limits), limits
    assert f"Evil{PAYLOAD}" in shown(mark_tip(0.4, 2.4, f"error: Evil{PAYLOAD}"))
    census = censuses(opened.profile)[0]  # type: ignore[arg-type]
    timeline.mark_times([(census.t, census_label(census, time=False))])
    marks = [label.text for label in timeline.event_lane.labels.entries if label.census]
    assert any(f"steps{PAYLOAD}" in mark for mark in marks), marks
    assert timeline.readout.textFormat() == Qt.TextFormat.PlainText


def test_console_window_title_run_setup_and_status_bar_show_the_literal_text(
    opened: MainWindow,
) -> None:
    text = opened.console.text.toPlainText()
    assert f"out{PAYLOAD}" in text and f"err{PAYLOAD}" in text
    handle = opened.windowHandle()
    assert (
        handle is not None and handle.title() == f"memsight — train{NAME_PAYLOAD}.py {PAYLOAD} --lr"
    )
    setup = opened.setup_panel
    assert setup.script.text().endswith(f"train{NAME_PAYLOAD}.py")
    assert shlex.split(setup.args.text()) == [PAYLOAD, "--lr"]
    setup.show_problems([Problem("script", f"no such file: {PAYLOAD}")])
    assert setup.problems.textFormat() == Qt.TextFormat.PlainText
    assert setup.problems.text() == f"no such file: {PAYLOAD}"
    opened.findings.message.emit(f"Could not open {PAYLOAD}")
    assert opened.statusBar().currentMessage() == f"Could not open {PAYLOAD}"
    for label in opened.statusBar().findChildren(QLabel):
        assert label.textFormat() == Qt.TextFormat.PlainText, label.text()


def test_an_error_dialog_quoting_a_file_name_shows_it_literally(
    window: MainWindow, tmp_path: Path
) -> None:
    path = tmp_path / f"bad{NAME_PAYLOAD}.memsight"
    path.write_bytes(b"not a profile")
    assert not window.open_profile(str(path))
    box = window.error_box
    assert box is not None and box.textFormat() == Qt.TextFormat.PlainText
    assert f"bad{NAME_PAYLOAD}.memsight" in box.text()
    box.close()
