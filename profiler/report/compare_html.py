"""`memsight compare BEFORE AFTER --html OUT`: the comparison as one self-contained page.

The same numbers as the text (compare_command.comparison_to_json), and the two runs' RAM of
the process tree overlaid on one time axis, drawn by the report's own script
(resources/report/report.js). When both runs have iterations, the second run is shifted so
that its first iteration starts where the first run's does.
"""

from __future__ import annotations

from typing import Any

from profiler.compare_command import change_text, changes, value_text
from profiler.comparison import Comparison, alignment_shift
from profiler.diagnosis import Finding
from profiler.profile.model import Profile
from profiler.profile.series import PROCESS_TREE, Series, process_tree_bytes
from profiler.report.data import chart_series
from profiler.report.html import template_environment

TEMPLATE = "compare.html.j2"
BEFORE = Series("before", "before: process tree", "#1f77b4")
AFTER = Series("after", "after: process tree", PROCESS_TREE.color, dashed=True)


def render_compare_html(c: Comparison, before_name: str, after_name: str) -> str:
    shift = -alignment_shift(c)  # the run after, onto the run before's axis
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
        {
            "label": change.label,
            "before": value_text(change, change.before),
            "after": value_text(change, change.after),
            "change": change_text(change),
        }
        for change in changes(c)
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


def _tree(profile: Profile, series: Series, shift: float) -> dict[str, Any] | None:
    ram = profile.ram
    if ram is None or not len(ram):
        return None
    return chart_series(series, ram.t + shift, process_tree_bytes(ram))


def _finding(finding: Finding) -> dict[str, str]:
    return {"severity": finding.severity, "rule": finding.rule, "title": finding.heading}
