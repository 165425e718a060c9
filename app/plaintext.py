"""Text from the target, shown as the literal string it is in widgets that read markup.

Qt renders a tooltip (and a label left in its automatic format) as rich text whenever the text
"looks like" HTML (Qt::mightBeRichText), so a class named `<img src=x>` would become an image.
Widgets that take a text format get Qt.TextFormat.PlainText where they are made; these helpers
cover the places that take none: tooltips, window titles and pyqtgraph's line labels.
"""

from __future__ import annotations

from PySide6.QtGui import Qt


def tooltip(text: str) -> str:
    """A tooltip that shows `text` as it is: unchanged when Qt would show it as plain text,
    else as rich text with every character escaped."""
    if not Qt.mightBeRichText(text):
        return text
    return Qt.convertFromPlainText(text, Qt.WhiteSpaceMode.WhiteSpaceNormal)


def window_title(text: str) -> str:
    """A window title that shows `text` as it is: Qt hides a "[*]" (the modified-document
    placeholder) and shows "[*][*]" as "[*]"."""
    return text.replace("[*]", "[*][*]")


def line_label(text: str) -> str:
    """A pyqtgraph InfiniteLine label that shows `text` as it is: the label is a format string
    (`{value}`), where a brace in a target's name would raise or be replaced."""
    return text.replace("{", "{{").replace("}", "}}")
