"""Cost per training step of the agent's PyTorch instrumentation, measured in-process.

No target of its own: it explains the overhead benchmark's number. `overhead.py` measures
memsight as a whole (recorder process, agent thread, instrumentation) on a real run, where a
difference of a few tenths of a percent is below the machine's noise. This script isolates
the part that runs in the training thread itself: profiler.agent.instrument.Instrumentation
is installed on the overhead workload's model (benchmarks/workloads/cpu_train.py) with a
stand-in for the agent that does in the calling thread what the real one does (pack the
row with struct, append it under a lock; events into a list). No recorder, no socket, no
agent thread.

* Blocks of steps run alternately with the instrumentation installed and uninstalled, in
  one process (same model, same data); the per-step difference of the block medians, in
  wall time and in the thread's CPU time, is the instrumentation's cost per step ("paired
  cost": the median difference between each block and the other mode's next to it), as a
  profiled run pays it: past the first steps, steps closer together than
  steps.DETAIL_EVERY_NS are recorded in detail one per DETAIL_EVERY_NS, the others light.
  The same blocks then run with every step in detail (the cost of a detailed step) and
  with every step light (past each block's untimed first step). "min cost" is the fastest
  instrumented block less the fastest plain one: other work on the machine only adds time,
  so with many short blocks (`--blocks 60 --block-steps 25`) it comes closest to the
  undisturbed cost. From the min costs of those two it prints what a long run pays per step
  at the workload's step time: light + (step time / DETAIL_EVERY_NS) x (detailed - light).
* `--per-hook` then runs again with a timer around every hook and helper, and reports the
  time spent in each per call (mean and median) and per step. The timers add about a
  microsecond per call of their own, and nested helpers are also counted in their caller.

A step of the default workload is ~40 ms, long enough for the CPU caches to forget the
hooks' code between two calls: per call they cost several times what they cost in a tight
loop. `--model tiny` gives ~1-2 ms steps, where the fixed cost per step shows as a
percentage.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from _common import WORKLOADS, print_table, write_result

from memsight.profiler.agent import instrument, spans
from memsight.profiler.agent import steps as step_hooks
from memsight.profiler.agent.outbox import Outbox

NAME = "hook_cost"

# Hooks torch calls (top level) and the helpers they call (nested), timed with --per-hook.
HOOKS = (
    "_root_pre",
    "_root_post",
    "_backward_started",
    "_backward_finished",
    "_step_pre",
    "_step_post",
    "_discover_pre",
    "_discover_post",
)
HELPERS = (
    "_watch_backward",
    "_watch",
    "_note_call_site",
    "_cuda_state",
    "_autocast",
    "_stack",
    "_attach_oom_observer",
    "memory_state",
    "_rss",
    "_step_memory",
    "_choose_detail",
    "_breakdown",
    "_cleared_how",
    "_remember_grads",
)
# Functions, wrapped in the module whose hooks call them (where they are looked up).
MODULE_HELPERS = ((step_hooks, "measure_breakdown"), (spans, "first_grad_tensor"))
AGENT_CALLS = ("row", "name_id", "event")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--blocks", type=int, default=10, help="blocks per mode (default 10)")
    p.add_argument(
        "--block-steps",
        type=int,
        default=None,
        help="steps per block (default: about 0.5 s of the model's steps, at least 30)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    sys.path.insert(0, str(WORKLOADS))
    from cpu_train import add_model_args

    add_model_args(p)
    p.add_argument(
        "--per-hook", action="store_true", help="also time every hook and helper (a second run)"
    )
    return p.parse_args()


class StandInAgent(Outbox):
    """The agent as the script's threads see it (its outbox), with no recorder behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[tuple[str, str]] = []

    def error(self, where: str, exc: BaseException) -> None:
        self.errors.append((where, repr(exc)))

    def report_exception(self, exc: BaseException, where: str, uncaught: bool = False) -> None:
        pass

    def cuda_reader(self) -> Any:
        return None


class Timers:
    """Wraps methods and functions with perf_counter_ns accumulators; undo() restores them."""

    def __init__(self) -> None:
        self.samples: dict[str, list[int]] = defaultdict(list)
        self.enabled = False
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        original = owner.__dict__.get(attr)
        if original is None:
            return  # not in this version of the instrumentation
        samples = self.samples[label]

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(*args, **kwargs)
            start = time.perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                samples.append(time.perf_counter_ns() - start)

        self._undo.append((owner, attr, original))
        setattr(owner, attr, timed)

    def undo(self) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)
        self._undo.clear()


def build(opts: argparse.Namespace) -> tuple[Callable[[], None], Callable[[], None], Any]:
    """The workload's training step and its forward alone, as closures over model and data."""
    sys.path.insert(0, str(WORKLOADS))
    import torch
    from cpu_train import make_step

    torch.set_num_threads(opts.threads)
    train_step, train_forward = make_step(opts)
    counter = [0]

    def step() -> None:
        counter[0] += 1
        train_step(counter[0])

    def forward() -> None:
        counter[0] += 1
        train_forward(counter[0])

    return step, forward, torch


