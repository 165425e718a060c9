"""dataloader-worker-growth: DataLoader workers' own memory rises and stays (warning).

A worker forked by a DataLoader shares its parent's pages until it writes to them, and
reading a Python object writes to it (its reference count). A dataset held as Python objects
is thus copied page by page into every worker as it is read: each worker's unique memory (USS)
rises until it has touched the whole dataset, then holds that plateau (with shuffling the
rise is fast, reading in order it lasts the whole epoch).

Only DataLoader workers are judged: the recorder names a child's role from its process name
(torch names its workers ``pt_data_worker``), so torchrun ranks, multiprocessing.spawn
processes and helpers started with subprocess are left out. Per worker life, from when it
became a worker: its USS smoothed by a running median; the first level, the highest level
held (the plateau) and the rise between them. The rise counts when it is large and either
came without RSS growth (pages that were shared became the worker's own: copy-on-access) or
was still going on at the end of the worker's life (steady growth).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.profile.model import Profile, SampleTable
from memsight.profiler.units import format_bytes, format_duration

RULE_ID = "dataloader-worker-growth"
EXPLANATION = (
    "Each DataLoader worker starts sharing the main process's memory, but reading Python "
    "objects (lists, dicts, strings) updates their reference counts, which copies the pages "
    "that hold them into the worker. With several workers the dataset ends up copied several "
    "times. Storing it as a few large arrays (numpy, Arrow, tensors) keeps the pages shared."
)

# torch names its worker processes from this version on; before it, workers keep the name of
# the interpreter and only the timing of DataLoader epochs tells them apart.
NAMED_WORKERS_SINCE = (2, 5)


@dataclass
class ChildLife:
    """One process's time in the tree (a reused pid starts a new life)."""

    pid: int
    start: float
    end: float  # math.inf while it runs
    name: str
    recorded_role: str | None  # None: the recording did not record roles
    worker_since: float | None = None  # when the recorder saw it become a DataLoader worker


@dataclass(frozen=True)
class WorkerRise:
    pid: int
    first: float  # bytes, the first smoothed level
    plateau: float  # bytes, the highest smoothed level
    start: float  # s, where the first level was measured
    reached: float  # s, where the plateau was reached (plateau share of the rise)
    end: float  # s, the last sample
    copied: float  # bytes of the rise that came without RSS growth
    growing: bool  # still growing at the end

    @property
    def rise(self) -> float:
        return self.plateau - self.first


def child_lives(profile: Profile) -> list[ChildLife]:
    """Every child process's life, in order, from the recorder's events; a pid with samples
    but no events (a profile assembled without them) gets one life over all its samples."""
    lives: list[ChildLife] = []
    running: dict[int, ChildLife] = {}
    for event in profile.events_of("child_started", "child_role", "child_exited"):
        pid = event.get("pid")
        if not isinstance(pid, int):
            continue
        if event.type == "child_started":
            old = running.pop(pid, None)
            if old is not None:
                old.end = event.t
            role = event.get("role")
            name = event.get("name")
            life = ChildLife(
                pid,
                event.t,
                math.inf,
                name if isinstance(name, str) else "",
                role if isinstance(role, str) else None,
            )
            if role == protocol.CHILD_ROLE_DATALOADER_WORKER:
                life.worker_since = event.t
            lives.append(life)
            running[pid] = life
        elif event.type == "child_role":
            named = running.get(pid)
            if named is None:
                continue
            named.recorded_role = named.recorded_role or protocol.CHILD_ROLE_OTHER
            name = event.get("name")
            if isinstance(name, str):
                named.name = name
            if (
                event.get("role") == protocol.CHILD_ROLE_DATALOADER_WORKER
                and named.worker_since is None
            ):
                named.recorded_role = protocol.CHILD_ROLE_DATALOADER_WORKER
                named.worker_since = event.t
        else:
            gone = running.pop(pid, None)
            if gone is not None:
                gone.end = event.t
    children = profile.table("children")
    if children is not None and len(children):
        described = {life.pid for life in lives}
        for pid in np.unique(children["pid"]):
            if int(pid) not in described:
                t = children.t[children["pid"] == pid]
                lives.append(ChildLife(int(pid), float(t[0]), math.inf, "", None))
    return lives


def _torch_version(profile: Profile) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", profile.info.torch_version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def dataloader_workers(profile: Profile, config: DiagnosisConfig) -> list[tuple[ChildLife, float]]:
    """The lives of DataLoader workers, each with the time from which it is judged.

    Recorded roles decide where the recording has them and torch names its workers. Else
    (recordings of older memsight, torch before 2.5): a child named pt_data_worker, or one
    that started within worker_epoch_window_s after a DataLoader epoch with workers, is a
    worker, judged after its first worker_warmup_s; a child known only by its samples is
    judged likewise.
    """
    version = _torch_version(profile)
    named = version is None or version >= NAMED_WORKERS_SINCE
    epochs = [
        e.t
        for e in profile.events_of("epoch")
        if isinstance(e.get("num_workers"), int) and e.get("num_workers") > 0
    ]
    out = []
    for life in child_lives(profile):
        if life.worker_since is not None:
            out.append((life, life.worker_since))
            continue
        if life.recorded_role is not None and named:
            continue  # the recorder saw it and it never became a DataLoader worker
        unknown = life.recorded_role is None and not life.name
        during_epoch = any(0.0 <= life.start - t <= config.worker_epoch_window_s for t in epochs)
        if unknown or life.name == protocol.DATALOADER_WORKER_NAME or during_epoch:
            out.append((life, life.start + config.worker_warmup_s))
    return out


