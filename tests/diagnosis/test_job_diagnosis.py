"""The job-wide diagnosis on job profiles written as the recorder writes them
(tests/job_files.py): rank-imbalance names the rank and the iteration where it pulls away,
stays quiet on a balanced job, and an error on one rank says what the others were doing."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsight.profiler.diagnosis import Finding, diagnose, finding_to_json
from memsight.profiler.profile.model import Profile
from tests.job_files import GiB, MiB, Rank, constant, load_job, oom

BASE = 300 * MiB


def imbalance(profile: Profile) -> list[Finding]:
    return [f for f in diagnose(profile).findings if f.rule == "rank-imbalance"]


def gathers_from(iteration: int, total: int) -> Rank:
    """Rank 0 keeping `total` bytes more over 10 iterations from the end of `iteration`."""
    start = Rank(0, constant(BASE)).step_start(iteration + 1)

    def rss(t: float) -> int:
        return BASE + round(total * min(1.0, max(0.0, (t - start) / 2.0)))

    return Rank(0, rss)


def test_rank_0_holding_a_gibibyte_more_is_named_with_the_iteration_it_pulls_away(
    tmp_path: Path,
) -> None:
    job = load_job(
        tmp_path / "job.memsight",
        [gathers_from(12, GiB), Rank(1, constant(BASE)), Rank(2, constant(BASE + 10 * MiB))],
    )
    (found,) = imbalance(job)
    assert found.severity == "warning"
    assert found.process is not None and found.process.rank == 0
    assert found.heading.startswith("rank 0: 4.3 times the RAM of the other ranks")
    numbers = found.evidence.numbers
    assert numbers["peak_bytes"] == BASE + GiB
    assert numbers["others_median_bytes"] == round(BASE + 5 * MiB)
    # It starts keeping memory in iteration 13 and passes a tenth of the gap in iteration 14
    assert "when it was in forward of iteration 14" in found.evidence.text, found.evidence.text
    assert 3.55 <= float(numbers["diverges_s"]) <= 3.7  # type: ignore[arg-type]
    assert found.evidence.start_s == pytest.approx(numbers["diverges_s"], abs=1e-3)  # its band
    assert finding_to_json(found)["process"] == {"proc": 1, "pid": 101, "rank": 0}


def test_a_rank_ahead_at_start_up_is_not_where_it_pulls_away(tmp_path: Path) -> None:
    # Rank 0 imports torch first: 250 MiB before the others have started at all
    early = gathers_from(20, GiB)
    early.start_s = 0.05
    late = [Rank(1, constant(BASE), start_s=0.6), Rank(2, constant(BASE), start_s=0.6)]
    (found,) = imbalance(load_job(tmp_path / "job.memsight", [early, *late]))
    assert "starting up" not in found.evidence.text
    assert "of iteration 22" in found.evidence.text, found.evidence.text


def test_gpu_memory_of_one_rank_far_above_the_others_is_named_with_where_it_pulls_away(
    tmp_path: Path,
) -> None:
    gathered = gathers_from(25, 2 * GiB)
    ranks = [
        Rank(0, constant(BASE), gpu=lambda t: GiB + gathered.rss(t) - BASE),
        Rank(1, constant(BASE), gpu=constant(GiB)),
        Rank(2, constant(BASE), gpu=constant(GiB)),
    ]
    (found,) = imbalance(load_job(tmp_path / "job.memsight", ranks))
    assert found.process is not None and found.process.rank == 0
    assert found.evidence.plot == "gpu" and found.evidence.numbers["memory"] == "gpu"
    assert found.heading == "rank 0: 3.0 times the GPU memory of the other ranks"
    assert "of iteration 27" in found.evidence.text, found.evidence.text


def test_a_balanced_job_has_no_finding_at_all(tmp_path: Path) -> None:
    ranks = [Rank(r, constant(BASE + r * 20 * MiB)) for r in range(3)]
    assert diagnose(load_job(tmp_path / "job.memsight", ranks)).findings == []


def test_a_large_ratio_of_a_small_difference_is_not_an_imbalance(tmp_path: Path) -> None:
    ranks = [Rank(0, constant(250 * MiB)), Rank(1, constant(60 * MiB))]  # 4x, 190 MiB
    assert imbalance(load_job(tmp_path / "job.memsight", ranks)) == []


def test_an_oom_on_rank_1_says_what_rank_0_was_doing_then(tmp_path: Path) -> None:
    ranks = [
        Rank(0, constant(BASE)),
        Rank(1, constant(BASE), events=[oom(3.23)], end_s=3.3, exit_code=1),
        Rank(2, constant(BASE), loop_s=1.05),
    ]
    (error,) = [
        f
        for f in diagnose(load_job(tmp_path / "job.memsight", ranks)).findings
        if f.rule == "out-of-memory"
    ]
    assert error.process is not None and error.process.rank == 1
    assert error.heading.startswith("rank 1: ")
    # Rank 0's iteration 12: forward from 3.2 s to 3.28 s; rank 2, 0.05 s ahead, finished its
    # 11th step at 3.22 s
    assert error.evidence.text.endswith(
        "; meanwhile rank 0 was in forward of iteration 12, "
        "rank 2 was between iterations, after iteration 11"
    ), error.evidence.text
