"""The phase spans in view: the index finds exactly what a pass over every span finds."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.profile import spanindex
from memsight.profiler.profile.model import SampleTable
from memsight.profiler.profile.spanindex import (
    SpanIndex,
    index_phases,
    ready_span_index,
    span_index,
    spans_overlapping,
)


def _spans(rows: int, seed: int) -> SampleTable:
    """Spans out of order and overlapping (threads, nested forwards), some at depth > 0."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 100, rows)
    table = SampleTable("spans", ["t", "end", "kind", "depth"])
    table.append(
        {
            "t": t,
            "end": t + rng.exponential(0.5, rows),
            "kind": rng.choice([protocol.SPAN_FORWARD, protocol.SPAN_BACKWARD], rows),
            "depth": rng.integers(0, 3, rows),
        }
    )
    return table


@pytest.mark.parametrize("kind", [protocol.SPAN_FORWARD, protocol.SPAN_BACKWARD])
def test_the_index_finds_every_span_in_view_and_no_other(kind: int) -> None:
    spans = _spans(5000, kind)
    index = SpanIndex.of(spans, kind)
    rng = np.random.default_rng(1)
    ranges = [(-5.0, 200.0), (50.0, 50.0), (99.9, 300.0), (-10.0, -1.0), (200.0, 300.0)]
    ranges += [tuple(sorted(rng.uniform(-1, 101, 2))) for _ in range(200)]
    for low, high in ranges:
        starts, ends = index.overlapping(low, high)
        want_starts, want_ends = spans_overlapping(spans, kind, low, high)
        order = np.lexsort((want_ends, want_starts))
        assert np.array_equal(starts, want_starts[order])
        assert np.array_equal(ends, want_ends[order])
        assert bool(np.all((ends >= low) & (starts <= high)))
        assert index.count(low, high) == len(want_starts)


def test_only_outermost_forwards_are_phases() -> None:
    spans = _spans(1000, 3)
    starts, _ = SpanIndex.of(spans, protocol.SPAN_FORWARD).overlapping(-1.0, 1000.0)
    depth0 = (spans["kind"] == protocol.SPAN_FORWARD) & (spans["depth"] == 0)
    assert len(starts) == int(depth0.sum())


def test_no_spans_of_a_kind() -> None:
    table = SampleTable("spans", ["t", "end", "kind", "depth"])
    starts, ends = SpanIndex.of(table, protocol.SPAN_FORWARD).overlapping(0.0, 1.0)
    assert len(starts) == len(ends) == 0


def _found(index: SpanIndex | None, low: float, high: float) -> list[float]:
    assert index is not None
    return sorted(index.overlapping(low, high)[0].tolist())


def test_a_table_s_index_is_kept_until_the_table_grows() -> None:
    spans = _spans(2000, 4)
    kind = protocol.SPAN_BACKWARD
    assert ready_span_index(spans, kind) is None
    index_phases(spans)  # as the thread that reads a file does
    kept = ready_span_index(spans, kind)
    assert kept is not None and span_index(spans, kind) is kept
    assert ready_span_index(_spans(2000, 4), kind) is None  # another table, equal or not

    one = {"t": [500.0], "end": [501.0], "kind": [kind], "depth": [0]}
    spans.append({column: np.array(values) for column, values in one.items()})
    assert ready_span_index(spans, kind) is None  # grown: the kept index no longer holds
    assert _found(span_index(spans, kind), 499.0, 600.0) == [500.0]
    assert _found(ready_span_index(spans, kind), 499.0, 600.0) == [500.0]


def test_a_kept_index_does_not_keep_its_table_alive() -> None:
    spans = _spans(100, 5)
    index_phases(spans)
    kept = len(spanindex._INDEXES)
    del spans
    gc.collect()
    assert len(spanindex._INDEXES) == kept - 1


def test_a_long_span_that_starts_first_is_found_in_every_view_it_covers() -> None:
    """The running reach: short spans after a long one end before a view it still covers."""
    t = np.array([0.0, 1.0, 2.0, 3.0, 50.0])
    table = SampleTable("spans", ["t", "end", "kind"])
    kinds = np.full(len(t), protocol.SPAN_BACKWARD)
    table.append({"t": t, "end": np.array([100.0, 1.5, 2.5, 3.5, 51.0]), "kind": kinds})
    index = SpanIndex.of(table, protocol.SPAN_BACKWARD)
    for low, high, want in [(10.0, 20.0, [0.0]), (2.2, 20.0, [0.0, 2.0, 3.0]), (0.0, 0.0, [0.0])]:
        starts, _ = index.overlapping(low, high)
        assert starts.tolist() == want and index.count(low, high) == len(want)
