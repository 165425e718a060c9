"""Write a profile as one self-contained HTML file: `memsight report P --html OUT`, Ctrl+E.

The page is rendered with Jinja2 (autoescaping on: every string from the target is escaped)
from resources/report/; its stylesheet and script are inlined, and it loads nothing from
anywhere, so it opens from disk with no network. Chart data travels as JSON in a script
element (Jinja2's tojson escapes it for that place) and is drawn by our own script as SVG,
zoomable, and printable as it is drawn.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import jinja2

from memsight.profiler import resources
from memsight.profiler.diagnosis import Diagnosis, diagnose
from memsight.profiler.diagnosis.finding import SEVERITY_COLORS
from memsight.profiler.output_path import OutputTarget, write_output
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import MARK_COLORS
from memsight.profiler.report.data import report_context

TEMPLATE = "report.html.j2"


@functools.cache
def template_environment() -> jinja2.Environment:
    folder = resources.path("report")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    # The colours the app uses too, one definition each: severities and timeline marks.
    colors = {**SEVERITY_COLORS, **{f"mark-{k}": v for k, v in MARK_COLORS.items()}}
    variables = " ".join(f"--{name}: {color};" for name, color in colors.items())
    stylesheet = (folder / "report.css").read_text(encoding="utf-8")
    env.globals["inline_css"] = f":root {{ {variables} }}\n{stylesheet}"
    env.globals["inline_js"] = (folder / "report.js").read_text(encoding="utf-8")
    return env


def render_html(profile: Profile, diagnosis: Diagnosis | None = None, name: str = "") -> str:
    """The report as a string; the same profile always renders to the same text."""
    if diagnosis is None:
        diagnosis = diagnose(profile)
    context = report_context(profile, diagnosis, name or Path(profile.source or "profile").name)
    return template_environment().get_template(TEMPLATE).render(**context)


def write_html(
    profile: Profile,
    out: str | os.PathLike[str] | OutputTarget,
    diagnosis: Diagnosis | None = None,
) -> int:
    """Render and write by memsight's one output rule (profiler/output_path.py): a regular
    file is replaced atomically (a half-written report never replaces a good one), a device
    or FIFO is written into, `-` is standard output.

    Returns the size in bytes; raises OutputError or OSError."""
    text = render_html(profile, diagnosis).encode("utf-8")
    return write_output(out, [text])
