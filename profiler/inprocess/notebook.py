"""IPython and Jupyter: `%load_ext memsight`, the `%%memsight` cell magic, `%memsight_report`.

`%%memsight [--out PATH] [--census WHEN] [--interval-ms N] [--no-hooks]` records the cell with
`memsight.record` and, once it ends (or raises, or is interrupted by the stop button), shows
the profile: in a notebook as HTML (the report's charts as static SVG, the peaks, the
findings with their "where" lines and fixes, the path of the profile), in a terminal IPython
as the text of `memsight report`. IPython is the user's; nothing here imports it before the
extension is loaded.
"""

from __future__ import annotations

import argparse
import html
import importlib
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memsight.profiler.command_line import ArgumentParser, UsageError
from memsight.profiler.diagnosis import Diagnosis, Finding, diagnose, get_fix
from memsight.profiler.diagnosis.finding import SEVERITY_COLORS, SEVERITY_LABELS
from memsight.profiler.diagnosis.text import format_findings
from memsight.profiler.inprocess.record import record
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.storage import ProfileError, load_profile
from memsight.profiler.profile.summary import format_text, summarize
from memsight.profiler.report.data import memory_charts
from memsight.profiler.report.svg import chart_svg
from memsight.profiler.units import format_bytes, format_duration


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="%%memsight",
        description="Record this cell's memory with memsight and show what it found.",
        add_help=False,
    )
    parser.add_argument("-o", "--out", metavar="PATH", help="the profile to write")
    parser.add_argument("--census", default="auto", metavar="WHEN")
    parser.add_argument("--interval-ms", type=float, default=10.0, metavar="N")
    parser.add_argument("--no-hooks", action="store_true")
    return parser


class ProfileView:
    """A saved profile as a notebook shows it (`_repr_html_`) and as a terminal does."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.profile: Profile = load_profile(self.path)
        self.diagnosis: Diagnosis = diagnose(self.profile)

    def __repr__(self) -> str:
        return format_text(self.profile, str(self.path)) + "\n" + format_findings(self.diagnosis)

    def _repr_html_(self) -> str:
        return profile_html(self.profile, self.diagnosis, self.path)


def profile_html(profile: Profile, diagnosis: Diagnosis, path: Path) -> str:
    """The cell's output: charts, peaks, findings, the file. Everything from the profile is
    escaped (a script's names and messages are text, never markup)."""
    e = html.escape
    s = summarize(profile)
    charts = "".join(chart_svg(chart, profile.duration) for chart in memory_charts(profile))
    peaks = [
        ("RAM, process tree", s.ram_tree),
        ("RAM, main process", s.ram),
        ("GPU allocated", s.gpu_allocated),
        ("GPU reserved", s.gpu_reserved),
    ]
    rows = "".join(
        f"<tr><td>{label}</td><td style='text-align:right'><b>{format_bytes(peak.bytes)}</b>"
        f"</td><td style='color:gray'>at {format_duration(peak.t)}</td></tr>"
        for label, peak in peaks
        if peak is not None
    )
    findings = "".join(_finding_html(f) for f in diagnosis.findings) or (
        "<p>No problems found: none of the rules matched this cell.</p>"
    )
    steps = f", {s.iterations:,} optimizer steps" if s.iterations else ""
    return (
        "<div class='memsight' style='font-family:sans-serif;font-size:13px'>"
        f"<p><b>memsight</b>: {format_duration(s.duration_s)}, {s.samples:,} samples{steps}</p>"
        f"{charts}<table style='margin:6px 0'>{rows}</table>"
        f"<h4 style='margin:8px 0 4px'>Findings</h4>{findings}"
        f"<p style='color:gray'>Profile: <code>{e(str(path))}</code> "
        f"(<code>memsight report {e(str(path))}</code>, or open it in the app)</p></div>"
    )


def _finding_html(finding: Finding) -> str:
    e = html.escape
    color = SEVERITY_COLORS[finding.severity]
    where = "".join(
        f"<li><code>{e(loc.file)}:{loc.line}</code>"
        + (f" — <code>{e(loc.code)}</code>" if loc.code else "")
        + (f"<br><span style='color:gray'>{e(loc.detail)}</span>" if loc.detail else "")
        + "</li>"
        for loc in finding.where
    )
    # The most likely fix with its code; the others by name (`memsight report` has them all).
    fixes = "".join(
        f"<li><b>{e(get_fix(fix).title)}</b>"
        + (
            f"<pre style='margin:2px 0 6px;padding:4px;background:#f6f6f6;"
            f"white-space:pre-wrap'>{e(get_fix(fix).after)}</pre>"
            if rank == 0
            else ""
        )
        + "</li>"
        for rank, fix in enumerate(finding.fixes)
    )
    return (
        f"<div style='border-left:3px solid {color};padding-left:8px;margin:6px 0'>"
        f"<b style='color:{color}'>{SEVERITY_LABELS[finding.severity]}</b> "
        f"<b>{e(finding.heading)}</b> <code style='color:gray'>{e(finding.rule)}</code>"
        f"<br>{e(finding.evidence.text)}"
        + (f"<p style='margin:4px 0'>Where:</p><ul style='margin:0'>{where}</ul>" if where else "")
        + (
            f"<p style='margin:4px 0'>Fixes, most likely to help first:</p><ol>{fixes}</ol>"
            if fixes
            else ""
        )
        + "</div>"
    )


def register(ipython: Any) -> None:
    """Register the magics on an IPython shell (what `%load_ext memsight` calls)."""
    # IPython is the user's (loaded: this is its extension); untyped, hence through importlib.
    display: Callable[[object], object] = importlib.import_module("IPython.display").display

    def memsight_cell(line: str, cell: str) -> None:
        try:
            options = _parser().parse_args(shlex.split(line))
        except UsageError as exc:
            print(f"memsight: {exc}")
            return
        try:
            recording = record(
                options.out,
                census=options.census,
                interval_ms=options.interval_ms,
                hooks=not options.no_hooks,
            )
        except ValueError as exc:
            print(f"memsight: {exc}")
            return
        with recording:
            ipython.run_cell(cell)  # its errors and a stop are shown as IPython shows them
        assert recording.path is not None
        display(ProfileView(recording.path))

    def memsight_report(line: str) -> None:
        path = line.strip()
        if not path:
            print("memsight: %memsight_report needs a profile's path")
            return
        try:
            display(ProfileView(path))
        except (ProfileError, OSError) as exc:
            print(f"memsight: {exc}")

    ipython.register_magic_function(memsight_cell, "cell", "memsight")
    ipython.register_magic_function(memsight_report, "line", "memsight_report")
