"""The phase spans in view: the index finds exactly what a pass over every span finds."""

from __future__ import annotations

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.profile.model import SampleTable
from memsight.profiler.profile.spanindex import SpanIndex, spans_overlapping


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


def test_only_outermost_forwards_are_phases() -> None:
    spans = _spans(1000, 3)
    starts, _ = SpanIndex.of(spans, protocol.SPAN_FORWARD).overlapping(-1.0, 1000.0)
    depth0 = (spans["kind"] == protocol.SPAN_FORWARD) & (spans["depth"] == 0)
    assert len(starts) == int(depth0.sum())


def test_no_spans_of_a_kind() -> None:
    table = SampleTable("spans", ["t", "end", "kind", "depth"])
    starts, ends = SpanIndex.of(table, protocol.SPAN_FORWARD).overlapping(0.0, 1.0)
    assert len(starts) == len(ends) == 0
