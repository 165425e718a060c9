"""out-of-memory: the run ended in an OOM (critical).

Sources, first that applies: the error that ended the script is an OOM (torch's CUDA
OutOfMemoryError, a CPU allocator failure, MemoryError); or the process died of SIGKILL while
the process tree was near its RAM limit, which is how the kernel's OOM killer ends a run.

For an error, the finding's `where` names the innermost line of the user's code on the
traceback (the forward that asked for the memory, or the call into a library that did), then
the library line that raised when that is elsewhere; the evidence quotes the user's line. A
kill has no traceback and names no line.

For a CUDA OOM, the allocator's block list at that moment (profiler/diagnosis/blocks.py), when
the agent took one, adds the memory free inside the allocator's segments and its largest free
block, which tells fragmentation (the request would fit in the free memory, but in no single
block) from a device that is simply full; with the allocator's history on (`--cuda-history`),
`where` also names the lines of the user's code that allocated the largest live blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memsight.profiler.diagnosis.anatomy import anatomy_for
from memsight.profiler.diagnosis.blocks import block_locations, blocks_text, oom_blocks
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.contents import Census, censuses
from memsight.profiler.diagnosis.contents import describe as describe_holder
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.fit import savings
from memsight.profiler.diagnosis.holders import holding_locations, largest_holders
from memsight.profiler.diagnosis.signals import (
    device_total,
    final_exception,
    killed_near_limit,
    ram_capacity,
    step_at,
)
from memsight.profiler.diagnosis.where import (
    add_locations,
    describe,
    exception_locations,
    script_path,
)
from memsight.profiler.profile.model import Event, Profile
from memsight.profiler.profile.series import process_tree
from memsight.profiler.units import format_bytes

RULE_ID = "out-of-memory"
EXPLANATION = (
    "The program asked for more memory than was left, and the run ended there. What was live "
    "at that moment (parameters, gradients, optimizer state, activations of the step in "
    "progress, cached blocks) did not fit; the evidence says where in the loop it happened and "
    "how much was asked for. Fixes that shrink the step's peak come first."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    exc = final_exception(profile)
    if exc is not None and exc.get("oom"):
        return [_from_exception(profile, config, exc.t, exc.data, exc)]
    killed = killed_near_limit(profile, config)
    if killed is not None:
        return [_from_kill(profile, config, *killed)]
    return []


def _when(data: dict[str, Any]) -> str:
    phase = data.get("phase")
    iteration = data.get("iteration")
    parts = []
    if phase:
        parts.append(f"in {phase}")
    if isinstance(iteration, int):
        parts.append(f"after {iteration} optimizer steps" if iteration else "before the first step")
    return " ".join(parts)


def _from_exception(
    profile: Profile,
    config: DiagnosisConfig,
    t: float,
    data: dict[str, Any],
    event: Event | None = None,
) -> Finding:
    kind = data.get("oom")
    numbers = data.get("numbers") if isinstance(data.get("numbers"), dict) else {}
    assert isinstance(numbers, dict)
    facts: dict[str, Any] = {
        "exception": data.get("exc_type"),
        "phase": data.get("phase"),
        "iteration": data.get("iteration"),
    }
    for key in ("requested", "free", "total", "allocated", "reserved_unallocated"):
        if isinstance(numbers.get(key), int):
            facts[f"{key}_bytes"] = numbers[key]
    when = _when(data)
    if kind == "gpu":
        title = "CUDA ran out of memory" + (f" {when}" if when else "")
        text = _gpu_text(numbers) or str(data.get("message", ""))[:200]
        fixes: tuple[str, ...] = (
            "smaller-batch",
            "mixed-precision",
            "activation-checkpointing",
            "gradient-accumulation",
            "allocator-config",
        )
        unallocated = numbers.get("reserved_unallocated")
        if isinstance(unallocated, int) and unallocated >= config.oom_fragmented_min_bytes:
            fixes = _first(("allocator-config",), fixes)
        plot = "gpu"
        blocks = oom_blocks(profile, event)
    else:
        title = "The run ran out of RAM" + (f" {when}" if when else "")
        exc_type = str(data.get("exc_type") or "error").removeprefix("builtins.")
        requested = numbers.get("requested")
        text = (
            f"{exc_type}: the allocator could not provide {format_bytes(requested)}"
            if isinstance(requested, int)
            else f"{exc_type}: {str(data.get('message', ''))[:160]}"
        )
        fixes = ("smaller-batch", "del-and-scope", "dataloader-worker-memory")
        plot = "ram"
        blocks = None
    single = _single_request(profile, kind, data, numbers)
    if single is not None and single[0] >= config.oom_single_request_share:
        # One allocation that large is one input too large (a sequence, an image), not a
        # batch of ordinary ones: shrinking the input and checkpointing come first.
        share, label = single
        text += f"; that one request is {share:.0%} of {label}"
        if data.get("iteration") == 0:
            text += ", on the first iteration"
        facts["request_share"] = round(share, 4)
        fixes = _first(("shorter-inputs", "activation-checkpointing"), fixes)
    where = exception_locations(data, script_path(profile.info))
    if where:  # the user's own line: the allocation that failed, or the call that led to it
        text += f"; at {describe(where[0])}"
    if blocks is not None:
        requested = numbers.get("requested")
        requested = requested if isinstance(requested, int) else blocks.requested
        text += f"; {blocks_text(blocks, requested)}"
        facts.update(
            {
                "segments": blocks.segments,
                "segment_free_bytes": blocks.free,
                "free_blocks": blocks.free_blocks,
                "largest_free_block_bytes": blocks.largest_free,
            }
        )
        if requested is not None and blocks.largest_free < requested <= blocks.free:
            facts["fragmented"] = True
            fixes = _first(("allocator-config",), fixes)
        where = add_locations(where, block_locations(blocks, script_path(profile.info)))
    at_error = _census_at(profile, data)
    if at_error is not None:
        held = largest_holders(at_error, config.oom_holder_min_bytes)
        if held:
            text += "; at the error, " + ", ".join(
                f"{describe_holder(h)} held {format_bytes(_held(h))}" for h in held[:2]
            )
            facts["holders"] = [{"holder": describe_holder(h), "bytes": _held(h)} for h in held]
            where = add_locations(where, holding_locations(held, "at the error"))
    device = numbers.get("device")
    anatomy = anatomy_for(profile, plot, device if isinstance(device, int) else None)
    saved = savings(anatomy) if anatomy is not None else None
    if saved is not None:
        # What the modules saved for backward, measured on one iteration: where to cut.
        text += "; " + saved.text()
        facts.update(saved.facts())
        fixes = saved.fixes(fixes)
    steps = profile.steps
    start = t
    iterations = None
    done = step_at(profile, t)
    if steps is not None and done:
        start = float(steps["end"][done - 1])
        iterations = (done, done + 1)
    return Finding(
        rule=RULE_ID,
        severity="critical",
        title=title,
        explanation=EXPLANATION,
        evidence=Evidence(text, start, t, plot, iterations, facts),  # type: ignore[arg-type]
        fixes=fixes,
        where=where,
    )


def _census_at(profile: Profile, data: dict[str, Any]) -> Census | None:
    """The census the agent took at this error (agent/census_schedule.py at_error)."""
    exc_id = data.get("exc_id")
    mine = [c for c in censuses(profile) if c.at_error and c.exc_id == exc_id]
    return mine[-1] if mine else None


def _held(holder: dict[str, Any]) -> int:
    return int(holder.get("bytes") or 0) + int(holder.get("grad_bytes") or 0)


def _first(ids: tuple[str, ...], fixes: tuple[str, ...]) -> tuple[str, ...]:
    return (*ids, *[f for f in fixes if f not in ids])


def _single_request(
    profile: Profile, kind: object, data: dict[str, Any], numbers: dict[str, Any]
) -> tuple[float, str] | None:
    """(the failed request's share of the memory it failed on, that memory in words), when
    the request is known and was made outside the optimizer step (whose state tensors are
    the parameters' size, whatever the input)."""
    requested = numbers.get("requested")
    if not isinstance(requested, int) or requested <= 0 or data.get("phase") == "optimizer":
        return None
    if kind == "gpu":
        total = numbers.get("total")
        device = numbers.get("device")
        if not isinstance(total, int) or total <= 0:
            total = device_total(profile, device if isinstance(device, int) else 0)
        if total is None:
            return None
        return requested / total, f"the device's {format_bytes(total)}"
    capacity = ram_capacity(profile)
    if capacity is None:
        return None
    return requested / capacity.bytes, f"{capacity.label} ({format_bytes(capacity.bytes)})"


def _gpu_text(numbers: dict[str, Any]) -> str:
    parts = []
    if isinstance(numbers.get("requested"), int):
        parts.append(f"asked for {format_bytes(numbers['requested'])}")
    if isinstance(numbers.get("free"), int) and isinstance(numbers.get("total"), int):
        parts.append(f"{format_bytes(numbers['free'])} free of {format_bytes(numbers['total'])}")
    if isinstance(numbers.get("allocated"), int):
        parts.append(f"PyTorch had {format_bytes(numbers['allocated'])} allocated")
    if isinstance(numbers.get("reserved_unallocated"), int):
        parts.append(f"{format_bytes(numbers['reserved_unallocated'])} reserved but unallocated")
    return "; ".join(parts)


def _from_kill(profile: Profile, config: DiagnosisConfig, end: float, peak: int) -> Finding:
    capacity = ram_capacity(profile)
    assert capacity is not None
    tree = process_tree(profile)
    assert tree is not None
    t, used = tree
    high = np.flatnonzero(used >= config.oom_kill_evidence_from_share * peak)
    start = float(t[high[0]]) if len(high) else end
    text = (
        f"killed by SIGKILL with the process tree at {format_bytes(peak)}, "
        f"{peak / capacity.bytes:.0%} of {capacity.label} ({format_bytes(capacity.bytes)})"
    )
    return Finding(
        rule=RULE_ID,
        severity="critical",
        title="The run was killed while RAM was nearly full (the OOM killer's way)",
        explanation=EXPLANATION,
        evidence=Evidence(
            text,
            start,
            end,
            "ram",
            None,
            {"peak_bytes": peak, "capacity_bytes": capacity.bytes, "signal": 9},
        ),
        fixes=("smaller-batch", "del-and-scope", "dataloader-worker-memory"),
    )
