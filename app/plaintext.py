"""Text from the target, shown as the literal string it is in widgets that read markup.

Qt renders a tooltip (and a label left in its automatic format) as rich text whenever the text
"looks like" HTML (Qt::mightBeRichText), so a class named `<img src=x>` would become an image.
Widgets that take a text format get Qt.TextFormat.PlainText where they are made; these helpers
cover the places that take none: tooltips, window titles and pyqtgraph's line labels.
"""

from __future__ import annotations

from PySide6.QtGui import Qt

# Longest text from the target that one widget shows: laying out megabytes of text in a label,
# a tooltip or a rich-text view takes minutes, and a profile can hold names that long.
MAX_SHOWN = 2_000
MAX_LABEL = 200  # labels drawn on the timeline and window titles


def shorten(text: str, limit: int = MAX_SHOWN) -> str:
    """`text`, cut after `limit` characters with a note of how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


def tooltip(text: str) -> str:
    """A tooltip that shows `text` as it is (shortened): unchanged when Qt would show it as
    plain text, else as rich text with every character escaped."""
    text = shorten(text)
    if not Qt.mightBeRichText(text):
        return text
    return Qt.convertFromPlainText(text, Qt.WhiteSpaceMode.WhiteSpaceNormal)


def window_title(text: str) -> str:
    """A window title that shows `text` as it is: Qt hides a "[*]" (the modified-document
    placeholder) and shows "[*][*]" as "[*]"."""
    return shorten(text, MAX_LABEL).replace("[*]", "[*][*]")


def line_label(text: str) -> str:
    """A pyqtgraph InfiniteLine label that shows `text` as it is: the label is a format string
    (`{value}`), where a brace in a target's name would raise or be replaced."""
    return shorten(text, MAX_LABEL).replace("{", "{{").replace("}", "}}")
