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


def test_an_empty_store_takes_a_whole_table_without_copying_and_grows_from_it() -> None:
    store = ColumnStore({"t": np.float64, "v": np.int64})
    t = np.arange(5, dtype=np.float64)
    v = np.arange(5, dtype=np.int64) * 10
    assert store.adopt({"t": t, "v": v})
    assert len(store) == 5 and np.shares_memory(store.column("v"), v)
    store.append({"t": np.array([5.0]), "v": np.array([50])}, 1)
    assert store.column("v").tolist() == [0, 10, 20, 30, 40, 50]
    assert store.column("t").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_arrays_a_store_cannot_take_as_they_are_leave_it_unchanged() -> None:
    ints = np.arange(6, dtype=np.int64)
    refused: list[dict[str, np.ndarray]] = [
        {"t": np.zeros(3), "v": ints[:3].astype(np.int32)},  # another dtype
        {"t": np.zeros(3), "v": ints[::2]},  # not contiguous
        {"t": np.zeros(3), "v": ints[:2]},  # lengths differ
        {"t": np.zeros(3)},  # a column missing
    ]
    for block in refused:
        store = ColumnStore({"t": np.float64, "v": np.int64})
        assert not store.adopt(block)
        assert len(store) == 0
    full = ColumnStore({"t": np.float64, "v": np.int64})
    full.append({"t": np.zeros(2), "v": ints[:2]}, 2)
    assert not full.adopt({"t": np.zeros(3), "v": ints[:3]})  # only an empty store adopts
    assert len(full) == 2


def test_a_truncated_store_writes_new_rows_over_the_cut_ones_in_its_own_buffers() -> None:
    store = ColumnStore({"i": np.int64, "f": np.float64})
    _append_counting(store, 10)
    buffer = store.column("i")
    store.truncate(7)
    assert store.column("i").tolist() == list(range(7))
    store.append({"i": np.array([70, 80]), "f": np.zeros(2)}, 2)
    assert store.column("i").tolist() == [*range(7), 70, 80]
    assert np.shares_memory(store.column("i"), buffer)  # no copy: the room was its own


def test_truncating_never_lets_a_store_write_into_arrays_it_does_not_own() -> None:
    taken = np.arange(6, dtype=np.int64)
    adopted = ColumnStore({"i": np.int64})
    assert adopted.adopt({"i": taken})
    adopted.truncate(3)
    adopted.append({"i": np.array([-1, -2])}, 2)
    assert adopted.column("i").tolist() == [0, 1, 2, -1, -2]
    assert taken.tolist() == list(range(6))  # the file's table, untouched
    owner = ColumnStore({"i": np.int64})
    owner.append({"i": np.arange(6)}, 6)
    shared = owner.frozen()
    shared.truncate(2)
    shared.append({"i": np.array([-1])}, 1)
    assert shared.column("i").tolist() == [0, 1, -1]
    assert owner.column("i").tolist() == list(range(6))
