"""What a diagnosis rule returns: a finding, the evidence behind it, and fixes to try."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}
Plot = Literal["ram", "gpu"]


@dataclass(frozen=True)
class Evidence:
    """Where on the timeline the pattern is, and the numbers that triggered the rule."""

    text: str  # one line in plain words, e.g. "+38 MiB per iteration over 240 iterations"
    start_s: float  # seconds since the start of the run
    end_s: float
    plot: Plot | None = None  # the timeline the evidence is on
    iterations: tuple[int, int] | None = None  # first and last optimizer step involved
    numbers: Mapping[str, float | int | str | None] = field(default_factory=dict)

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
class Finding:
    rule: str  # a stable id from DESIGN.md
    severity: Severity
    title: str  # one line in plain words
    explanation: str  # what the pattern means and why it costs memory
    evidence: Evidence
    fixes: tuple[str, ...]  # ids of resources/fixes/*.toml, most likely to help first

    @property
    def rank(self) -> tuple[int, float]:
        return SEVERITY_ORDER[self.severity], self.evidence.start_s
