"""Size and load time of a profile with 1,000,000 samples.

Target (DESIGN.md): the file is at most 40 MB and `load_profile` reads it in at most 1 s.

The profile is written through the recorder's own writing path, not a shortcut: a RUN frame,
the schema frames, rows added to profiler.recorder.blocks.TableBuffer (the sampler's one at
a time, the agent's a frame at a time, as they arrive) and drained every 200 ms of simulated time (the recorder's FLUSH_S) into
profiler.storage.ProfileWriter, which is flushed after every drain, as a recording does.
Then profiler.storage.compact_profile rewrites it, as Recording.finish does after a clean
end. Both files are measured: the verdict is on the finished (compacted) one, which is what
users normally load; the file as recorded is what a killed recording leaves behind.

What a 10 ms recording of a 2.8-hour GPU training run would hold (defaults):

* ram      1,000,000 rows: t with the sampler's small lateness, RSS moving in whole pages
           (a per-step sawtooth of host batches, noise, slow drift and a few big steps),
           rss_peak derived from it the way HostSampler derives it, the children's USS
           total, and MemAvailable moving with the system;
* gpu      1,000,000 rows from the agent's own clock (which drifts: it sleeps a full
           interval after each sample): allocated with a forward/backward sawtooth per
           100 ms step in 512-byte units, *_peak as CudaSampler reports them, reserved
           in 20 MiB segments, active, inactive_split, a rare alloc retry;
* children 4 DataLoader workers sampled about once a second each;
* steps    one row per 100 ms optimizer step, as the agent's PyTorch instrumentation
           (profiler/agent/instrument.py) sends them: start, end, index, optimizer, how the
           gradients were cleared, the memory state at the step's end (RSS from the ram
           rows, the CUDA allocator counters from the gpu rows, peaks as the allocator's own
           high-water marks) and the parameter / gradient / optimizer-state breakdown on the
           first 3 steps, then at most once a second (-1 on the other steps);
* spans    per step the root module's forward, the backward and one link row from that
           backward to the forward;
* events   the few JSON events still sent: a "name" event per name id (the module and the
           optimizer class), torch_imported, cuda_init, one epoch per 1,000 steps.
           Agent rows and events reach the recorder once per agent flush (100 ms); agent
           rows go into the recorder's TableBuffer per table (Recording.on_rows) and are
           drained with the others, events are re-framed as Recording.on_events does.
           `--events step` writes only the steps rows, with nothing but the times, index,
           optimizer and clearing known (-1 elsewhere): the lower bound.

Not modelled: the optional nvml table (NVML's device view, 10 rows/s per GPU where
nvidia-ml-py is installed), stdout/stderr output.

Each loaded profile is checked against the generated data (row counts, every value of every
column of the five tables, event counts per type, name ids, and several steps and spans
rows read back the way a viewer reads them), so a fast load of wrong data cannot pass.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _common import print_table, verdict, write_result

from profiler import protocol
from profiler.agent.client import FLUSH_S as AGENT_FLUSH_S
from profiler.agent.instrument import BREAKDOWN_EVERY_NS, BREAKDOWN_WARMUP_STEPS
from profiler.model import TIME_COLUMNS
from profiler.protocol import (
    CHILD_TABLE,
    GPU_TABLE,
    RAM_TABLE,
    SPAN_TABLE,
    STEP_TABLE,
    TableSchema,
)
from profiler.recorder.blocks import TableBuffer
from profiler.storage import ProfileWriter, load_profile

try:  # a finished recording is compacted (profiler.storage.compact_profile, when present)
    from profiler.storage import compact_profile
except ImportError:  # pragma: no cover - older trees write the file as recorded only
    compact_profile = None

NAME = "load"
TARGET_MB = 40.0
TARGET_LOAD_S = 1.0
MB = 1_000_000  # the target's "MB": decimal megabytes, as a file manager shows them
MiB = 1 << 20
PAGE = 4096
T0_NS = 3 * 86_400 * 10**9 + 123_456_789  # monotonic clock at the launch: 3 days of uptime
GIB = 1 << 30


@dataclass
class Timeline:
    """Generated rows of every table, as int64 matrices in schema column order."""

    interval_ns: int
    flush_ns: int
    ram: np.ndarray
    gpu: np.ndarray
    children: np.ndarray
    steps: np.ndarray  # STEP_TABLE rows, one per optimizer step
    spans: np.ndarray  # SPAN_TABLE rows (empty with --events step)
    # When each agent row reaches the recorder: the end of the agent flush (100 ms) that
    # sends it. The recorder adds rows to its TableBuffer as they arrive (Recording.on_rows).
    gpu_arrival: np.ndarray
    steps_arrival: np.ndarray
    spans_arrival: np.ndarray
    names: dict[int, str]  # name ids used in the rows, as the "name" events announce them
    # The agent's EVENTS payloads, already JSON as they arrive on the socket: (arrival ns,
    # payload). The recorder only re-frames them (Recording.on_events).
    payloads: list[tuple[int, bytes]] = field(default_factory=list)
    event_counts: dict[str, int] = field(default_factory=dict)
    child_pids: list[int] = field(default_factory=list)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--samples",
        type=int,
        default=1_000_000,
        help="rows in the ram and gpu tables (default 1,000,000)",
    )
    p.add_argument(
        "--interval-ms", type=float, default=10.0, help="simulated sampling interval (default 10)"
    )
    p.add_argument(
        "--flush-ms",
        type=float,
        default=200.0,
        help="simulated drain period (default 200, the recorder's)",
    )
    p.add_argument(
        "--step-ms", type=float, default=100.0, help="simulated optimizer step period (default 100)"
    )
    p.add_argument(
        "--events",
        choices=["full", "step"],
        default="full",
        help="full (default): what the agent's PyTorch instrumentation sends for a GPU "
        "training loop: per step a forward, a backward and a link row in the spans table and "
        "a steps row with the memory state, plus rare JSON events (names, epochs); "
        "step: the bare minimum, one steps row per step with only its times, index and "
        "optimizer known (-1 elsewhere), no spans",
    )
    p.add_argument(
        "--epoch-steps",
        type=int,
        default=1000,
        help="steps per epoch: one epoch event each (default 1000, 100 s at 100 ms steps)",
    )
    p.add_argument("--workers", type=int, default=4, help="DataLoader worker processes (default 4)")
    p.add_argument("--repeat", type=int, default=3, help="timed loads (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", metavar="PATH", help="write the profile here and keep it")
    return p.parse_args()


# -- data -----------------------------------------------------------------------------------------


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
    rng: np.random.Generator, t: np.ndarray, opts: argparse.Namespace, children_total: np.ndarray
) -> np.ndarray:
    n = len(t)
    per_step = max(1, round(opts.step_ms / opts.interval_ms))
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


def gpu_rows(rng: np.random.Generator, n: int, opts: argparse.Namespace) -> np.ndarray:
    interval_ns = int(opts.interval_ms * 1e6)
    # The agent waits a full interval after each sample, so its clock drifts by the work.
    t = T0_NS + 900_000_000 + np.cumsum(interval_ns + rng.integers(40_000, 160_000, n))
    per_step = max(1, round(opts.step_ms / opts.interval_ms))
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


def generate(opts: argparse.Namespace) -> Timeline:
    rng = np.random.default_rng(opts.seed)
    interval_ns = int(opts.interval_ms * 1e6)
    t = sample_times(rng, opts.samples, interval_ns)
    pids = [41000 + i for i in range(opts.workers)]
    children = children_rows(rng, int(t[-1]), pids) if pids else np.empty((0, 6), dtype=np.int64)
    ram = ram_rows(rng, t, opts, children_total_at(t, children, pids))
    gpu = gpu_rows(rng, opts.samples, opts)
    step_ns = int(opts.step_ms * 1e6)
    starts = np.arange(T0_NS + 1_000_000_000, int(t[-1]) - step_ns, step_ns, dtype=np.int64)
    starts += rng.integers(0, 2_000_000, len(starts))
    phases = step_phases(rng, starts, step_ns)
    full = opts.events == "full"
    # Name ids in the order the agent hands them out (Agent.name_id): the root module's class
    # at the end of the first forward, the optimizer's at the end of the first step.
    names = {1: "GPT", 2: "AdamW"} if full else {1: "AdamW"}
    ids = {name: i for i, name in names.items()}
    steps = step_rows(phases, ram, gpu, ids["AdamW"], full)
    spans = span_rows(phases, ids["GPT"]) if full else np.empty((0, 7), dtype=np.int64)
    batch_ns = int(AGENT_FLUSH_S * 1e9)
    events = rare_events(phases, names, opts, full)
    payloads = agent_payloads(events, batch_ns)
    counts: dict[str, int] = {}
    for _, ev in events:
        counts[ev["type"]] = counts.get(ev["type"], 0) + 1
    # Rows are queued when their span ends: a forward row at the forward's end, the backward
    # and link rows at the backward's end, a step row at the step's end.
    span_queued = spans[:, 1] if len(spans) else np.empty(0, dtype=np.int64)
    return Timeline(
        interval_ns=interval_ns,
        flush_ns=int(opts.flush_ms * 1e6),
        ram=ram,
        gpu=gpu,
        children=children,
        steps=steps,
        spans=spans,
        gpu_arrival=agent_arrival(gpu[:, 0], batch_ns),
        steps_arrival=agent_arrival(steps[:, 1], batch_ns),
        spans_arrival=agent_arrival(span_queued, batch_ns),
        names=names,
        payloads=payloads,
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
    g = gpu[latest_at(gpu[:, 0], phases.opt_end)]
    rows[:, col["device"]] = 0
    rows[:, col["allocated"]] = g[:, 2]
    rows[:, col["reserved"]] = g[:, 4]
    # CudaSampler.read(): the allocator's peaks since the start, not the per-interval peaks
    # of the gpu table.
    at = latest_at(gpu[:, 0], phases.opt_end)
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
    phases: Phases, names: dict[int, str], opts: argparse.Namespace, full: bool
) -> list[tuple[int, dict[str, Any]]]:
    """The JSON events an instrumented run still sends, as (time queued, event): the "name"
    of each id (when first used), and with `full` torch_imported, cuda_init and one "epoch"
    per DataLoader iterator (every --epoch-steps steps)."""
    ids = {name: i for i, name in names.items()}
    out: list[tuple[int, dict[str, Any]]] = []

    def name_event(name: str, at: int) -> None:
        out.append((at, {"id": ids[name], "name": name, "t": at, "type": "name"}))

    if full:
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
        epoch_starts = range(0, len(phases.start), max(1, opts.epoch_steps))
        for k, i in enumerate(epoch_starts):
            at = int(phases.start[i]) - 1_500_000  # DataLoader.__iter__, before the batch
            out.append(
                (
                    at,
                    {
                        "loader": 1,
                        "index": k + 1,
                        "num_workers": opts.workers,
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
) -> list[tuple[int, bytes]]:
    """Group events by the agent flush that sends them and encode each group as the agent does."""
    payloads: list[tuple[int, bytes]] = []
    batch: list[dict[str, Any]] = []
    edge = None
    for queued, event in events:
        if edge is not None and queued >= edge and batch:
            payloads.append((edge, encode_events(batch)))
            batch = []
        if edge is None or queued >= edge:
            edge = T0_NS + ((queued - T0_NS) // batch_ns + 1) * batch_ns
        batch.append(event)
    if batch and edge is not None:
        payloads.append((edge, encode_events(batch)))
    return payloads


def encode_events(events: list[dict[str, Any]]) -> bytes:
    return protocol.encode_json_frame(protocol.EVENTS, events)[protocol.HEADER_SIZE :]


# -- writing ------------------------------------------------------------------------------------


def run_metadata(opts: argparse.Namespace) -> dict[str, Any]:
    return {
        "script": "train.py",
        "module": None,
        "argv": ["--epochs", "40"],
        "cwd": "/home/user/project",
        "python": "/usr/bin/python3",
        "interval_ms": opts.interval_ms,
        "start_time": "2025-01-01T00:00:00.000+00:00",
        "t0_ns": T0_NS,
        "hostname": "bench",
        "platform": "Linux",
        "memsight_version": "bench",
        "pid": 40000,
        "ram_total_bytes": 64 * GIB,
        "memory_limit_bytes": None,
        "hooks": True,
    }


def cursor_rows(matrix: np.ndarray) -> list[tuple[int, ...]]:
    """Rows as the tuples the sampler and the server hand to TableBuffer."""
    return [tuple(r) for r in matrix.tolist()]


def write_profile(path: Path, data: Timeline, opts: argparse.Namespace) -> dict[str, Any]:
    """Write `data` frame by frame the way Recording does; return timing and byte counts."""
    # (name, schema, rows, when each row reaches the recorder). Recorder tables get a row at
    # each sample; agent tables get the rows of an agent frame at once (Recording.on_rows).
    sources = [
        ("ram", RAM_TABLE, cursor_rows(data.ram), data.ram[:, 0]),
        ("children", CHILD_TABLE, cursor_rows(data.children), data.children[:, 0]),
        ("gpu", GPU_TABLE, cursor_rows(data.gpu), data.gpu_arrival),
        ("steps", STEP_TABLE, cursor_rows(data.steps), data.steps_arrival),
        ("spans", SPAN_TABLE, cursor_rows(data.spans), data.spans_arrival),
    ]
    payload_t = np.array([t for t, _ in data.payloads], dtype=np.int64)
    end_ns = int(max(times[-1] for _, _, _, times in sources if len(times))) + 1
    edges = np.arange(T0_NS + data.flush_ns, end_ns + data.flush_ns, data.flush_ns, dtype=np.int64)
    # Where each window ends in each table, found up front: the recorder knows this for free.
    cut = {
        name: np.searchsorted(times, edges, side="left").tolist() for name, _, _, times in sources
    }
    cut["events"] = np.searchsorted(payload_t, edges, side="left").tolist()
    table_bytes = {name: 0 for name, _, _, _ in sources}
    table_bytes["events"] = 0

    started = time.perf_counter()
    writer = ProfileWriter(path)
    emit = writer.write
    emit(protocol.encode_json_frame(protocol.RUN, run_metadata(opts)))
    buffers: dict[str, TableBuffer] = {}

    def declare(name: str, schema: TableSchema) -> None:  # Recording._table
        buffers[name] = TableBuffer(schema)
        emit(schema.frame())

    declare("ram", RAM_TABLE)
    declare("children", CHILD_TABLE)
    emit(
        events_frame(
            [
                {
                    "t": T0_NS + 400_000_000,
                    "type": "agent_connected",
                    "pid": 40000,
                    "python_version": "3.11.7",
                    "executable": "/usr/bin/python3",
                }
            ]
        )
    )
    # The agent declares all its tables right after its hello (Agent.__init__), used or not.
    for schema in (GPU_TABLE, STEP_TABLE, SPAN_TABLE):
        declare(schema.name, schema)
    emit(
        events_frame(
            [
                {
                    "t": T0_NS + 800_000_000 + i,
                    "type": "child_started",
                    "pid": pid,
                    "ppid": 40000,
                    "name": "pt_data_worker",
                    "cmdline": ["python3", "train.py"],
                }
                for i, pid in enumerate(data.child_pids)
            ]
        )
    )
    done = dict.fromkeys(cut, 0)
    for w in range(len(edges)):
        for name, _, rows, _ in sources:
            upto = cut[name][w]
            if upto > done[name]:
                if name in ("ram", "children"):  # HostSampler / TreeWatcher: row by row
                    add = buffers[name].add
                    for row in rows[done[name] : upto]:
                        add(row)
                else:  # AgentServer -> Recording.on_rows: a frame's rows at once
                    buffers[name].extend(rows[done[name] : upto])
                done[name] = upto
        for _, payload in data.payloads[done["events"] : cut["events"][w]]:
            # Recording.on_events: the agent's payload as it came, compressed when it pays.
            frame = protocol.encode_frame(protocol.EVENTS, payload, compress=len(payload) > 1024)
            table_bytes["events"] += len(frame)
            emit(frame)
        done["events"] = cut["events"][w]
        for name, buf in buffers.items():  # Recording.flush(): drain every table, then the file
            frame = buf.drain()
            if frame:
                table_bytes[name] += len(frame)
                emit(frame)
        writer.flush()
    emit(events_frame([{"t": end_ns, "type": "exit", "exit_code": 0, "signal": None}]))
    emit(
        events_frame(
            [
                {
                    "t": end_ns + 1,
                    "type": "recording_end",
                    "samples": len(data.ram),
                    "missed_ticks": 0,
                }
            ]
        )
    )
    writer.close()
    write_s = time.perf_counter() - started
    return {"write_s": write_s, "frame_bytes": table_bytes, "file_bytes": path.stat().st_size}


def events_frame(events: list[dict[str, Any]]) -> bytes:
    """An EVENTS frame the recorder writes itself (Recording.event)."""
    return protocol.encode_json_frame(protocol.EVENTS, events)


# -- loading and checking -------------------------------------------------------------------------


def time_loads(path: Path, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        load_profile(path)
        times.append(time.perf_counter() - start)
    return times


def verify(path: Path, data: Timeline) -> list[str]:
    """Problems found comparing the loaded profile with what was written (empty: none)."""
    profile = load_profile(path)
    problems: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    checks: list[tuple[str, np.ndarray, TableSchema]] = [
        ("ram", data.ram, RAM_TABLE),
        ("gpu", data.gpu, GPU_TABLE),
        ("children", data.children, CHILD_TABLE),
        ("steps", data.steps, STEP_TABLE),
        ("spans", data.spans, SPAN_TABLE),
    ]
    for name, matrix, schema in checks:
        table = profile.table(name)
        check(
            table is not None and len(table) == len(matrix),
            f"{name}: {len(table) if table is not None else 'no'} rows, expected {len(matrix)}",
        )
        if table is None or len(table) != len(matrix):
            continue
        for i, (col, _) in enumerate(schema.columns):
            if col in TIME_COLUMNS:  # loaded as seconds since the start, the decoder's float
                check(
                    np.array_equal(table[col], (matrix[:, i] - T0_NS) / 1e9),
                    f"{name}.{col} differs from what was written",
                )
            else:
                check(
                    np.array_equal(table[col], matrix[:, i]),
                    f"{name}.{col} differs from what was written",
                )
    for kind, count in data.event_counts.items():
        got = sum(1 for e in profile.events if e.type == kind)
        check(got == count, f"{got} {kind} events, expected {count}")
    check(profile.names == data.names, f"name ids {profile.names}, expected {data.names}")
    check(
        profile.iterations == len(data.steps),
        f"{profile.iterations} iterations, expected {len(data.steps)}",
    )
    check_rows(profile, data, check)
    check(profile.complete, "the loaded profile is not marked complete")
    check(not profile.warnings, f"warnings on load: {profile.warnings}")
    check(sorted(profile.children) == data.child_pids, "child processes do not round-trip")
    return problems


def check_rows(profile: Any, data: Timeline, check: Callable[[bool, str], None]) -> None:
    """A few steps and spans rows read the way a viewer reads them, against their sources."""
    steps, spans = profile.steps, profile.spans
    if steps is None:
        check(False, "no steps table")
        return
    n = len(steps)
    full = data.spans.size > 0
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
    if full:
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
    elif spans is not None:
        check(False, "spans rows with --events step")


def timed(label: str, fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    elapsed = time.perf_counter() - start
    print(f"  {label}: {elapsed:.2f} s", flush=True)
    return value, elapsed


@dataclass
class Measured:
    """One file's size, load times and round-trip problems."""

    size: int
    loads: list[float]
    problems: list[str]

    @property
    def best(self) -> float:
        return min(self.loads)

    @property
    def median(self) -> float:
        return statistics.median(self.loads)

    @property
    def passed(self) -> bool:
        return self.size / MB <= TARGET_MB and self.median <= TARGET_LOAD_S and not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "file_bytes": self.size,
            "file_mb": self.size / MB,
            "load_s": self.loads,
            "load_best_s": self.best,
            "load_median_s": self.median,
            "problems": self.problems,
            "passed": self.passed,
        }


