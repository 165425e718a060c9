"""What a diagnosis rule returns: a finding, the evidence behind it, and fixes to try."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from memsight.profiler.profile.processes import ProcessInfo
from memsight.profiler.units import format_bytes, format_duration

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}
SEVERITY_LABELS: dict[str, str] = {"critical": "Critical", "warning": "Warning", "info": "Info"}
# One colour per severity for the app and the HTML report; dark enough for text on white and
# still readable on a dark palette.
SEVERITY_COLORS: dict[str, str] = {"critical": "#c62f2f", "warning": "#b86a00", "info": "#2f6fba"}
Plot = Literal["ram", "gpu"]


@dataclass(frozen=True)
class Evidence:
    """Where on the timeline the pattern is, and the numbers that triggered the rule."""

    text: str  # one line in plain words, e.g. "+38 MiB per iteration over 240 iterations"
    start_s: float  # seconds since the start of the run
    end_s: float
    plot: Plot | None = None  # the timeline the evidence is on
    iterations: tuple[int, int] | None = None  # first and last iteration involved (optimizer
    # steps; in a loop without them, what profiler.profile.series.iterations counts instead)
    numbers: Mapping[str, float | int | str | None] = field(default_factory=dict)

    def where(self) -> str:
        """The span in words: "1.73 s to 1.99 s, iterations 5 to 6"."""
        text = format_duration(self.start_s)
        if self.end_s - self.start_s >= 0.01:
            text += f" to {format_duration(self.end_s)}"
        if self.iterations:
            first, last = self.iterations
            text += f", iteration {first}" if first == last else f", iterations {first} to {last}"
        return text

    def to_json(self) -> dict[str, object]:
        return {
            "text": self.text,
            "start_s": round(self.start_s, 6),
            "end_s": round(self.end_s, 6),
            "plot": self.plot,
            "iterations": list(self.iterations) if self.iterations else None,
            "numbers": dict(self.numbers),
        }


@dataclass(frozen=True)
class Location:
    """A place in the user's code a finding points at: the line that raised, the forward call
    that ran with autograd on, the line that adds to what holds the memory.

    `report --json` carries these under each finding's "where", most important first.
    """

    file: str  # as the interpreter knew it (absolute for scripts run by path)
    line: int
    function: str | None = None
    code: str | None = None  # the source line, stripped
    holder: str | None = None  # what keeps the memory alive, in words: "`kept` (list, local of
    # `train()` in train.py)"; None for locations that are not about a holder
    bytes: int | None = None  # what that holder keeps (per iteration for growth), if known

    @property
    def detail(self) -> str:
        """What the views show beside the place: the holder, which says what it keeps (its
        text carries the amount), else the bytes alone; "" when neither is known."""
        if self.holder:
            return self.holder
        return format_bytes(self.bytes) if self.bytes else ""

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "code": self.code,
            "holder": self.holder,
            "bytes": self.bytes,
        }


@dataclass(frozen=True)
class Finding:
    rule: str  # a stable id from docs/architecture.md
    severity: Severity
    title: str  # one line in plain words
    explanation: str  # what the pattern means and why it costs memory
    evidence: Evidence
    # Ids of resources/fixes/*.toml, most likely to help first. A rule names plain ids;
    # diagnose() fits them to the run (fixes.choose_fixes), which may add the variant chosen,
    # as in "smaller-batch@cpu". fixes.get_fix reads both.
    fixes: tuple[str, ...]
    # Where in the user's code to look, most important first; empty when nothing there can be
    # named (the memory is held by a library, or the run left no trace of it).
    where: tuple[Location, ...] = ()
    # Why `where` is empty, and what to do, for a finding that would name a holder ("fewer than
    # two censuses fell in the climb's span …; run with `--census every-10` …"); None otherwise.
    where_note: str | None = None
    # The process of a job it is about (a torchrun rank, profile/processes.py); None in a
    # run of one process, and for findings about the job as a whole.
    process: ProcessInfo | None = None

    @property
    def heading(self) -> str:
        """The title as views show it: in a job, after the process it is about ("rank 1: …")."""
        return f"{self.process.label}: {self.title}" if self.process is not None else self.title

    @property
    def rank(self) -> tuple[int, float]:
        return SEVERITY_ORDER[self.severity], self.evidence.start_s


def severity_counts(findings: list[Finding]) -> str:
    """Counts like "1 critical, 2 warning", for the severities present, most severe first."""
    return ", ".join(
        f"{n} {severity}"
        for severity in SEVERITY_ORDER
        if (n := sum(f.severity == severity for f in findings))
    )
