"""Findings as plain text for `memsight report`: what is wrong, the evidence, how to fix it."""

from __future__ import annotations

import textwrap

from memsight.profiler.diagnosis import Diagnosis, Finding, get_fixes
from memsight.profiler.diagnosis.finding import Location, severity_counts
from memsight.profiler.terminal_text import terminal_safe

WIDTH = 96
INDENT = "    "


def _wrap(text: str, indent: str) -> list[str]:
    # Escaped first: wrapping would turn the target's CR or tab into a space, hiding it.
    return textwrap.wrap(
        terminal_safe(text), WIDTH, initial_indent=indent, subsequent_indent=indent
    )


def format_location(location: Location) -> str:
    """`/work/train.py:25 in train(): loss = model(x)`, with what holds memory there when known.

    The path is whole so that a terminal or an editor can open it as it is. One line: the
    parts come from the target, so their control characters are escaped."""
    text = f"{location.file}:{location.line}"
    if location.function and location.function != "<module>":
        text += f" in {location.function}()"
    if location.code:
        text += f": {location.code}"
    if location.detail:
        text += f" ({location.detail})"
    return terminal_safe(text)


def format_finding(finding: Finding, number: int, snippets: bool = True) -> list[str]:
    title = terminal_safe(finding.heading)  # may name the target's classes and modules
    lines = [f"{number}. [{finding.severity.upper()}] {title}  ({finding.rule})"]
    lines += _wrap(f"Evidence: {finding.evidence.text} (at {finding.evidence.where()})", INDENT)
    # Unwrapped: a path or a line of code split in two can no longer be copied or clicked.
    lines += [f"{INDENT}Where: {format_location(location)}" for location in finding.where]
    if finding.where_note and not finding.where:
        lines += _wrap(f"Where: not named: {terminal_safe(finding.where_note)}", INDENT)
    lines += _wrap(f"Why: {finding.explanation}", INDENT)
    lines.append(f"{INDENT}Fixes, most likely to help first:")
    for rank, fix in enumerate(get_fixes(finding.fixes), 1):
        lines += _wrap(f"{rank}) {fix.title}: {fix.summary}", INDENT + "  ")
        if snippets and rank == 1:
            lines.append("")
            lines += [f"{INDENT}      {code}".rstrip() for code in fix.after.splitlines()]
            lines.append("")
        lines.append(f"{INDENT}     {fix.docs[0].url}")
    return lines


def format_findings(diagnosis: Diagnosis) -> str:
    findings = diagnosis.findings
    if findings:
        lines = [f"Findings ({severity_counts(findings)})", ""]
        for i, finding in enumerate(findings, 1):
            lines += [*format_finding(finding, i), ""]
    else:
        lines = ["Findings", "  No problems found: none of the rules matched this run.", ""]
    for rule, error in diagnosis.failed.items():
        lines.append(f"  (rule {rule} could not run on this profile: {terminal_safe(error)})")
    return "\n".join(lines).rstrip() + "\n"