def _running_median(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or len(values) < window:
        return values
    smoothed: np.ndarray = np.median(
        np.lib.stride_tricks.sliding_window_view(values, window), axis=1
    )
    return smoothed


def measure_rise(
    children: SampleTable, life: ChildLife, since: float, config: DiagnosisConfig
) -> WorkerRise | None:
    """First level, plateau and rise of one worker's USS; None with too few samples.

    The first level is the lowest of the first samples (USS never dips by chance, so the
    lowest is the level before the rise); the plateau is the highest running median of
    worker_smooth_samples samples, a level held rather than a passing spike (a batch in
    flight).
    """
    rows = (children["pid"] == life.pid) & (children.t >= since) & (children.t <= life.end)
    rows &= children["uss"] > 0
    if int(rows.sum()) < config.worker_min_samples:
        return None
    t = children.t[rows]
    uss = children["uss"][rows].astype(np.float64)
    rss = children["rss"][rows].astype(np.float64)
    window = max(1, min(config.worker_smooth_samples, len(t)))
    first = int(np.argmin(uss[:window]))
    held, held_rss = _running_median(uss, window), _running_median(rss, window)
    held_t = t[window // 2 : window // 2 + len(held)]  # each median stands at its middle
    top = int(np.argmax(held))
    rise = float(held[top] - uss[first])
    if rise <= 0:
        level, when = float(uss[first]), float(t[first])
        return WorkerRise(life.pid, level, level, when, when, float(t[-1]), 0.0, False)
    reached = int(np.argmax(held >= uss[first] + config.worker_plateau_share * rise))
    copied = rise - max(0.0, float(held_rss[top] - rss[first]))
    # Still growing: the held level rose by worker_tail_share of the rise over the last
    # worker_tail_fraction of the judged time.
    tail_from = float(t[-1] - config.worker_tail_fraction * (t[-1] - t[first]))
    before_tail = held[: max(1, int(np.searchsorted(held_t, tail_from, side="right")))]
    tail_rise = float(held[-1] - before_tail[-1])
    return WorkerRise(
        pid=life.pid,
        first=float(uss[first]),
        plateau=float(held[top]),
        start=float(t[first]),
        reached=float(held_t[reached]),
        end=float(t[-1]),
        copied=max(0.0, copied),
        growing=tail_rise >= config.worker_tail_share * rise,
    )


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    children = profile.table("children")
    if children is None or not len(children):
        return []
    grown: list[WorkerRise] = []
    for life, since in dataloader_workers(profile, config):
        rise = measure_rise(children, life, since, config)
        if rise is None or rise.rise < config.worker_growth_min_bytes:
            continue
        if rise.growing or rise.copied >= config.worker_copied_min_share * rise.rise:
            grown.append(rise)
    if not grown:
        return []
    largest = max(grown, key=lambda r: r.rise)
    start = min(r.start for r in grown)
    end = max(r.end if r.growing else r.reached for r in grown)
    mean_rise = sum(r.rise for r in grown) / len(grown)
    workers = "1 DataLoader worker" if len(grown) == 1 else f"{len(grown)} DataLoader workers"
    shape = (
        "and was still growing at the end"
        if largest.growing
        else f"then held that level for {format_duration(largest.end - largest.reached)}"
    )
    copied = (
        ", its RSS flat: pages copied from the main process"
        if largest.copied >= config.worker_copied_min_share * largest.rise
        else ""
    )
    text = (
        f"{workers} grew by {format_bytes(mean_rise)} each on average; the largest "
        f"(pid {largest.pid}) rose from {format_bytes(largest.first)} to "
        f"{format_bytes(largest.plateau)} in {format_duration(largest.reached - largest.start)}"
        f"{copied}, {shape}"
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
                    "pids": ", ".join(str(r.pid) for r in grown),
                    "mean_growth_bytes": round(mean_rise),
                    "total_growth_bytes": round(sum(r.rise for r in grown)),
                    "first_level_bytes": round(largest.first),
                    "plateau_bytes": round(largest.plateau),
                    "rise_bytes": round(largest.rise),
                    "rise_start_s": round(largest.start, 3),
                    "rise_end_s": round(largest.reached, 3),
                    "copied_bytes": round(sum(r.copied for r in grown)),
                    "shape": "growing" if largest.growing else "plateau",
                },
            ),
            ("dataloader-worker-memory",),
        )
    ]
