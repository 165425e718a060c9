"""What only the whole job shows: each rank against the others (rules/rank_imbalance.py), and,
beside an error on one rank, what the other ranks were doing at that moment.

Runs after the per-process rules (diagnosis/__init__.py), on the views of
profile/processes.job_processes: one Profile per process, all on the run's clock.
"""

from __future__ import annotations

from dataclasses import replace

from memsight.profiler import protocol
from memsight.profiler.diagnosis.finding import Finding
from memsight.profiler.diagnosis.signals import step_at
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.processes import ROLE_RANK

# Findings about one rank that the other ranks' state at their moment explains better.
_ERROR_RULES = frozenset({"out-of-memory", "run-failed"})


def ranks_of(views: list[Profile]) -> list[Profile]:
    """The job's ranks, by rank."""
    return sorted(
        (v for v in views if v.process.role == ROLE_RANK), key=lambda v: v.process.rank or 0
    )


def activity_at(view: Profile, t: float) -> str:
    """What a process was doing at time `t`, in words: "in backward of iteration 12",
    "evaluating (model.eval()) after iteration 30", "starting up"."""
    process = view.process
    if t < process.started:
        return "not running yet"
    if process.ended is not None and t > process.ended:
        return "already gone"
    done = step_at(view, t) or 0
    spans = view.spans
    if spans is not None:
        inside = (spans.t <= t) & (spans["end"] >= t) & (spans["kind"] != protocol.SPAN_LINK)
        if inside.any():
            kind = int(spans["kind"][inside][-1])
            phase = "forward" if kind == protocol.SPAN_FORWARD else "backward"
            return f"in {phase} of iteration {done + 1}"
    modes = [e for e in view.events_of("mode") if e.t <= t]
    if modes and modes[-1].get("training") is False:
        return f"evaluating (model.eval()) after iteration {done}" if done else "evaluating"
    return f"between iterations, after iteration {done}" if done else "starting up"


def with_other_ranks(findings: list[Finding], views: list[Profile]) -> list[Finding]:
    """Each error finding about one rank says, in its evidence, what the other ranks were
    doing when it happened (a rank that stopped answering shows up as the others waiting)."""
    ranks = ranks_of(views)
    if len(ranks) < 2:
        return findings
    out = []
    for finding in findings:
        process = finding.process
        if finding.rule in _ERROR_RULES and process is not None and process.rank is not None:
            # The error's moment is where its evidence ends (out-of-memory and run-failed
            # start theirs at the last finished step, before it).
            others = [
                f"{r.process.label} was {activity_at(r, finding.evidence.end_s)}"
                for r in ranks
                if r.process.proc != process.proc
            ]
            text = f"{finding.evidence.text}; meanwhile {', '.join(others[:8])}"
            if len(others) > 8:
                text += f" and {len(others) - 8} more ranks"
            finding = replace(finding, evidence=replace(finding.evidence, text=text))
        out.append(finding)
    return out
