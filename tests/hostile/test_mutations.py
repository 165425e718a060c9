"""Frame-level mutants of real recordings (tests/hostile/mutate.py: truncation at every kind of
boundary, bit flips, reordered and duplicated frames, inflated length and count fields) through
everything `memsight report` does, in this process, each under a time guard; and the files whose
counts made the reader loop, by name, each with the time it took before its fix.

A file either loads or is refused with one line, within HANG_S, in bounded memory.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from memsight.profiler.profile.storage import ProfileError, decode_profile
from tests.hostile import corpus, frames, mutate
from tests.hostile.capped import capped_memsight
from tests.hostile.check_files import check
from tests.load import deadline

# A file either loads or is refused within this, on a quiet machine (a hang is anything slower).
HANG_S = 10.0
SAMPLE = 300  # mutants in the tier: about 20 s on a quiet 2-core machine


class Hung(Exception):
    pass


def _on_alarm(_signum: int, _frame: FrameType | None) -> None:
    raise Hung


@pytest.fixture
def time_guard() -> Iterator[None]:
    """SIGALRM ends a file that runs past its deadline, so a hang fails one check, not the run."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def guarded(name: str, path: Path, html: bool) -> dict[str, object]:
    limit = deadline(HANG_S)
    signal.setitimer(signal.ITIMER_REAL, 3 * limit)  # a hang still ends, to be reported
    started = time.perf_counter()
    try:
        result = check(name, str(path), html)  # a Hung becomes its "crashed" outcome
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    result["seconds"] = time.perf_counter() - started
    result["limit"] = limit
    return result


def test_a_sample_of_frame_level_mutants_loads_or_is_refused_in_one_line(
    tmp_path: Path, recorded_seeds: list[bytes], time_guard: None
) -> None:
    mutants = mutate.sample(recorded_seeds + corpus.synthetic_seeds(), SAMPLE)
    assert len(mutants) == SAMPLE
    results = []
    for n, (name, data) in enumerate(mutants):
        path = tmp_path / f"{n:03d}.memsight"
        path.write_bytes(data)
        results.append(guarded(name, path, html=n % 5 == 0))
        path.unlink()
    crashed = [
        (r["name"], r.get("error"), r.get("where")) for r in results if r["outcome"] == "crashed"
    ]
    assert not crashed
    unclear = [(r["name"], r["message"]) for r in results if r.get("bad_message")]
    assert not unclear
    slow = [(r["name"], r["seconds"]) for r in results if r["seconds"] > r["limit"]]  # type: ignore[operator]
    assert not slow
    outcomes = {r["outcome"] for r in results}
    assert outcomes == {"loaded", "refused"}  # the sample reaches both ends


# -- regressions: counts a file holds that made the reader loop --------------------------------


def timed_load(data: bytes) -> float:
    started = time.perf_counter()
    decode_profile(data, "hostile.memsight")
    return time.perf_counter() - started


@pytest.mark.parametrize("kind", ["child_exited", "child_role", "child_started"])
def test_events_naming_pids_in_a_job_of_4096_processes_load_in_seconds(
    kind: str, time_guard: None
) -> None:
    # Before: each event searched all 4,096 processes for its pid (90 s measured for 100,000
    # child_exited events in a file of 300 KB). Now a pid is found in an index.
    data = frames.many_processes(4096, 100_000, kind)
    assert len(data) < 400_000
    signal.setitimer(signal.ITIMER_REAL, 3 * deadline(HANG_S))
    assert timed_load(data) < deadline(HANG_S)


def test_a_repeated_recording_end_in_a_job_of_4096_processes_loads_in_seconds(
    time_guard: None,
) -> None:
    # Before: each of them marked all 4,096 processes finished again (400 million steps).
    data = frames.many_processes(4096, 100_000, "recording_end")
    signal.setitimer(signal.ITIMER_REAL, 3 * deadline(HANG_S))
    assert timed_load(data) < deadline(HANG_S)


def test_a_sample_block_over_4096_processes_is_split_in_one_sort(time_guard: None) -> None:
    # Before: one pass over the block per process: 10 s for 400,000 rows in a file of 92 KB,
    # rows x processes. Now one stable sort; the rows of each process keep their order.
    data = frames.rows_over_processes(4096, 600_000)
    assert len(data) < 200_000
    signal.setitimer(signal.ITIMER_REAL, 3 * deadline(HANG_S))
    started = time.perf_counter()
    profile = decode_profile(data, "hostile.memsight")
    assert time.perf_counter() - started < deadline(HANG_S)
    assert len(profile.subprocesses) == 4096
    times = profile.subprocesses[7].tables["ram"].t
    assert len(times) == 600_000 // 4096 + 1 and bool((times[1:] > times[:-1]).all())


def test_a_small_file_cannot_decode_to_millions_of_events() -> None:
    # Before: 400,000 identical events in a 120 KB file loaded (a 64 MiB floor for all JSON);
    # 1.2 million such events took 18 s and 900 MiB. Events now have a share of their own.
    with pytest.raises(ProfileError, match="events and metadata inflate past"):
        decode_profile(frames.constant_events(400_000), "hostile.memsight")
    decode_profile(frames.constant_events(20_000), "fine.memsight")  # a busy real run's worth


@pytest.mark.slow
@pytest.mark.parametrize("name", ["many-processes", "rows-over-processes", "events-at-the-budget"])
def test_the_worst_inflated_files_report_under_a_memory_cap(tmp_path: Path, name: str) -> None:
    data = {
        "many-processes": lambda: frames.many_processes(4096, 100_000, "child_exited"),
        "rows-over-processes": lambda: frames.rows_over_processes(4096, 600_000),
        "events-at-the-budget": lambda: frames.constant_events(100_000),
    }[name]()
    path = tmp_path / f"{name}.memsight"
    path.write_bytes(data)
    for extra in ([], ["--json"], ["--html", str(tmp_path / "r.html")]):
        done = capped_memsight("report", *extra, path, cwd=tmp_path, timeout=deadline(60))
        assert done.returncode in (0, 1), (extra, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr
        if extra == ["--json"] and done.returncode == 0:
            json.loads(done.stdout)
