"""Run setup panel: script, arguments, working directory, interpreter, environment, interval.

Thin over the Qt-free core: it builds a profiler.launch.RunSpec and shows the problems
profiler.launch.preflight finds, next to the fields they concern.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.settings import ScriptSetup
from profiler.diagnosis.finding import SEVERITY_COLORS
from profiler.launch.preflight import (
    InvalidSetting,
    Problem,
    Setting,
    check_run,
    ram_budget_from_text,
)
from profiler.launch.runtime import default_python
from profiler.launch.spec import DEFAULT_INTERVAL_MS, RunSpec


class RunSetupPanel(QWidget):
    runRequested = Signal()
    stopRequested = Signal()
    scriptChosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.script = QLineEdit()
        self.script.setPlaceholderText("train.py, or -m package.module")
        self.args = QLineEdit()
        self.args.setPlaceholderText("--epochs 2 --batch-size 64")
        self.cwd = QLineEdit()
        self.cwd.setPlaceholderText("the script's folder")
        self.python = QComboBox()
        self.python.setEditable(True)
        self.python.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        # A long interpreter path must not set the dock's width: the field scrolls instead.
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
        # Short, so that the Run dock leaves the timeline room on a small screen.
        self.hooks = QCheckBox("PyTorch instrumentation")
        self.hooks.setToolTip(
            "Iterations, phases, modes, censuses of live tensors and out-of-memory details. "
            "Off: memory only."
        )
        self.hooks.setChecked(True)
        self.problems = QLabel("")
        self.problems.setWordWrap(True)
        self.problems.setObjectName("problems")
        self.problems.setStyleSheet(f"color: {SEVERITY_COLORS['critical']};")
        self.problems.setTextFormat(Qt.TextFormat.PlainText)
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Run the script and record its memory (Ctrl+R)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the script and its whole process tree (Ctrl+.)")
        self.stop_button.setEnabled(False)

        form = QFormLayout()
        form.addRow("Script", self._with_button(self.script, self._browse_script))
        form.addRow("Arguments", self.args)
        form.addRow("Working dir", self._with_button(self.cwd, self._browse_cwd))
        form.addRow("Python", self._with_button(self.python, self._browse_python))
        form.addRow("Environment", self.env)
        form.addRow("Sample every", self.interval)
        form.addRow("RAM budget", self.ram_budget)
        form.addRow("", self.hooks)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.problems)
        layout.addStretch(1)
        self.run_button.clicked.connect(self.runRequested)
        self.stop_button.clicked.connect(self.stopRequested)
        self.script.editingFinished.connect(
            lambda: self.scriptChosen.emit(self.script.text().strip())
        )

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

    # -- fields <-> spec ----------------------------------------------------------------------

    def set_script(self, path: str, setup: ScriptSetup | None) -> None:
        self.script.setText(path)
        setup = setup or ScriptSetup()
        self.args.setText(setup.args)
        self.cwd.setText(setup.cwd or (str(Path(path).resolve().parent) if path else ""))
        if setup.python:
            self.add_python(setup.python)
            self.python.setCurrentText(setup.python)
        else:
            self.python.setCurrentText(default_python())
        self.env.setPlainText(setup.env)
        self.interval.setValue(setup.interval_ms)
        self.hooks.setChecked(setup.hooks)
        self.ram_budget.setText(setup.ram_budget)
        self.problems.clear()

    def setup(self) -> ScriptSetup:
        return ScriptSetup(
            args=self.args.text(),
            cwd=self.cwd.text().strip(),
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
        cwd = self.cwd.text().strip() or (
            str(Path(target).resolve().parent) if target and not module else os.getcwd()
        )
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
        self.problems.setText("\n".join(p.message for p in problems))
        fields: dict[Setting, QWidget] = {
            "script": self.script,
            "cwd": self.cwd,
            "python": self.python,
            "args": self.args,
            "env": self.env,
            "interval": self.interval,
            "ram_budget": self.ram_budget,
        }
        for name, widget in fields.items():
            bad = any(p.setting == name for p in problems)
            widget.setStyleSheet(f"border: 1px solid {SEVERITY_COLORS['critical']};" if bad else "")
        if problems:
            fields.get(problems[0].setting, self.script).setFocus()

    def set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)

    # -- file pickers ---------------------------------------------------------------------------

    def _browse_script(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open script", self.cwd.text(), "Python scripts (*.py)"
        )
        if path:
            self.scriptChosen.emit(path)

    def _browse_cwd(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Working directory", self.cwd.text())
        if path:
            self.cwd.setText(path)

    def _browse_python(self) -> None:
        start = str(Path(self.python.currentText()).parent)
        path, _ = QFileDialog.getOpenFileName(
            self, "Python interpreter (for a venv: venv/bin/python)", start
        )
        if path:
            self.add_python(path)
            self.python.setCurrentText(path)
