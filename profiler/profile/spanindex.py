"""Phase spans that overlap a time range, found without a pass over every span.

The timeline draws the forward and backward phases in view on every pan and zoom. A day-long
run has millions of spans, and masks over all of them cost tens of milliseconds a frame; a
`SpanIndex` sorts one kind's spans by start once, with the running maximum of their ends, so
the spans overlapping [low, high] are found by two binary searches and a mask over the
candidates between them.

Sorting a day's spans takes a few tenths of a second, so a finished table's indexes are kept
(`span_index`) for as long as the table lives: the app builds them in the thread that reads a
large file, and the timeline's first frame then finds them ready.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np

from memsight.profiler import protocol
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
        first, inside, last, keep = self._candidates(low, high)
        if keep.all():
            return self.t[first:last], self.end[first:last]
        return (
            np.concatenate([self.t[first:inside][keep], self.t[inside:last]]),
            np.concatenate([self.end[first:inside][keep], self.end[inside:last]]),
        )

    def count(self, low: float, high: float) -> int:
        """How many spans overlapping() finds, without gathering them (a view too wide to
        draw them in is told by this alone)."""
        _first, inside, last, keep = self._candidates(low, high)
        return last - inside + int(np.count_nonzero(keep))

    def _candidates(self, low: float, high: float) -> tuple[int, int, int, np.ndarray]:
        """(first, inside, last, keep): the spans overlapping [low, high] are those of
        [first, inside) that `keep` marks and every one of [inside, last)."""
        first = int(np.searchsorted(self.reach, low, side="left"))
        last = max(first, int(np.searchsorted(self.t, high, side="right")))
        # From `inside` on, spans start at or after `low`, so each ends at or after it too:
        # only those before it, which start before the view, are looked at one by one.
        inside = min(max(first, int(np.searchsorted(self.t, low, side="left"))), last)
        return first, inside, last, self.end[first:inside] >= low


# The kinds of span the timeline draws as phases.
PHASE_KINDS = (protocol.SPAN_FORWARD, protocol.SPAN_BACKWARD)


def index_phases(spans: SampleTable | None) -> None:
    """Build and keep the index of every kind of phase in `spans` (a finished table)."""
    if spans is not None:
        for kind in PHASE_KINDS:
            span_index(spans, kind)


# table -> (its length when indexed, {kind: index}); the lock because the thread that reads a
# file and the GUI thread both index tables (each its own).
_INDEXES: weakref.WeakKeyDictionary[SampleTable, tuple[int, dict[int, SpanIndex]]] = (
    weakref.WeakKeyDictionary()
)
_INDEXES_LOCK = threading.Lock()


def span_index(spans: SampleTable, kind: int) -> SpanIndex:
    """The index of `spans`' spans of `kind`, built at the first call for the table at its
    current length and kept while the table lives."""
    index = ready_span_index(spans, kind)
    if index is not None:
        return index
    index = SpanIndex.of(spans, kind)  # outside the lock: the other thread is not held up
    with _INDEXES_LOCK:
        rows, by_kind = _INDEXES.get(spans, (-1, {}))
        if rows != len(spans):
            by_kind = {}
            _INDEXES[spans] = (len(spans), by_kind)
        by_kind[kind] = index
    return index


def ready_span_index(spans: SampleTable, kind: int) -> SpanIndex | None:
    """The index span_index built for `spans` at its current length, if it has."""
    with _INDEXES_LOCK:
        rows, by_kind = _INDEXES.get(spans, (-1, {}))
        return by_kind.get(kind) if rows == len(spans) else None


def spans_overlapping(
    spans: SampleTable, kind: int, low: float, high: float
) -> tuple[np.ndarray, np.ndarray]:
    """What SpanIndex.overlapping finds, by one pass over every span (for a table still
    growing, where an index would be rebuilt on every call)."""
    mask = phase_mask(spans, kind) & (spans["end"] >= low) & (spans.t <= high)
    return spans.t[mask], spans["end"][mask]
