"""Size and load time of a profile with 1,000,000 samples.

Target (DESIGN.md): the file is at most 40 MB and `load_profile` reads it in at most 1 s.

The profile is written through the recorder's own writing path, not a shortcut: a RUN frame,
the schema frames, rows added one at a time to profiler.recorder.blocks.TableBuffer and
drained every 200 ms of simulated time (the recorder's FLUSH_S) into
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
* events   per 100 ms training step, what the agent's PyTorch instrumentation sends
           (profiler/agent/instrument.py): a forward, a backward and a step event carrying
           the memory state (RSS and the CUDA allocator counters), a parameter/gradient/
           optimizer-state breakdown once a second; one EVENTS payload per agent flush
           (100 ms), re-framed by the recorder as Recording.on_events does.
           `--events step` writes one bare {"t", "type": "step", "index"} event per step
           instead, batched per 200 ms flush: the lower bound.

Each loaded profile is checked against the generated data (row counts, every value of every
column, event counts per type, times and values of several step events), so a fast load of
wrong data cannot pass.
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
from profiler.protocol import CHILD_TABLE, GPU_TABLE, RAM_TABLE, TableSchema
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
    step_times: np.ndarray  # ns when each training step starts
    step_event_ns: list[int]  # the "t" of each step event
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
        help="full (default): the forward/backward/step events the agent's PyTorch "
        "instrumentation sends per step, in one payload per agent flush (100 ms); "
        "step: one bare step event per step, batched per --flush-ms",
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
    steps = np.arange(T0_NS + 1_000_000_000, int(t[-1]) - step_ns, step_ns, dtype=np.int64)
    steps += rng.integers(0, 2_000_000, len(steps))
    if opts.events == "full":
        events = instrumentation_events(steps, step_ns, ram, gpu)
        batch_ns = int(AGENT_FLUSH_S * 1e9)
    else:
        events = [
            (int(s), {"t": int(s), "type": "step", "index": i + 1}) for i, s in enumerate(steps)
        ]
        batch_ns = int(opts.flush_ms * 1e6)
    payloads = agent_payloads(events, batch_ns)
    counts: dict[str, int] = {}
    for _, ev in events:
        counts[ev["type"]] = counts.get(ev["type"], 0) + 1
    step_event_ns = [ev["t"] for _, ev in events if ev["type"] == "step"]
    return Timeline(
        interval_ns,
        int(opts.flush_ms * 1e6),
        ram,
        gpu,
        children,
        steps,
        step_event_ns,
        payloads,
        counts,
        pids,
    )


def instrumentation_events(
    steps: np.ndarray, step_ns: int, ram: np.ndarray, gpu: np.ndarray
) -> list[tuple[int, dict[str, Any]]]:
    """What profiler/agent/instrument.py reports per training step of a GPU model: a forward
    of the root module, the backward, and the optimizer step with the memory state (RSS and
    the CUDA allocator counters), plus a parameter/gradient/state breakdown once a second.
    Each is (time queued, event); the agent queues an event when its span ends."""
    out: list[tuple[int, dict[str, Any]]] = []
    ram_at = np.searchsorted(ram[:, 0], steps)
    gpu_at = np.searchsorted(gpu[:, 0], steps)
    per_second = max(1, round(1e9 / step_ns))
    for i, start in enumerate(steps.tolist()):
        fwd_end = start + int(0.35 * step_ns)
        bwd_start, bwd_end = fwd_end + 150_000, start + int(0.85 * step_ns)
        opt_start, opt_end = bwd_end + 120_000, start + int(0.97 * step_ns)
        g = gpu[min(gpu_at[i], len(gpu) - 1)].tolist()
        cuda = {
            "device": 0,
            "allocated": g[2],
            "allocated_peak": g[3],
            "reserved": g[4],
            "reserved_peak": g[5],
            "active": g[6],
            "active_peak": g[3] + 2 * MiB,
            "inactive_split": g[7],
            "inactive_split_peak": g[7] + 64 * MiB,
            "alloc_retries": g[8],
            "ooms": g[9],
        }
        step: dict[str, Any] = {
            "end": opt_end,
            "index": i + 1,
            "optimizer": "AdamW",
            "cleared": "zero_grad",
            "memory": {"rss": int(ram[min(ram_at[i], len(ram) - 1), 1]), "cuda": cuda},
        }
        if i < 3 or i % per_second == 0:
            step["breakdown"] = {
                "params": {"cuda:0": 1_247_281_152},
                "grads": {"cuda:0": 1_247_281_152},
                "state": {"cuda:0": 2_494_562_304},
            }
        out.append(
            (
                fwd_end,
                {
                    "end": fwd_end,
                    "id": i + 1,
                    "module": "GPT",
                    "training": True,
                    "grad": True,
                    "autocast": "bfloat16",
                    "requires_grad": True,
                    "depth": 0,
                    "t": start,
                    "type": "forward",
                },
            )
        )
        out.append(
            (bwd_end, {"end": bwd_end, "forwards": [i + 1], "t": bwd_start, "type": "backward"})
        )
        out.append((opt_end, {**step, "t": opt_start, "type": "step"}))
    return out


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


def cursor_rows(matrix: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Rows as the tuples the sampler builds, plus their times for slicing by window."""
    return [tuple(r) for r in matrix.tolist()], matrix[:, 0].copy()


