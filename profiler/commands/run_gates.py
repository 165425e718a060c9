"""`memsight run`'s memory gates for CI (--check, --fail-on, --max-peak-*, --baseline,
--max-growth): the options read into CheckOptions, and the finished run judged against them.
The gates themselves (what fails and the line that says so) are profiler/gates.py's."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from memsight.profiler.command_line import UsageError
from memsight.profiler.gates import (
    Baseline,
    baseline_failures,
    findings_failures,
    parse_percent,
    peak_failures,
    read_baseline,
)
from memsight.profiler.terminal_text import terminal_safe
from memsight.profiler.typed_values import size_between

T = TypeVar("T")


@dataclass(frozen=True)
class CheckOptions:
    """What `memsight run --check` gates on."""

    fail_on: str
    max_peak_ram: int | None
    max_peak_gpu: int | None
    baseline: str | None
    max_growth: float


def check_options(options: argparse.Namespace) -> CheckOptions | None:
    """The gates asked for (None: no --check); a UsageError for a bad value."""
    asked = options.check or any(
        value is not None
        for value in (
            options.fail_on,
            options.max_peak_ram,
            options.max_peak_gpu,
            options.baseline,
            options.max_growth,
        )
    )
    if not asked:
        return None
    if options.max_growth is not None and options.baseline is None:
        raise UsageError("--max-growth needs --baseline OLD.memsight to compare with")
    ram = _gate_value("--max-peak-ram", options.max_peak_ram, size_between)
    gpu = _gate_value("--max-peak-gpu", options.max_peak_gpu, size_between)
    growth = _gate_value("--max-growth", options.max_growth, parse_percent)
    if options.baseline is not None and not os.path.isfile(options.baseline):
        raise UsageError(f"--baseline: {options.baseline}: no such profile")
    return CheckOptions(
        options.fail_on or "warning", ram, gpu, options.baseline, 0.10 if growth is None else growth
    )


def _gate_value(option: str, text: str | None, parse: Callable[[str], T]) -> T | None:
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def read_check_baseline(check: CheckOptions | None) -> Baseline | None:
    """The --baseline profile's peaks, read before the script starts: a baseline that cannot
    be compared with is a usage error now, not a failed check after the whole run."""
    if check is None or check.baseline is None:
        return None
    try:
        return read_baseline(check.baseline)
    except ValueError as exc:
        raise UsageError(f"--baseline: {exc}") from None


def run_check(out: Path, check: CheckOptions, baseline: Baseline | None, quiet: bool) -> list[str]:
    """The report of the finished run, then every gate that failed, one line each."""
    from memsight.profiler.diagnosis import diagnose
    from memsight.profiler.diagnosis.text import format_findings
    from memsight.profiler.profile.storage import ProfileError, load_profile
    from memsight.profiler.profile.summary import format_text

    try:
        profile = load_profile(out)
    except ProfileError as exc:
        return [f"cannot read a profile: {exc}"]
    diagnosis = diagnose(profile)
    if not quiet:
        report = format_text(profile, str(out)) + "\n" + format_findings(diagnosis)
        sys.stdout.write(terminal_safe(report, lines=True))
    failures = findings_failures(diagnosis, check.fail_on)
    failures += peak_failures(profile, check.max_peak_ram, check.max_peak_gpu)
    if baseline is not None:
        failures += baseline_failures(baseline, profile, check.max_growth)
    return failures
