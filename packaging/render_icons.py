"""Render resources/icons/memsight.svg to the PNG sizes desktops look for.

Run after changing the SVG: python packaging/render_icons.py. The PNGs are committed, so
builds and installs need no SVG renderer.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"


def main() -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(ICONS / "memsight.svg"))
    if not renderer.isValid():
        print("memsight.svg could not be read", file=sys.stderr)
        return 1
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        out = ICONS / f"memsight-{size}.png"
        image.save(str(out))
        print(out.relative_to(ICONS.parent.parent))
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
