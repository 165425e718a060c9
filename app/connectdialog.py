"""File → Connect…: the address and token of a run served by `memsight run --serve`."""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from memsight.profiler.remote.wire import parse_address

ADDRESS_KEY = "connect/address"  # the last address connected to, offered again
HOW = (
    "Start the run with <code>memsight run --serve 8765 train.py</code>; it prints the token. "
    "For a run on another machine, forward its port first: "
    "<code>ssh -N -L 8765:127.0.0.1:8765 you@server</code>."
)


class ConnectDialog(QDialog):
    """Asks for [HOST:]PORT and the token; `accepted` only with an address that parses."""

    def __init__(self, store: QSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Connect to a served run")
        self.store = store
        self.address = QLineEdit(str(store.value(ADDRESS_KEY, "") or ""))
        self.address.setPlaceholderText("127.0.0.1:8765")
        self.token = QLineEdit()
        self.token.setPlaceholderText("the token `memsight run --serve` printed")
        self.problem = QLabel("")
        self.problem.setStyleSheet("color: #c0392b")
        self.problem.setWordWrap(True)
        self.problem.hide()  # shown with a problem only: no gap above the buttons before
        how = QLabel(HOW)
        how.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Address:", self.address)
        form.addRow("Token:", self.token)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Connect")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(how)
        layout.addLayout(form)
        layout.addWidget(self.problem)
        layout.addWidget(buttons)
        self.setMinimumWidth(460)
        (self.token if self.address.text() else self.address).setFocus()
        self.host, self.port = "", 0

    def accept(self) -> None:
        text = self.address.text().strip()
        try:
            self.host, self.port = parse_address(text)
        except ValueError as exc:
            self._say(f"Address: {exc}")
            self.address.setFocus()
            return
        if self.port == 0:
            self._say("Address: the port the run is served on (not 0)")
            self.address.setFocus()
            return
        if not self.token.text().strip():
            self._say("Token: the one the served run printed")
            self.token.setFocus()
            return
        self.store.setValue(ADDRESS_KEY, text)
        super().accept()

    def _say(self, problem: str) -> None:
        self.problem.setText(problem)
        self.problem.show()

    @property
    def token_text(self) -> str:
        return self.token.text().strip()
