"""The app's file pickers: open, save and folder dialogs sized to show what they list.

Qt's own dialog (used where the desktop offers no native one) opens at about 600x400 px with
columns of fixed widths: file sizes and dates come out cut ("27 11 2…6 18:21"). Here it opens
at a size taken from the window it belongs to, and each listing's columns are fitted to their
contents once the folder is read. A native dialog sizes itself; these settings are then moot.
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QFileSystemModel,
    QHeaderView,
    QTreeView,
    QWidget,
)

PREFERRED_SIZE = QSize(900, 560)  # px: four columns of a long file name, size, type and date
SHARE_OF_WINDOW = 0.9  # never larger than this share of the window it opens over
NAME_COLUMN = 0
NAME_MIN_WIDTH = 200  # px: below this the listing scrolls sideways rather than cut names more


def file_dialog(
    parent: QWidget,
    title: str,
    folder: str,
    filters: str = "",
    mode: QFileDialog.FileMode = QFileDialog.FileMode.ExistingFile,
    saving: bool = False,
) -> QFileDialog:
    """A dialog set up as the static QFileDialog functions would set it, sized to be read."""
    dialog = QFileDialog(parent, title, folder, filters)
    dialog.setFileMode(mode)
    if saving:
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
    window = parent.window()
    dialog.resize(
        max(
            dialog.sizeHint().width(),
            min(PREFERRED_SIZE.width(), int(window.width() * SHARE_OF_WINDOW)),
        ),
        max(
            dialog.sizeHint().height(),
            min(PREFERRED_SIZE.height(), int(window.height() * SHARE_OF_WINDOW)),
        ),
    )
    model = dialog.findChild(QFileSystemModel)
    listing = dialog.findChild(QTreeView)
    if model is not None and listing is not None:
        model.directoryLoaded.connect(lambda _folder: fit_columns(listing))
    return dialog


def fit_columns(listing: QTreeView) -> None:
    """Size, type and date as wide as their widest entry; the name takes the rest, whatever
    width the dialog remembered from its last use (in a larger window, say)."""
    header = listing.header()
    for column in range(header.count()):
        if column == NAME_COLUMN:
            continue
        needed = max(listing.sizeHintForColumn(column), header.sectionSizeHint(column))
        if header.sectionSize(column) < needed:
            header.resizeSection(column, needed)
    others = sum(header.sectionSize(c) for c in range(header.count()) if c != NAME_COLUMN)
    room = listing.viewport().width() - others
    header.resizeSection(NAME_COLUMN, max(room, NAME_MIN_WIDTH))
    header.setSectionResizeMode(NAME_COLUMN, QHeaderView.ResizeMode.Interactive)


def _chosen(dialog: QFileDialog) -> str:
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return ""
    files = dialog.selectedFiles()
    return files[0] if files else ""


def open_file_name(parent: QWidget, title: str, folder: str, filters: str = "") -> str:
    """The path of an existing file the user picked, or "" when cancelled."""
    return _chosen(file_dialog(parent, title, folder, filters))


def save_file_name(parent: QWidget, title: str, suggestion: str, filters: str = "") -> str:
    """The path to write to that the user picked (the dialog asks before replacing a file),
    or "" when cancelled."""
    return _chosen(
        file_dialog(parent, title, suggestion, filters, QFileDialog.FileMode.AnyFile, saving=True)
    )


def existing_folder(parent: QWidget, title: str, folder: str) -> str:
    """A folder the user picked, or "" when cancelled."""
    dialog = file_dialog(parent, title, folder, mode=QFileDialog.FileMode.Directory)
    dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
    return _chosen(dialog)
