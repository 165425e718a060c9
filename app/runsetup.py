"""The run bar: script, arguments, Run and Stop, and under More the working directory,
interpreter, environment, sample interval, RAM budget and PyTorch instrumentation.

Thin over the Qt-free core: it builds a profiler.launch.RunSpec and shows the problems
profiler.launch.preflight finds, next to the fields they concern.
"""

from __future__ import annotations

import functools
import os
import shlex
from pathlib import Path

from PySide6.QtCore import Qt, Signal, SignalInstance
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from memsight.app import filedialogs
from memsight.app.settings import ScriptSetup
from memsight.profiler.diagnosis.finding import SEVERITY_COLORS
from memsight.profiler.launch.preflight import (
    InvalidSetting,
    Problem,
    Setting,
    check_run,
    ram_budget_from_text,
)
from memsight.profiler.launch.runtime import default_python
from memsight.profiler.launch.spec import DEFAULT_INTERVAL_MS, RunSpec


class RunSetupPanel(QWidget):
    """The run bar: script, arguments, Run and Stop on one line; the other settings in a
    panel under it, shown by the More button, which counts those that differ from their
    defaults while the panel is closed."""

    runRequested = Signal()
    stopRequested = Signal()
    scriptChosen = Signal(str)
    moreShown = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.script = QLineEdit()
        self.script.setPlaceholderText("train.py, or -m package.module")
        self.script.setToolTip("The script to run, or -m and a module")
        self.args = QLineEdit()
        self.args.setPlaceholderText("--epochs 2 --batch-size 64")
        self.args.setToolTip("The script's arguments, as on a command line")
        self.cwd = QLineEdit()
        self.cwd.setPlaceholderText("the script's folder")
        self.python = QComboBox()
        self.python.setEditable(True)
        self.python.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        # A long interpreter path must not set the panel's width: the field scrolls instead.
        self.python.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.python.setMinimumContentsLength(12)
        self.python.addItem(default_python())
        self.env = QPlainTextEdit()
        self.env.setPlaceholderText("KEY=VALUE, one per line (added to memsight's environment)")
        self.env.setMaximumHeight(70)
        self.interval = QDoubleSpinBox()
        self.interval.setRange(0.5, 10_000)
        self.interval.setDecimals(1)
        self.interval.setSuffix(" ms")
        self.interval.setValue(DEFAULT_INTERVAL_MS)
        self.ram_budget = QLineEdit()
        self.ram_budget.setPlaceholderText("optional, e.g. 6 GiB: warn when the run nears it")
        self.ram_budget.setToolTip(
            "The RAM the run must fit in (the machine it will run on, say). The near-capacity "
            "finding warns when the peak comes within 10 % of it."
        )
        self.hooks = QCheckBox("PyTorch instrumentation")
        self.hooks.setToolTip(
            "Iterations, phases, modes, censuses of live tensors and out-of-memory details. "
            "Off: memory only."
        )
        self.hooks.setChecked(True)
        # Under the run bar, as wide as the window, wrapped: a path in a message can be long.
        self.problems = QLabel("")
        self.problems.setObjectName("problems")
        self.problems.setWordWrap(True)
        self.problems.setTextFormat(Qt.TextFormat.PlainText)
        self.problems.setStyleSheet(f"color: {SEVERITY_COLORS['critical']};")
        self.problems.hide()
        self.browse_button = QPushButton("Browse…")
        self.browse_button.setToolTip("Choose the script to run")
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Run the script and record its memory (Ctrl+R)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the script and its whole process tree (Ctrl+.)")
        self.stop_button.setEnabled(False)
        self.more_button = QToolButton()
        self.more_button.setCheckable(True)
        self.more_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.more_button.setArrowType(Qt.ArrowType.DownArrow)
        self.defaults_button = QPushButton("Defaults")
        self.defaults_button.setToolTip(
            "Back to the defaults: the script's folder, memsight's Python, no extra "
            "environment, no RAM budget, instrumentation on"
        )

        line = QHBoxLayout()
        line.setContentsMargins(0, 0, 0, 0)
        line.addWidget(QLabel("Script"))
        line.addWidget(self.script, 3)
        line.addWidget(self.browse_button)
        line.addSpacing(6)
        line.addWidget(QLabel("Arguments"))
        line.addWidget(self.args, 2)
        line.addSpacing(6)
        line.addWidget(self.run_button)
        line.addWidget(self.stop_button)
        line.addWidget(self.more_button)

        self.more = QWidget()
        self.more.setObjectName("more_settings")
        grid = QGridLayout(self.more)
        grid.setContentsMargins(0, 4, 0, 0)
        grid.addWidget(QLabel("Working dir"), 0, 0)
        grid.addWidget(self._with_button(self.cwd, self._browse_cwd), 0, 1)
        grid.addWidget(QLabel("Python"), 0, 2)
        grid.addWidget(self._with_button(self.python, self._browse_python), 0, 3)
        grid.addWidget(QLabel("Environment"), 1, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.env, 1, 1, 3, 1)
        grid.addWidget(QLabel("Sample every"), 1, 2)
        grid.addWidget(self.interval, 1, 3)
        grid.addWidget(QLabel("RAM budget"), 2, 2)
        grid.addWidget(self.ram_budget, 2, 3)
        checks = QHBoxLayout()
        checks.addWidget(self.hooks, 1)
        checks.addWidget(self.defaults_button)
        grid.addLayout(checks, 3, 3)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        self.more.hide()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.addLayout(line)
        layout.addWidget(self.more)
        layout.addWidget(self.problems)
        self.run_button.clicked.connect(self.runRequested)
        self.stop_button.clicked.connect(self.stopRequested)
        self.browse_button.clicked.connect(self._browse_script)
        self.more_button.toggled.connect(self.set_more_shown)
        self.defaults_button.clicked.connect(self.reset_more)
        self.script.editingFinished.connect(
            lambda: self.scriptChosen.emit(self.script.text().strip())
        )
        self.fields: dict[Setting, QWidget] = {
            "script": self.script,
            "args": self.args,
            "cwd": self.cwd,
            "python": self.python,
            "env": self.env,
            "interval": self.interval,
            "ram_budget": self.ram_budget,
        }
        self._problems: list[Problem] = []
        changes: dict[Setting, SignalInstance] = {
            "script": self.script.textChanged,
            "args": self.args.textChanged,
            "cwd": self.cwd.textChanged,
            "python": self.python.currentTextChanged,
            "env": self.env.textChanged,
            "interval": self.interval.valueChanged,
            "ram_budget": self.ram_budget.textChanged,
        }
        # The working dir follows the script while it is the script's folder, its default, so
        # a path typed and run at once (Ctrl+R without Enter) runs in its own folder.
        self._script_before = ""
        self.script.textChanged.connect(self._follow_script)
        for setting, changed in changes.items():
            changed.connect(functools.partial(self._field_changed, setting))
            changed.connect(self._count_changed)
        self.hooks.toggled.connect(self._count_changed)
        self._count_changed()

    @staticmethod
    def _with_button(field: QWidget, action: object) -> QWidget:
        row = QWidget()
        box = QHBoxLayout(row)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(field, 1)
        button = QToolButton()
        button.setText("…")
        button.clicked.connect(action)
        box.addWidget(button)
        return row

    # -- the More panel ---------------------------------------------------------------------

    def set_more_shown(self, shown: bool) -> None:
        """Open or close the panel of the settings beyond script and arguments."""
        if self.more.isHidden() == shown:
            self.more.setVisible(shown)
            self.moreShown.emit(shown)
        self.more_button.setChecked(shown)
        self.more_button.setArrowType(Qt.ArrowType.UpArrow if shown else Qt.ArrowType.DownArrow)

    def changed_settings(self) -> list[str]:
        """The names of the More panel's settings that differ from their defaults."""
        changed = []
        cwd = self.cwd.text().strip()
        if cwd and not _same_folder(cwd, self._default_cwd()):
            changed.append("working dir")
        if self.python.currentText().strip() not in ("", default_python()):
            changed.append("Python")
        if self.env.toPlainText().strip():
            changed.append("environment")
        if self.interval.value() != DEFAULT_INTERVAL_MS:
            changed.append("sample interval")
        if self.ram_budget.text().strip():
            changed.append("RAM budget")
        if not self.hooks.isChecked():
            changed.append("PyTorch instrumentation off")
        return changed

    def reset_more(self) -> None:
        """The More panel's settings back to their defaults."""
        target = self.script.text().strip()
        self.cwd.setText(self._default_cwd() if target else "")
        self.python.setCurrentText(default_python())
        self.env.setPlainText("")
        self.interval.setValue(DEFAULT_INTERVAL_MS)
        self.ram_budget.setText("")
        self.hooks.setChecked(True)

    def _default_cwd(self) -> str:
        """Where a run starts when nobody says otherwise: the script's folder."""
        return _folder_of(self.script.text())

    def _follow_script(self, text: str) -> None:
        before, self._script_before = self._script_before, text
        cwd = self.cwd.text().strip()
        if not cwd or _same_folder(cwd, _folder_of(before)):
            self.cwd.setText(_folder_of(text) if text.strip() else "")

    def _count_changed(self) -> None:
        changed = self.changed_settings()
        self.more_button.setText(f"More ({len(changed)} changed)" if changed else "More")
        summary = f"Changed from the defaults: {', '.join(changed)}." if changed else ""
        self.more_button.setToolTip(
            "Working dir, Python, environment, sample interval, RAM budget, PyTorch "
            f"instrumentation. {summary}".strip()
        )
        self.defaults_button.setEnabled(bool(changed))

    # -- fields <-> spec ----------------------------------------------------------------------

    def set_script(self, path: str, setup: ScriptSetup | None) -> None:
        self.script.setText(path)
        setup = setup or ScriptSetup()
        self.args.setText(setup.args)
        self.cwd.setText(setup.cwd or (_folder_of(path) if path else ""))
        if setup.python:
            self.add_python(setup.python)
            self.python.setCurrentText(setup.python)
        else:
            self.python.setCurrentText(default_python())
        self.env.setPlainText(setup.env)
        self.interval.setValue(setup.interval_ms)
        self.hooks.setChecked(setup.hooks)
        self.ram_budget.setText(setup.ram_budget)
        self.show_problems([])

    def setup(self) -> ScriptSetup:
        cwd = self.cwd.text().strip()
        return ScriptSetup(
            args=self.args.text(),
            # The default is not stored: it is the script's folder wherever the script is.
            cwd="" if _same_folder(cwd, self._default_cwd()) else cwd,
            python=self.python.currentText().strip(),
            env=self.env.toPlainText(),
            interval_ms=self.interval.value(),
            hooks=self.hooks.isChecked(),
            ram_budget=self.ram_budget.text().strip(),
        )

    def add_python(self, path: str) -> None:
        if path and self.python.findText(path) < 0:
            self.python.addItem(path)

    def spec(self) -> RunSpec:
        """The run the fields describe; raises InvalidSetting for unparsable text."""
        target = self.script.text().strip()
        module = target.startswith("-m ")
        if module:
            target = target[3:].strip()
        try:
            args = tuple(shlex.split(self.args.text()))
        except ValueError as exc:
            raise InvalidSetting(
                Problem("args", f"The arguments cannot be split: {exc}.")
            ) from None
        cwd = self.cwd.text().strip() or self._default_cwd()
        env = dict(os.environ)
        for number, line in enumerate(self.env.toPlainText().splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise InvalidSetting(Problem("env", f"Environment line {number} is not KEY=VALUE."))
            env[key.strip()] = value
        return RunSpec(
            target=target,
            args=args,
            module=module,
            cwd=cwd,
            python=self.python.currentText().strip() or default_python(),
            env=env,
            interval_ms=self.interval.value(),
            hooks=self.hooks.isChecked(),
            ram_budget_bytes=ram_budget_from_text(self.ram_budget.text()),
        )

    def validate(self) -> RunSpec | None:
        """The spec if it can run; otherwise show the problems and return None.

        Problems that do not block (a guess that may be wrong) are shown and the run goes on.
        """
        try:
            spec = self.spec()
        except InvalidSetting as exc:
            self.show_problems([exc.problem])
            return None
        problems = check_run(spec)
        self.show_problems(problems)
        return None if any(p.blocking for p in problems) else spec

    def show_problems(self, problems: list[Problem]) -> None:
        """Each problem under the run bar, its field outlined and the first one focused; a
        problem in a field of the More panel opens the panel, so the field is in sight."""
        self._outline(problems)
        fields = self.fields
        if any(self.more.isAncestorOf(fields[p.setting]) for p in problems if p.setting in fields):
            self.set_more_shown(True)
        if problems:
            fields.get(problems[0].setting, self.script).setFocus()

    def _outline(self, problems: list[Problem]) -> None:
        self._problems = problems
        self.problems.setText("\n".join(p.message for p in problems))
        self.problems.setVisible(bool(problems))
        for name, widget in self.fields.items():
            bad = any(p.setting == name for p in problems)
            widget.setStyleSheet(f"border: 1px solid {SEVERITY_COLORS['critical']};" if bad else "")

    def _field_changed(self, setting: Setting, *_value: object) -> None:
        """A field the user changes is no longer known to be wrong: its problem goes (the
        next Run checks it again)."""
        remaining = [p for p in self._problems if p.setting != setting]
        if len(remaining) != len(self._problems):
            self._outline(remaining)

    def set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)

    # -- file pickers ---------------------------------------------------------------------------

    def _browse_script(self) -> None:
        path = filedialogs.open_file_name(
            self, "Open script", self.cwd.text(), "Python scripts (*.py)"
        )
        if path:
            self.scriptChosen.emit(path)

    def _browse_cwd(self) -> None:
        path = filedialogs.existing_folder(self, "Working directory", self.cwd.text())
        if path:
            self.cwd.setText(path)

    def _browse_python(self) -> None:
        start = str(Path(self.python.currentText()).parent)
        path = filedialogs.open_file_name(
            self, "Python interpreter (for a venv: venv/bin/python)", start
        )
        if path:
            self.add_python(path)
            self.python.setCurrentText(path)


def _folder_of(target: str) -> str:
    """The default working dir of a run of `target`: the script's folder (for `-m module`, or
    no script yet, memsight's own)."""
    target = target.strip()
    if not target or target.startswith("-m "):
        return os.getcwd()
    try:
        return str(Path(target).resolve().parent)
    except (OSError, ValueError):  # a name too long for the system, or with a NUL
        return os.getcwd()


def _same_folder(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, ValueError):  # a name too long for the system, or with a NUL
        return a == b
