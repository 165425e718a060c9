"""A synthetic 10 ms recording of a long GPU training run, written the way the recorder writes.

Used by load.py (size and load time of a 1,000,000-sample profile) and, through
_common.large_profile, by gui_load.py and report_html.py. The API:

* `Params`: what to generate (sample count, events mode, intervals, seed); `add_arguments`
  and `Params.from_args` give every script the same command-line flags.
* `generate(params) -> Timeline`: the rows of every table and the agent's event payloads.
* `write_recording(path, timeline) -> Written`: the file as recorded, written by the
  recorder's own frame sink, profiler.recorder.session.Recording (nothing is launched): the
  RUN frame, the schema frames as the recorder and the agent declare them, the sampler's rows
  added one by one to Recording's profiler.recorder.blocks.TableBuffer, the agent's rows a
  frame at a time (Recording.on_rows) and its JSON events as they come (Recording.on_events),
  all drained by Recording.flush every FLUSH_S (200 ms) of simulated time into
  profiler.profile.writer.ProfileWriter. Then profiler.profile.storage.compact_profile
  rewrites it, as Recording.finish does after a clean end (`make_profile` does both).
* `verify(profile, timeline) -> list[str]`: what differs between a loaded profile and the
  generated data (empty: nothing).
* `file_breakdown(path)`: the bytes each table, the events and the rest take in a file.
* `cached_profile(params) -> Path`: a finished, verified profile in the temporary folder,
  made once per `cache_key(params)`: the profile format and protocol versions, this
  generator's version, every parameter and a digest of the writing path's source files
  (protocol, codec, storage, TableBuffer, Recording), so a change of encoding or generator
  makes a new file instead of reusing a stale one.

Run directly, it writes one profile: `python benchmarks/synthetic_recording.py --out P`
(finished and verified), or without --out prints the cached profile's path, making it first.

What a 10 ms recording of a 2.8-hour GPU training run would hold (the defaults):

* ram      1,000,000 rows: t with the sampler's small lateness and rare hiccups, RSS moving
           in whole pages (a per-step sawtooth of host batches, noise, slow drift and a few
           big steps), rss_peak derived from it the way HostSampler derives it, the
           children's USS total, and MemAvailable moving with the system. The change
           statistics were checked against a real 10 ms recording of workloads/cpu_train.py.
* gpu      1,000,000 rows from the agent's own clock (which drifts: it sleeps a full
           interval after each sample): allocated with a forward/backward sawtooth per
           100 ms step in 512-byte units, *_peak as CudaSampler reports them, reserved in
           20 MiB segments, active, inactive_split, a rare alloc retry. Modelled, not
           calibrated against a real GPU recording.
* children 4 DataLoader workers, each sampled about once a second.
* steps    one row per 100 ms optimizer step, as the agent's PyTorch instrumentation
           (profiler/agent/steps.py) sends them: start, end, index, optimizer, how the
           gradients were cleared, the memory state at the step's end (RSS from the ram rows,
           the CUDA allocator counters from the gpu rows, peaks as the allocator's own
           high-water marks, never reset) and the parameter / gradient / optimizer-state
           breakdown on the first 3 steps, then whenever a second has passed since the last
           one (-1 on the other steps). Phase times carry tens to hundreds of microseconds of
           jitter, as real timings do.
* spans    per step, in the agent's order: the root module's forward (module name id,
           training / grad / requires-grad / CUDA autocast flags, depth 0), then at the
           backward's end the backward and one link row from it to that forward.
* events   the few JSON events still sent: a "name" event per name id (the model and the
           optimizer class), torch_imported, cuda_init, one epoch per 1,000 steps; and the
           recorder's own: agent_connected, child_started per worker, exit, recording_end.
           Agent rows and events reach the recorder once per agent flush (100 ms, the
           agent's FLUSH_S), one frame per table; its schema frames right after its hello.
* `--events step` writes only the steps rows, with nothing but the times, index, optimizer
  and clearing known (-1 elsewhere), and no spans: the lower bound.

Not modelled: the optional nvml table (10 rows/s per GPU where nvidia-ml-py is installed; the
NVML sampler that a cuda_init event starts is left out), the script's output.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import inspect
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.agent.client import EVENTS_PER_FRAME
from memsight.profiler.agent.client import FLUSH_S as AGENT_FLUSH_S
from memsight.profiler.agent.steps import BREAKDOWN_EVERY_NS, BREAKDOWN_WARMUP_STEPS
from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.profile import codec, header, storage, writer
from memsight.profiler.profile.header import FORMAT_VERSION
from memsight.profiler.profile.model import TIME_COLUMNS, Profile
from memsight.profiler.profile.storage import compact_profile, load_profile
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import (
    CHILD_TABLE,
    GPU_TABLE,
    PROTOCOL_VERSION,
    RAM_TABLE,
    SPAN_TABLE,
    STEP_TABLE,
    TableSchema,
)
from memsight.profiler.recorder import blocks, session
from memsight.profiler.recorder.session import FLUSH_S, Recording

# Bump whenever what this module generates or how it frames it changes: the cache key holds it.
GENERATOR_VERSION = 1

MiB = 1 << 20
GIB = 1 << 30
PAGE = 4096
T0_NS = 3 * 86_400 * 10**9 + 123_456_789  # monotonic clock at the launch: 3 days of uptime
TARGET_PID = 40000
FIRST_WORKER_PID = 41000
TABLES = (RAM_TABLE, CHILD_TABLE, GPU_TABLE, STEP_TABLE, SPAN_TABLE)
# Source files the bytes of a profile depend on besides this module: part of the cache key,
# since an encoding can change without a version constant changing.
WRITING_PATH: tuple[ModuleType, ...] = (protocol, codec, header, storage, writer, blocks, session)


@dataclass(frozen=True)
class Params:
    """What to generate. The defaults: 1,000,000 samples of a 10 ms recording."""

    samples: int = 1_000_000  # rows in the ram and gpu tables
    interval_ms: float = 10.0  # sampling interval
    flush_ms: float = FLUSH_S * 1000  # the recorder's drain period
    step_ms: float = 100.0  # optimizer step period
    events: Literal["full", "step"] = "full"  # see the module's docstring
    epoch_steps: int = 1000  # steps per epoch event
    workers: int = 4  # DataLoader worker processes
    seed: int = 1

    def __post_init__(self) -> None:
        if self.events not in ("full", "step"):
            raise ValueError(f"events must be 'full' or 'step', not {self.events!r}")
        if self.samples < 2 or self.interval_ms <= 0 or self.flush_ms <= 0 or self.step_ms <= 0:
            raise ValueError("samples must be at least 2 and every period positive")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Params:
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})

    def argv(self) -> list[str]:
        """The command-line flags that give these parameters (see add_arguments)."""
        out = []
        for f in dataclasses.fields(self):
            out += [f"--{f.name.replace('_', '-')}", str(getattr(self, f.name))]
        return out

    @property
    def full(self) -> bool:
        return self.events == "full"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The generator's flags, with the defaults of Params."""
    d = Params()
    p.add_argument(
        "--samples",
        type=int,
        default=d.samples,
        help=f"rows in the ram and gpu tables (default {d.samples:,})",
    )
    p.add_argument(
        "--interval-ms",
        type=float,
        default=d.interval_ms,
        help=f"simulated sampling interval (default {d.interval_ms:g})",
    )
    p.add_argument(
        "--flush-ms",
        type=float,
        default=d.flush_ms,
        help=f"simulated drain period (default {d.flush_ms:g}, the recorder's FLUSH_S)",
    )
    p.add_argument(
        "--step-ms",
        type=float,
        default=d.step_ms,
        help=f"simulated optimizer step period (default {d.step_ms:g})",
    )
    p.add_argument(
        "--events",
        choices=["full", "step"],
        default=d.events,
        help="full (default): what the agent's PyTorch instrumentation sends for a GPU "
        "training loop: per step a forward, a backward and a link row in the spans table and "
        "a steps row with the memory state, plus rare JSON events (names, epochs); "
        "step: the bare minimum, one steps row per step with only its times, index and "
        "optimizer known (-1 elsewhere), no spans",
    )
    p.add_argument(
        "--epoch-steps",
        type=int,
        default=d.epoch_steps,
        help=f"steps per epoch: one epoch event each (default {d.epoch_steps})",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=d.workers,
        help=f"DataLoader worker processes (default {d.workers})",
    )
    p.add_argument(
        "--seed", type=int, default=d.seed, help=f"the generator's random seed (default {d.seed})"
    )