def write_profile(path: Path, data: Timeline, opts: argparse.Namespace) -> dict[str, Any]:
    """Write `data` frame by frame the way Recording does; return timing and byte counts."""
    ram_rows_, ram_t = cursor_rows(data.ram)
    gpu_rows_, gpu_t = cursor_rows(data.gpu)
    child_rows_, child_t = cursor_rows(data.children)
    payload_t = np.array([t for t, _ in data.payloads], dtype=np.int64)
    end_ns = int(max(ram_t[-1], gpu_t[-1])) + 1
    edges = np.arange(T0_NS + data.flush_ns, end_ns + data.flush_ns, data.flush_ns, dtype=np.int64)
    # Where each window ends in each table, found up front: the recorder knows this for free.
    cut = {
        name: np.searchsorted(times, edges, side="left").tolist()
        for name, times in (
            ("ram", ram_t),
            ("gpu", gpu_t),
            ("children", child_t),
            ("events", payload_t),
        )
    }
    table_bytes = {"ram": 0, "children": 0, "gpu": 0, "events": 0}

    started = time.perf_counter()
    writer = ProfileWriter(path)
    emit = writer.write
    emit(protocol.encode_json_frame(protocol.RUN, run_metadata(opts)))
    buffers: dict[str, TableBuffer] = {}

    def table(name: str, schema: TableSchema) -> TableBuffer:
        buffers[name] = TableBuffer(schema)
        emit(schema.frame())
        return buffers[name]

    ram, children = table("ram", RAM_TABLE), table("children", CHILD_TABLE)
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
    gpu = table("gpu", GPU_TABLE)
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
    sources: list[tuple[str, TableBuffer, list[tuple[int, ...]]]] = [
        ("ram", ram, ram_rows_),
        ("children", children, child_rows_),
        ("gpu", gpu, gpu_rows_),
    ]
    done = {"ram": 0, "children": 0, "gpu": 0, "events": 0}
    for w in range(len(edges)):
        for name, buf, rows in sources:
            add = buf.add
            for row in rows[done[name] : cut[name][w]]:
                add(row)
            done[name] = cut[name][w]
        for _, payload in data.payloads[done["events"] : cut["events"][w]]:
            # Recording.on_events: the agent's payload as it came, compressed when it pays.
            frame = protocol.encode_frame(protocol.EVENTS, payload, compress=len(payload) > 1024)
            table_bytes["events"] += len(frame)
            emit(frame)
        done["events"] = cut["events"][w]
        for name, buf, _ in sources:  # Recording.flush(): drain every table, then the file
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
                    "samples": len(ram_rows_),
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
            if col == "t":
                expected_t = (matrix[:, 0] - T0_NS) / 1e9
                check(
                    np.array_equal(table.t, expected_t), f"{name}.t differs from what was written"
                )
            else:
                check(
                    np.array_equal(table[col], matrix[:, i]),
                    f"{name}.{col} differs from what was written",
                )
    steps = [e for e in profile.events if e.type == "step"]
    check(
        len(steps) == len(data.step_times),
        f"{len(steps)} step events, expected {len(data.step_times)}",
    )
    for kind, count in data.event_counts.items():
        got = sum(1 for e in profile.events if e.type == kind)
        check(got == count, f"{got} {kind} events, expected {count}")
    if steps:
        for k in (0, len(steps) // 2, len(steps) - 1):
            expected = (data.step_event_ns[k] - T0_NS) / 1e9
            check(
                steps[k].t == expected and steps[k].get("index") == k + 1,
                f"step event {k} does not round-trip",
            )
        if opts_events_full(steps[0]):
            gpu_at = np.searchsorted(data.gpu[:, 0], data.step_times)
            for k in (0, len(steps) // 2, len(steps) - 1):
                cuda = steps[k].get("memory", {}).get("cuda", {})
                check(
                    cuda.get("allocated") == int(data.gpu[min(gpu_at[k], len(data.gpu) - 1), 2]),
                    f"step event {k}: memory.cuda.allocated does not round-trip",
                )
    check(profile.complete, "the loaded profile is not marked complete")
    check(not profile.warnings, f"warnings on load: {profile.warnings}")
    check(sorted(profile.children) == data.child_pids, "child processes do not round-trip")
    return problems


def opts_events_full(step: Any) -> bool:
    return "memory" in step.data


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


def print_contents(data: Timeline, written: dict[str, Any], events: str) -> None:
    counts = {
        "ram": len(data.ram),
        "gpu": len(data.gpu),
        "children": len(data.children),
        f"events ({events})": sum(data.event_counts.values()),
    }
    keys = {"ram": "ram", "gpu": "gpu", "children": "children", f"events ({events})": "events"}
    print_table(
        ["table", "rows", "bytes", "bytes/row"],
        [
            [
                name,
                n,
                written["frame_bytes"][keys[name]],
                written["frame_bytes"][keys[name]] / max(n, 1),
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

    print_contents(data, written, opts.events)
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
