"""ColumnStore keeps every appended row, in order, whatever the block sizes."""

from __future__ import annotations

import numpy as np

from memsight.profiler.profile.columns import MIN_CAPACITY, ColumnStore


def _append_counting(store: ColumnStore, rows: int) -> None:
    start = len(store)
    values = np.arange(start, start + rows)
    store.append({"i": values, "f": values * 0.5}, rows)


def test_small_appends_across_many_growths_keep_every_row() -> None:
    store = ColumnStore({"i": np.int64, "f": np.float64})
    rng = np.random.default_rng(1)
    while len(store) < 40 * MIN_CAPACITY:
        _append_counting(store, int(rng.integers(1, 90)))
        assert store.capacity >= len(store)
    expected = np.arange(len(store))
    assert np.array_equal(store.column("i"), expected)
    assert np.array_equal(store.column("f"), expected * 0.5)
    assert store.column("i").dtype == np.int64


def test_block_larger_than_the_buffer_ahead_then_small_ones() -> None:
    store = ColumnStore({"i": np.int64, "f": np.float64})
    _append_counting(store, 700)  # past half capacity: the next buffer is being filled
    _append_counting(store, 250_000)
    for _ in range(3000):
        _append_counting(store, 7)
    assert np.array_equal(store.column("i"), np.arange(len(store)))


def test_scalars_fill_a_column_and_empty_appends_change_nothing() -> None:
    store = ColumnStore({"i": np.int64, "f": np.float64})
    store.append({"i": 5, "f": np.arange(3.0)}, 3)
    store.append({"i": [], "f": []}, 0)
    assert store.column("i").tolist() == [5, 5, 5]
    assert len(store) == 3


def test_a_table_cut_at_a_time_keeps_the_rows_up_to_it_without_copying_them() -> None:
    from memsight.profiler.profile.model import SampleTable

    table = SampleTable("ram", ["t", "rss"])
    table.append({"t": np.arange(10.0), "rss": np.arange(10) * 100})
    cut = table.until(4.0)
    assert list(cut.t) == [0, 1, 2, 3, 4] and list(cut["rss"]) == [0, 100, 200, 300, 400]
    assert np.shares_memory(cut["rss"], table["rss"])  # a view: a long run is not copied
    assert table.until(9.0) is table and len(table.until(-1.0)) == 0
    table.append({"t": np.array([10.0]), "rss": np.array([1])})
    assert len(cut) == 5  # later rows of the table do not show in the cut
    # Rows out of time order (spans end after the ones they contain): those at or before.
    spans = SampleTable("spans", ["t", "end"])
    spans.append({"t": np.array([3.0, 1.0, 5.0, 2.0]), "end": np.array([4.0, 6.0, 7.0, 3.0])})
    assert list(spans.until(3.0).t) == [3.0, 1.0, 2.0]
