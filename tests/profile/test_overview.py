"""A large profile's stored overview: what it keeps, that it changes nothing else, and that a
reader that cannot use it loses nothing (profiler/profile/overview.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.profile import overview
from memsight.profiler.profile.header import FILE_HEADER
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.storage import ProfileError, compact_profile, load_profile
from tests.overview_files import BINS, T0, small_limits, write_run

__all__ = ["small_limits"]  # a fixture


def slices(t_ns: np.ndarray, low: int, high: int) -> np.ndarray:
    width = -(-(high - low + 1) // BINS)
    return (t_ns - low) // width


def envelope(
    t_ns: np.ndarray, values: np.ndarray, low: int, high: int
) -> dict[int, tuple[int, int]]:
    """Each slice's lowest and highest value."""
    out: dict[int, tuple[int, int]] = {}
    for s, v in zip(slices(t_ns, low, high).tolist(), values.tolist(), strict=True):
        lo, hi = out.get(s, (v, v))
        out[s] = (min(lo, v), max(hi, v))
    return out


def ns(profile: Profile, table: str) -> np.ndarray:
    return T0 + np.round(profile.tables[table].t * 1e9).astype(np.int64)


def test_the_overview_keeps_every_curves_lowest_and_highest_value_in_each_slice(
    tmp_path: Path, small_limits: None
) -> None:
    path = tmp_path / "day.memsight"
    written = write_run(path)
    compact_profile(path)

    seen = overview.read_overview(path)

    assert seen is not None and seen.complete
    ram, t = written["ram"], written["ram"][:, 0]
    low, high = int(t.min()), int(t.max())
    kept = seen.tables["ram"]
    assert len(kept) < len(ram) / 5  # far fewer rows than the run
    kept_t = ns(seen, "ram")
    assert set(kept_t.tolist()) <= set(t.tolist())  # real samples, not made-up ones
    for column, values in (
        ("rss", ram[:, 1]),
        ("rss_peak", ram[:, 2]),
        ("children", ram[:, 3]),
        ("tree", ram[:, 2] + ram[:, 3]),  # the process tree, drawn from two columns
    ):
        shown = kept["rss_peak"] + kept["children"] if column == "tree" else kept[column]
        assert envelope(kept_t, shown, low, high) == envelope(t, values, low, high), column
    # Each device on its own: two devices' rows interleave in one table.
    nvml = written["nvml"]
    nvml_t = nvml[:, 0]
    low, high = int(nvml_t.min()), int(nvml_t.max())
    kept_nvml = seen.tables["nvml"]
    assert len(kept_nvml) < len(nvml) / 5
    for device in (0, 1):
        mine = nvml[:, 1] == device
        kept_mine = kept_nvml["device"] == device
        assert envelope(ns(seen, "nvml")[kept_mine], kept_nvml["used"][kept_mine], low, high) == (
            envelope(nvml_t[mine], nvml[mine, 2], low, high)
        )


def test_the_overview_leaves_out_large_tables_of_intervals_and_frequent_events(
    tmp_path: Path, small_limits: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview, "MOST_EVENTS_OF_A_TYPE", 100)
    path = tmp_path / "day.memsight"
    write_run(path)
    compact_profile(path)

    seen = overview.read_overview(path)

    assert seen is not None
    assert "spans" not in seen.tables  # a subset of them would draw as gaps
    types = {e.type for e in seen.events}
    assert "census" in types and "recording_end" in types and "tick" not in types


def test_the_whole_profile_reads_the_same_with_an_overview_and_without(
    tmp_path: Path, small_limits: None
) -> None:
    path = tmp_path / "day.memsight"
    write_run(path)
    before = load_profile(path)
    compact_profile(path)
    once = path.read_bytes()

    after = load_profile(path)

    for name, table in before.tables.items():
        for column in table.column_names:
            assert np.array_equal(table[column], after.tables[name][column]), (name, column)
    assert [(e.t, e.type, e.data) for e in before.events] == [
        (e.t, e.type, e.data) for e in after.events
    ]
    assert after.complete and after.info == before.info and not after.warnings
    # Compacted again (a merged or re-saved file): one overview, made anew, the same bytes.
    compact_profile(path)
    assert path.read_bytes() == once


def test_a_small_or_unfinished_profile_has_no_overview(tmp_path: Path, small_limits: None) -> None:
    small = tmp_path / "small.memsight"
    write_run(small, rows=2_000)
    compact_profile(small)
    unfinished = tmp_path / "cut.memsight"
    write_run(unfinished, end=False)  # the recorder was killed: no recording_end
    compact_profile(unfinished)
    as_recorded = tmp_path / "live.memsight"
    write_run(as_recorded)

    for path in (small, unfinished, as_recorded):
        assert overview.read_overview(path) is None, path.name
    # Nothing was added to the small file: it stays readable by the first format's readers.
    assert FILE_HEADER.unpack_from(small.read_bytes())[1] == 1


def test_a_damaged_overview_is_not_used_and_the_file_reports_its_damage(
    tmp_path: Path, small_limits: None
) -> None:
    path = tmp_path / "day.memsight"
    write_run(path)
    compact_profile(path)
    data = bytearray(path.read_bytes())
    # The second frame is the overview's first chunk: change a byte of its payload.
    run_length = protocol.HEADER.unpack_from(data, FILE_HEADER.size)[0]
    second = FILE_HEADER.size + protocol.HEADER_SIZE + run_length
    data[second + protocol.HEADER_SIZE + 40] ^= 0xFF
    path.write_bytes(bytes(data))

    assert overview.read_overview(path) is None
    with pytest.raises(ProfileError, match="checksum mismatch"):
        load_profile(path)


def test_a_fifo_or_a_folder_is_left_to_the_loader_to_name(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.memsight"
    os.mkfifo(fifo)
    # Opening a FIFO for reading blocks until a writer comes: it must not be opened at all.
    assert overview.read_overview(fifo) is None
    assert overview.read_overview(tmp_path) is None
    assert overview.read_overview(tmp_path / "missing.memsight") is None
