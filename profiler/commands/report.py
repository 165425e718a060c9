"""`memsight report PROFILE`: how the run ended, its peaks, its processes and what was found,
as text, JSON (--json), a self-contained page (--html), or what was alive at a census
(--contents, --since)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memsight.profiler.command_line import ArgumentParser, UsageError
from memsight.profiler.commands.errors import error, output_error
from memsight.profiler.profile.storage import ProfileError, load_profile
from memsight.profiler.profile.summary import (
    damage_read_text,
    format_text,
    judged_nothing,
    summarize,
    to_json,
)
from memsight.profiler.terminal_text import terminal_safe
from memsight.profiler.typed_values import integer_between, shown
from memsight.profiler.units import format_bytes, parse_bytes

if TYPE_CHECKING:
    from memsight.profiler.diagnosis import Diagnosis
    from memsight.profiler.profile.model import Profile


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="memsight report",
        description=(
            "Summarize a saved profile: how the run ended, peaks and when they happened, child "
            "processes, and the memory problems found in it with the evidence and fixes."
        ),
    )
    parser.add_argument("profile", metavar="PROFILE", help="a .memsight profile file")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (schema in docs/profile-format.md)",
    )
    parser.add_argument(
        "--contents",
        nargs="?",
        const="last",
        metavar="WHEN",
        help="print what was alive at a census, grouped by what holds it: WHEN is first, last "
        "(the default), oom (at the out-of-memory error), an index (0, 1, -1) or step:N; "
        'with --json, a "contents" key',
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="with --contents: what changed from this census to that one (e.g. --contents "
        "last --since first: what survived and grew over the run)",
    )
    parser.add_argument(
        "--fit",
        metavar="SIZE",
        help="project the peak against batch size from the measured iteration's anatomy and "
        "give the largest batch that fits SIZE (e.g. 24GiB), with and without checkpointing and "
        'bf16 autocast; with --json, a "fit" key',
    )
    parser.add_argument(
        "--html",
        metavar="OUT.html",
        help="write a self-contained HTML report (charts, findings and fixes, output) to this file",
    )
    return parser


def _write_html(profile: Profile, diagnosis: Diagnosis, out: str) -> int:
    """Write the HTML report by the one output rule (profiler/output_path.py); the status."""
    from memsight.profiler.output_path import OutputError, output_target
    from memsight.profiler.report import write_html

    try:
        size = write_html(profile, output_target(out), diagnosis)
    except (OutputError, OSError) as exc:
        return output_error(exc, out, "--html")
    sys.stderr.write(f"memsight: wrote {terminal_safe(out)} ({format_bytes(size)})\n")
    return 0


# The most censuses or iterations a WHEN can name: no run comes near it.
MAX_CENSUS_NUMBER = 10**12


def census_choice(option: str, text: str) -> str:
    """--contents/--since's WHEN, read before the profile: first, last, oom, an index or
    step:N (ASCII digits, within MAX_CENSUS_NUMBER), as diagnosis.contents.pick reads it."""
    if text in ("first", "last", "oom"):
        return text
    try:
        if text.startswith(("step:", "iteration:")):
            word, number = text.split(":", 1)
            return f"{word}:{integer_between(number, 0, MAX_CENSUS_NUMBER, 'an iteration')}"
        return str(integer_between(text, -MAX_CENSUS_NUMBER, MAX_CENSUS_NUMBER, "an index"))
    except ValueError:
        raise UsageError(
            f"{option}: choose a census as first, last, oom, an index (0, 1, -1) or step:N, "
            f"not {shown(text)}"
        ) from None


def fit_budget(text: str) -> int:
    """--fit's SIZE, read before the profile."""
    try:
        budget = parse_bytes(text)
    except ValueError:
        budget = 0
    if budget <= 0:
        raise UsageError(f"--fit: give a size such as 24GiB or 512MiB, not {shown(text)}")
    return budget


