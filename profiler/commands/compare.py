"""`memsight compare BEFORE AFTER`: what a change did to a run's memory, as text, JSON or a
page (--html), and optionally a CI gate on the growth of its peaks (--max-growth). The
comparison and its text and JSON are profiler/comparison.py's."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from memsight.profiler.command_line import ArgumentParser
from memsight.profiler.commands.errors import error, output_error
from memsight.profiler.comparison import (
    SIGNIFICANT_BYTES,
    SIGNIFICANT_SECONDS_SHARE,
    SIGNIFICANT_SHARE,
    compare,
    comparison_to_json,
    format_comparison,
)
from memsight.profiler.gates import GATE_FAILED, growth_failures, parse_percent
from memsight.profiler.profile.storage import ProfileError, load_profile
from memsight.profiler.terminal_text import terminal_safe
from memsight.profiler.units import format_bytes


def build_parser() -> argparse.ArgumentParser:
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
    options = build_parser().parse_args(list(argv))
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
        return error(str(exc))
    comparison = compare(before, after)
    if options.html is not None:
        from memsight.profiler.output_path import OutputError, output_target, write_output
        from memsight.profiler.report.compare_html import render_compare_html

        try:
            target = output_target(options.html)
            page = render_compare_html(comparison, options.before, options.after)
            write_output(target, [page.encode("utf-8")])
        except (OutputError, OSError) as exc:
            return output_error(exc, options.html, "--html")
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