def run_blocks(
    call: Callable[[], None],
    inst: Any,
    opts: argparse.Namespace,
    calls: int,
    timers: Timers | None,
    warm: int = 1,
) -> dict[str, list[tuple[float, float]]]:
    """Per-call (wall ns, thread CPU ns) of each block, by mode, alternating the order."""
    blocks: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    for b in range(opts.blocks):
        for mode in ("on", "off") if b % 2 == 0 else ("off", "on"):
            if mode == "on":
                inst.install()
            # Untimed: on, this is where root discovery ends (at the first step, or after
            # DISCOVERY_FORWARDS forwards without a step).
            for _ in range(warm):
                call()
            if timers is not None:
                timers.enabled = mode == "on"
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            for _ in range(calls):
                call()
            wall, cpu = time.perf_counter_ns() - wall, time.thread_time_ns() - cpu
            if timers is not None:
                timers.enabled = False
            blocks[mode].append((wall / calls, cpu / calls))
            if mode == "on":
                inst.uninstall()
    return blocks


NEVER_NS = 10**18  # DETAIL_EVERY_NS that no run reaches: every step past the warm-up light


def run_with_detail_every(
    every_ns: int,
    step: Callable[[], None],
    inst: Any,
    opts: argparse.Namespace,
    calls: int,
) -> dict[str, list[tuple[float, float]]]:
    """run_blocks with steps.DETAIL_EVERY_NS set to every_ns for the duration."""
    sampled = step_hooks.DETAIL_EVERY_NS
    step_hooks.DETAIL_EVERY_NS = every_ns
    try:
        return run_blocks(step, inst, opts, calls, None)
    finally:
        step_hooks.DETAIL_EVERY_NS = sampled


