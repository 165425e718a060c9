"""dataloader-worker-growth: worker processes' own memory keeps growing (warning).

A worker forked by a DataLoader shares its parent's pages until it writes to them, and
reading a Python object writes to it (its reference count). A dataset held as a list of
Python objects is thus copied page by page into every worker as it is read: each worker's
unique memory (USS) climbs through the epoch. Per child process, after its first second: a
line fits its USS and the fitted growth is large.
"""

from __future__ import annotations

import numpy as np

from profiler.diagnosis.config import DiagnosisConfig
from profiler.diagnosis.finding import Evidence, Finding
from profiler.diagnosis.signals import linear_fit
from profiler.profile.model import Profile
from profiler.units import format_bytes, format_duration

RULE_ID = "dataloader-worker-growth"
EXPLANATION = (
    "Each DataLoader worker starts sharing the main process's memory, but reading Python "
    "objects (lists, dicts, strings) updates their reference counts, which copies the pages "
    "that hold them into the worker. With several workers the dataset ends up copied several "
    "times. Storing it as a few large arrays (numpy, Arrow, tensors) keeps the pages shared."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    children = profile.table("children")
    if children is None or not len(children):
        return []
    grown = []
    for pid in np.unique(children["pid"]):
        rows = children["pid"] == pid
        t, uss = children.t[rows], children["uss"][rows]
        keep = (uss > 0) & (t >= t[0] + config.worker_warmup_s)
        if keep.sum() < config.worker_min_samples:
            continue
        fit = linear_fit(t[keep], uss[keep])
        growth = fit.slope * float(t[keep][-1] - t[keep][0])
        if growth >= config.worker_growth_min_bytes and fit.r2 >= config.worker_growth_min_r2:
            grown.append((int(pid), growth, fit.r2, float(t[keep][0]), float(t[keep][-1])))
    if not grown:
        return []
    start, end = min(g[3] for g in grown), max(g[4] for g in grown)
    mean_growth = sum(g[1] for g in grown) / len(grown)
    workers = "1 worker" if len(grown) == 1 else f"{len(grown)} workers"
    text = (
        f"{workers} grew by {format_bytes(mean_growth)} each on average over "
        f"{format_duration(end - start)} (r² ≥ {min(g[2] for g in grown):.2f})"
    )
    return [
        Finding(
            RULE_ID,
            "warning",
            "DataLoader workers' memory keeps growing",
            EXPLANATION,
            Evidence(
                text,
                start,
                end,
                "ram",
                None,
                {
                    "workers": len(grown),
                    "pids": ", ".join(str(g[0]) for g in grown),
                    "mean_growth_bytes": round(mean_growth),
                    "total_growth_bytes": round(sum(g[1] for g in grown)),
                },
            ),
            ("dataloader-worker-memory",),
        )
    ]
