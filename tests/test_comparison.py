"""Two runs compared (profiler/comparison.py) and the memory gates (profiler/gates.py), on
synthetic profiles: what counts as a change, how findings are matched, every gate's edge."""

from __future__ import annotations

import numpy as np
import pytest

from memsight.profiler.comparison import Change, compare, growth_per_iteration
from memsight.profiler.diagnosis import diagnose
from memsight.profiler.gates import findings_failures, growth_failures, parse_percent, peak_failures
from memsight.profiler.profile.model import Profile
from tests.factories import GiB, MiB, profile, ram, steps, table


def training(per_step: float, base: float = 500 * MiB, n: int = 100) -> Profile:
    levels = base + per_step * np.arange(n)
    return profile(
        ram(12.0, lambda t: (base + per_step * 10 * t).astype(np.int64)),
        steps(levels, start=1.0, dt=0.1),
    )


def with_gpu(p: Profile, peak: int) -> Profile:
    t = np.arange(0, 10.0, 0.1)
    p.tables["gpu"] = table(
        "gpu", t, device=0, allocated=peak, allocated_peak=peak, reserved=peak, reserved_peak=peak
    )
    return p


def test_a_fixed_leak_resolves_its_finding_and_its_growth() -> None:
    leak, fixed = training(4 * MiB), training(0.0)
    c = compare(leak, fixed)
    assert [f.rule for f in c.findings.resolved] == ["growth-per-iteration"]
    assert not c.findings.new and not c.findings.still
    (growth,) = c.growth
    assert growth.before == pytest.approx(4 * MiB) and growth.after == pytest.approx(0.0)
    assert growth.significant
    tree = next(p for p in c.peaks if p.label == "peak RAM, process tree")
    assert tree.absolute is not None and tree.absolute < 0 and tree.significant
    assert c.aligned_by == "iteration"


def test_the_same_run_twice_is_no_significant_change() -> None:
    a, b = training(0.0), training(0.0)
    c = compare(a, b)
    assert not any(change.significant for change in (*c.peaks, *c.growth, c.iteration_time))
    assert not c.findings.resolved and not c.findings.new


def test_small_changes_are_noise_large_ones_are_not() -> None:
    assert not Change("peak", 1000 * MiB, 1040 * MiB, "bytes").significant  # 4 %
    assert Change("peak", 1000 * MiB, 1060 * MiB, "bytes").significant  # 6 %, 60 MiB
    assert not Change("peak", 10 * MiB, 15 * MiB, "bytes").significant  # 50 %, but 5 MiB
    assert Change("growth", 0.0, 1 * MiB, "bytes/iteration").significant
    assert not Change("time", 0.100, 0.105, "seconds").significant
    assert Change("only after", None, 2 * GiB, "bytes").significant
    assert not Change("only after", None, 1 * MiB, "bytes").significant  # below the floor
    assert Change("growth only before", 1 * MiB, None, "bytes/iteration").significant
    # one run read the RSS too seldom to fit a growth; the other fitted 67 bytes/iteration
    assert not Change("growth only after", None, 67.2, "bytes/iteration").significant
    assert Change("time only after", None, 0.1, "seconds").significant
    assert not Change("in neither", None, None, "bytes").significant


def test_gpu_peaks_compare_per_device_and_a_run_without_cuda_has_none() -> None:
    cpu, gpu = training(0.0), with_gpu(training(0.0), 3 * GiB)
    c = compare(cpu, gpu)
    allocated = next(p for p in c.peaks if p.label == "peak GPU allocated, cuda:0")
    assert (allocated.before, allocated.after) == (None, 3 * GiB)
    assert allocated.absolute is None
    both = compare(with_gpu(training(0.0), 2 * GiB), gpu)
    allocated = next(p for p in both.peaks if p.label == "peak GPU allocated, cuda:0")
    assert allocated.relative == pytest.approx(0.5)


def test_a_run_without_iterations_has_no_growth_per_iteration() -> None:
    assert growth_per_iteration(profile(ram(5.0, 100 * MiB))) == {}


def test_gates() -> None:
    leak, fixed = training(4 * MiB), training(0.0)
    leak_diagnosis = diagnose(leak)
    assert findings_failures(leak_diagnosis, "warning")
    assert not findings_failures(leak_diagnosis, "critical")
    assert peak_failures(fixed, max_ram=1 * GiB, max_gpu=None) == []
    (ram_failure,) = peak_failures(leak, max_ram=600 * MiB, max_gpu=None)
    assert "above --max-peak-ram 600.0 MiB" in ram_failure
    gpu = with_gpu(training(0.0), 3 * GiB)
    assert peak_failures(gpu, None, 4 * GiB) == []
    (gpu_failure,) = peak_failures(gpu, None, 2 * GiB)
    assert "peak GPU allocated 3.00 GiB" in gpu_failure
    assert peak_failures(fixed, None, 1) == []  # no CUDA: nothing to exceed
    assert growth_failures(compare(fixed, leak), 0.10)
    assert growth_failures(compare(fixed, training(0.0)), 0.10) == []


@pytest.mark.parametrize("text, share", [("10%", 0.10), ("2.5 %", 0.025), ("15", 0.15)])
def test_percentages(text: str, share: float) -> None:
    assert parse_percent(text) == pytest.approx(share)


def test_a_bad_percentage_says_so() -> None:
    with pytest.raises(ValueError, match="not a percentage"):
        parse_percent("ten")


def test_runs_with_iterations_align_iteration_by_iteration() -> None:
    from memsight.profiler.comparison import aligned_times

    slow = profile(ram(12.0, 500 * MiB), steps(np.full(100, 500.0 * MiB), start=1.0, dt=0.1))
    fast = profile(ram(6.0, 500 * MiB), steps(np.full(60, 500.0 * MiB), start=0.5, dt=0.05))
    c = compare(slow, fast)
    assert c.aligned_by == "iteration"
    slow_ends, fast_ends = slow.steps["end"], fast.steps["end"]  # type: ignore[index]
    # Iteration 10's end of the slow run lands on iteration 10's end of the fast one
    assert aligned_times(c, slow_ends[[9, 29, 59]]) == pytest.approx(fast_ends[[9, 29, 59]])
    # Before its first iteration and after the last one they share: shifted, not squeezed
    assert aligned_times(c, np.array([0.0]))[0] == pytest.approx(-0.5)
    late = aligned_times(c, np.array([slow_ends[59] + 2.0]))[0]
    assert late == pytest.approx(fast_ends[59] + 2.0)
    # Without iterations in both, times stay as they are
    idle = profile(ram(5.0, 100 * MiB))
    assert list(aligned_times(compare(idle, fast), np.array([1.0, 2.0]))) == [1.0, 2.0]
