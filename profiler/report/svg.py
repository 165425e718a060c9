"""The report's memory charts as static SVG: for a notebook's output, where the HTML report's
script may not run (JupyterLab and VS Code sanitise untrusted outputs) and nothing may be
fetched. The same charts as the HTML report (data.memory_charts), drawn without a script:
axes with byte and second ticks, the series as polylines, capacity lines, a legend.
"""

from __future__ import annotations

import html
import math
from typing import Any

from memsight.profiler.units import format_bytes, unit_for

WIDTH, HEIGHT = 760, 240
LEFT, RIGHT, TOP, BOTTOM = 78, 12, 40, 30  # room for the y labels, the legend, the x labels
MAX_POINTS = 2 * (WIDTH - LEFT - RIGHT)  # an envelope: two points per pixel column
FONT = "font-family:sans-serif;font-size:11px"


def _nice_step(span: float, ticks: int = 5) -> float:
    """1, 2 or 5 times a power of ten, giving about `ticks` intervals over `span`."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


def _byte_ticks(top: float) -> list[float]:
    """Ticks from 0 to `top` at round numbers of the unit `top` is shown in."""
    _, factor = unit_for(top)
    step = _nice_step(top / factor) * factor
    return [i * step for i in range(int(top // step) + 1)]


def _byte_label(value: float) -> str:
    """A tick's size: "400 MiB", "1.5 GiB" (no decimals a round tick does not need)."""
    unit, factor = unit_for(value)
    return f"{value / factor:g} {unit}" if value else "0"


def _second_ticks(end: float) -> list[float]:
    step = _nice_step(end)
    return [i * step for i in range(int(end // step) + 1)]


def _seconds(value: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{value:.{decimals}f} s"


def _thin(t: list[float], y: list[int]) -> tuple[list[float], list[int]]:
    """At most MAX_POINTS points: every k-th, plus each dropped stretch's highest point."""
    if len(t) <= MAX_POINTS:
        return t, y
    k = math.ceil(len(t) / MAX_POINTS)
    tt, yy = [], []
    for start in range(0, len(t), k):
        part = range(start, min(start + k, len(t)))
        top = max(part, key=y.__getitem__)
        tt.append(t[top])
        yy.append(y[top])
    return tt, yy


def chart_svg(chart: dict[str, Any], end_s: float | None = None) -> str:
    """One chart of data.memory_charts as a self-contained <svg> element."""
    series = [s for s in chart["series"] if s["t"]]
    end = max([end_s or 0.0, *(s["t"][-1] for s in series)]) or 1.0
    peak = float(max([1, *(max(s["y"]) for s in series)]))
    limits = [lim for lim in chart.get("limits", []) if 0 < lim["y"] <= peak * 1.5]
    top = max([peak, *(lim["y"] for lim in limits)]) * 1.08
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + plot_w * t / end

    def y(v: float) -> float:
        return float(TOP + plot_h * (1 - v / top))

    e = html.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{e(chart["title"])}" '
        'style="background:#fff">',
        f'<text x="{LEFT}" y="14" style="{FONT};font-weight:bold">{e(chart["title"])}</text>',
    ]
    for value in _byte_ticks(top / 1.08):
        py = y(value)
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py:.1f}" y2="{py:.1f}" stroke="#e4e4e4"/>'
            f'<text x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end" style="{FONT}">'
            f"{e(_byte_label(value))}</text>"
        )
    step = _nice_step(end)
    for value in _second_ticks(end):
        px = x(value)
        parts.append(
            f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 4}" '
            f'stroke="#888"/><text x="{px:.1f}" y="{HEIGHT - 10}" text-anchor="middle" '
            f'style="{FONT}">{_seconds(value, step)}</text>'
        )
    parts.append(
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#888"/>'
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" '
        'stroke="#888"/>'
    )
    for limit in limits:
        py = y(limit["y"])
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py:.1f}" y2="{py:.1f}" stroke="#c0392b" '
            f'stroke-dasharray="6 4"/><text x="{WIDTH - RIGHT - 4}" y="{py - 4:.1f}" '
            f'text-anchor="end" style="{FONT};fill:#c0392b">{e(limit["label"])} '
            f"{e(format_bytes(limit['y']))}</text>"
        )
    legend_x = float(LEFT)
    for s in series:
        tt, yy = _thin(s["t"], s["y"])
        points = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in zip(tt, yy, strict=True))
        dash = ' stroke-dasharray="5 3"' if s.get("dash") else ""
        parts.append(
            f'<polyline fill="none" stroke="{e(s["color"])}" stroke-width="1.4"{dash} '
            f'points="{points}"><title>{e(s["name"])}</title></polyline>'
        )
        parts.append(
            f'<line x1="{legend_x}" x2="{legend_x + 16}" y1="28" y2="28" '
            f'stroke="{e(s["color"])}" stroke-width="2"{dash}/>'
            f'<text x="{legend_x + 20}" y="32" style="{FONT}">{e(s["name"])}</text>'
        )
        legend_x += 28 + 6.2 * len(s["name"])
    parts.append("</svg>")
    return "".join(parts)
