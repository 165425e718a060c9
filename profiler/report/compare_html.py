"""`memsight compare BEFORE AFTER --html OUT`: the comparison as one self-contained page.

The same numbers as the text, and the two runs' RAM of the process tree overlaid on the run
after's time axis, drawn by the report's own script (resources/report/report.js). When both
runs have iterations, the run before is aligned by iteration (comparison.aligned_times).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from memsight.profiler.comparison import Comparison, aligned_times, change_text, changes, value_text
from memsight.profiler.diagnosis import Finding
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import (
    AFTER_TREE,
    BEFORE_TREE,
    Series,
    memory_name,
    process_tree_bytes,
)
from memsight.profiler.report.data import chart_series
from memsight.profiler.report.html import template_environment

TEMPLATE = "compare.html.j2"


def render_compare_html(c: Comparison, before_name: str, after_name: str) -> str:
    before = _tree(c.before, BEFORE_TREE, lambda t: aligned_times(c, t))
    after = _tree(c.after, AFTER_TREE, lambda t: t)
    series = [s for s in (before, after) if s is not None]
    ends = [float(s["t"][-1]) for s in series if s["t"]]
    duration = max([c.after.duration, *ends, 1e-3])
    chart_data = {
        "duration": round(duration, 4),
        "charts": [
            {
                "id": "ram",
                "plot": "ram",
                "title": memory_name("ram", None),
                "series": series,
                "limits": [],
            }
        ]
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
                "by iteration: iteration k of the run before is drawn where the run after "
                "reached iteration k"
                if c.aligned_by == "iteration"
                else "by time, both from their start"
            ),
            rows=rows,
            resolved=[_finding(x) for x in f.resolved],
            new=[_finding(x) for x in f.new],
            still=[_finding(after) for _before, after in f.still],
            chart_data=chart_data,
            memsight_version=c.after.info.memsight_version,
        )
    )


def _tree(
    profile: Profile, series: Series, place: Callable[[np.ndarray], np.ndarray]
) -> dict[str, Any] | None:
    """A run's process-tree RAM, its times put on the page's axis by `place`."""
    ram = profile.ram
    if ram is None or not len(ram):
        return None
    return chart_series(series, place(ram.t), process_tree_bytes(ram))


def _finding(finding: Finding) -> dict[str, str]:
    return {"severity": finding.severity, "rule": finding.rule, "title": finding.heading}
