"""HTML report export: one self-contained file per profile (see html.py)."""

from __future__ import annotations

from memsight.profiler.report.html import render_html, write_html

__all__ = ["render_html", "write_html"]
