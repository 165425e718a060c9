"""rank-imbalance: one rank's peak far above the other ranks' (warning).

Ranks of a data-parallel job run the same code on equal shares of the data, so their peaks
are close. One rank far above the others is doing something the others do not: typically
rank 0 evaluating, logging, saving checkpoints, or gathering every rank's outputs
(`gather`, `all_gather_object`) into its own memory. The job's memory is sized by its largest
rank, so the others' share is wasted, and that rank runs out first.

Judged on each rank's own RSS peak (RAM), and on PyTorch's allocated peak (GPU, over its
devices) where the ranks used CUDA: the largest rank against the median of the others, when
it is at least rank_imbalance_factor times it and rank_imbalance_min_bytes above it. Where it
diverges: the first moment its RSS stands above the others' median level by a tenth of the
final gap, with what it was doing then (diagnosis/job.py activity_at). Needs two ranks or
more.

Evidence numbers: `rank`, `peak_bytes`, `others_median_bytes`, `factor`, `memory`
("ram" or "gpu"), `diverges_s`.
"""

from __future__ import annotations

import numpy as np

from profiler.diagnosis.config import DiagnosisConfig
from profiler.diagnosis.finding import Evidence, Finding
from profiler.diagnosis.job import activity_at, level_at, ranks_of
from profiler.profile.model import Profile
from profiler.units import format_bytes

RULE_ID = "rank-imbalance"
EXPLANATION = (
    "The ranks of a data-parallel job run the same code on equal shares of the data, so their "
    "memory should be close. One rank far above the others does work the others do not: "
    "evaluation, logging or checkpoint saving on rank 0 only, or gathering every rank's "
    "outputs into one process. The job needs as much memory per process as its largest rank, "
    "and that rank runs out first. Spread the extra work, gather less (or to the CPU, in "
    "chunks), or free what rank 0 gathered as soon as it is used."
)
FIXES = ("rank-zero-extra-work", "del-and-scope")
DIVERGED_SHARE = 0.1  # of the final gap: past start-up noise, near where the extra work begins


def check_job(views: list[Profile], config: DiagnosisConfig) -> list[Finding]:
    ranks = ranks_of(views)
    if len(ranks) < 2:
        return []
    found = _imbalance(ranks, "ram", [_ram_peak(r) for r in ranks], config)
    if found is None:
        gpu = [_gpu_peak(r) for r in ranks]
        if any(p > 0 for p in gpu):
            found = _imbalance(ranks, "gpu", gpu, config)
    return [found] if found is not None else []


def _ram_peak(view: Profile) -> int:
    ram = view.ram
    return int(ram["rss_peak"].max()) if ram is not None and len(ram) else 0


def _gpu_peak(view: Profile) -> int:
    gpu = view.gpu
    return int(gpu["allocated_peak"].max()) if gpu is not None else 0


def _imbalance(
    ranks: list[Profile], memory: str, peaks: list[int], config: DiagnosisConfig
) -> Finding | None:
    top = int(np.argmax(peaks))
    others = float(np.median([p for i, p in enumerate(peaks) if i != top]))
    peak = peaks[top]
    if others <= 0 or peak < config.rank_imbalance_factor * others:
        return None
    if peak - others < config.rank_imbalance_min_bytes:
        return None
    view = ranks[top]
    label = view.process.label
    diverges = (
        _divergence(view, [r for i, r in enumerate(ranks) if i != top]) if memory == "ram" else None
    )
    where = "RAM" if memory == "ram" else "GPU memory"
    text = (
        f"{label} peaks at {format_bytes(peak)} of {where}, {peak / others:.1f} times the other "
        f"ranks' median {format_bytes(others)} (+{format_bytes(peak - others)})"
    )
    start = view.process.started
    if diverges is not None:
        text += f"; it pulls away at {diverges:.2f} s, when it was {activity_at(view, diverges)}"
        start = diverges
    end = view.process.ended if view.process.ended is not None else view.duration
    return Finding(
        RULE_ID,
        "warning",
        f"{peak / others:.1f} times the {where} of the other ranks",
        EXPLANATION,
        Evidence(
            text,
            start,
            max(start, end),
            "gpu" if memory == "gpu" else "ram",
            None,
            {
                "rank": view.process.rank,
                "peak_bytes": peak,
                "others_median_bytes": round(others),
                "factor": round(peak / others, 3),
                "memory": memory,
                "diverges_s": round(diverges, 4) if diverges is not None else None,
            },
        ),
        FIXES,
        process=view.process,
    )


def _divergence(view: Profile, others: list[Profile]) -> float | None:
    """When `view`'s RSS first stands above the others' median level by DIVERGED_SHARE of its
    final gap: where it starts to pull away."""
    ram = view.ram
    if ram is None or not len(ram):
        return None
    t = ram.t
    levels = np.median(np.vstack([level_at(o, t) for o in others]), axis=0)
    gap = ram["rss"] - levels
    final = float(gap.max())
    if final <= 0:
        return None
    above = np.flatnonzero(gap >= DIVERGED_SHARE * final)
    return float(t[above[0]]) if len(above) else None
