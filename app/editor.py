"""Open a line of the user's code in their editor: the places a finding names (its `where`).

Which editor: the command in the settings (EDITOR_KEY) when there is one, else `$VISUAL` or
`$EDITOR` when it names an editor known here, else whatever the desktop opens .py files with
(which cannot be told a line). A command in the settings may place `{file}` and `{line}`
itself (`kitty nvim +{line} {file}`); without them it is read like `$EDITOR`: a known editor
gets its own way of naming the line, any other program the file alone.

Editors that draw in a terminal (vim, nano, helix...) are started in a terminal emulator:
the app has no terminal of its own to give them, and one started from a shell would fight that
shell for its terminal. Without a terminal emulator to be found, the desktop's handler opens
the file instead.

Commands run with no shell (nothing in a path is ever interpreted) and in a session of their
own, so that closing memsight leaves the editor open.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from PySide6.QtCore import QObject, QSettings, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices

EDITOR_KEY = "editor/command"
# How long an opener is watched for a failure: editors' launchers and xdg-open exit within it.
WATCH_S = 5.0
WATCH_EVERY_MS = 200


class LineStyle(Enum):
    """How an editor is told the line to open a file at."""

    GOTO = "goto"  # code --goto FILE:LINE
    PLUS = "plus"  # vim +LINE FILE
    COLON = "colon"  # subl FILE:LINE
    LINE_FLAG = "line-flag"  # kate --line LINE FILE


# Known editors by program name: how they take a line, and whether they need a terminal.
EDITORS: dict[str, tuple[LineStyle, bool]] = {
    "code": (LineStyle.GOTO, False),
    "code-insiders": (LineStyle.GOTO, False),
    "codium": (LineStyle.GOTO, False),
    "vscodium": (LineStyle.GOTO, False),
    "vim": (LineStyle.PLUS, True),
    "nvim": (LineStyle.PLUS, True),
    "vi": (LineStyle.PLUS, True),
    "nano": (LineStyle.PLUS, True),
    "micro": (LineStyle.PLUS, True),
    "kak": (LineStyle.PLUS, True),
    # Helix reads +LINE only since 25.01; FILE:LINE works in every release.
    "hx": (LineStyle.COLON, True),
    "helix": (LineStyle.COLON, True),
    "emacs": (LineStyle.PLUS, False),  # opens its own window on a desktop
    "emacsclient": (LineStyle.PLUS, False),
    "gvim": (LineStyle.PLUS, False),
    "gedit": (LineStyle.PLUS, False),
    "gnome-text-editor": (LineStyle.PLUS, False),
    "kate": (LineStyle.LINE_FLAG, False),
    "subl": (LineStyle.COLON, False),
    "sublime_text": (LineStyle.COLON, False),
}
# Terminal emulators tried for a terminal editor, after $TERMINAL; each runs the rest of its
# command line with -e.
TERMINALS = ("x-terminal-emulator", "gnome-terminal", "konsole", "xfce4-terminal", "xterm")

Which = Callable[[str], str | None]


def _with_line(program: list[str], style: LineStyle, file: str, line: int) -> list[str]:
    if style is LineStyle.GOTO:
        return [*program, "--goto", f"{file}:{line}"]
    if style is LineStyle.PLUS:
        return [*program, f"+{line}", file]
    if style is LineStyle.COLON:
        return [*program, f"{file}:{line}"]
    return [*program, "--line", str(line), file]


def terminal_prefix(environ: Mapping[str, str], which: Which = shutil.which) -> list[str] | None:
    """The start of a command line that runs the rest in a new terminal window, if any."""
    configured = shlex.split(environ.get("TERMINAL", ""))
    if configured and which(configured[0]):
        return [*configured, "-e"]
    for name in TERMINALS:
        if which(name):
            # gnome-terminal's -e takes one string; its `--` takes the command as it is.
            return [name, "--"] if name == "gnome-terminal" else [name, "-e"]
    return None


def _known_editor_command(
    spec: str, file: str, line: int, environ: Mapping[str, str], which: Which
) -> list[str] | None:
    """The command for an editor given as `$EDITOR` is (a program and its options), or None
    when the program is not known here or needs a terminal there is none of."""
    try:
        program = shlex.split(spec)
    except ValueError:
        return None
    if not program:
        return None
    known = EDITORS.get(os.path.basename(program[0]))
    if known is None:
        return None
    style, needs_terminal = known
    command = _with_line(program, style, file, line)
    if not needs_terminal:
        return command
    terminal = terminal_prefix(environ, which)
    return [*terminal, *command] if terminal is not None else None


def editor_command(
    file: str,
    line: int,
    configured: str = "",
    environ: Mapping[str, str] | None = None,
    which: Which = shutil.which,
) -> list[str] | None:
    """The command line that opens `file` at `line`, or None for the desktop's handler.

    `configured` is the command from the settings; `environ` supplies $VISUAL, $EDITOR and
    $TERMINAL (the process's environment by default)."""
    env = os.environ if environ is None else environ
    configured = configured.strip()
    if configured:
        try:
            words = shlex.split(configured)
        except ValueError:
            words = []
        if any("{file}" in word for word in words):
            return [word.replace("{file}", file).replace("{line}", str(line)) for word in words]
        known = _known_editor_command(configured, file, line, env, which)
        if known is not None:
            return known
        if words and os.path.basename(words[0]) not in EDITORS:
            return [*words, file]  # a program we do not know: it gets the file, at least
    for variable in ("VISUAL", "EDITOR"):
        command = _known_editor_command(env.get(variable, ""), file, line, env, which)
        if command is not None:
            return command
    return None


@dataclass(frozen=True)
class Started:
    """The program started to open a location, to be watched: most editors' launchers and the
    desktop's opener exit at once, and a failure then is only seen in their exit status."""

    process: subprocess.Popen[bytes]
    program: str  # its name, for what the app says
    at_line: bool  # told the line (an editor), or only the file (the desktop's opener)


def desktop_opener(which: Which = shutil.which) -> list[str] | None:
    """The desktop's file opener as a command whose exit status tells whether it found an
    application (xdg-open on Linux and the BSDs); None where only Qt's call is there."""
    if sys.platform.startswith(("darwin", "win")):
        return None
    return ["xdg-open"] if which("xdg-open") else None


def open_location(file: str, line: int, store: QSettings) -> Started | str | None:
    """Open `file` at `line` in the user's editor: the program started (to watch), a sentence
    saying why not, or None when handed to the desktop with no way to tell how it went."""
    if not os.path.isfile(file):
        return f"{file} is not there any more (or is not on this machine)"
    command = editor_command(file, line, str(store.value(EDITOR_KEY, "") or ""))
    at_line = command is not None
    if command is None:
        opener = desktop_opener()
        if opener is None:
            if QDesktopServices.openUrl(QUrl.fromLocalFile(file)):
                return None
            return f"the desktop has no application to open {file} with"
        command = [*opener, file]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return f"could not start {command[0]}: {exc.strerror or exc}"
    return Started(process, os.path.basename(command[0]), at_line)


class OpenWatcher(QObject):
    """Says how each opening went (`said`, a line for the status bar), so a click on a place
    is never silent: the opener's failure in its first seconds (xdg-open with no application
    for .py files exits 3), the desktop's application that got only the file, or the editor."""

    said = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._watched: list[tuple[Started, str, int, int]] = []  # opener, file, line, polls left
        self._timer = QTimer(self)
        self._timer.setInterval(WATCH_EVERY_MS)
        self._timer.timeout.connect(self._poll)

    def watch(self, started: Started, file: str, line: int) -> None:
        self._watched.append((started, file, line, int(WATCH_S * 1000 / WATCH_EVERY_MS)))
        self._timer.start()

    def _poll(self) -> None:
        still = []
        for started, file, line, polls in self._watched:
            status = started.process.poll()
            if status is None and polls > 1:
                still.append((started, file, line, polls - 1))
            else:
                self.said.emit(opened_text(started, file, line, status))
        self._watched = still
        if not still:
            self._timer.stop()


def opened_text(started: Started, file: str, line: int, status: int | None) -> str:
    """What the status bar says of an opener of `file` at `line` that exited with `status`
    (None: still running, an editor's own window)."""
    place = f"{file}:{line}"
    if status:
        text = f"Could not open {place}: {started.program} exited with status {status}"
        if not started.at_line:
            text += "; no application opens this file here: choose an editor (Findings panel)"
        return text
    if not started.at_line:
        return (
            f"Opened {file} with the desktop's application, which cannot be told line {line}: "
            "choose an editor to open at the line (Findings panel)"
        )
    return f"Opened {place} in {started.program}"
