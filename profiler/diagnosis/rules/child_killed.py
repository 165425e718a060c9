"""child-killed: a child process of the run was killed by SIGKILL or crashed (critical).

"DataLoader worker (pid N) is killed by signal: Killed" is how most runs that ran out of RAM
in a worker end: the Linux OOM killer ends the process that frees the most memory with
SIGKILL, and that is often a worker, each holding its own copy of what it read of the
dataset. The evidence names the child (pid, DataLoader worker or not, its command line), when
it died and after how long, and its highest RSS before it died, with the machine's available
RAM at its lowest meanwhile; the text says what to check (`dmesg`, `journalctl -k`) to tell
the OOM killer from a kill by the program itself.

A child that crashed (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) is named the same way. A child
stopped by SIGTERM, SIGINT or SIGHUP was stopped on purpose (Pool.terminate(), a DataLoader
shutting down its workers) and is left alone. Children are the job's processes other than the
target and the ranks (diagnosis/children.py); the status comes from the parent's wait, the
recorder's look at the exited child, or the child itself (profile/replay.py).
"""

from __future__ import annotations

import signal

from memsight.profiler.diagnosis.children import child_facts, is_child
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.signals import CRASH_SIGNALS
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes

RULE_ID = "child-killed"
EXPLANATION_KILLED = (
    "SIGKILL cannot be caught: the process ends at once, without a traceback. Unless the "
    "program killed it itself (Process.kill(), a timeout), it is how the Linux OOM killer "
    "ends a process when the machine or its memory limit (cgroup, container) runs out of RAM, "
    "choosing the process that frees the most. The kernel log says so: run `dmesg -T | grep -i "
    "'killed process'` or `journalctl -k | grep -i oom` and look for this pid."
)
EXPLANATION_WORKER = (
    " A DataLoader worker is a copy of the training process: each of num_workers holds what "
    "it read of the dataset (Python objects are copied into it as they are read), its batches "
    "in flight (prefetch_factor of them) and whatever the dataset loads; fewer workers, or a "
    "dataset kept in flat arrays, lowers the total."
)
EXPLANATION_CRASH = (
    "The child's interpreter crashed: a bug in a C extension (or in memory it was handed), an "
    "abort() after a failed check, or a stack overflow. No Python exception is raised for it. "
    "Run the child's code alone under `python -X faulthandler` to get the Python stack at the "
    "crash."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    process = profile.process
    if not is_child(profile) or process.signal is None:
        return []
    killed = process.signal == signal.SIGKILL
    crash = CRASH_SIGNALS.get(process.signal)
    if not killed and crash is None:
        return []  # stopped on purpose (SIGTERM, SIGINT, SIGHUP, ...)
    facts = child_facts(profile)
    name = "SIGKILL" if killed else crash
    what = f"killed by signal {process.signal} ({name})" if killed else f"crashed with {name}"
    text = f"{facts.name} was {what} at {facts.ended:.2f} s, {facts.lived} after it started"
    text += f"; {facts.peak_text()}"
    if facts.peak_at is not None:
        text += f" at {facts.peak_at:.2f} s"
    if facts.lowest_available is not None:
        text += f"; the machine's available RAM fell to {format_bytes(facts.lowest_available)}"
    if facts.command:
        text += f"; command: {facts.command}"
    if killed:
        text += f"; check the kernel log for the OOM killer: dmesg -T | grep -i 'killed process {process.pid}'"
    explanation = EXPLANATION_KILLED if killed else EXPLANATION_CRASH
    fixes: tuple[str, ...] = ("child-out-of-memory",) if killed else ("fix-the-child-error",)
    if facts.worker:
        explanation += EXPLANATION_WORKER if killed else ""
        fixes = (*fixes, "dataloader-worker-memory")
    title = f"{facts.kind[0].upper()}{facts.kind[1:]} was {what}"
    numbers = {
        "pid": process.pid,
        "signal": process.signal,
        "peak_ram_bytes": facts.peak_ram,
        "available_bytes": facts.lowest_available,
        "started_s": round(facts.started, 6),
        "ended_s": round(facts.ended, 6),
        "dataloader_worker": facts.worker,
    }
    return [
        Finding(
            rule=RULE_ID,
            severity="critical",
            title=title,
            explanation=explanation,
            evidence=Evidence(text, facts.started, facts.ended, "ram", None, numbers),
            fixes=fixes,
        )
    ]
