"""File → Attach to Process…: the user's Python processes, to pick one to record."""

from __future__ import annotations

import os

import psutil
from PySide6.QtCore import QSortFilterProxyModel, Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from memsight.profiler.launch.running import is_python_program
from memsight.profiler.units import format_bytes

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
PID_ROLE = Qt.ItemDataRole.UserRole + 2
# memsight's own processes are never offered: the app, and its recording processes.
OWN = ("memsight.profiler.recorder.host", "memsight.profiler.cli", "memsight.app")
HOW = (
    "memsight records the process and its workers from outside at once, and starts its agent "
    "in it (gdb before Python 3.14) for iterations, censuses and lines. Stop detaches: the "
    "process goes on exactly as before."
)


def python_processes() -> list[tuple[int, int, str]]:
    """(pid, RSS bytes, command line) of this user's Python processes, largest first."""
    me, mine = os.getpid(), psutil.Process().username()
    found = []
    for process in psutil.process_iter(
        ["pid", "name", "exe", "cmdline", "username", "memory_info"]
    ):
        info = process.info
        if info["pid"] == me or info["username"] != mine:
            continue
        exe, cmdline = info.get("exe") or "", info.get("cmdline") or []
        program = exe or (cmdline[0] if cmdline else "")
        if not is_python_program(program):
            continue
        line = " ".join(cmdline)
        if any(own in line for own in OWN):
            continue
        rss = info["memory_info"].rss if info.get("memory_info") is not None else 0
        found.append((int(info["pid"]), int(rss), line or os.path.basename(program)))
    return sorted(found, key=lambda row: -row[1])


class AttachDialog(QDialog):
    """Lists python_processes(); `pid` is the one chosen once accepted."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Attach to a running Python process")
        self.pid = 0
        self.model = QStandardItemModel(0, 3, self)
        self.model.setHorizontalHeaderLabels(["PID", "RAM", "Command line"])
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.proxy.setFilterKeyColumn(-1)
        self.proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSortingEnabled(True)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.doubleClicked.connect(lambda _index: self.accept())
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter by command line or pid")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self.proxy.setFilterFixedString)
        self.empty = QLabel("")
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        how = QLabel(HOW)
        how.setWordWrap(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.attach_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.attach_button.setText("Attach")
        buttons.addButton(refresh, QDialogButtonBox.ButtonRole.ResetRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(how)
        layout.addWidget(self.filter)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.empty)
        layout.addWidget(buttons)
        self.resize(820, 420)
        self.table.selectionModel().selectionChanged.connect(self._update_button)
        self.refresh()

    def refresh(self) -> None:
        self.model.removeRows(0, self.model.rowCount())
        for pid, rss, line in python_processes():
            cells = [QStandardItem(str(pid)), QStandardItem(format_bytes(rss)), QStandardItem(line)]
            cells[0].setData(pid, SORT_ROLE)
            cells[1].setData(rss, SORT_ROLE)
            cells[2].setData(line.lower(), SORT_ROLE)
            cells[2].setToolTip(line)
            for cell in cells:
                cell.setData(pid, PID_ROLE)
            cells[1].setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.model.appendRow(cells)
        self.table.sortByColumn(1, Qt.SortOrder.DescendingOrder)  # the largest first
        self.table.resizeColumnToContents(0)
        self.table.resizeColumnToContents(1)
        self.empty.setText(
            "" if self.model.rowCount() else "No Python process of yours is running."
        )
        self.empty.setVisible(not self.model.rowCount())
        self._update_button()

    def _chosen(self) -> int:
        rows = self.table.selectionModel().selectedRows()
        return int(rows[0].data(PID_ROLE)) if rows else 0

    def _update_button(self) -> None:
        self.attach_button.setEnabled(self._chosen() > 0)

    def choose(self, pid: int) -> bool:
        """Select the row of `pid` (what a click does); False when it is not listed."""
        for row in range(self.proxy.rowCount()):
            if self.proxy.index(row, 0).data(PID_ROLE) == pid:
                self.table.selectRow(row)
                return True
        return False

    def accept(self) -> None:
        self.pid = self._chosen()
        if self.pid > 0:
            super().accept()
