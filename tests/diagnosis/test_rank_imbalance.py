"""rank-imbalance, and what the other ranks were doing at an error on one rank: the job-wide
part of the diagnosis (profiler/diagnosis/job.py, rules/rank_imbalance.py), on synthetic jobs."""

from __future__ import annotations

import numpy as np

from memsight.profiler.diagnosis import diagnose
from memsight.profiler.diagnosis.finding import Finding
from memsight.profiler.profile.model import Event, Profile, SampleTable
from tests.factories import GiB, MiB, job, oom_event, profile, ram, spans, steps, table


def rank(rss: object, *more: SampleTable, events: list[Event] | None = None) -> Profile:
    return profile(
        ram(10.0, rss),
        steps(np.full(50, 300.0 * MiB), start=1.0, dt=0.1),
        *more,
        events=events or [],
    )


def imbalance(p: Profile) -> list[Finding]:
    return [f for f in diagnose(p).findings if f.rule == "rank-imbalance"]


def test_a_balanced_job_has_no_imbalance() -> None:
    assert imbalance(job(rank(300 * MiB), rank(310 * MiB), rank(305 * MiB))) == []


def test_rank_0_holding_a_gibibyte_more_is_named_with_where_it_pulls_away() -> None:
    # rank 0 starts keeping 100 MiB a second from 4 s on
    def gathers(t: np.ndarray) -> np.ndarray:
        return (300 * MiB + np.maximum(0.0, t - 4.0) * 100 * MiB * 2).astype(np.int64)

    (found,) = imbalance(job(rank(gathers), rank(300 * MiB), rank(300 * MiB)))
    assert found.severity == "warning"
    assert found.process is not None and found.process.rank == 0
    assert found.heading == "rank 0: 5.0 times the RAM of the other ranks"
    numbers = found.evidence.numbers
    assert numbers["others_median_bytes"] == 300 * MiB
    diverges = numbers["diverges_s"]
    assert isinstance(diverges, float) and 4.0 <= diverges <= 4.8
    assert "between iterations, after iteration 3" in found.evidence.text  # steps 0.1 s apart
    assert found.fixes[0].startswith("rank-zero-extra-work")


def test_where_it_pulls_away_is_read_from_the_steps_when_they_carry_the_memory() -> None:
    """On a busy machine the sampled RSS lags the steps: rank 0's samples rise only at 4 s,
    but the RSS its agent read at each step has climbed 40 MiB a step since step 12 (1.1 s)."""
    climbing = 300 * MiB + 40 * MiB * np.maximum(0, np.arange(1, 51) - 11)
    late = profile(
        ram(10.0, lambda t: (300 * MiB + np.maximum(0.0, t - 4.0) * 400 * MiB).astype(np.int64)),
        steps(climbing, start=0.0, dt=0.1),
    )
    (found,) = imbalance(job(late, rank(300 * MiB), rank(300 * MiB)))
    diverges = found.evidence.numbers["diverges_s"]
    # The first step a tenth of the largest gap (1,560 MiB at step 50) above the others:
    # step 15 (160 MiB), which starts at 1.4 s; by the samples it would be 4.4 s.
    assert diverges == 1.4, found.evidence.text
    assert "after iteration 14" in found.evidence.text


def test_a_small_difference_is_not_an_imbalance_however_large_the_ratio() -> None:
    assert imbalance(job(rank(200 * MiB), rank(50 * MiB))) == []  # 4x, but 150 MiB


def test_gpu_memory_is_compared_when_ram_is_balanced() -> None:
    def gpu(peak: int) -> SampleTable:
        t = np.arange(0, 10.0, 0.1)
        return table("gpu", t, device=0, allocated=peak, allocated_peak=peak, reserved=peak)

    (found,) = imbalance(
        job(rank(300 * MiB), rank(300 * MiB, gpu(1 * GiB)), rank(300 * MiB, gpu(3 * GiB)))
    )
    assert found.process is not None and found.process.rank == 2
    assert found.evidence.plot == "gpu" and found.evidence.numbers["memory"] == "gpu"


def test_a_single_process_run_has_no_job_findings() -> None:
    assert imbalance(rank(5 * GiB)) == []


def test_an_oom_on_one_rank_says_what_the_other_ranks_were_doing() -> None:
    forward_then_backward = spans([(1, 1)] * 60, list(range(1, 61)), start=0.0)
    busy = rank(300 * MiB, forward_then_backward)
    failing = rank(300 * MiB, events=[oom_event("cpu", t=3.005)])
    failing.info.exit_code = 1
    findings = diagnose(job(busy, failing)).findings
    (oom,) = [f for f in findings if f.rule == "out-of-memory"]
    assert oom.process is not None and oom.process.rank == 1
    # Forward 31 runs from 3.0 s to 3.01 s: rank 0 was in it, 10 steps after its 20th
    assert "meanwhile rank 0 was in forward of iteration" in oom.evidence.text