def measure(path: Path, data: Timeline, repeat: int) -> Measured:
    return Measured(path.stat().st_size, time_loads(path, repeat), verify(path, data))


def print_contents(data: Timeline, written: dict[str, Any]) -> None:
    counts = {
        "ram": len(data.ram),
        "gpu": len(data.gpu),
        "children": len(data.children),
        "steps": len(data.steps),
        "spans": len(data.spans),
        "events": sum(data.event_counts.values()),
    }
    print_table(
        ["table", "rows", "bytes", "bytes/row"],
        [
            [
                name if name != "events" else "agent JSON events",
                n,
                written["frame_bytes"][name],
                written["frame_bytes"][name] / max(n, 1),
            ]
            for name, n in counts.items()
        ],
        title="what the file holds as recorded (frame bytes, headers included)",
    )


def print_summary(
    samples: int,
    raw: Measured,
    done: Measured | None,
    written: dict[str, Any],
    compact_s: float | None,
) -> None:
    def cols(m: Measured | None, value: Callable[[Measured], Any]) -> Any:
        return value(m) if m is not None else "-"

    def check(m: Measured) -> str:
        return "ok" if not m.problems else f"{len(m.problems)} problems"

    print_table(
        ["measure", "as recorded", "finished (compacted)", "target"],
        [
            ["file size MB", raw.size / MB, cols(done, lambda m: m.size / MB), f"<= {TARGET_MB:g}"],
            ["load median s", raw.median, cols(done, lambda m: m.median), f"<= {TARGET_LOAD_S:g}"],
            ["load best s", raw.best, cols(done, lambda m: m.best), ""],
            [
                "loads s",
                ", ".join(f"{x:.3f}" for x in raw.loads),
                cols(done, lambda m: ", ".join(f"{x:.3f}" for x in m.loads)),
                "",
            ],
            [
                "bytes per sample",
                raw.size / samples,
                cols(done, lambda m: m.size / samples),
                "(all tables)",
            ],
            ["round-trip check", check(raw), cols(done, check), "ok"],
            ["write s (info)", written["write_s"], "-", ""],
            ["compact s (info)", "-", compact_s if compact_s is not None else "-", ""],
        ],
        title=f"profile of {samples:,} samples",
    )
    for label, m in (("as recorded", raw), ("finished", done)):
        for problem in m.problems if m is not None else []:
            print(f"  problem ({label}): {problem}")