# -- the cache key --------------------------------------------------------------------------------


def cache_key(params: Params) -> str:
    """Names one generated profile: format, protocol and generator versions, the sample count
    and events mode in plain sight, then a digest of every parameter and of the writing path's
    source, so that nothing a profile's bytes depend on can change under the same name."""
    digest = hashlib.sha256()
    versions = {"format": FORMAT_VERSION, "protocol": PROTOCOL_VERSION}
    digest.update(json.dumps([versions, GENERATOR_VERSION, dataclasses.asdict(params)]).encode())
    for module in WRITING_PATH:
        digest.update(Path(inspect.getfile(module)).read_bytes())
    return (
        f"f{FORMAT_VERSION}-p{PROTOCOL_VERSION}-g{GENERATOR_VERSION}"
        f"-{params.samples}-{params.events}-{digest.hexdigest()[:12]}"
    )


def cache_path(params: Params, folder: Path | None = None) -> Path:
    folder = Path(tempfile.gettempdir()) if folder is None else folder
    return folder / f"memsight-synthetic-{cache_key(params)}{header.SUFFIX}"


def cached_profile(params: Params | None = None, folder: Path | None = None) -> Path:
    """A finished, verified profile of `params`, made on first use and kept under its key.

    It is made in a separate process, so the caller (a benchmark timing its own process)
    carries none of the generator's memory, and put in place only once verified.
    """
    params = params or Params()
    path = cache_path(params, folder)
    if path.exists():
        return path
    print(f"making a {params.samples:,}-sample profile: {path} ...", flush=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--out", str(partial), *params.argv()],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


# -- data -----------------------------------------------------------------------------------------


@dataclass
class Timeline:
    """Generated rows of every table, as int64 matrices in schema column order."""

    params: Params
    ram: np.ndarray
    gpu: np.ndarray
    children: np.ndarray
    steps: np.ndarray  # STEP_TABLE rows, one per optimizer step
    spans: np.ndarray  # SPAN_TABLE rows (empty with events "step")
    # When each agent row reaches the recorder: the end of the agent flush (100 ms) that
    # sends it. The recorder adds rows to its TableBuffer as they arrive (Recording.on_rows).
    gpu_arrival: np.ndarray
    steps_arrival: np.ndarray
    spans_arrival: np.ndarray
    names: dict[int, str]  # name ids used in the rows, as the "name" events announce them
    # The agent's EVENTS payloads, already JSON as they arrive on the socket: (arrival ns,
    # payload, events). The recorder only re-frames them (Recording.on_events).
    payloads: list[tuple[int, bytes, list[dict[str, Any]]]] = field(default_factory=list)
    event_counts: dict[str, int] = field(default_factory=dict)  # the agent's, per type
    child_pids: list[int] = field(default_factory=list)

    def rows(self) -> dict[str, np.ndarray]:
        """Each table's rows by name, in TABLES order."""
        by_name = {
            "ram": self.ram,
            "children": self.children,
            "gpu": self.gpu,
            "steps": self.steps,
            "spans": self.spans,
        }
        return {schema.name: by_name[schema.name] for schema in TABLES}

    @property
    def end_ns(self) -> int:
        """When the target exits: just after the last row reaches the recorder."""
        last = [int(self.ram[-1, 0]), int(self.gpu_arrival[-1])]
        last += [int(a[-1]) for a in (self.steps_arrival, self.spans_arrival) if len(a)]
        last += [int(self.children[-1, 0])] if len(self.children) else []
        last += [self.payloads[-1][0]] if self.payloads else []
        return max(last) + 1

    def recorder_event_counts(self) -> dict[str, int]:
        """The events the recorder writes itself (see write_recording), per type."""
        workers = len(self.child_pids)
        return {"agent_connected": 1, "child_started": workers, "exit": 1, "recording_end": 1}


def pages(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, dtype=np.int64) // PAGE) * PAGE


def sample_times(rng: np.random.Generator, n: int, interval_ns: int) -> np.ndarray:
    """The HostSampler's ticks: deadline-based, so lateness never accumulates."""
    late = np.abs(rng.normal(0, 40_000, n)).astype(np.int64)  # tens of microseconds
    hiccup = rng.random(n) < 0.002  # a GC pause or a busy core now and then
    late[hiccup] += rng.integers(1_000_000, 8_000_000, hiccup.sum())
    return T0_NS + 2_000_000 + np.arange(n, dtype=np.int64) * interval_ns + late


def interval_peak(current: np.ndarray, highest: np.ndarray) -> np.ndarray:
    """Peak since the previous row as the samplers report it, given each interval's highest
    value: the running high-water mark where it rose, else max(previous, current)."""
    mark = np.maximum.accumulate(highest)
    rose = np.concatenate([[True], mark[1:] > mark[:-1]])
    prev = np.concatenate([current[:1], current[:-1]])
    return np.where(rose, mark, np.maximum(current, prev))


def ram_rows(
    rng: np.random.Generator, t: np.ndarray, params: Params, children_total: np.ndarray
) -> np.ndarray:
    n = len(t)
    per_step = max(1, round(params.step_ms / params.interval_ms))
    phase = np.arange(n) % per_step
    # A host-side batch (pinned staging buffer) appears at the start of each step, then goes.
    batch = np.where(phase < per_step // 2, 24 * MiB, 0)
    drift = 180 * MiB * np.sin(np.arange(n) / n * 6 * np.pi)
    steps = np.zeros(n)
    for at in rng.integers(0, n, 6):  # evaluation passes, checkpoint saves, cache growth
        steps[at:] += rng.choice([-1, 1]) * rng.integers(50, 500) * MiB
    changed = rng.random(n) < 0.35
    noise = np.cumsum(np.where(changed, rng.integers(-64, 65, n) * PAGE, 0))
    rss = pages(2_600 * MiB + batch + drift + steps + noise)
    # rss_peak as HostSampler computes it: the kernel's high-water mark when it rose, else
    # the larger of the two readings. Transient spikes between ticks lift the mark.
    spikes = np.where(rng.random(n) < 0.01, pages(rng.integers(0, 64 * MiB, n)), 0)
    rss_peak = interval_peak(rss, rss + spikes)
    other = np.cumsum(np.where(rng.random(n) < 0.5, rng.integers(-96, 97, n) * PAGE, 0))
    available = (48 * GIB - rss - children_total - other) // 1024 * 1024
    return np.stack([t, rss, rss_peak, children_total, available], axis=1)


def gpu_rows(rng: np.random.Generator, n: int, params: Params) -> np.ndarray:
    interval_ns = int(params.interval_ms * 1e6)
    # The agent waits a full interval after each sample, so its clock drifts by the work.
    t = T0_NS + 900_000_000 + np.cumsum(interval_ns + rng.integers(40_000, 160_000, n))
    per_step = max(1, round(params.step_ms / params.interval_ms))
    phase = np.arange(n) % per_step
    up = per_step * 0.4
    activations = np.where(
        phase < up, phase / up, np.maximum(0.0, 1 - (phase - up) / (per_step - up))
    )
    base = 6 * GIB + 300 * MiB
    allocated = base + (activations * 4 * GIB).astype(np.int64)
    allocated += rng.integers(-8192, 8192, n) * 512
    allocated = (allocated // 512) * 512
    # *_peak columns follow CudaSampler: the allocator's peak when it rose since the last
    # row, else the larger of the two readings (so they move every sample, like allocated).
    transient = np.where(rng.random(n) < 0.2, rng.integers(0, 64 * MiB // 512, n) * 512, 0)
    allocated_peak = interval_peak(allocated, allocated + transient)
    segment = 20 * MiB
    reserved = np.maximum.accumulate(-(-(allocated + transient) // segment) * segment + 512 * MiB)
    reserved_peak = interval_peak(reserved, reserved)
    # Active blocks equal allocated ones unless frees wait on another stream (rare).
    active = allocated + np.where(rng.random(n) < 0.05, rng.integers(0, 4096, n) * 512, 0)
    # Split-block fragmentation follows the step's allocation pattern, with per-sample noise.
    inactive_split = (
        (activations * 180 * MiB).astype(np.int64) // 512 + rng.integers(0, 2048, n)
    ) * 512
    alloc_retries = np.cumsum(rng.random(n) < 1e-5)
    ooms = np.zeros(n, dtype=np.int64)
    device = np.zeros(n, dtype=np.int64)
    return np.stack(
        [
            t,
            device,
            allocated,
            allocated_peak,
            reserved,
            reserved_peak,
            active,
            inactive_split,
            alloc_retries,
            ooms,
        ],
        axis=1,
    ).astype(np.int64)


def children_rows(rng: np.random.Generator, t_end: int, pids: list[int]) -> np.ndarray:
    """Each worker's memory about once a second, at its own phase."""
    if not pids:
        return np.empty((0, len(CHILD_TABLE.columns)), dtype=np.int64)
    rows = []
    for k, pid in enumerate(pids):
        times = np.arange(T0_NS + 1_500_000_000 + k * 250_000_000, t_end, 1_000_000_000)
        times = times + rng.integers(0, 5_000_000, len(times))
        m = len(times)
        uss = pages(310 * MiB + np.cumsum(rng.integers(-256, 257, m) * PAGE) + (k * 7 * MiB))
        shared = 420 * MiB
        rows.append(
            np.stack(
                [
                    times,
                    np.full(m, pid),
                    uss + shared,
                    uss,
                    uss + shared // 5,
                    np.zeros(m, dtype=np.int64),
                ],
                axis=1,
            )
        )
    out = np.concatenate(rows).astype(np.int64)
    return out[np.argsort(out[:, 0], kind="stable")]


def children_total_at(t: np.ndarray, children: np.ndarray, pids: list[int]) -> np.ndarray:
    """Sum of every worker's latest USS at each ram tick: what HostSampler records."""
    total = np.zeros(len(t), dtype=np.int64)
    for pid in pids:
        mine = children[children[:, 1] == pid]
        idx = np.searchsorted(mine[:, 0], t, side="right") - 1
        total += np.where(idx >= 0, mine[np.maximum(idx, 0), 3], 0)
    return total


def generate(params: Params) -> Timeline:
    """Every table's rows and the agent's event payloads for `params` (deterministic)."""
    rng = np.random.default_rng(params.seed)
    interval_ns = int(params.interval_ms * 1e6)
    t = sample_times(rng, params.samples, interval_ns)
    pids = [FIRST_WORKER_PID + i for i in range(params.workers)]
    children = children_rows(rng, int(t[-1]), pids)
    ram = ram_rows(rng, t, params, children_total_at(t, children, pids))
    gpu = gpu_rows(rng, params.samples, params)
    step_ns = int(params.step_ms * 1e6)
    starts = np.arange(T0_NS + 1_000_000_000, int(t[-1]) - step_ns, step_ns, dtype=np.int64)
    starts += rng.integers(0, 2_000_000, len(starts))
    phases = step_phases(rng, starts, step_ns)
    # Name ids in the order the agent hands them out (Agent.name_id): the root module's class
    # at the end of the first forward, the optimizer's at the end of the first step.
    names = {1: "GPT", 2: "AdamW"} if params.full else {1: "AdamW"}
    ids = {name: i for i, name in names.items()}
    steps = step_rows(phases, ram, gpu, ids["AdamW"], params.full)
    empty_spans = np.empty((0, len(SPAN_TABLE.columns)), dtype=np.int64)
    spans = span_rows(phases, ids["GPT"]) if params.full else empty_spans
    batch_ns = int(AGENT_FLUSH_S * 1e9)
    events = rare_events(phases, names, params)
    counts: dict[str, int] = {}
    for _, ev in events:
        counts[ev["type"]] = counts.get(ev["type"], 0) + 1
    # Rows are queued when their span ends: a forward row at the forward's end, the backward
    # and link rows at the backward's end, a step row at the step's end.
    return Timeline(
        params=params,
        ram=ram,
        gpu=gpu,
        children=children,
        steps=steps,
        spans=spans,
        gpu_arrival=agent_arrival(gpu[:, 0], batch_ns),
        steps_arrival=agent_arrival(steps[:, 1], batch_ns),
        spans_arrival=agent_arrival(spans[:, 1], batch_ns),
        names=names,
        payloads=agent_payloads(events, batch_ns),
        event_counts=counts,
        child_pids=pids,
    )


@dataclass
class Phases:
    """Monotonic-clock times of each training step's phases (ns), one entry per step."""

    start: np.ndarray  # forward begins
    fwd_end: np.ndarray
    bwd_start: np.ndarray  # the gradient hook on the forward's output fires
    bwd_end: np.ndarray  # the autograd engine's queued callback runs
    opt_start: np.ndarray  # optimizer step pre hook
    opt_end: np.ndarray  # optimizer step post hook


def step_phases(rng: np.random.Generator, starts: np.ndarray, step_ns: int) -> Phases:
    """Forward 35 %, backward to 85 %, optimizer step to 97 % of each step, with the jitter of
    real timings (tens to hundreds of microseconds; monotonic_ns has ns resolution)."""
    n = len(starts)

    def jitter(sd_ns: float) -> np.ndarray:
        return np.clip(rng.normal(0, sd_ns, n), -3 * sd_ns, 3 * sd_ns).astype(np.int64)

    fwd_end = starts + int(0.35 * step_ns) + jitter(200_000)
    bwd_start = fwd_end + rng.integers(100_000, 300_000, n)
    bwd_end = starts + int(0.85 * step_ns) + jitter(300_000)
    opt_start = bwd_end + rng.integers(80_000, 200_000, n)
    opt_end = starts + int(0.97 * step_ns) + jitter(100_000)
    return Phases(starts, fwd_end, bwd_start, bwd_end, opt_start, opt_end)


def latest_at(times: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Index of the latest row at or before each time in `at` (clipped to the first row)."""
    return np.maximum(np.searchsorted(times, at, side="right") - 1, 0)


def step_rows(
    phases: Phases, ram: np.ndarray, gpu: np.ndarray, optimizer_id: int, full: bool
) -> np.ndarray:
    """STEP_TABLE rows as Instrumentation._step_post builds them.

    full: the memory state read at the step's end (RSS, the CUDA allocator's counters, whose
    *_peak are the allocator's own high-water marks, never reset), and the parameter /
    gradient / optimizer-state breakdown on the first 3 steps, then whenever a second has
    passed since the last one (-1 on the others). Otherwise the bare minimum: times, index,
    optimizer and how gradients were cleared, every other column -1 (unknown).
    """
    n = len(phases.start)
    rows = np.full((n, len(STEP_TABLE.columns)), -1, dtype=np.int64)
    col = {name: i for i, (name, _) in enumerate(STEP_TABLE.columns)}
    rows[:, col["t"]] = phases.opt_start
    rows[:, col["end"]] = phases.opt_end
    rows[:, col["index"]] = np.arange(1, n + 1)
    rows[:, col["optimizer"]] = optimizer_id
    rows[:, col["cleared"]] = protocol.CLEARED_ZERO_GRAD  # zero_grad() before each backward
    if not full:
        return rows
    rows[:, col["rss"]] = ram[latest_at(ram[:, 0], phases.opt_end), 1]
    at = latest_at(gpu[:, 0], phases.opt_end)
    g = gpu[at]
    rows[:, col["device"]] = 0
    rows[:, col["allocated"]] = g[:, 2]
    rows[:, col["reserved"]] = g[:, 4]
    # CudaSampler.read(): the allocator's peaks since the start, not the per-interval peaks
    # of the gpu table.
    rows[:, col["allocated_peak"]] = np.maximum.accumulate(gpu[:, 3])[at]
    rows[:, col["reserved_peak"]] = np.maximum.accumulate(gpu[:, 5])[at]
    rows[:, col["active"]] = g[:, 6]
    rows[:, col["inactive_split"]] = g[:, 7]
    rows[:, col["alloc_retries"]] = g[:, 8]
    rows[:, col["ooms"]] = g[:, 9]
    # Instrumentation._breakdown: measured on the first steps, then at most once a second.
    measured = np.zeros(n, dtype=bool)
    last, count = 0, 0
    for i, end in enumerate(phases.opt_end.tolist()):
        if count < BREAKDOWN_WARMUP_STEPS or end - last >= BREAKDOWN_EVERY_NS:
            measured[i] = True
            last, count = end, count + 1
    params = 1_247_281_152  # a 312M-parameter fp32 model on cuda:0, AdamW's two moments
    for name, value in (
        ("params_cpu", 0),
        ("params_gpu", params),
        ("grads_cpu", 0),
        ("grads_gpu", params),
        ("state_cpu", 0),
        ("state_gpu", 2 * params),
    ):
        rows[measured, col[name]] = value
    return rows


def span_rows(phases: Phases, module_id: int) -> np.ndarray:
    """SPAN_TABLE rows per step, in the order the agent queues them: the root module's
    forward (training, grad enabled, output requires grad, CUDA autocast, depth 0), then at
    the backward's end the backward row and its one link row to that forward."""
    n = len(phases.start)
    forward_id = np.arange(1, n + 1)
    zeros = np.zeros(n, dtype=np.int64)
    flags = (
        protocol.FLAG_TRAINING
        | protocol.FLAG_GRAD
        | protocol.FLAG_REQUIRES_GRAD
        | protocol.FLAG_AUTOCAST_CUDA
    )
    forward = np.stack(
        [
            phases.start,
            phases.fwd_end,
            zeros + protocol.SPAN_FORWARD,
            forward_id,
            zeros + module_id,
            zeros + flags,
            zeros,
        ],
        axis=1,
    )

    def backward_row(kind: int) -> np.ndarray:
        return np.stack(
            [phases.bwd_start, phases.bwd_end, zeros + kind, forward_id, zeros, zeros, zeros],
            axis=1,
        )

    rows = np.stack(
        [forward, backward_row(protocol.SPAN_BACKWARD), backward_row(protocol.SPAN_LINK)], axis=1
    )
    return rows.reshape(-1, len(SPAN_TABLE.columns)).astype(np.int64)


def rare_events(
    phases: Phases, names: dict[int, str], params: Params
) -> list[tuple[int, dict[str, Any]]]:
    """The JSON events an instrumented run still sends, as (time queued, event): the "name"
    of each id (when first used), and with events "full" torch_imported, cuda_init and one
    "epoch" per DataLoader iterator (every epoch_steps steps)."""
    ids = {name: i for i, name in names.items()}
    out: list[tuple[int, dict[str, Any]]] = []

    def name_event(name: str, at: int) -> None:
        out.append((at, {"id": ids[name], "name": name, "t": at, "type": "name"}))

    if params.full:
        torch_at, cuda_at = T0_NS + 600_000_000, T0_NS + 850_000_000
        out.append(
            (
                torch_at,
                {
                    "version": "2.5.1+cu124",
                    "cuda": "12.4",
                    "hooks": True,
                    "t": torch_at,
                    "type": "torch_imported",
                },
            )
        )
        device = {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "total_bytes": 85_045_870_592,
            "uuid": "GPU-5a1c3e9f-0d2b-4c6e-9f7a-3b8d1e2c4a6f",
            "pci": [0, 24, 0],
        }
        out.append((cuda_at, {"devices": [device], "t": cuda_at, "type": "cuda_init"}))
        epoch_starts = range(0, len(phases.start), max(1, params.epoch_steps))
        for k, i in enumerate(epoch_starts):
            at = int(phases.start[i]) - 1_500_000  # DataLoader.__iter__, before the batch
            out.append(
                (
                    at,
                    {
                        "loader": 1,
                        "index": k + 1,
                        "num_workers": params.workers,
                        "persistent_workers": False,
                        "t": at,
                        "type": "epoch",
                    },
                )
            )
        name_event("GPT", int(phases.fwd_end[0]))
    name_event("AdamW", int(phases.opt_end[0]))
    out.sort(key=lambda item: item[0])
    return out


def agent_arrival(queued: np.ndarray, batch_ns: int) -> np.ndarray:
    """When rows queued at these times reach the recorder: the agent's next flush."""
    return T0_NS + ((queued - T0_NS) // batch_ns + 1) * batch_ns


def agent_payloads(
    events: list[tuple[int, dict[str, Any]]], batch_ns: int
) -> list[tuple[int, bytes, list[dict[str, Any]]]]:
    """Group events by the agent flush that sends them and encode each group as the agent
    does (Agent._send_pending: EVENTS frames of at most EVENTS_PER_FRAME events)."""
    batches: dict[int, list[dict[str, Any]]] = {}
    for queued, event in events:
        edge = T0_NS + ((queued - T0_NS) // batch_ns + 1) * batch_ns
        batches.setdefault(edge, []).append(event)
    payloads = []
    for edge, batch in sorted(batches.items()):
        for start in range(0, len(batch), EVENTS_PER_FRAME):
            part = batch[start : start + EVENTS_PER_FRAME]
            frame = protocol.encode_json_frame(protocol.EVENTS, part)
            payloads.append((edge, frame[protocol.HEADER_SIZE :], part))
    return payloads


# -- writing --------------------------------------------------------------------------------------


class _Sink(Recording):
    """Recording's frame sink (emit, event, its TableBuffers, flush, on_schema, on_rows,
    on_events) with nothing launched, sampled or listened to: the rows come from a Timeline."""

    def _start_nvml(self, devices: Any) -> None:
        """The NVML sampler a cuda_init event starts is not modelled (it would sample this
        machine's real GPUs into the synthetic profile)."""


def run_spec(params: Params) -> RunSpec:
    return RunSpec(
        target="train.py",
        args=("--epochs", "40"),
        cwd="/home/user/project",
        python="/usr/bin/python3",
        interval_ms=params.interval_ms,
        hooks=True,
    )


def run_metadata(spec: RunSpec) -> dict[str, Any]:
    """The RUN frame's object, with the keys Recording.start writes."""
    return {
        "script": None if spec.module else spec.target,
        "module": spec.target if spec.module else None,
        "argv": list(spec.args),
        "cwd": spec.cwd,
        "python": spec.python,
        "interval_ms": spec.interval_ms,
        "start_time": "2025-01-01T00:00:00.000+00:00",
        "t0_ns": T0_NS,
        "hostname": "bench",
        "platform": "Linux",
        "memsight_version": "bench",
        "pid": TARGET_PID,
        "ram_total_bytes": 64 * GIB,
        "memory_limit_bytes": None,
        "hooks": spec.hooks,
        "ram_budget_bytes": spec.ram_budget_bytes,
    }


def as_tuples(matrix: np.ndarray) -> list[tuple[int, ...]]:
    """Rows as the tuples the sampler and the agent server hand to TableBuffer."""
    return [tuple(r) for r in matrix.tolist()]


# One agent frame reaching the recorder: (arrival ns, order within the agent's flush, deliver).
Delivery = tuple[int, int, Callable[[], None]]


def agent_deliveries(data: Timeline, sink: Recording) -> list[Delivery]:
    """The agent's frames in the order they reach the recorder: per agent flush, a rows frame
    for each table with rows (in AGENT_TABLES order), then its EVENTS frames."""
    out: list[Delivery] = []
    arrivals = {"gpu": data.gpu_arrival, "steps": data.steps_arrival, "spans": data.spans_arrival}
    matrices = data.rows()
    for order, schema in enumerate(protocol.AGENT_TABLES):
        if schema.name not in arrivals:
            continue  # declared with the hello, never filled here (the C heap's few rows)
        times, rows = arrivals[schema.name].tolist(), as_tuples(matrices[schema.name])
        bounds = [0, *(np.flatnonzero(np.diff(arrivals[schema.name])) + 1).tolist(), len(rows)]
        for a, b in itertools.pairwise(bounds):
            if b > a:
                out.append((times[a], order, functools.partial(sink.on_rows, 0, schema, rows[a:b])))
    for i, (arrival, payload, events) in enumerate(data.payloads):
        order = len(protocol.AGENT_TABLES) + i
        out.append((arrival, order, functools.partial(sink.on_events, 0, payload, events)))
    out.sort(key=lambda d: (d[0], d[1]))
    return out


@dataclass
class Written:
    """What write_recording did: its time (the writing path only) and the file's size."""

    write_s: float
    file_bytes: int


def write_recording(path: Path, data: Timeline) -> Written:
    """Write `data` into `path` as a recording does, frame by frame (the file as recorded).

    The order is Recording's: RUN, the recorder's schemas and its first sample (flushed at
    once), the agent's hello and schemas, the workers' child_started events; then every
    FLUSH_S of simulated time the rows and frames that arrived (sampler rows one by one,
    agent frames as they came) and Recording.flush; at the end exit and recording_end.
    """
    params = data.params
    spec = run_spec(params)
    sink = _Sink(spec, path, stdio="capture")
    ram, children = as_tuples(data.ram), as_tuples(data.children)
    deliveries = agent_deliveries(data, sink)
    flush_ns = int(params.flush_ms * 1e6)
    end_ns = data.end_ns
    edges = np.arange(T0_NS + flush_ns, end_ns + flush_ns, flush_ns, dtype=np.int64)
    # Where each window ends in the recorder's tables, found up front.
    ram_cut = np.searchsorted(data.ram[:, 0], edges, side="left").tolist()
    child_cut = np.searchsorted(data.children[:, 0], edges, side="left").tolist()

    started = time.perf_counter()
    sink.writer = ProfileWriter(path)
    sink.emit(protocol.encode_json_frame(protocol.RUN, run_metadata(spec)))
    ram_buffer = sink._table(RAM_TABLE)  # what Recording.start hands HostSampler ...
    child_buffer = sink._table(CHILD_TABLE)  # ... and TreeWatcher
    ram_buffer.add(ram[0])  # the first sample, taken and flushed before the target runs
    sink.flush()
    sink.event(
        "agent_connected",
        t=T0_NS + 400_000_000,
        pid=TARGET_PID,
        python_version="3.11.7",
        executable=spec.python,
    )
    for schema in protocol.AGENT_TABLES:  # sent with the hello (Agent.__init__), used or not
        sink.on_schema(0, schema)  # the target: process 0
    for i, pid in enumerate(data.child_pids):
        sink.event(
            "child_started",
            t=T0_NS + 800_000_000 + i,
            pid=pid,
            ppid=TARGET_PID,
            name="pt_data_worker",
            cmdline=["python3", "train.py"],
        )
    ram_done, child_done, next_delivery = 1, 0, 0
    add_ram, add_child = ram_buffer.add, child_buffer.add
    for edge, ram_upto, child_upto in zip(edges.tolist(), ram_cut, child_cut, strict=True):
        for row in ram[ram_done:ram_upto]:  # HostSampler: one row per tick
            add_ram(row)
        for row in children[child_done:child_upto]:  # TreeWatcher: one row per reading
            add_child(row)
        ram_done, child_done = max(ram_done, ram_upto), child_upto
        while next_delivery < len(deliveries) and deliveries[next_delivery][0] < edge:
            deliveries[next_delivery][2]()  # AgentServer -> on_rows / on_events
            next_delivery += 1
        sink.flush()  # Recording._flush_loop: every table drained, then the file flushed
    sink.event("exit", t=end_ns, exit_code=0, signal=None)
    sink.flush()
    sink.event("recording_end", t=end_ns + 1, samples=len(ram), missed_ticks=0)
    sink.flush()
    sink.writer.close()
    write_s = time.perf_counter() - started
    assert next_delivery == len(deliveries) and ram_done == len(ram), "rows left unwritten"
    return Written(write_s, path.stat().st_size)


def make_profile(path: Path, params: Params) -> Timeline:
    """Generate, write and compact a profile into `path`; raise if it does not verify."""
    data = generate(params)
    write_recording(path, data)
    compact_profile(path)
    problems = verify(load_profile(path), data)
    if problems:
        raise RuntimeError(f"{path}: the written profile does not verify: {problems}")
    return data


def file_breakdown(path: Path) -> dict[str, int]:
    """Bytes each part of a profile file takes, frame headers included: per sample table,
    "events" (the JSON events, the agent's and the recorder's) and "other" (the file header,
    the RUN and schema frames)."""
    data = path.read_bytes()
    out = {schema.name: 0 for schema in TABLES} | {"events": 0}
    out["other"] = header.FILE_HEADER.size
    names: dict[int, str] = {}
    reader = protocol.FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
    reader.feed(data[header.FILE_HEADER.size :])
    for kind, payload in reader.frames():
        size = protocol.HEADER_SIZE + len(payload)
        base, plain = protocol.unpack_payload(kind, payload)
        if base == protocol.SAMPLES:
            part = names.get(plain[0], "other")
        elif base == protocol.EVENTS:
            part = "events"
        else:
            if base == protocol.SCHEMA:
                schema = TableSchema.from_json(protocol.decode_json(plain))
                names[schema.id] = schema.name
            part = "other"
        out[part] = out.get(part, 0) + size
    if reader.pending:
        raise ValueError(f"{path}: {reader.pending} bytes after the last complete frame")
    return out


# -- checking -------------------------------------------------------------------------------------


def verify(profile: Profile, data: Timeline) -> list[str]:
    """Problems found comparing a loaded profile with what was generated (empty: none): row
    counts and every value of every column of the five tables (t and end as the exact float
    the decoder computes), the set of tables, event counts per type, the name ids, the run's
    metadata, Profile.iterations, completeness, and a few steps and spans rows read back the
    way a viewer reads them."""
    problems: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    expected = data.rows()
    check(
        # Every table the agent declares with its hello is there, those it never filled too.
        set(profile.tables) == set(expected) | {t.name for t in protocol.AGENT_TABLES},
        f"tables {sorted(profile.tables)}, expected {sorted(expected)} and the agent's",
    )
    for schema in TABLES:
        matrix, table = expected[schema.name], profile.table(schema.name)
        check(
            table is not None and len(table) == len(matrix),
            f"{schema.name}: {len(table) if table is not None else 'no'} rows, "
            f"expected {len(matrix)}",
        )
        if table is None or len(table) != len(matrix):
            continue
        for i, (col, _) in enumerate(schema.columns):
            # Times load as seconds since the start, the decoder's float.
            want = (matrix[:, i] - T0_NS) / 1e9 if col in TIME_COLUMNS else matrix[:, i]
            check(np.array_equal(table[col], want), f"{schema.name}.{col} differs")
    for kind, count in (data.event_counts | data.recorder_event_counts()).items():
        got = sum(1 for e in profile.events if e.type == kind)
        check(got == count, f"{got} {kind} events, expected {count}")
    check(profile.names == data.names, f"name ids {profile.names}, expected {data.names}")
    info = profile.info
    check(
        (info.t0_ns, info.interval_ms, info.pid, info.exit_code, info.signal)
        == (T0_NS, data.params.interval_ms, TARGET_PID, 0, None),
        "the run's metadata does not round-trip",
    )
    check(
        profile.iterations == len(data.steps),
        f"{profile.iterations} iterations, expected {len(data.steps)}",
    )
    check_rows(profile, data, check)
    check(profile.complete, "the loaded profile is not marked complete")
    check(not profile.warnings, f"warnings on load: {profile.warnings}")
    check(sorted(profile.children) == data.child_pids, "child processes do not round-trip")
    check(not profile.output, "output chunks in a profile written without any")
    return problems


def check_rows(profile: Profile, data: Timeline, check: Callable[[bool, str], None]) -> None:
    """A few steps and spans rows read the way a viewer reads them, against their sources."""
    steps, spans = profile.steps, profile.spans
    if steps is None:
        check(False, "no steps table")
        return
    n = len(steps)
    if n != len(data.steps):
        return  # reported by verify's row count; rows cannot be paired with their sources
    full = data.params.full
    for k in (0, 1, 2, 3, n // 2, n - 1):
        if not 0 <= k < n:
            continue
        row = {c: steps[c][k] for c in steps.column_names}
        end_ns = int(data.steps[k, 1])
        ok = (
            row["index"] == k + 1
            and profile.name(row["optimizer"]) == "AdamW"
            and row["t"] < row["end"]
            and row["end"] == (end_ns - T0_NS) / 1e9
        )
        if full:
            ram_at = latest_at(data.ram[:, 0], np.array([end_ns]))[0]
            gpu_at = latest_at(data.gpu[:, 0], np.array([end_ns]))[0]
            ok = ok and row["rss"] == data.ram[ram_at, 1] and row["device"] == 0
            ok = ok and row["allocated"] == data.gpu[gpu_at, 2]
            ok = ok and row["allocated_peak"] == data.gpu[: gpu_at + 1, 3].max()
            if k < BREAKDOWN_WARMUP_STEPS:  # measured on the first steps, always
                ok = ok and row["params_gpu"] > 0 and row["state_gpu"] == 2 * row["params_gpu"]
        check(bool(ok), f"steps row {k} does not round-trip")
    if not full:
        check(spans is None, "spans rows with events 'step'")
        return
    measured = int((steps["params_gpu"] >= 0).sum())
    seconds = (steps["end"][-1] - steps["end"][0]) + 1
    check(
        BREAKDOWN_WARMUP_STEPS < measured <= BREAKDOWN_WARMUP_STEPS + seconds,
        f"breakdown on {measured} steps, expected about one a second",
    )
    if spans is None:
        check(False, "no spans table")
        return
    kind, ident = spans["kind"], spans["id"]
    check(
        int((kind == protocol.SPAN_FORWARD).sum()) == n
        and int((kind == protocol.SPAN_BACKWARD).sum()) == n
        and int((kind == protocol.SPAN_LINK).sum()) == n,
        "spans: not one forward, backward and link row per step",
    )
    for k in (0, n // 2, n - 1):
        f, b, link = 3 * k, 3 * k + 1, 3 * k + 2
        ok = (
            kind[f] == protocol.SPAN_FORWARD
            and profile.name(spans["module"][f]) == "GPT"
            and spans["flags"][f] & protocol.FLAG_REQUIRES_GRAD
            and kind[b] == protocol.SPAN_BACKWARD
            and kind[link] == protocol.SPAN_LINK
            and ident[f] == ident[b] == ident[link] == k + 1
            and spans["t"][f] < spans["end"][f] < spans["t"][b] < spans["end"][b]
            and spans["end"][b] < steps["t"][k]  # the step follows its backward
        )
        check(bool(ok), f"spans of step {k} do not round-trip")


# -- command line ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(p)
    p.add_argument(
        "--out",
        type=Path,
        help="write the finished, verified profile here (default: print the cached "
        "profile's path, making it first)",
    )
    args = p.parse_args(argv)
    params = Params.from_args(args)
    if args.out is None:
        print(cached_profile(params))
        return 0
    make_profile(args.out, params)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
