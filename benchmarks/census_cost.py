"""The pause of one census of live tensors (profiler/agent/census.py), measured in-process.

Target: one census takes at most 200 ms (census_schedule.MAX_PAUSE_S, where a census stops and
calls itself partial) in a process the size of a mid-sized training script.

The process is this script's own: about 1 GiB of tensors in a few hundred tensors (a global
list of activations kept by mistake, a model, its gradients and AdamW's state), and 100 k
Python objects held in globals (records of dicts with lists of ints, as a metrics log
would keep). take_census runs in the main thread, as the agent's schedule runs it between
iterations (from the roots only, as the schedule takes it), `--repeat` times after one warm-up;
the verdict uses the median pause; the pause of a census that also lists every tensor gc tracks
(to count what no root reaches) is shown beside it. The table
also shows what one census visited: objects walked from the roots, objects gc tracks in the
process (every one is touched once to find the tensors), tensors, holders.

No recorder, no agent: the census alone. On a 2-core VM shared with other work expect
10-30 % run-to-run noise; the CPU-time column is the census thread's own.

`--big-heap`: the 5 M-object case. Targets: a census of a heap of millions of objects pauses
the loop for at most 200 ms at a time (census_schedule.MAX_PAUSE_S; the verdict allows
250 ms for the OS's jitter on a shared VM), adds at most 16 MiB + 1 % of the process' RSS
(census_limits.MEMORY_FLOOR, MEMORY_SHARE), completes, and slows a training loop under
`memsight run` by at most 1 % against `--census never` (census_schedule.SLICES_SHARE). Two parts:

1. In this process, as the default case: a tokenised dataset kept in memory in a global list,
   `--objects` / 2 records `(doc_id, token_ids)` (a tuple and a list of 6 small ints each:
   `--objects` objects gc tracks, default 5,000,000), whose last 4 records hold a tensor of
   features each (only reading the list to its end finds them), and `kept`, a global list
   of 8 tensors of 4 MiB. One whole census runs in slices exactly as the schedule runs it
   (max_seconds=MAX_PAUSE_S, find_unreached=False, one CensusProgress, again until
   cost["continues"] is False), the slices back to back. Measured: each slice's pause (wall
   time of take_census in this thread), the slices, the census' CPU time, and the RSS it
   added: the kernel's peak RSS (VmHWM) after the census less before it, the peak reset
   (/proc/self/clear_refs) once the objects are built. The census must complete (neither
   partial nor continuing) and name both holders with all their bytes.
2. Under `memsight run`: workloads/big_heap_train.py (one step of an MLP, the same globals,
   then the MLP trained for about `--loop-seconds`, a fixed number of ~35 ms steps calibrated
   by a short plain run: the censuses are taken at the loop's iterations) with the default census (auto) and with `--census never`, `--pairs`
   interleaved pairs (the order alternating). The script times its own loop: the ratio is
   auto / never per pair. From the auto run's profile: the censuses completed (`census`
   events) with their slices and longest pause; from the script: its steps over 120 ms (a
   slice pauses the loop between two steps, so it shows as one long step). At 1 % of the run
   a census of C seconds needs C / 0.01 seconds of run to complete: a run shorter than that
   ends with the census still in slices (none sent), which the table says.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    WORKLOADS,
    last_json_line,
    memsight_cmd,
    mib,
    percentile,
    print_table,
    python_cmd,
    run_process,
    verdict,
    write_result,
)

from memsight.profiler.agent import census_schedule
from memsight.profiler.agent.census import CensusProgress, take_census
from memsight.profiler.agent.census_limits import MEMORY_FLOOR, MEMORY_SHARE

NAME = "census_cost"
TARGET_MS = 200.0
BIG_NAME = "census_cost_big_heap"
BIG_OBJECTS = 5_000_000
BIG_MAX_PAUSE_MS = 250.0  # the schedule's 200 ms, and room for the OS's jitter on a shared VM
BIG_TARGET_RATIO = 1.0 + census_schedule.SLICES_SHARE
BIG_WORKLOAD = WORKLOADS / "big_heap_train.py"
KEPT = 8  # tensors of 4 MiB in `kept`
TAIL = 4  # last records of the dataset holding a tensor of 1 MiB each
FULL_S = 10.0  # the whole census is timed, not one cut short at the schedule's limit

# Globals the census walks: what a script at module level would hold.
activations: list[Any] = []
records: list[dict[str, Any]] = []
model: Any = None
optimizer: Any = None
# --big-heap: a tokenised dataset (doc_id, token ids) and tensors kept across steps.
dataset: list[tuple[int, Any]] = []
kept: list[Any] = []


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--repeat", type=int, default=5, help="censuses timed (default 5)")
    p.add_argument("--mib", type=int, default=1024, help="MiB of tensors in all (default 1024)")
    p.add_argument("--tensors", type=int, default=200, help="kept activations (default 200)")
    p.add_argument(
        "--objects",
        type=int,
        default=None,
        help="Python objects in globals (default 100000; with --big-heap 5000000)",
    )
    big = p.add_argument_group("the 5 M-object case")
    big.add_argument(
        "--big-heap",
        action="store_true",
        help="measure the census of a heap of --objects small objects, in slices, and its "
        "cost under memsight run against --census never",
    )
    big.add_argument(
        "--pairs", type=int, default=2, help="auto/never pairs under memsight run (default 2)"
    )
    big.add_argument(
        "--loop-seconds",
        type=float,
        default=90.0,
        help="training loop of each memsight run, about (default 90; 0: no memsight runs)",
    )
    opts = p.parse_args()
    if opts.objects is None:
        opts.objects = BIG_OBJECTS if opts.big_heap else 100_000
    return opts


def build(opts: argparse.Namespace) -> None:
    global model, optimizer
    import torch
    from torch import nn

    torch.set_num_threads(1)
    width = 512
    # A model of 16 layers, its grads and AdamW's two moments: 4 copies of the weights.
    model = nn.Sequential(*(nn.Linear(width, width) for _ in range(16)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, width)).sum().backward()
    optimizer.step()
    weights = 4 * sum(p.numel() * p.element_size() for p in model.parameters())
    # The rest of the budget in kept activations, touched so that the memory is real.
    each = max(1, (opts.mib * 2**20 - weights) // opts.tensors // 4)
    activations.extend(torch.zeros(each) for _ in range(opts.tensors))
    # Half dicts, half lists of ints: a metrics log of opts.objects objects.
    records.extend({"step": i, "ids": [i, i + 1, i + 2]} for i in range(opts.objects // 2))


def main() -> int:
    opts = parse_args()
    if opts.big_heap:
        return big_heap(opts)
    import torch

    build(opts)
    gc.collect()
    tracked = len(gc.get_objects())
    take_census(torch)  # warm-up: the first call pays for imports and cold caches
    runs = []
    full_ms = []
    for _ in range(opts.repeat):
        # As the agent's schedule takes it: from the roots only.
        began = time.perf_counter()
        census = take_census(torch, max_seconds=FULL_S, find_unreached=False)
        wall_ms = (time.perf_counter() - began) * 1e3
        runs.append((wall_ms, census))
        # With every tensor gc tracks listed too (what no root reaches): for comparison.
        began = time.perf_counter()
        take_census(torch, max_seconds=FULL_S)
        full_ms.append((time.perf_counter() - began) * 1e3)
    wall = statistics.median(ms for ms, _ in runs)
    cpu = statistics.median(c.cost["cpu_us"] / 1e3 for _, c in runs)
    last = runs[-1][1]
    partial = sum(1 for _, c in runs if c.partial)
    print(
        f"process: {mib(last.tensors['bytes']):,.0f} MiB in {last.tensors['count']} tensor "
        f"storages, {tracked:,} objects tracked by gc; {opts.repeat} censuses after a warm-up"
    )
    print_table(
        ["census", "pause ms", "cpu ms", "objects walked", "tensors", "holders", "partial"],
        [
            [
                i + 1,
                ms,
                c.cost["cpu_us"] / 1e3,
                c.cost["objects"],
                c.tensors["objects"],
                len(c.holders),
                c.partial,
            ]
            for i, (ms, c) in enumerate(runs)
        ],
        title="one census each (pause: wall time of take_census in the calling thread)",
    )
    print_table(
        ["holder", "kind", "tensors", "MiB"],
        [[h["name"], h["kind"], h["count"], mib(h["bytes"])] for h in last.holders[:6]],
        title="largest holders (last census)",
    )
    full = statistics.median(full_ms)
    detail = (
        f"median pause {wall:.1f} ms (cpu {cpu:.1f} ms), {last.cost['objects']:,} objects "
        f"walked, {tracked:,} tracked; {full:.1f} ms also listing every tensor gc tracks; "
        f"target <= {TARGET_MS:.0f} ms"
    )
    passed = wall <= TARGET_MS and not partial
    verdict(NAME, passed, detail if not partial else detail + f"; {partial} partial")
    write_result(
        NAME,
        {
            "settings": vars(opts),
            "median_pause_ms": wall,
            "median_cpu_ms": cpu,
            "median_pause_listing_all_ms": full,
            "pauses_ms": [ms for ms, _ in runs],
            "objects_walked": last.cost["objects"],
            "objects_tracked": tracked,
            "tensor_bytes": last.tensors["bytes"],
            "tensor_storages": last.tensors["count"],
            "partial": partial,
            "target_ms": TARGET_MS,
            "passed": passed,
        },
    )
    return 0 if passed else 1


# -- --big-heap: the 5 M-object case ---------------------------------------------------------


def proc_status(field: str) -> int:
    """A byte count of /proc/self/status (VmRSS, VmHWM); 0 where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def reset_peak_rss() -> bool:
    """Set the kernel's peak RSS (VmHWM) back to the RSS now (Linux 4.0+)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def build_big_heap(objects: int) -> None:
    """The dataset (objects // 2 records of a tuple and a list of ints; the last TAIL hold a
    tensor of 1 MiB instead of the list) and KEPT tensors of 4 MiB, in this module's globals."""
    import torch

    records = max(TAIL, objects // 2)
    dataset.extend((i, [i % 251, 7, 42, 3, 99, 17]) for i in range(records - TAIL))
    dataset.extend((i, torch.zeros(1 << 18)) for i in range(records - TAIL, records))
    kept.extend(torch.zeros(1 << 20) for _ in range(KEPT))


def holder_bytes(holders: list[dict[str, Any]], root: str) -> int:
    """Bytes a census attributes to holders starting at the global `root`."""
    return sum(h["bytes"] for h in holders if h.get("root") == root and h.get("kind") == "global")


def census_in_slices(opts: argparse.Namespace) -> dict[str, Any]:
    """Part 1: one whole census of this process, in slices as the schedule takes it."""
    import torch

    torch.set_num_threads(1)
    began = time.perf_counter()
    build_big_heap(opts.objects)
    build_s = time.perf_counter() - began
    gc.collect()
    tracked = len(gc.get_objects())
    rss = proc_status("VmRSS")
    peak_reset = reset_peak_rss()
    hwm_before = proc_status("VmHWM")
    progress = CensusProgress()
    pauses: list[float] = []
    while True:
        began = time.perf_counter()
        census = take_census(
            torch,
            max_seconds=census_schedule.MAX_PAUSE_S,
            find_unreached=False,
            progress=progress,
        )
        pauses.append((time.perf_counter() - began) * 1e3)
        if not census.cost.get("continues"):
            break
    hwm_after = proc_status("VmHWM")
    cost = census.cost
    return {
        "objects": opts.objects,
        "objects_tracked": tracked,
        "build_s": build_s,
        "rss": rss,
        "peak_reset": peak_reset,
        "rss_added": hwm_after - hwm_before,
        "memory_cap": MEMORY_FLOOR + int(MEMORY_SHARE * rss),
        "pauses_ms": pauses,
        "pause_p50_ms": statistics.median(pauses),
        "pause_max_ms": max(pauses),
        "slices": cost.get("slices", len(pauses)),
        "wall_ms": cost["wall_us"] / 1e3,
        "cpu_ms": cost["cpu_us"] / 1e3,
        "max_pause_ms_census": cost.get("max_pause_us", 0) / 1e3,
        "objects_walked": cost["objects"],
        "partial": census.partial,
        "stopped_by": cost.get("stopped_by"),
        "continues": bool(cost.get("continues")),
        "kept_bytes": holder_bytes(census.holders, "kept"),
        "kept_expected": KEPT * 4 * 2**20,
        "dataset_bytes": holder_bytes(census.holders, "dataset"),
        "dataset_expected": TAIL * 2**20,
        "holders": [[h["name"], h["kind"], h["count"], h["bytes"]] for h in census.holders[:6]],
    }


def auto_censuses(profile_path: Path) -> dict[str, Any]:
    """The censuses an auto run's profile holds (each sent once whole), and the agent's census
    errors."""
    from memsight.profiler.diagnosis.contents import censuses
    from memsight.profiler.profile.storage import load_profile

    profile = load_profile(profile_path)
    taken = []
    for c in censuses(profile):
        cost = c.data.get("cost") or {}
        taken.append(
            {
                "t": c.t,
                "iterations_are": c.iterations_are,
                "iteration": c.iteration,
                "slices": cost.get("slices", 1),
                "max_pause_ms": cost.get("max_pause_us", cost.get("wall_us", 0)) / 1e3,
                "wall_ms": cost.get("wall_us", 0) / 1e3,
                "cpu_ms": cost.get("cpu_us", 0) / 1e3,
                "partial": bool(cost.get("partial")),
                "stopped_by": cost.get("stopped_by"),
                "kept_bytes": holder_bytes(c.data.get("holders") or [], "kept"),
                "dataset_bytes": holder_bytes(c.data.get("holders") or [], "dataset"),
            }
        )
    errors = [
        str(e.get("error")) for e in profile.events_of("agent_error") if e.get("where") == "census"
    ]
    return {"censuses": taken, "census_errors": errors}


def memsight_run(args_: list[str], mode: str, folder: Path) -> dict[str, Any]:
    out = folder / f"{mode}.memsight"
    proc = run_process(memsight_cmd(BIG_WORKLOAD, out, args_, options=["-q", "--census", mode]))
    res = last_json_line(proc.stdout)
    slow = [ms for _, ms in res["slow_steps"]]
    run: dict[str, Any] = {
        "mode": mode,
        "loop_s": res["loop_s"],
        "steps": res["steps"],
        "step_p50_ms": res["step_p50_ms"],
        "step_max_ms": res["step_max_ms"],
        "slow_steps": len(slow),
        # Loop time in long steps beyond an ordinary step: the pauses the loop saw.
        "slow_excess_s": sum(ms - res["step_p50_ms"] for ms in slow) / 1e3,
        "loss": res["loss"],
        "build_s": res["build_s"],
        "vm_hwm": res["vm_hwm"],
        "process_s": proc.wall_s,
        "background_cores": proc.background_cores,
    }
    run.update(auto_censuses(out))
    out.unlink()
    return run


def memsight_pairs(opts: argparse.Namespace) -> dict[str, Any]:
    """Part 2: the training loop under memsight run, census auto against never."""
    probe = 30
    calib = last_json_line(
        run_process(python_cmd(BIG_WORKLOAD, ["--objects", "0", "--steps", str(probe)])).stdout
    )
    steps = max(50, round(opts.loop_seconds / (calib["loop_s"] / probe)))
    args_ = ["--objects", str(opts.objects), "--steps", str(steps)]
    print(
        f"\nmemsight run: {BIG_WORKLOAD.name} {' '.join(args_)} (~{calib['step_ms']:.0f} ms "
        f"steps), {opts.pairs} pairs of --census auto and never",
        flush=True,
    )
    pairs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memsight-census-cost-") as tmp:
        for i in range(opts.pairs):
            order = ("never", "auto") if i % 2 == 0 else ("auto", "never")
            runs = {mode: memsight_run(args_, mode, Path(tmp)) for mode in order}
            pair = {
                "order": list(order),
                "auto": runs["auto"],
                "never": runs["never"],
                "ratio": runs["auto"]["loop_s"] / runs["never"]["loop_s"],
                "load_avg": os.getloadavg()[0],
            }
            auto = runs["auto"]
            print(
                f"  pair {i + 1}/{opts.pairs} ({' then '.join(order)}): never "
                f"{runs['never']['loop_s']:.2f} s, auto {auto['loop_s']:.2f} s, ratio "
                f"{pair['ratio']:.4f}; auto: {len(auto['censuses'])} censuses sent, "
                f"{auto['slow_steps']} steps over 120 ms (max {auto['step_max_ms']:.0f} ms)",
                flush=True,
            )
            pairs.append(pair)
    return {"steps": steps, "calibration_step_ms": calib["step_ms"], "pairs": pairs}


def big_heap(opts: argparse.Namespace) -> int:
    load_before = os.getloadavg()
    one = census_in_slices(opts)
    print(
        f"process: {one['objects']:,} objects in the dataset (built in {one['build_s']:.1f} s), "
        f"{one['objects_tracked']:,} tracked by gc, RSS {mib(one['rss']):,.0f} MiB; "
        f"load average {load_before[0]:.2f} before"
    )
    pauses = one["pauses_ms"]
    print_table(
        ["slices", "pause p50 ms", "pause max ms", "pause p90 ms", "wall ms", "cpu ms", "walked"],
        [
            [
                one["slices"],
                one["pause_p50_ms"],
                one["pause_max_ms"],
                percentile(pauses, 90),
                one["wall_ms"],
                one["cpu_ms"],
                one["objects_walked"],
            ]
        ],
        title="one whole census in slices (pause: wall time of each take_census call)",
    )
    print_table(
        ["holder", "kind", "tensors", "MiB"],
        [[n, k, c, mib(b)] for n, k, c, b in one["holders"]],
        title="largest holders",
    )
    added, cap = one["rss_added"], one["memory_cap"]
    complete = not one["partial"] and not one["continues"]
    named = (
        one["kept_bytes"] == one["kept_expected"]
        and one["dataset_bytes"] == one["dataset_expected"]
    )
    print(
        f"\nRSS added by the census (peak after - peak before"
        f"{'' if one['peak_reset'] else ', peak NOT reset'}): {mib(added):.1f} MiB, "
        f"cap {mib(cap):.1f} MiB (16 MiB + 1 % of RSS); complete: {complete} "
        f"(stopped_by {one['stopped_by']}); kept {mib(one['kept_bytes']):.0f} of "
        f"{mib(one['kept_expected']):.0f} MiB, dataset tail {mib(one['dataset_bytes']):.0f} of "
        f"{mib(one['dataset_expected']):.0f} MiB"
    )
    needed_s = one["wall_ms"] / 1e3 / census_schedule.SLICES_SHARE
    print(
        f"at {census_schedule.SLICES_SHARE:.0%} of the run this census needs about "
        f"{needed_s:.0f} s of run to complete under memsight (auto)"
    )
    passed = one["pause_max_ms"] <= BIG_MAX_PAUSE_MS and added <= cap and complete and named
    detail = (
        f"{one['objects']:,} objects: {one['slices']} slices, pause p50 "
        f"{one['pause_p50_ms']:.0f} ms, max {one['pause_max_ms']:.0f} ms (<= "
        f"{BIG_MAX_PAUSE_MS:.0f}; schedule {TARGET_MS:.0f}), CPU {one['cpu_ms'] / 1e3:.2f} s, "
        f"RSS added {mib(added):.1f} MiB (<= {mib(cap):.1f}), "
        f"{'complete' if complete else 'NOT complete'}"
        f"{'' if named else ', holders NOT all found'}"
    )
    verdict(BIG_NAME, passed, detail)

    result: dict[str, Any] = {
        "settings": vars(opts),
        "load_avg_before": load_before[0],
        "census": one,
        "needed_run_s": needed_s,
        "target": {
            "max_pause_ms": BIG_MAX_PAUSE_MS,
            "schedule_pause_ms": TARGET_MS,
            "rss_added_max": cap,
            "ratio_max": BIG_TARGET_RATIO,
        },
        "census_passed": passed,
    }
    if opts.loop_seconds > 0 and opts.pairs > 0:
        under = memsight_pairs(opts)
        pairs = under["pairs"]
        print_table(
            ["pair", "never s", "auto s", "ratio", "sent", "slices", "slow steps", "slow s", "bg"],
            [
                [
                    i + 1,
                    p["never"]["loop_s"],
                    p["auto"]["loop_s"],
                    p["ratio"],
                    len(p["auto"]["censuses"]),
                    sum(c["slices"] for c in p["auto"]["censuses"]),
                    f"{p['auto']['slow_steps']} / {p['never']['slow_steps']}",
                    f"{p['auto']['slow_excess_s']:.2f} / {p['never']['slow_excess_s']:.2f}",
                    max(p["auto"]["background_cores"] or 0, p["never"]["background_cores"] or 0),
                ]
                for i, p in enumerate(pairs)
            ],
            title="training loop (its own perf_counter) under memsight run; sent: censuses in "
            "the auto profile; slices: theirs; slow steps, slow s: steps over 120 ms and their "
            "time beyond the median step, auto / never; bg: other processes' cores",
        )
        for i, p in enumerate(pairs):
            for c in p["auto"]["censuses"]:
                print(
                    f"  pair {i + 1} census at {c['iterations_are']} {c['iteration']} "
                    f"(t {c['t']:.1f} s): "
                    f"{c['slices']} slices, max pause {c['max_pause_ms']:.0f} ms, wall "
                    f"{c['wall_ms']:.0f} ms, partial {c['partial']} ({c['stopped_by']}); "
                    f"kept {mib(c['kept_bytes']):.0f} MiB, dataset tail "
                    f"{mib(c['dataset_bytes']):.0f} MiB"
                )
            if p["auto"]["census_errors"]:
                print(f"  pair {i + 1} census errors: {p['auto']['census_errors']}")
        ratios = [p["ratio"] for p in pairs]
        med = statistics.median(ratios)
        spread = max(p["never"]["loop_s"] for p in pairs) / min(p["never"]["loop_s"] for p in pairs)
        sent = sum(len(p["auto"]["censuses"]) for p in pairs)
        print(
            f"\nmedian ratio {med:.4f} (each: {', '.join(f'{r:.4f}' for r in ratios)}); noise "
            f"floor (slowest / fastest never run) {spread:.4f}; load average after "
            f"{os.getloadavg()[0]:.2f}"
        )
        slow_ok = med <= BIG_TARGET_RATIO
        verdict(
            BIG_NAME + " (memsight run)",
            slow_ok,
            f"auto / never loop time, median of {len(pairs)} pairs {med:.4f} (target <= "
            f"{BIG_TARGET_RATIO:.2f}; noise floor {spread:.4f}); {sent} censuses sent in "
            f"{len(pairs)} auto runs",
        )
        result.update(memsight=under, median_ratio=med, noise_floor=spread, slowdown_passed=slow_ok)
        passed = passed and slow_ok
    result["passed"] = passed
    write_result(BIG_NAME, result)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