def main() -> int:
    opts = parse_args()
    print(
        f"generating {opts.samples:,} samples at {opts.interval_ms:g} ms "
        f"({opts.samples * opts.interval_ms / 1000 / 3600:.2f} h of simulated run)"
    )
    data, gen_s = timed("generate data (numpy)", lambda: generate(opts))
    done: Measured | None = None
    compact_s: float | None = None
    with tempfile.TemporaryDirectory(prefix="memsight-load-") as tmp:
        path = Path(opts.keep) if opts.keep else Path(tmp) / "million.memsight"
        written, _ = timed(
            "write through TableBuffer + ProfileWriter", lambda: write_profile(path, data, opts)
        )
        # As recorded: what a killed recording leaves, and what a live view decodes.
        raw = measure(path, data, opts.repeat)
        if compact_profile is not None:
            # What Recording.finish leaves after a clean end: the file users normally load.
            _, compact_s = timed(
                "compact_profile (as Recording.finish does)", lambda: compact_profile(path)
            )
            done = measure(path, data, opts.repeat)

    print_contents(data, written)
    print_summary(len(data.ram), raw, done, written, compact_s)
    judged = done if done is not None else raw
    which = "finished profile" if done is not None else "profile as recorded"
    line = verdict(
        NAME,
        judged.passed,
        f"{which}: {judged.size / MB:.1f} MB (<= {TARGET_MB:g}), load median {judged.median:.3f} s"
        f" / best {judged.best:.3f} s (<= {TARGET_LOAD_S:g}), round trip "
        f"{'ok' if not judged.problems else 'FAILED'}",
    )
    if done is not None and not raw.passed:
        print(
            f"      (as recorded, before compaction, e.g. after a crash: {raw.size / MB:.1f} MB, "
            f"load median {raw.median:.3f} s)"
        )
    write_result(
        NAME,
        {
            "target": {
                "file_mb_max": TARGET_MB,
                "load_s_max": TARGET_LOAD_S,
                "judged": "finished (compacted) profile" if done is not None else "as recorded",
            },
            "passed": judged.passed,
            "verdict": line,
            "settings": vars(opts),
            "rows": {
                "ram": len(data.ram),
                "gpu": len(data.gpu),
                "children": len(data.children),
                "steps": len(data.steps),
                "spans": len(data.spans),
                "events": data.event_counts,
                "event_frames": len(data.payloads),
            },
            "frame_bytes_as_recorded": written["frame_bytes"],
            "generate_s": gen_s,
            "write_s": written["write_s"],
            "compact_s": compact_s,
            "as_recorded": raw.to_json(),
            "finished": done.to_json() if done is not None else None,
        },
    )
    return 0 if judged.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
