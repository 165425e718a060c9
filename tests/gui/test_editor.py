"""Opening a finding's location in the user's editor.

- The command line for each known editor, from the settings, $VISUAL or $EDITOR; terminal
  editors in a terminal emulator; the desktop's handler otherwise. Nothing is launched here.
- The findings panel lists a finding's locations as `file:line — code`, and a click opens the
  one clicked, at its line, in the editor the settings name; the status bar says how that went
  (real programs on PATH stand in for the editor and for xdg-open).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt, QUrl
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

import memsight.app.findings as findings_module
from memsight.app.editor import EDITOR_KEY, editor_command, open_location, terminal_prefix
from memsight.app.mainwindow import MainWindow
from memsight.profiler.diagnosis import Diagnosis, Evidence, Finding, Location
from memsight.profiler.profile.model import Profile
from tests.factories import MiB, census, holder, profile

FILE = "/work/my project/train.py"  # a space: one argument all the same, never split


def no_terminal(name: str) -> str | None:
    return None


def every_program(name: str) -> str | None:
    return f"/usr/bin/{name}"


@pytest.mark.parametrize(
    "editor, expected",
    [
        ("code", ["code", "--goto", f"{FILE}:25"]),
        ("codium", ["codium", "--goto", f"{FILE}:25"]),
        ("/snap/bin/code --wait", ["/snap/bin/code", "--wait", "--goto", f"{FILE}:25"]),
        ("subl", ["subl", f"{FILE}:25"]),
        ("sublime_text", ["sublime_text", f"{FILE}:25"]),
        ("gedit", ["gedit", "+25", FILE]),
        ("kate", ["kate", "--line", "25", FILE]),
        ("emacs", ["emacs", "+25", FILE]),
        ("emacsclient -c", ["emacsclient", "-c", "+25", FILE]),
    ],
)
def test_a_desktop_editor_from_the_environment_opens_the_file_at_the_line(
    editor: str, expected: list[str]
) -> None:
    assert editor_command(FILE, 25, environ={"EDITOR": editor}, which=no_terminal) == expected


@pytest.mark.parametrize(
    "editor, expected",
    [
        ("vim", ["vim", "+25", FILE]),
        ("nvim", ["nvim", "+25", FILE]),
        ("vi", ["vi", "+25", FILE]),
        ("nano", ["nano", "+25", FILE]),
        ("micro", ["micro", "+25", FILE]),
        ("kak", ["kak", "+25", FILE]),
        ("hx", ["hx", f"{FILE}:25"]),
    ],
)
def test_a_terminal_editor_opens_in_a_terminal_emulator(editor: str, expected: list[str]) -> None:
    env = {"VISUAL": editor, "TERMINAL": "kitty"}
    assert editor_command(FILE, 25, environ=env, which=every_program) == ["kitty", "-e", *expected]


def test_without_a_terminal_emulator_a_terminal_editor_gives_way_to_the_desktop() -> None:
    assert editor_command(FILE, 25, environ={"EDITOR": "vim"}, which=no_terminal) is None


def test_the_terminal_emulator_is_terminal_then_the_systems_choice() -> None:
    assert terminal_prefix({"TERMINAL": "alacritty"}, every_program) == ["alacritty", "-e"]
    assert terminal_prefix({}, every_program) == ["x-terminal-emulator", "-e"]
    only_gnome = {"gnome-terminal": "/usr/bin/gnome-terminal"}.get
    assert terminal_prefix({}, only_gnome) == ["gnome-terminal", "--"]
    assert terminal_prefix({"TERMINAL": "missing"}, no_terminal) is None


def test_visual_comes_before_editor_and_unknown_editors_are_passed_over() -> None:
    env = {"VISUAL": "code", "EDITOR": "vim"}
    assert editor_command(FILE, 3, environ=env, which=no_terminal) == [
        "code",
        "--goto",
        f"{FILE}:3",
    ]
    env = {"VISUAL": "my-own-script", "EDITOR": "subl"}
    assert editor_command(FILE, 3, environ=env, which=no_terminal) == ["subl", f"{FILE}:3"]
    assert editor_command(FILE, 3, environ={"EDITOR": "ed"}, which=no_terminal) is None
    assert editor_command(FILE, 3, environ={}, which=no_terminal) is None


def test_the_setting_comes_first_with_its_placeholders_or_as_an_editor() -> None:
    env = {"EDITOR": "vim"}
    placed = editor_command(FILE, 7, "pycharm --line {line} {file}", env, no_terminal)
    assert placed == ["pycharm", "--line", "7", FILE]
    assert editor_command(FILE, 7, "kate", env, no_terminal) == ["kate", "--line", "7", FILE]
    assert editor_command(FILE, 7, "my-editor --new", env, no_terminal) == [
        "my-editor",
        "--new",
        FILE,
    ]
    assert editor_command(FILE, 7, "   ", {"EDITOR": "subl"}, no_terminal) == ["subl", f"{FILE}:7"]


def test_a_file_that_is_gone_is_said_so_and_nothing_is_started(tmp_path: Path) -> None:
    store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    store.setValue(EDITOR_KEY, "/nonexistent/editor {file}")
    problem = open_location(str(tmp_path / "gone.py"), 3, store)
    assert isinstance(problem, str) and "gone.py is not there" in problem


# -- the findings panel -----------------------------------------------------------------------


def located_finding(script: Path) -> Finding:
    return Finding(
        "out-of-memory",
        "critical",
        "The run ran out of RAM in forward after 5 optimizer steps",
        "explanation",
        Evidence("RuntimeError: the allocator could not provide 1.00 TiB", 4.0, 7.0, "ram"),
        ("smaller-batch",),
        where=(
            Location(str(script), 22, "forward", "return (q @ k.transpose(-2, -1)) @ v"),
            Location("/venv/site-packages/torch/nn/functional.py", 5000, "softmax"),
        ),
    )


def test_the_panel_shows_each_location_and_a_click_opens_it_in_the_editor(
    window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a finding that names the model's line, and an editor chosen in the settings
    script = tmp_path / "model.py"
    script.write_text("\n" * 30)
    run = Profile()
    run.info.cwd = str(tmp_path)
    window.store.setValue(EDITOR_KEY, "code")
    opened: list[tuple[str, int, str]] = []

    def fake_open(file: str, line: int, store: QSettings) -> str | None:
        opened.append((file, line, str(store.value(EDITOR_KEY))))
        return None

    monkeypatch.setattr(findings_module, "open_location", fake_open)
    panel = window.findings
    panel.set_diagnosis(run, Diagnosis([located_finding(script)]), final=True)

    # When the finding is selected
    panel.list.setCurrentRow(0)

    # Then its places are listed under it as file:line — code, the run's own files relative
    shown = panel.details.toPlainText()
    assert "Where to look" in shown
    assert "\nmodel.py:22 — return (q @ k.transpose(-2, -1)) @ v" in shown
    assert str(script) not in shown
    assert "/venv/site-packages/torch/nn/functional.py:5000" in shown

    # And a click on the first opens that file at that line with the configured editor
    panel.details.anchorClicked.emit(QUrl("open:0"))
    assert opened == [(str(script), 22, "code")]


def test_a_location_that_cannot_be_opened_says_why_in_the_status_bar(
    window: MainWindow, tmp_path: Path
) -> None:
    gone = tmp_path / "deleted.py"  # the script was removed after the run
    panel = window.findings
    panel.set_diagnosis(Profile(), Diagnosis([located_finding(gone)]), final=True)
    panel.list.setCurrentRow(0)
    panel.details.anchorClicked.emit(QUrl("open:0"))
    message = window.statusBar().currentMessage()
    assert f"Could not open {gone}:22" in message and "is not there any more" in message


def test_double_clicking_a_holder_in_the_contents_opens_where_it_lives(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[tuple[str, int]] = []
    monkeypatch.setattr(
        findings_module, "open_location", lambda file, line, store: opened.append((file, line))
    )
    # Given a run whose census names `kept`, a local of train() at train.py:9 (relative path)
    kept = holder("kept", "local", 5 * MiB, count=5, file="train.py", line=9)
    untraced = holder("model", "global", 9 * MiB, file=None, line=None)
    run = profile(events=[census(1.0, 5, kept, untraced)], end_t=2.0)
    run.info.cwd = str(tmp_path)
    window._show_profile(run, tmp_path / "run.memsight")
    window.contents_dock.raise_()
    table = window.contents.table
    names = [table.model().index(r, 0).data() for r in range(table.model().rowCount())]

    # When the user double-clicks the global, whose line is unknown, nothing opens, and the
    # status bar says why
    model_cell = table.model().index(names.index(next(n for n in names if "model" in n)), 0)
    rect = table.visualRect(model_cell)
    double_click(qtbot, table.viewport(), rect.center())
    assert opened == []
    said = window.statusBar().currentMessage()
    assert "model" in said and "No line to open: a module's global" in said

    # And double-clicking `kept` opens train.py of the run's directory at line 9
    kept_cell = table.model().index(names.index(next(n for n in names if "kept" in n)), 3)
    rect = table.visualRect(kept_cell)
    double_click(qtbot, table.viewport(), rect.center())
    assert opened == [(str(tmp_path / "train.py"), 9)]


def double_click(qtbot: QtBot, widget: QWidget, pos: QPoint) -> None:
    """A user's double-click: Qt's item views act on the second click of a press and release."""
    qtbot.mouseClick(widget, Qt.MouseButton.LeftButton, pos=pos)  # type: ignore[no-untyped-call]
    qtbot.mouseDClick(widget, Qt.MouseButton.LeftButton, pos=pos)  # type: ignore[no-untyped-call]


def click_the_first_place(window: MainWindow, folder: Path) -> Path:
    """A finding naming line 22 of a script in `folder`, selected, and a click on that place;
    the script."""
    script = folder / "model.py"
    script.write_text("\n" * 30)
    panel = window.findings
    panel.set_diagnosis(Profile(), Diagnosis([located_finding(script)]), final=True)
    panel.list.setCurrentRow(0)
    panel.details.anchorClicked.emit(QUrl("open:0"))
    return script


def program(folder: Path, name: str, status: int) -> Path:
    """A real program on PATH that exits with `status` (an opener that failed or worked)."""
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\nexit {status}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (3, "xdg-open exited with status 3; no application opens this file here"),
        (0, "with the desktop's application, which cannot be told line 22"),
    ],
)
def test_a_click_with_no_editor_set_says_how_the_desktop_opener_went(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    status: int, said: str,
) -> None:  # fmt: skip
    # No editor chosen, none in $VISUAL or $EDITOR: the desktop's opener gets the file, and its
    # failure (xdg-open with no application for .py files) is said, not swallowed.
    bin_dir = tmp_path / "bin"
    program(bin_dir, "xdg-open", status)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    script = click_the_first_place(window, tmp_path)
    assert window.statusBar().currentMessage() == f"Opening {script}:22 with xdg-open…"
    qtbot.waitUntil(lambda: said in window.statusBar().currentMessage(), timeout=10_000)


def test_a_click_with_an_editor_set_says_it_opened_the_line(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    editor = program(tmp_path / "bin", "my-editor", 0)
    window.store.setValue(EDITOR_KEY, f"{editor} --line {{line}} {{file}}")
    script = click_the_first_place(window, tmp_path)
    expected = f"Opened {script}:22 in my-editor"
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() == expected, timeout=10_000)
