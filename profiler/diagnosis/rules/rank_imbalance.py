"""rank-imbalance: one rank's peak far above the other ranks' (warning).

Ranks of a data-parallel job run the same code on equal shares of the data, so their peaks
are close. One rank far above the others is doing something the others do not: typically
rank 0 evaluating, logging, saving checkpoints, or gathering every rank's outputs
(`gather`, `all_gather_object`) into its own memory. The job's memory is sized by its largest
rank, so the others' share is wasted, and that rank runs out first.

Judged on each rank's own RSS peak (RAM), and on PyTorch's allocated peak (GPU, over its
devices) where the ranks used CUDA: the largest rank against the median of the others, when
it is at least rank_imbalance_factor times it and rank_imbalance_min_bytes above it. Where it
diverges: the moment from which its level (RSS, or allocated on the device of its peak) stays
above the others' median level by a tenth of the final gap until the gap is largest, with
what it was doing then (diagnosis/job.py activity_at). Compared step by step where the ranks'
agents read their memory at their optimizer steps (the ranks of a data-parallel job step
together, and a step's reading is taken in the rank itself, exactly at its step), else by
time on the sampled levels: on a busy machine the samples lag the steps, and a rank that
pulled away at step 11 was named at step 24 by them. "Stays": the ranks start a little
apart, so one rank is briefly ahead while the others still import torch; that is not where
it pulls away. Needs two ranks or more.

Evidence numbers: `rank`, `peak_bytes`, `others_median_bytes`, `factor`, `memory`
("ram" or "gpu"), `diverges_s`.
"""

from __future__ import annotations

import numpy as np

from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.job import activity_at, ranks_of
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes

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
# Of the final gap: a tenth is past the ranks' RSS noise (a few MiB against a gap of 256 MiB
# or more) yet close to where the extra work begins; half would name the middle of a gradual
# build-up (rank 0 gathering a little every step), well after the step that started it.
DIVERGED_SHARE = 0.1


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
    diverges = _divergence(view, [r for i, r in enumerate(ranks) if i != top], memory)
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


def _divergence(view: Profile, others: list[Profile], memory: str) -> float | None:
    """When `view` pulls away from the others: by step where the steps carry the memory read
    at each, else by time."""
    by_step = _step_divergence(view, others, memory)
    return by_step if by_step is not None else _time_divergence(view, others, memory)


def _first_of_last_run_above(gap: np.ndarray) -> int | None:
    """The index from which `gap` stays at or above DIVERGED_SHARE of its largest value, up to
    that largest value; None when it never rises above zero."""
    largest = int(np.argmax(gap))
    if gap[largest] <= 0:
        return None
    below = np.flatnonzero(gap[: largest + 1] < DIVERGED_SHARE * gap[largest])
    return int(below[-1] + 1) if len(below) else 0


def _step_memory(view: Profile, memory: str) -> dict[int, tuple[float, float]]:
    """Step index -> (its start, the memory read at its end), for the steps where it was read
    (RSS, or PyTorch's allocated bytes; -1 where a step did not read it)."""
    steps = view.steps
    column = "rss" if memory == "ram" else "allocated"
    if steps is None or not len(steps) or column not in steps:
        return {}
    values = steps[column]
    read = values >= 0
    return {
        int(index): (float(t), float(value))
        for index, t, value in zip(steps["index"][read], steps.t[read], values[read], strict=True)
    }


def _step_divergence(view: Profile, others: list[Profile], memory: str) -> float | None:
    """The start of the first step from which `view`'s memory at its steps stays above the
    others' median at the same steps (DIVERGED_SHARE of the largest gap); None where the
    ranks share fewer than two such steps or `view` is never above them."""
    own = _step_memory(view, memory)
    theirs = [_step_memory(o, memory) for o in others]
    common = sorted(i for i in own if all(i in t for t in theirs))
    if len(common) < 2:
        return None
    gap = np.array([own[i][1] - float(np.median([t[i][1] for t in theirs])) for i in common])
    first = _first_of_last_run_above(gap)
    return own[common[first]][0] if first is not None else None


def _time_divergence(view: Profile, others: list[Profile], memory: str) -> float | None:
    """The moment from which `view`'s sampled level stays above the others' median level by
    DIVERGED_SHARE of the final gap, up to where the gap is largest. None without samples."""
    t, own = _levels(view, memory)
    if not len(t):
        return None
    levels = np.median(np.vstack([_level_at(*_levels(o, memory), t) for o in others]), axis=0)
    first = _first_of_last_run_above(own - levels)
    return float(t[first]) if first is not None else None


def _levels(view: Profile, memory: str) -> tuple[np.ndarray, np.ndarray]:
    """A process' level over time: its RSS, or the bytes PyTorch had allocated on the device
    where its allocated peak was (a rank drives one device; rows of others would interleave)."""
    empty = (np.zeros(0), np.zeros(0))
    if memory == "ram":
        ram = view.ram
        return (ram.t, ram["rss"].astype(np.float64)) if ram is not None and len(ram) else empty
    gpu = view.gpu
    if gpu is None or not len(gpu):
        return empty
    device = gpu["device"][int(np.argmax(gpu["allocated_peak"]))]
    mine = gpu["device"] == device
    return gpu.t[mine], gpu["allocated"][mine].astype(np.float64)


def _level_at(t_levels: np.ndarray, levels: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The level at times `t`: the reading at or before each, 0 before the first (the process
    had not started: a rank started later is not yet at its level)."""
    if not len(t_levels):
        return np.zeros(len(t))
    at = np.searchsorted(t_levels, t, side="right") - 1
    return np.where(at >= 0, levels[np.maximum(at, 0)], 0.0)
