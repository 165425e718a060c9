"""Diagnosis: pure rules over a Profile that find memory problems and cite their evidence.

diagnose() runs every rule in rules/ (one module per stable rule id from docs/architecture.md) and
returns the findings, most severe first. Thresholds live in config.DiagnosisConfig; fixes are
data files in resources/fixes/ (see fixes.py). Each finding's fixes are fitted to the run here,
once (fixes.choose_fixes: what the run lacks is dropped, a CPU run gets CPU snippets), so every
view of a Diagnosis shows the same fixes. docs/rules.md describes each rule.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from memsight.profiler.diagnosis.config import DEFAULT_CONFIG, DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding, Location
from memsight.profiler.diagnosis.fixes import (
    Fix,
    RunContext,
    choose_fixes,
    get_fix,
    get_fixes,
    run_context,
)
from memsight.profiler.diagnosis.job import with_other_ranks
from memsight.profiler.diagnosis.rules import ALL_RULES, JOB_RULES
from memsight.profiler.diagnosis.span import up_to_script_end
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.processes import ProcessInfo, job_processes

__all__ = [
    "DEFAULT_CONFIG",
    "RULE_IDS",
    "Diagnosis",
    "DiagnosisConfig",
    "Evidence",
    "Finding",
    "Fix",
    "Location",
    "RunContext",
    "choose_fixes",
    "diagnose",
    "finding_to_json",
    "get_fix",
    "get_fixes",
    "one_line_error",
    "run_context",
]

RULE_IDS: tuple[str, ...] = tuple(rule.RULE_ID for rule in (*ALL_RULES, *JOB_RULES))
log = logging.getLogger(__name__)
# A process with this many samples or more (a day at 10 ms: 8.6 million) is judged by its
# rules in RULE_THREADS threads; below it the threads cost more than they save.
PARALLEL_RULES_SAMPLES = 1_000_000
RULE_THREADS = 2


@dataclass
class Diagnosis:
    findings: list[Finding] = field(default_factory=list)
    # Rules that failed on this profile (a bug, or data no rule expected): named, not hidden.
    failed: dict[str, str] = field(default_factory=dict)


def diagnose(
    profile: Profile, config: DiagnosisConfig = DEFAULT_CONFIG, threads: int = RULE_THREADS
) -> Diagnosis:
    """Every rule on every process of the run: the target, and in a job (torchrun ranks,
    spawned processes; profile/processes.py) each other process on its own, its findings
    marked with it (Finding.process). `threads`: how many rules run at once on a process of
    PARALLEL_RULES_SAMPLES or more (the app, which draws meanwhile, asks for one)."""
    result = Diagnosis()
    # Each process is judged up to its script's end: the interpreter's teardown after it
    # frees memory in a drop that is never part of the run (span.py).
    views = [up_to_script_end(view) for view in job_processes(profile)]
    for view in views:
        _diagnose_process(view, config, result, view.process if len(views) > 1 else None, threads)
    if len(views) > 1:
        result.findings = with_other_ranks(result.findings, views)
        _diagnose_job(views, config, result)
    result.findings.sort(key=lambda f: f.rank)
    return result


def _diagnose_job(views: list[Profile], config: DiagnosisConfig, result: Diagnosis) -> None:
    """The rules that need every process at once (rank-imbalance)."""
    contexts = {view.process.proc: run_context(view) for view in views}
    for rule in JOB_RULES:
        try:
            found = rule.check_job(views, config)
        except Exception as exc:
            log.debug("rule %s failed", rule.RULE_ID, exc_info=True)
            result.failed.setdefault(rule.RULE_ID, one_line_error(exc))
            continue
        for finding in found:
            proc = finding.process.proc if finding.process is not None else 0
            fixes = choose_fixes(finding.fixes, contexts[proc])
            result.findings.append(replace(finding, fixes=fixes))


def _diagnose_process(
    profile: Profile,
    config: DiagnosisConfig,
    result: Diagnosis,
    process: ProcessInfo | None,
    threads: int,
) -> None:
    context = run_context(profile)

    def check(rule: Any) -> list[Finding] | Exception:
        try:
            return [
                replace(finding, fixes=choose_fixes(finding.fixes, context), process=process)
                for finding in rule.check(profile, config)
            ]
        except Exception as exc:  # one broken rule must not hide the others' findings
            # At debug level: logging's fallback handler would print the traceback to stderr,
            # and every front end shows `failed` as one line instead.
            log.debug("rule %s failed", rule.RULE_ID, exc_info=True)
            return exc

    if profile.sample_count < PARALLEL_RULES_SAMPLES or threads < 2:
        outcomes = [check(rule) for rule in ALL_RULES]
    else:
        # The rules only read the profile, and mostly in numpy, which lets go of the GIL: a
        # day-long run's are judged on every core. Their findings keep the rules' order.
        with ThreadPoolExecutor(threads, thread_name_prefix="memsight-rules") as pool:
            outcomes = list(pool.map(check, ALL_RULES))
    for rule, outcome in zip(ALL_RULES, outcomes, strict=True):
        if isinstance(outcome, Exception):
            result.failed.setdefault(rule.RULE_ID, one_line_error(outcome))
        else:
            result.findings.extend(outcome)


def one_line_error(exc: Exception) -> str:
    """The exception as one short line: its type, and its message with whitespace collapsed."""
    message = " ".join(str(exc).split())
    if len(message) > 200:
        message = message[:199] + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def finding_to_json(finding: Finding) -> dict[str, object]:
    return {
        "rule": finding.rule,
        "severity": finding.severity,
        "title": finding.title,
        "explanation": finding.explanation,
        "evidence": finding.evidence.to_json(),
        "fixes": [fix.to_json() for fix in get_fixes(finding.fixes)],
        "where": [location.to_json() for location in finding.where],
        "where_note": finding.where_note,
        "process": process_to_json(finding.process) if finding.process is not None else None,
    }


def process_to_json(process: ProcessInfo) -> dict[str, object]:
    """Which process of a job a finding is about: its number in the profile, pid and rank."""
    return {"proc": process.proc, "pid": process.pid, "rank": process.rank}