def summarize(blocks: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    out = {}
    for k, label in ((0, "wall"), (1, "cpu")):
        on = statistics.median(b[k] for b in blocks["on"])
        off = statistics.median(b[k] for b in blocks["off"])
        out[f"{label}_off_us"] = off / 1e3
        out[f"{label}_on_us"] = on / 1e3
        out[f"{label}_cost_us"] = (on - off) / 1e3
        out[f"{label}_ratio"] = on / off
        # Each block against the other mode's block run next to it: a machine whose speed
        # drifts by more than the cost between blocks moves both alike.
        paired = [a[k] - b[k] for a, b in zip(blocks["on"], blocks["off"], strict=True)]
        out[f"{label}_paired_cost_us"] = statistics.median(paired) / 1e3
        # The fastest block of each mode: other work on the machine only ever adds time, so
        # with many short blocks the minima come closest to the undisturbed cost.
        fastest_on = min(b[k] for b in blocks["on"])
        fastest_off = min(b[k] for b in blocks["off"])
        out[f"{label}_min_cost_us"] = (fastest_on - fastest_off) / 1e3
    return out


def block_steps(step: Callable[[], None], opts: argparse.Namespace) -> int:
    """--block-steps, or as many steps as take about half a second (at least 30)."""
    if opts.block_steps:
        return int(opts.block_steps)
    began = time.perf_counter()
    for _ in range(5):
        step()
    return max(30, round(0.5 / ((time.perf_counter() - began) / 5)))


def cost_table(cost: dict[str, float], what: str) -> None:
    print_table(
        [
            f"per {what}",
            "uninstrumented",
            "instrumented",
            "cost",
            "ratio",
            "paired cost",
            "min cost",
        ],
        [
            [
                label,
                cost[f"{label}_off_us"],
                cost[f"{label}_on_us"],
                cost[f"{label}_cost_us"],
                cost[f"{label}_ratio"],
                cost[f"{label}_paired_cost_us"],
                cost[f"{label}_min_cost_us"],
            ]
            for label in ("wall", "cpu")
        ],
        title=f"median per-{what} time of the blocks, microseconds (cpu: the thread's CPU time)",
    )


def main() -> int:
    opts = parse_args()
    step, forward, torch = build(opts)
    agent = StandInAgent()
    inst = instrument.Instrumentation(agent, torch)
    for _ in range(5):  # warm-up, uninstrumented
        step()
    steps = block_steps(step, opts)
    sys.path.insert(0, str(WORKLOADS))
    from cpu_train import shape

    dims = ", ".join(f"{k} {v}" for k, v in shape(opts).items() if v)
    print(
        f"workload: cpu_train.py --model {opts.model} ({dims}), {opts.threads} thread(s); "
        f"{opts.blocks} blocks of {steps} steps per mode, alternating",
        flush=True,
    )
    blocks = run_blocks(step, inst, opts, steps, None)
    cost = summarize(blocks)
    cost_table(cost, "step")
    # Every step in detail (forward and backward spans, CUDA counters), as the first
    # DETAIL_WARMUP_STEPS and any step DETAIL_EVERY_NS or more after the last detailed one;
    # then every step light (but each block's untimed first step, which follows a pause).
    sampled_every_ns = step_hooks.DETAIL_EVERY_NS
    first_id = inst._forward_ids
    detailed_blocks = run_with_detail_every(0, step, inst, opts, steps)
    forwards_per_step = (inst._forward_ids - first_id) / (opts.blocks * (steps + 1))
    detailed_cost = summarize(detailed_blocks)
    cost_table(detailed_cost, "detailed step")
    light_cost = summarize(run_with_detail_every(NEVER_NS, step, inst, opts, steps))
    cost_table(light_cost, "light step")
    # What a long run pays per step at this step time, from the two (min costs): steadier on
    # a noisy machine than the sampled blocks, whose few detailed steps fall unevenly.
    share = min(1.0, cost["wall_off_us"] * 1e3 / sampled_every_ns)
    modelled = {
        label: light_cost[f"{label}_min_cost_us"]
        + share * (detailed_cost[f"{label}_min_cost_us"] - light_cost[f"{label}_min_cost_us"])
        for label in ("wall", "cpu")
    }
    # The model's forward alone (autograd on, no backward): the hooks of one outermost
    # forward, with torch's slower call path for a hooked module and the gradient hook.
    forward_blocks = run_blocks(forward, inst, opts, steps, None, warm=4)
    forward_cost = summarize(forward_blocks)
    cost_table(forward_cost, "forward")
    print(
        f"\n{forwards_per_step:.1f} outermost forwards per step (the model's, the loss "
        f"module's); cost per step {cost['wall_cost_us']:.1f} us wall, "
        f"{cost['cpu_cost_us']:.1f} us CPU (one step in detail per "
        f"{sampled_every_ns / 1e6:g} ms); per detailed step "
        f"{detailed_cost['wall_cost_us']:.1f} us wall; per light step "
        f"{light_cost['wall_cost_us']:.1f} us wall; per forward "
        f"{forward_cost['wall_cost_us']:.1f} us wall, {forward_cost['cpu_cost_us']:.1f} us CPU"
    )
    print(
        f"per step of a long run, from the min costs (light + {share:.4f} x (detailed - "
        f"light)): {modelled['wall']:.1f} us wall, {modelled['cpu']:.1f} us CPU, "
        f"{100 * modelled['wall'] / cost['wall_off_us']:.2f} % of the "
        f"{cost['wall_off_us'] / 1e3:.2f} ms step"
    )
    hooks: dict[str, dict[str, float]] = {}
    if opts.per_hook:
        timers = Timers()
        cls = instrument.Instrumentation
        for attr in HOOKS + HELPERS:
            # Defined by one of the parts Instrumentation is made of (a mixin): wrapped there.
            owner = next((klass for klass in cls.__mro__ if attr in klass.__dict__), cls)
            timers.wrap(owner, attr, attr)
        for module, attr in MODULE_HELPERS:
            timers.wrap(module, attr, attr)
        for attr in AGENT_CALLS:
            timers.wrap(StandInAgent, attr, "agent." + attr)
        inst = instrument.Instrumentation(agent, torch)  # binds the wrapped methods
        try:
            timed_blocks = run_blocks(step, inst, opts, steps, timers)
        finally:
            timers.undo()
        timed_steps = opts.blocks * steps
        for label, samples in timers.samples.items():
            if samples:
                hooks[label] = {
                    "calls_per_step": len(samples) / timed_steps,
                    "us_per_step": sum(samples) / timed_steps / 1e3,
                    "us_per_call_mean": statistics.fmean(samples) / 1e3,
                    "us_per_call_median": statistics.median(samples) / 1e3,
                }
        order = sorted(hooks, key=lambda k: (k not in HOOKS, -hooks[k]["us_per_step"]))
        print_table(
            ["hook / helper", "kind", "calls/step", "us/step", "us/call mean", "us/call median"],
            [
                [
                    label,
                    "hook" if label in HOOKS else "nested",
                    hooks[label]["calls_per_step"],
                    hooks[label]["us_per_step"],
                    hooks[label]["us_per_call_mean"],
                    hooks[label]["us_per_call_median"],
                ]
                for label in order
            ],
            title="time inside each hook (hook: called by torch; nested: inside a hook)",
        )
        total = sum(v["us_per_step"] for k, v in hooks.items() if k in HOOKS)
        timed_cost = summarize(timed_blocks)["wall_cost_us"]
        print(
            f"\nhooks total {total:.1f} us/step with timers (run cost with timers "
            f"{timed_cost:.1f} us/step); the rest of the cost is torch's side: the slow "
            f"module-call path of hooked modules, tensor-hook and engine-callback dispatch"
        )
    if agent.errors:
        print(f"instrumentation errors: {agent.errors}")
    write_result(
        NAME,
        {
            "settings": {**vars(opts), "block_steps": steps, "shape": shape(opts)},
            "per_step": cost,
            "per_detailed_step": detailed_cost,
            "per_light_step": light_cost,
            "per_step_modelled_us": modelled,
            "detail_every_ns": sampled_every_ns,
            "per_forward": forward_cost,
            "forwards_per_step": forwards_per_step,
            "blocks_us": {
                mode: [[w / 1e3, c / 1e3] for w, c in values] for mode, values in blocks.items()
            },
            "per_hook": hooks,
            "errors": agent.errors,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
