"""run-failed: the script ended with an error that is not an out-of-memory (critical).

A run that stops with an uncaught exception, a non-zero exit status or a crash has not done
what it was started for, and its profile covers only what happened before: a syntax error or a
missing module leaves nothing but the interpreter starting up. Without this finding such a run
would read "no problems found". The evidence is the error itself: its type and message, and
where: the innermost line of the user's own code on the recorded traceback, and the line that
raised when that is elsewhere (in a library); a SyntaxError names its file and line in the
message, since Python reports it before any frame runs. Without an exception, the exit status
or signal. The finding's `where` holds the same places as Locations (profiler/diagnosis/where.py).
It judges the target and, in a job, each rank; the end of any other process of the job (a
multiprocessing child, a DataLoader worker) is child-failed's or child-killed's.

Out-of-memory errors are the out-of-memory rule's. Runs stopped from outside (Ctrl+C, which
raises KeyboardInterrupt; SIGINT, SIGTERM, SIGHUP; SIGKILL, which the out-of-memory rule reads
when memory was near its limit) are not failures of the script and are left alone.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from memsight.profiler import protocol
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding, Location
from memsight.profiler.diagnosis.signals import (
    CRASH_SIGNALS,
    MESSAGE_CHARS,
    STOPPED_FROM_OUTSIDE,
    final_exception,
    step_at,
)
from memsight.profiler.diagnosis.where import (
    SYNTAX_ERRORS,
    SYNTAX_WHERE,
    Frame,
    describe,
    exception_locations,
    parse_traceback,
    script_path,
    user_frame,
)
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.processes import ROLE_RANK

RULE_ID = "run-failed"
EXPLANATION_EARLY = (
    "The script stopped with an error before it did any work: memsight recorded the "
    "interpreter starting and the error, nothing of the model or its data, so there is no "
    "memory behaviour to judge and the absence of other findings means nothing. Fix the error "
    "so that the script runs under plain python, then record it again."
)
EXPLANATION_LATER = (
    "The script stopped with an error before it finished. The profile covers the run up to "
    "the error only: other findings describe that part, and patterns that need the whole run "
    "(memory that keeps growing, a peak late in training) may not have shown yet."
)

# Suffixes of files Python scripts are kept in; any other file run as a script is named.
PYTHON_SUFFIXES = (".py", ".pyw", "")
_MISSING_MODULE = re.compile(r"No module named '(?P<name>[^']+)'")


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    if profile.process.proc != 0 and profile.process.role != ROLE_RANK:
        return []  # a child's end is child-failed's and child-killed's, never the run's
    exc = final_exception(profile)
    info = profile.info
    if exc is not None:
        if exc.get("oom"):
            return []  # the out-of-memory rule's
        if _short_type(exc.get("exc_type")) in STOPPED_FROM_OUTSIDE:
            return []
        return [_from_exception(profile, exc.t, exc.data)]
    if info.signal is not None:
        name = CRASH_SIGNALS.get(info.signal)
        return [_from_status(profile, f"crashed with {name}")] if name else []
    if info.exit_code not in (None, 0):
        return [_from_status(profile, f"exited with status {info.exit_code}")]
    return []


def _short_type(exc_type: object) -> str:
    return str(exc_type or "Exception").rsplit(".", 1)[-1]


def _place(frame: Frame) -> str:
    name = Path(frame.file).name
    return f"{name}:{frame.line}" if frame.line is not None else name


def _work_done(profile: Profile, t: float) -> tuple[int, bool]:
    """(optimizer steps completed by `t`, whether any step or forward pass ran at all)."""
    done = step_at(profile, t) or 0
    spans = profile.spans
    forwards = spans is not None and bool((spans["kind"] == protocol.SPAN_FORWARD).any())
    return done, bool(done) or forwards


def _from_exception(profile: Profile, t: float, data: dict[str, Any]) -> Finding:
    info = profile.info
    exc_type = _short_type(data.get("exc_type"))
    message = " ".join(str(data.get("message") or "").split())[:MESSAGE_CHARS]
    facts: dict[str, Any] = {
        "exception": str(data.get("exc_type") or exc_type),
        "message": message,
        "file": None,
        "line": None,
        "function": None,
        "exit_code": info.exit_code,
    }
    script = script_path(info)
    frames = parse_traceback(data.get("traceback"))
    mine = user_frame(frames, script)
    syntax = SYNTAX_WHERE.search(message) if exc_type in SYNTAX_ERRORS else None
    where = ""
    if syntax is not None:  # where the code does not parse, not where it was imported from
        facts.update(file=syntax["file"], line=int(syntax["line"]))
        message = message[: syntax.start()].rstrip()
        where = f" at {syntax['file']}:{syntax['line']}"
        if mine is not None:
            where += f" (from {_place(mine)})"
    elif frames:
        innermost = frames[-1]
        facts.update(file=innermost.file, line=innermost.line, function=innermost.function)
        # The user's own line first: that is the one they can change.
        where = f" at {describe((mine or innermost).location())}"
        if mine is not None and mine != innermost:
            where += f" (raised in {describe(replace(innermost.location(), code=None))})"
    done, worked = _work_done(profile, t)
    facts["iterations"] = done
    text = f"{exc_type}: {message}{where}" if message else f"{exc_type}{where}"
    # An exception the running script raised is debugged at its line; a script that could not
    # start (a syntax error, not Python) is fixed before it runs at all.
    started = syntax is None and bool(frames)
    fixes: tuple[str, ...] = ("debug-the-exception",) if started else ("fix-the-script-error",)
    missing = _MISSING_MODULE.search(message) if exc_type == "ModuleNotFoundError" else None
    in_script = (
        bool(info.script) and Path(str(facts["file"] or "")).name == Path(str(info.script)).name
    )
    if missing is not None:
        module = missing["name"].split(".")[0]
        text += f"; {info.python or 'the interpreter'} has no {module} installed"
        facts["missing_module"] = module
        fixes = ("use-the-right-interpreter", "fix-the-script-error")
    elif in_script and not _is_python_file(info.script):
        text += f"; {info.script} is not a Python script, and memsight runs it with python"
        facts["not_python"] = True
        fixes = ("fix-the-script-error",)
    if syntax is not None and not frames:  # Python rejected the script before running it
        title = f"The script could not start: {exc_type}{where}"
        worked = False
    elif not worked:
        title = f"The script failed before doing any work: {exc_type}"
    elif done:
        title = f"The script failed after {done} optimizer step{'s' * (done != 1)}: {exc_type}"
    else:
        title = f"The script failed: {exc_type}"
    locations = exception_locations(data, script)
    return _finding(profile, title, text, t, done, worked, facts, fixes, locations)


def _from_status(profile: Profile, what: str) -> Finding:
    info = profile.info
    t = info.end_t if info.end_t is not None else profile.duration
    exit_event = next(profile.events_of("exit"), None)
    if exit_event is not None:
        t = exit_event.t
    done, worked = _work_done(profile, t)
    text = f"the script {what}; no exception was recorded"
    last = _last_stderr_line(profile)
    if last:
        text += f"; its last error output: {last}"
    facts: dict[str, Any] = {
        "exit_code": info.exit_code,
        "signal": info.signal,
        "iterations": done,
        "stderr": last or None,
    }
    head = "The Python process" if info.signal is not None else "The script"
    title = f"{head} {what}" + ("" if worked else " before doing any work")
    return _finding(profile, title, text, t, done, worked, facts, ("fix-the-script-error",))


def _last_stderr_line(profile: Profile) -> str:
    lines = [line.strip() for line in profile.output_text(protocol.STDERR).splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:MESSAGE_CHARS] if lines else ""


def _is_python_file(script: str | None) -> bool:
    if not script:
        return True  # `-m module`
    return Path(script).suffix.lower() in PYTHON_SUFFIXES


def _finding(
    profile: Profile,
    title: str,
    text: str,
    t: float,
    done: int,
    worked: bool,
    facts: dict[str, Any],
    fixes: tuple[str, ...],
    where: tuple[Location, ...] = (),
) -> Finding:
    start, iterations = t, None
    steps = profile.steps
    if steps is not None and done:
        start = min(t, float(steps["end"][done - 1]))
        iterations = (done, done + 1)
    return Finding(
        rule=RULE_ID,
        severity="critical",
        title=title,
        explanation=EXPLANATION_LATER if worked else EXPLANATION_EARLY,
        evidence=Evidence(text, start, t, None, iterations, facts),
        fixes=fixes,
        where=where,
    )
