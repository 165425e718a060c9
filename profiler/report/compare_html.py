"""`memsight compare BEFORE AFTER --html OUT`: the comparison as one self-contained page.

The same numbers as the text (compare_command.comparison_to_json), and the two runs' RAM of
the process tree overlaid on one time axis, drawn by the report's own script
(resources/report/report.js). When both runs have iterations, the second run is shifted so
that its first iteration starts where the first run's does.
"""

from __future__ import annotations

from typing import Any

from profiler.compare_command import comparison_to_json
from profiler.comparison import Comparison
from profiler.diagnosis import Finding
from profiler.profile.model import Profile
from profiler.profile.series import PROCESS_TREE, Series, iterations, process_tree_bytes
from profiler.report.data import chart_series
from profiler.report.html import template_environment
from profiler.units import format_bytes, format_duration

TEMPLATE = "compare.html.j2"
BEFORE = Series("before", "before: process tree", "#1f77b4")
AFTER = Series("after", "after: process tree", PROCESS_TREE.color, dashed=True)


def render_compare_html(c: Comparison, before_name: str, after_name: str) -> str:
    data = comparison_to_json(c)
    shift = _shift(c)
    series = [
        s for s in (_tree(c.before, BEFORE, 0.0), _tree(c.after, AFTER, shift)) if s is not None
    ]
    duration = max(c.before.duration, c.after.duration + shift, 1e-3)
    chart_data = {
        "duration": round(duration, 4),
        "charts": [{"id": "ram", "plot": "ram", "title": "RAM", "series": series, "limits": []}]
        if series
        else [],
        "markers": {"iterations": [], "iteration_every": 1, "epochs": [], "events": []},
        "findings": [],
    }
    rows = [
        {**change, "before_text": _text(change, "before"), "after_text": _text(change, "after")}
        for change in (*data["peaks"], *data["growth_per_iteration"], data["time_per_iteration"])
        if change["before"] is not None or change["after"] is not None
    ]
    f = c.findings
    return (
        template_environment()
        .get_template(TEMPLATE)
        .render(
            before_name=before_name,
            after_name=after_name,
            before=c.before.info.target,
            after=c.after.info.target,
            same_script=c.same_script,
            aligned=(
                f"the after run shifted by {shift:+.2f} s so that both first iterations line up"
                if c.aligned_by == "iteration"
                else "both from their start"
            ),
            rows=rows,
            resolved=[_finding(x) for x in f.resolved],
            new=[_finding(x) for x in f.new],
            still=[_finding(after) for _before, after in f.still],
            chart_data=chart_data,
            memsight_version=c.after.info.memsight_version,
        )
    )


def _shift(c: Comparison) -> float:
    a, b = iterations(c.before), iterations(c.after)
    if c.aligned_by != "iteration" or a is None or b is None or not len(a) or not len(b):
        return 0.0
    return float(a.t[0] - b.t[0])


def _tree(profile: Profile, series: Series, shift: float) -> dict[str, Any] | None:
    ram = profile.ram
    if ram is None or not len(ram):
        return None
    return chart_series(series, ram.t + shift, process_tree_bytes(ram))


def _text(change: dict[str, Any], which: str) -> str:
    value = change[which]
    if value is None:
        return "—"
    if change["label"] == "time per iteration":
        return format_duration(value)
    text = format_bytes(abs(value))
    return ("-" if value < 0 else "+") + text if "growth" in change["label"] else text


def _finding(finding: Finding) -> dict[str, str]:
    return {"severity": finding.severity, "rule": finding.rule, "title": finding.heading}
