"""`memsight compare BEFORE AFTER`: what a change did to a run's memory, as text or JSON,
and optionally a CI gate on the growth of its peaks."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from profiler.command_line import ArgumentParser
from profiler.comparison import (
    SIGNIFICANT_BYTES,
    SIGNIFICANT_BYTES_PER_ITERATION,
    SIGNIFICANT_SECONDS_SHARE,
    SIGNIFICANT_SHARE,
    Change,
    Comparison,
    compare,
)
from profiler.diagnosis import Finding, finding_to_json
from profiler.gates import GATE_FAILED, growth_failures, parse_percent
from profiler.profile.model import Profile
from profiler.profile.storage import ProfileError, load_profile
from profiler.terminal_text import terminal_safe
from profiler.units import format_bytes, format_duration


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="memsight compare",
        description=(
            "Compare two runs, typically the same script before and after a change: peaks "
            "(RAM of the main process and of the process tree, GPU allocated and reserved per "
            "device) with their change, memory growth per iteration, time per iteration, and "
            "the findings resolved, new and still there. Changes below "
            f"{100 * SIGNIFICANT_SHARE:g} % or {format_bytes(SIGNIFICANT_BYTES)} "
            "(time: "
            f"{100 * SIGNIFICANT_SECONDS_SHARE:g} %) are within the noise between two "
            "recordings of one script and are not marked."
        ),
        epilog=f"exit status: 0; {GATE_FAILED} when --max-growth is given and a peak grew "
        "more; 1 when a profile cannot be read; 2 for a usage error.",
    )
    parser.add_argument("before", metavar="BEFORE", help="the profile of the run before")
    parser.add_argument("after", metavar="AFTER", help="the profile of the run after")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--html", metavar="OUT.html", help="also write the comparison as a self-contained page"
    )
    parser.add_argument(
        "--max-growth",
        metavar="PCT",
        help=f"fail (exit status {GATE_FAILED}) when a peak of AFTER is more than PCT above "
        "the same peak of BEFORE, e.g. 10%%",
    )
    return parser


def cmd_compare(argv: Sequence[str]) -> int:
    options = _parser().parse_args(list(argv))
    if options.html == "-":
        sys.stderr.write("memsight: error: --html: standard output holds the comparison\n")
        return 2
    max_growth = None
    if options.max_growth is not None:
        try:
            max_growth = parse_percent(options.max_growth)
        except ValueError as exc:
            sys.stderr.write(f"memsight: error: --max-growth: {exc}\n")
            return 2
    try:
        before, after = load_profile(options.before), load_profile(options.after)
    except ProfileError as exc:
        sys.stderr.write(f"memsight: error: {terminal_safe(str(exc))}\n")
        return 1
    comparison = compare(before, after)
    if options.html is not None:
        from profiler.output_path import OutputError, output_failure, output_target, write_output
        from profiler.report.compare_html import render_compare_html

        try:
            target = output_target(options.html)
            page = render_compare_html(comparison, options.before, options.after)
            write_output(target, [page.encode("utf-8")])
        except (OutputError, OSError) as exc:
            status, problem = output_failure(exc, options.html)
            sys.stderr.write(f"memsight: error: --html: {terminal_safe(problem)}\n")
            return status
    failures = growth_failures(comparison, max_growth) if max_growth is not None else []
    if options.json:
        data = comparison_to_json(comparison)
        data["gate"] = {"max_growth": max_growth, "failures": failures, "passed": not failures}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        text = format_comparison(comparison, options.before, options.after)
        sys.stdout.write(terminal_safe(text, lines=True))
    for failure in failures:
        sys.stderr.write(f"memsight: check failed: {terminal_safe(failure)}\n")
    return GATE_FAILED if failures else 0


# -- text ------------------------------------------------------------------------------------


def format_comparison(c: Comparison, before_name: str, after_name: str) -> str:
    lines = [
        "memsight compare",
        f"  before  {before_name}: {_run(c.before)}",
        f"  after   {after_name}: {_run(c.after)}",
    ]
    if not c.same_script:
        lines.append("  (the runs are of different scripts: the numbers compare, the code may not)")
    lines += ["", f"  {'':<34} {'before':>12} {'after':>12}  change"]
    for change in changes(c):
        lines.append(
            f"  {change.label:<34} {value_text(change, change.before):>12} "
            f"{value_text(change, change.after):>12}  {change_text(change)}"
        )
    memory = [*c.peaks, *c.growth]
    if not any(change.significant for change in memory):
        lines.append("  No significant change in memory.")
    f = c.findings
    lines += ["", "Findings"]
    for word, found in (("resolved", f.resolved), ("new", f.new)):
        lines += [f"  {word:<9}{_finding(finding)}" for finding in found]
    lines += [f"  {'still':<9}{_finding(after)}" for _before, after in f.still]
    if not (f.resolved or f.new or f.still):
        lines.append("  none in either run")
    lines += [
        "",
        f"* marks a change of at least {100 * SIGNIFICANT_SHARE:g} % and "
        f"{format_bytes(SIGNIFICANT_BYTES)} (growth: "
        f"{format_bytes(SIGNIFICANT_BYTES_PER_ITERATION)} per iteration; time: "
        f"{100 * SIGNIFICANT_SECONDS_SHARE:g} %);",
        "smaller ones are within the noise between two recordings of one script.",
    ]
    return "\n".join(lines) + "\n"


def changes(c: Comparison) -> list[Change]:
    """The rows every view of a comparison shows: peaks, growth, time; those in a run."""
    every = (*c.peaks, *c.growth, c.iteration_time)
    return [change for change in every if change.before is not None or change.after is not None]


def _run(profile: Profile) -> str:
    info = profile.info
    return (
        f"{info.target}  ({info.start_time.replace('T', ' ')[:19]}, "
        f"{format_duration(profile.duration)}, {info.ended_by})"
    )


def value_text(change: Change, value: float | None) -> str:
    """One side of a change as the text, the HTML page and the app show it."""
    if value is None:
        return "—"
    if change.kind == "seconds":
        return format_duration(value)
    text = format_bytes(abs(value))
    if change.kind == "bytes/iteration":
        return ("-" if value < 0 else "+") + text
    return text


def change_text(change: Change) -> str:
    """The change itself, "-538.1 MiB (-58.4 %) *", "*" when it is significant."""
    delta = change.absolute
    if delta is None:
        return "only in one run"
    mark = " *" if change.significant else ""
    relative = change.relative
    share = f" ({100 * relative:+.1f} %)" if relative is not None else ""
    if change.kind == "seconds":
        return f"{delta:+.3f} s{share}{mark}"
    return f"{'-' if delta < 0 else '+'}{format_bytes(abs(delta))}{share}{mark}"


def _finding(finding: Finding) -> str:
    return f"[{finding.severity}] {finding.rule}: {finding.heading}"


# -- JSON ------------------------------------------------------------------------------------


def change_to_json(change: Change) -> dict[str, Any]:
    return {
        "label": change.label,
        "before": change.before,
        "after": change.after,
        "absolute": change.absolute,
        "relative": change.relative,
        "significant": change.significant,
    }


def comparison_to_json(c: Comparison) -> dict[str, Any]:
    def run(profile: Profile) -> dict[str, Any]:
        info = profile.info
        return {
            "file": profile.source,
            "script": f"-m {info.module}" if info.module else info.script,
            "argv": info.argv,
            "start_time": info.start_time,
            "exit_code": info.exit_code,
            "signal": info.signal,
            "iterations": profile.iterations,
        }

    f = c.findings
    return {
        "before": run(c.before),
        "after": run(c.after),
        "same_script": c.same_script,
        "aligned_by": c.aligned_by,
        "peaks": [change_to_json(x) for x in c.peaks],
        "growth_per_iteration": [change_to_json(x) for x in c.growth],
        "time_per_iteration": change_to_json(c.iteration_time),
        "findings": {
            "resolved": [finding_to_json(x) for x in f.resolved],
            "new": [finding_to_json(x) for x in f.new],
            "still": [finding_to_json(after) for _before, after in f.still],
        },
    }
