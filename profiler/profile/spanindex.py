"""Phase spans that overlap a time range, found without a pass over every span.

The timeline draws the forward and backward phases in view on every pan and zoom. A day-long
run has millions of spans, and masks over all of them cost tens of milliseconds a frame; a
`SpanIndex` sorts one kind's spans by start once, with the running maximum of their ends, so
the spans overlapping [low, high] are found by two binary searches and a mask over the
candidates between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memsight.profiler.profile.model import SampleTable
from memsight.profiler.profile.series import phase_mask


@dataclass(frozen=True)
class SpanIndex:
    """One kind of span (the outermost forwards, or the backwards), sorted by start."""

    t: np.ndarray
    end: np.ndarray
    reach: np.ndarray  # the latest end of the spans up to each one: never decreasing

    @classmethod
    def of(cls, spans: SampleTable, kind: int) -> SpanIndex:
        mask = phase_mask(spans, kind)
        t, end = spans.t[mask], spans["end"][mask]
        order = np.argsort(t, kind="stable")
        t, end = t[order], end[order]
        reach = np.maximum.accumulate(end) if len(end) else end
        return cls(t, end, reach)

    def overlapping(self, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the spans with end >= low and start <= high, by start."""
        first = int(np.searchsorted(self.reach, low, side="left"))
        last = int(np.searchsorted(self.t, high, side="right"))
        if last <= first:
            return self.t[:0], self.end[:0]
        t, end = self.t[first:last], self.end[first:last]
        keep = end >= low
        return t[keep], end[keep]


def spans_overlapping(
    spans: SampleTable, kind: int, low: float, high: float
) -> tuple[np.ndarray, np.ndarray]:
    """What SpanIndex.overlapping finds, by one pass over every span (for a table still
    growing, where an index would be rebuilt on every call)."""
    mask = phase_mask(spans, kind) & (spans["end"] >= low) & (spans.t <= high)
    return spans.t[mask], spans["end"][mask]
