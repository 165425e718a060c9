"""What the rules about a child's end (child-killed, child-failed) say of the child.

A child here is a process of the job other than the target that is not one of
torch.distributed's ranks: a multiprocessing.Process (fork or spawn), a DataLoader worker, a
Python program the script started. A rank's end stays the run-failed and out-of-memory
rules' (a rank is a run of the training script of its own), and the target's end is the run's.
"""

from __future__ import annotations

from dataclasses import dataclass

from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.processes import ROLE_DATALOADER_WORKER, ROLE_RANK
from memsight.profiler.profile.summary import summarize
from memsight.profiler.units import format_bytes, format_duration

COMMAND_CHARS = 120


def is_child(profile: Profile) -> bool:
    """Whether `profile` is a child's view (profile/processes.job_processes)."""
    process = profile.process
    return process.proc != 0 and process.role != ROLE_RANK


@dataclass(frozen=True)
class ChildFacts:
    """Who the child was and what it held, in words and numbers."""

    kind: str  # "a DataLoader worker", "a child process"
    name: str  # "DataLoader worker pid 4242", "child process pid 4242"
    command: str  # its command line, cut to one short line
    started: float
    ended: float
    peak_ram: int | None  # its highest RSS (the recorder's between-sample peak)
    peak_at: float | None
    lowest_available: int | None  # the machine's available RAM at its lowest while it ran

    @property
    def worker(self) -> bool:
        return "DataLoader" in self.kind

    @property
    def lived(self) -> str:
        return format_duration(max(0.0, self.ended - self.started))

    def peak_text(self) -> str:
        if self.peak_ram is None:
            return "its memory was not sampled"
        return f"its RAM peaked at {format_bytes(self.peak_ram)} (RSS)"


def child_facts(profile: Profile) -> ChildFacts:
    process = profile.process
    kind = "DataLoader worker" if process.role == ROLE_DATALOADER_WORKER else "child process"
    command = " ".join(process.cmdline)
    if len(command) > COMMAND_CHARS:
        command = command[: COMMAND_CHARS - 1] + "…"
    ended = process.ended if process.ended is not None else profile.duration
    lowest = None
    # Its RAM peak as the report's process table shows it: one definition (profile/summary.py).
    peak_ram = summarize(profile).ram
    peak, peak_at = (peak_ram.bytes, peak_ram.t) if peak_ram is not None else (None, None)
    ram = profile.ram
    if ram is not None and len(ram) and "available" in ram:
        available = ram["available"][ram["available"] > 0]
        lowest = int(available.min()) if len(available) else None
    return ChildFacts(
        kind=f"a {kind}",
        name=f"{kind} pid {process.pid if process.pid is not None else '?'}",
        command=command,
        started=process.started,
        ended=ended,
        peak_ram=peak,
        peak_at=peak_at,
        lowest_available=lowest,
    )