def cmd_report(argv: Sequence[str]) -> int:
    options = build_parser().parse_args(argv)
    budget = fit_budget(options.fit) if options.fit is not None else None
    if options.contents is not None:
        options.contents = census_choice("--contents", options.contents)
    if options.since is not None:
        options.since = census_choice("--since", options.since)
    try:
        profile = load_profile(options.profile)
    except ProfileError as exc:
        return error(str(exc))
    from memsight.profiler.diagnosis import diagnose, finding_to_json
    from memsight.profiler.diagnosis.anatomy_report import (
        anatomy_json,
        anatomy_skipped,
        fit_for,
        fit_json,
        format_anatomy,
        format_fit,
    )
    from memsight.profiler.diagnosis.text import format_findings

    if options.since is not None and options.contents is None:
        sys.stderr.write("memsight: error: --since needs --contents\n")
        return 2
    contents: dict[str, Any] | None = None
    if options.contents is not None:
        from memsight.profiler.diagnosis.contents import contents_json, format_contents

        try:
            if not options.json:
                text = format_contents(profile, options.contents, options.since)
                sys.stdout.write(terminal_safe(text, lines=True))
                return 0
            contents = contents_json(profile, options.contents, options.since)
        except ValueError as exc:
            sys.stderr.write(f"memsight: error: --contents: {terminal_safe(str(exc))}\n")
            return 2
    if options.html == "-" and options.json:
        sys.stderr.write("memsight: error: --html - and --json both write to standard output\n")
        return 2
    diagnosis = diagnose(profile)
    if options.html is not None:
        status = _write_html(profile, diagnosis, options.html)
        if status or not options.json:
            return status
    if options.json:
        findings = [finding_to_json(f) for f in diagnosis.findings]
        data = to_json(profile, findings)
        # Rules that raised on this profile, by rule id: named here, never a traceback.
        data["failed_rules"] = dict(diagnosis.failed)
        if contents is not None:
            data["contents"] = contents
        data["damaged"] = _damage_json(profile)
        data["anatomy"] = anatomy_json(profile)
        data["anatomy_skipped"] = anatomy_skipped(profile)
        if budget is not None:
            data["fit"] = fit_json(fit_for(profile, budget))
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        # The target's strings are in both: shown escaped, never acted on by the terminal.
        verdict = format_findings(diagnosis)
        if profile.damaged is not None:
            part = _NOTHING_JUDGED if judged_nothing(profile) else _PART_JUDGED
            verdict = _damage_text(profile) + verdict.replace(_WHOLE_RUN_VERDICT, part)
        report = format_text(profile, options.profile) + "\n" + verdict
        anatomy = format_anatomy(profile)
        if anatomy:
            report += "\n" + anatomy
        if budget is not None:
            report += "\n" + format_fit(fit_for(profile, budget))
        sys.stdout.write(terminal_safe(report, lines=True))
    return 0


# A damaged file's verdict is about the part read, never about the whole run; with no sample
# read there is none.
_WHOLE_RUN_VERDICT = "No problems found: none of the rules matched this run."
_PART_JUDGED = (
    "No problems found: none of the rules matched the part of the run that could be read."
)
_NOTHING_JUDGED = "Nothing judged: no memory sample could be read from the file."


def _damage_json(profile: Profile) -> dict[str, Any] | None:
    """`report --json`'s "damaged": what is wrong with the file and what of it was read."""
    damage = profile.damaged
    if damage is None:
        return None
    s = summarize(profile)
    return {
        "reason": damage.reason,
        "read_bytes": damage.read_bytes,
        "file_bytes": damage.file_bytes,
        "samples": s.samples,
        "duration_s": s.duration_s,
    }


def _damage_text(profile: Profile) -> str:
    damage = profile.damaged
    read = damage_read_text(profile)
    assert damage is not None and read is not None
    return (
        f"DAMAGED FILE: {damage.reason}.\n"
        f"  {read[0].upper()}{read[1:]}. The findings below judge only that part;\n"
        "  the rest of the run is not in the file.\n\n"
    )
