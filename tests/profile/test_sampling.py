"""Honest sampling: the rate the recorder achieved, its longest gap, and whether it fell behind
the asked interval (profiler.profile.summary.sampling_pace), as the text report, the summary
after `memsight run`, `report --json` and the HTML report say it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.cli import main
from memsight.profiler.commands.run import report_saved
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.summary import (
    format_text,
    sampling_behind_text,
    sampling_pace,
    to_json,
)
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.report import render_html
from tests.factories import GiB, MiB, profile, sample_profile, table
from tests.job_files import Rank, constant, load_job
from tests.support import run_memsight, write_script


def busy_times(n: int = 2000, every_s: float = 0.00113, gap_at: int = 700) -> np.ndarray:
    """Sample times of a recorder asked for 1 ms that got one every 1.13 ms, plus one 41 ms
    gap (a tick that waited for the CPU)."""
    t = 0.05 + every_s * np.arange(n)
    t[gap_at:] += 0.041 - every_s
    return t


def run_of(t: np.ndarray, interval_ms: float, end_t: float | None = None) -> Profile:
    return profile(
        table("ram", t, rss=100 * MiB, rss_peak=100 * MiB, available=8 * GiB),
        interval_ms=interval_ms,
        end_t=float(t[-1]) + 0.002 if end_t is None and len(t) else end_t,
    )


def test_a_recorder_that_kept_up_is_not_behind_and_the_reports_stay_as_they_were() -> None:
    run = run_of(0.01 * np.arange(1, 301), interval_ms=10)
    pace = sampling_pace(run)
    assert pace.samples == 300
    assert pace.samples_per_second == pytest.approx(100)
    assert pace.longest_gap_ms == pytest.approx(10)
    assert pace.behind is False
    assert sampling_behind_text(pace) is None
    assert "  samples    300 every 10 ms\n" in format_text(run, "run.memsight")
    assert "sampling" not in format_text(run, "run.memsight")


def test_a_recorder_that_fell_behind_says_what_it_got_against_what_was_asked() -> None:
    t = busy_times()
    pace = sampling_pace(run_of(t, interval_ms=1))
    assert pace.asked_ms == 1
    assert pace.samples_per_second == pytest.approx(1999 / (t[-1] - t[0]))
    assert pace.longest_gap_ms == pytest.approx(41)
    assert pace.behind is True
    text = sampling_behind_text(pace)
    assert text is not None
    rate = f"{1999 / (t[-1] - t[0]):.0f}"
    mean = f"{(t[-1] - t[0]) / 1999 * 1000:.3g}"
    assert text.startswith(
        f"asked every 1 ms, got {rate} samples/s (every {mean} ms on average; "
        "longest gap 41 ms): the machine was too busy to keep up"
    )
    assert "\n" not in text


@pytest.mark.parametrize(("every_ms", "behind"), [(1.09, False), (1.11, True)])
def test_behind_means_more_than_ten_percent_slower_than_asked_on_average(
    every_ms: float, behind: bool
) -> None:
    t = every_ms / 1000 * np.arange(1000)
    assert sampling_pace(run_of(t, interval_ms=1)).behind is behind


def test_a_single_long_gap_in_a_run_that_otherwise_kept_up_is_reported_but_not_behind() -> None:
    t = 0.01 * np.arange(1000)
    t[500:] += 0.05  # five ticks lost once: 0.5 % of the run
    pace = sampling_pace(run_of(t, interval_ms=10))
    assert pace.behind is False
    assert pace.longest_gap_ms == pytest.approx(60)


def test_samples_spanning_fewer_than_ten_asked_intervals_are_too_few_to_judge() -> None:
    # Five samples one interval and a half apart: slower than asked, but over 6 intervals.
    few = sampling_pace(run_of(np.arange(5) * 1.5, interval_ms=1000))
    assert few.behind is None and sampling_behind_text(few) is None
    assert few.samples_per_second == pytest.approx(1 / 1.5)
    assert few.longest_gap_ms == pytest.approx(1500)
    # A recorder stalled for the whole run is judged by the time it had, not its samples.
    stalled = sampling_pace(run_of(np.array([0.0, 0.6]), interval_ms=1))
    assert stalled.behind is True
    one = sampling_pace(run_of(np.array([0.1]), interval_ms=1))
    assert (one.samples, one.samples_per_second, one.longest_gap_ms, one.behind) == (
        1,
        None,
        None,
        None,
    )
    none = sampling_pace(profile(interval_ms=10.0))
    assert (none.samples, none.samples_per_second, none.behind) == (0, None, None)
    ended = sampling_pace(run_of(np.empty(0), interval_ms=10.0, end_t=1.0))
    assert (ended.samples, ended.samples_per_second, ended.behind) == (0, None, None)


def test_without_an_asked_interval_the_rate_is_given_but_not_judged() -> None:
    pace = sampling_pace(run_of(busy_times(), interval_ms=0.0))  # an older file's RUN frame
    assert pace.asked_ms is None and pace.behind is None
    assert pace.samples_per_second is not None and pace.longest_gap_ms == pytest.approx(41)


def test_samples_after_the_exit_do_not_count() -> None:
    t = np.append(0.001 * np.arange(1, 1001), [1.5, 1.6])  # two after the exit at 1.2 s
    pace = sampling_pace(run_of(t, interval_ms=1, end_t=1.2))
    assert pace.samples == 1000
    assert pace.longest_gap_ms == pytest.approx(1)
    assert pace.behind is False


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_long_run_is_counted_whole_its_longest_gap_found_wherever_it_falls(
    shuffled: bool,
) -> None:
    # Longer than one block of the gap search (GAP_BLOCK), the longest gap late in the run,
    # and samples after the exit: one late in the file, or one out of order among the rest.
    n = 200_000
    t = 0.001 * np.arange(1, n + 1)
    t[150_000:] += 0.05
    t = np.append(t, [t[-1] + 1.0, t[-1] + 2.0])
    end = float(t[-3]) + 0.5
    if shuffled:
        t[1000], t[-1] = t[-1], t[1000]
    pace = sampling_pace(run_of(t, interval_ms=1, end_t=end))
    kept = t[t <= end]
    assert pace.samples == n
    assert pace.longest_gap_ms == pytest.approx(1000 * float(np.max(np.diff(kept))))
    assert pace.longest_gap_ms == pytest.approx(51)


def test_a_run_with_a_time_that_is_not_a_number_gives_no_rate() -> None:
    t = 0.001 * np.arange(1, 200_001)
    t[150_000] = np.nan
    run = run_of(t, interval_ms=1)
    run.info.end_t = None  # still running: no exit time to leave it out by
    pace = sampling_pace(run)
    assert pace.samples_per_second is None and pace.longest_gap_ms is None


def test_a_running_figure_looks_at_the_last_seconds_only() -> None:
    # Kept up for 10 s, then fell behind (one sample every 2 ms) for the last 2 s.
    t = np.concatenate([0.001 * np.arange(10_000), 10 + 0.002 * np.arange(1000)])
    run = run_of(t, interval_ms=1, end_t=None)
    run.info.end_t = None  # still running
    assert sampling_pace(run).behind is False
    recent = sampling_pace(run, last_s=1.0)
    assert recent.behind is True
    assert recent.samples_per_second == pytest.approx(500)
    # The window covers ten asked intervals at least, so a slow interval can still be judged.
    slow = run_of(np.arange(0, 20.0, 1.0), interval_ms=1000)
    assert sampling_pace(slow, last_s=1.0).samples == 11


def test_each_process_of_a_job_is_judged_by_its_own_samples(tmp_path: Path) -> None:
    job = load_job(
        tmp_path / "job.memsight",
        [Rank(0, constant(200 * MiB), end_s=4.0), Rank(1, constant(200 * MiB), end_s=8.0)],
    )
    target = sampling_pace(job)
    assert target.samples == len(job.ram or [])  # the launcher's own rows, none of procs_ram
    for sub in job.subprocesses.values():
        pace = sampling_pace(sub)
        assert pace.samples == len(sub.ram or []) > 0
        assert pace.samples_per_second == pytest.approx(20, rel=0.01)  # one every 50 ms


def test_odd_sample_times_give_finite_numbers_or_none() -> None:
    for t in (
        np.array([0.0, 0.0, 0.0]),
        np.array([3.0, 1.0, 2.0, 0.5]),
        np.array([0.0, 1e300]),
    ):
        run = run_of(t, interval_ms=1, end_t=None)
        run.info.end_t = None
        json.dumps(to_json(run), allow_nan=False)  # no NaN or infinity in the JSON


def test_report_json_has_the_rate_the_longest_gap_and_the_verdict() -> None:
    t = busy_times()
    run = to_json(run_of(t, interval_ms=1))["run"]
    assert run["samples_per_second"] == round(1999 / (t[-1] - t[0]), 2)
    assert run["longest_gap_ms"] == pytest.approx(41, abs=1e-3)
    assert run["sampling_behind"] is True
    quiet = to_json(run_of(0.01 * np.arange(300), interval_ms=10))["run"]
    assert quiet["sampling_behind"] is False
    empty = to_json(profile(interval_ms=10.0))["run"]
    assert (empty["samples_per_second"], empty["longest_gap_ms"], empty["sampling_behind"]) == (
        None,
        None,
        None,
    )


def test_the_text_report_says_what_it_got_instead_of_every_n_ms() -> None:
    text = format_text(run_of(busy_times(), interval_ms=1), "run.memsight")
    lines = text.splitlines()
    assert "  samples    2,000" in lines
    sampling = [line for line in lines if line.startswith("  sampling   ")]
    assert len(sampling) == 1 and "asked every 1 ms, got " in sampling[0]
    assert "every 1 ms" not in text.replace("asked every 1 ms", "")


def test_the_html_report_gives_the_same_sentence() -> None:
    quiet = render_html(sample_profile())
    assert "3,000 every 10 ms" in quiet and "too busy" not in quiet
    busy = sample_profile()
    busy.info.interval_ms = 5.0  # its samples came every 10 ms
    sentence = sampling_behind_text(sampling_pace(busy))
    assert sentence is not None and "asked every 5 ms, got 100 samples/s" in sentence
    page = render_html(busy)
    assert f"3,000: <strong>{sentence}</strong>" in page
    assert "every 5 ms</td>" not in page


def write_busy_file(path: Path) -> Path:
    """A profile file as the recorder writes one, asked for 1 ms and given busy_times()."""
    t0 = 1_000_000_000_000
    rows = TableBuffer(protocol.RAM_TABLE)
    times = busy_times()
    for t in times:
        rows.add((t0 + round(t * 1e9), 100 * MiB, 100 * MiB, 0, 8 * GiB))
    writer = ProfileWriter(path)
    writer.write(
        protocol.encode_json_frame(
            protocol.RUN, {"t0_ns": t0, "script": "busy.py", "interval_ms": 1.0}
        )
    )
    writer.write(protocol.RAM_TABLE.frame() + rows.drain())
    end = t0 + round((times[-1] + 0.002) * 1e9)
    events = [
        {"t": end, "type": "exit", "exit_code": 0, "signal": None},
        {"t": end, "type": "recording_end"},
    ]
    writer.write(protocol.encode_json_frame(protocol.EVENTS, events))
    writer.close()
    return path


def test_memsight_report_says_so_in_json_and_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_busy_file(tmp_path / "busy.memsight")
    assert main(["report", str(path), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["interval_ms"] == 1.0 and run["sampling_behind"] is True
    assert 800 < run["samples_per_second"] < 900
    assert run["longest_gap_ms"] == pytest.approx(41, abs=0.01)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  sampling   asked every 1 ms, got 8" in out
    report_saved(path)  # what `memsight run` prints once the run is saved
    err = capsys.readouterr().err
    assert "\nmemsight: sampling: asked every 1 ms, got 8" in err


@pytest.mark.slow  # records a run in a subprocess
def test_a_real_run_at_1_ms_reports_its_achieved_rate(tmp_path: Path) -> None:
    write_script(tmp_path, "tiny.py", "import time; time.sleep(0.3)\n")
    done = run_memsight(["--interval-ms", "1", "tiny.py"], tmp_path)
    assert done.returncode == 0
    recorded = done.profile()
    run = to_json(recorded)["run"]
    assert recorded.ram is not None and recorded.info.end_t is not None
    t = recorded.ram.t[recorded.ram.t <= recorded.info.end_t]
    assert run["samples_per_second"] == round((len(t) - 1) / (t[-1] - t[0]), 2)
    assert run["longest_gap_ms"] == round(float(np.diff(t).max()) * 1000, 3)
    # Judged, whatever the machine's load: 0.3 s is far more than ten 1 ms intervals.
    assert run["sampling_behind"] is bool((t[-1] - t[0]) / (len(t) - 1) > 1.1e-3)
    behind = "  sampling   asked every 1 ms, got " in format_text(recorded, "r.memsight")
    assert behind is run["sampling_behind"]
