"""child-failed: a child process of the run ended with an exception or a non-zero exit status
(warning).

A multiprocessing.Process whose target raises prints the traceback and exits with status 1;
its parent goes on, and the work it was to do is silently missing. The evidence is the
exception as the child's agent caught it (its type, message, and the line: the innermost line
of the user's own code, and where it was raised when that is in a library), or, without one,
the exit status (`os._exit(3)`, `sys.exit(2)`). The finding is about that child: the run's own
end stays the run-failed rule's.

An out-of-memory error in a child is the out-of-memory rule's, a KeyboardInterrupt (Ctrl+C
reaches every process of the terminal's group) is not a failure, and a child killed by a
signal is child-killed's. Children are the job's processes other than the target and the
ranks (diagnosis/children.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memsight.profiler.diagnosis.children import child_facts, is_child
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.signals import MESSAGE_CHARS, STOPPED_FROM_OUTSIDE, final_exception
from memsight.profiler.diagnosis.where import (
    describe,
    exception_locations,
    parse_traceback,
    user_frame,
)
from memsight.profiler.profile.model import Profile

RULE_ID = "child-failed"
EXPLANATION = (
    "A child process the script started ended in an error. Its parent is not told unless it "
    "checks (Process.exitcode after join(), Popen.returncode): the work the child was to do "
    "is missing, and what it was to hand back never comes. The error and its line are in the "
    "evidence; the child's traceback is also in the run's output."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    process = profile.process
    if not is_child(profile) or process.signal is not None:
        return []
    exc = final_exception(profile)
    if exc is not None:
        if exc.get("oom"):
            return []  # the out-of-memory rule's
        exc_type = str(exc.get("exc_type") or "Exception").rsplit(".", 1)[-1]
        if exc_type in STOPPED_FROM_OUTSIDE:
            return []
        return [_from_exception(profile, exc_type, exc.t, exc.data)]
    if process.exit_code not in (None, 0):
        return [_from_status(profile)]
    return []


def _from_exception(profile: Profile, exc_type: str, t: float, data: dict[str, Any]) -> Finding:
    facts = child_facts(profile)
    process = profile.process
    message = " ".join(str(data.get("message") or "").split())[:MESSAGE_CHARS]
    frames = parse_traceback(data.get("traceback"))
    mine = user_frame(frames)
    innermost = frames[-1] if frames else None
    where = ""
    if innermost is not None:
        where = f" at {describe((mine or innermost).location())}"
        if mine is not None and mine != innermost:
            where += f" (raised in {describe(replace(innermost.location(), code=None))})"
    shown = mine or innermost
    status = f"exit code {process.exit_code}" if process.exit_code is not None else "its end"
    text = f"{exc_type}: {message}{where}" if message else f"{exc_type}{where}"
    text += f"; {facts.name} ran {facts.lived} to {status} at {facts.ended:.2f} s"
    if facts.command:
        text += f"; command: {facts.command}"
    numbers = {
        "pid": process.pid,
        "exit_code": process.exit_code,
        "exception": str(data.get("exc_type") or exc_type),
        "message": message,
        "file": shown.file if shown is not None else None,
        "line": shown.line if shown is not None else None,
        "started_s": round(facts.started, 6),
        "ended_s": round(facts.ended, 6),
    }
    return Finding(
        rule=RULE_ID,
        severity="warning",
        title=f"{facts.kind[0].upper()}{facts.kind[1:]} failed: {exc_type}",
        explanation=EXPLANATION,
        evidence=Evidence(text, facts.started, max(t, facts.ended), "ram", None, numbers),
        fixes=("fix-the-child-error",),
        where=exception_locations(data),
    )


def _from_status(profile: Profile) -> Finding:
    facts = child_facts(profile)
    process = profile.process
    text = (
        f"{facts.name} exited with status {process.exit_code} at {facts.ended:.2f} s, "
        f"{facts.lived} after it started; no exception was recorded in it (os._exit() or "
        "sys.exit() with that status, or an error its own code printed and handled)"
    )
    if facts.command:
        text += f"; command: {facts.command}"
    numbers = {
        "pid": process.pid,
        "exit_code": process.exit_code,
        "started_s": round(facts.started, 6),
        "ended_s": round(facts.ended, 6),
    }
    return Finding(
        rule=RULE_ID,
        severity="warning",
        title=f"{facts.kind[0].upper()}{facts.kind[1:]} exited with status {process.exit_code}",
        explanation=EXPLANATION,
        evidence=Evidence(text, facts.started, facts.ended, "ram", None, numbers),
        fixes=("fix-the-child-error",),
    )
