"""inference-without-no-grad: forwards that record a graph nobody uses (warning, or info).

A forward pass with grad mode on and an output that requires grad keeps every intermediate
tensor the backward would need. Counted: such forwards that no backward went through, when
the model was in eval mode, or when the run had no backward at all (a pure inference script).
A train-mode forward of a model whose forwards are never linked to a backward in a run that
does have backwards is left out: that is a model whose loss comes from an output the hook did
not see, not an inference.

Counted once per batch (profiler.profile.series.forward_batches): a loop calling the model and
then the loss module is one batch, not two forwards. The cost is measured from the samples:
how far memory rose during one batch's forwards above the level before them, at its largest
over the batches, less the same for forwards of the same modules under no_grad when the run
has any. Measured on enough batches, on RAM and on every CUDA device sampled, and negligible
(inference_negligible_bytes), the finding is info: the fix is still right, but memory is not
what it costs.

Evidence numbers: `batches`, `forwards` (outermost module calls), `eval_mode_forwards`,
`eval_mode_batches` (batches with a forward in eval mode), `modules`, and, when measured,
`cost_bytes`, `rise_bytes` (largest rise of a batch), `no_grad_rise_bytes` (or null),
`measured_batches`, `cost_plot`, `device`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.diagnosis.adders import source_line
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.contents import censuses, contents
from memsight.profiler.diagnosis.finding import Evidence, Finding, Location, Severity
from memsight.profiler.diagnosis.signals import (
    backward_count,
    distinct,
    forward_rows,
    linked_forward_ids,
    rise_during,
    sampled_series,
    step_at,
)
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import forward_batches, memory_name
from memsight.profiler.units import format_bytes

RULE_ID = "inference-without-no-grad"
MAX_SITES = 3
EXPLANATION = (
    "These forward passes ran with autograd recording, so every activation a backward pass "
    "would need was kept until the output was dropped, and no backward pass ever came. "
    "model.eval() only changes layers such as dropout and batch norm; it does not stop "
    "autograd. Under torch.no_grad() or torch.inference_mode() the same forward keeps "
    "nothing, using a fraction of the memory and running faster."
)


@dataclass(frozen=True)
class Cost:
    """What the graph cost on one timeline: the largest rise of a batch, less no_grad's."""

    plot: str
    device: int | None
    rise: float  # largest rise above the level before a batch's forwards
    no_grad_rise: float | None  # the same for the same modules' forwards under no_grad
    measured: int  # batches with samples around them

    @property
    def bytes(self) -> float:
        return max(0.0, self.rise - (self.no_grad_rise or 0.0))


def graph_kept_bytes(profile: Profile) -> int:
    """Bytes the last census found kept alive only by autograd graphs (its holders'
    graph-kept bytes, summed); 0 without a census."""
    found = censuses(profile)
    if not found:
        return 0
    return sum(row.graph_bytes for row in contents(found[-1]))


def _batches(
    t: np.ndarray, end: np.ndarray, module: np.ndarray, evaluating: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, any forward in eval mode) of each batch of forwards, in time order."""
    order = np.argsort(t, kind="stable")
    batch = forward_batches(module[order])
    starts = np.flatnonzero(np.diff(batch, prepend=-1))
    flags = np.zeros(len(t), dtype=bool) if evaluating is None else evaluating[order]
    return (
        t[order][starts],
        np.maximum.reduceat(end[order], starts),
        np.maximum.reduceat(flags, starts),
    )


def _cost(
    profile: Profile,
    batches: tuple[np.ndarray, np.ndarray, np.ndarray],
    reference: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    config: DiagnosisConfig,
) -> tuple[Cost | None, bool]:
    """The largest cost over RAM and each GPU (None when no timeline measured enough batches),
    and whether every timeline did."""
    best: Cost | None = None
    every = True
    for plot, device, t, level, peak in sampled_series(profile):
        rises = rise_during(t, level, peak, batches[0], batches[1])
        measured = rises[~np.isnan(rises)]
        if len(measured) < min(config.inference_cost_min_batches, len(rises)):
            every = False
            continue
        no_grad = None
        if reference is not None:
            ref = rise_during(t, level, peak, reference[0], reference[1])
            ref = ref[~np.isnan(ref)]
            if len(ref) >= min(config.inference_cost_min_batches, len(reference[0])):
                no_grad = float(ref.max())
        cost = Cost(plot, device, float(measured.max()), no_grad, len(measured))
        if best is None or cost.bytes > best.bytes:
            best = cost
    return best, every


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    rows = forward_rows(profile)
    if rows is None:
        return []
    flags = rows["flags"]
    grad = (flags & protocol.FLAG_GRAD) != 0
    requires = (flags & protocol.FLAG_REQUIRES_GRAD) != 0
    training = (flags & protocol.FLAG_TRAINING) != 0
    outermost = rows["depth"] == 0
    linked = np.isin(rows["id"], linked_forward_ids(profile))
    candidate = grad & requires & outermost & ~linked
    if backward_count(profile):
        modules_with_backward = distinct(rows["module"][linked])
        seen_module = np.isin(rows["module"], modules_with_backward)
        candidate &= ~training | seen_module
    count = int(candidate.sum())
    if not count:
        return []
    t, end, module = rows["t"][candidate], rows["end"][candidate], rows["module"][candidate]
    batches = _batches(t, end, module, ~training[candidate])
    batch_count = len(batches[0])
    if batch_count < config.inference_min_forwards:
        return []
    names = sorted({profile.name(m) for m in distinct(module)})
    eval_count = int((candidate & ~training).sum())
    # A batch is in eval mode when its model was: a loss module is rarely switched to eval.
    eval_batches = int(batches[2].sum())
    mode = (
        "in eval mode"
        if eval_batches == batch_count
        else "in train mode"
        if eval_batches == 0
        else f"({eval_batches} of them in eval mode)"
    )
    counted = (
        f"{count} forward passes"
        if batch_count == count
        else f"{batch_count} batches ({count} forward passes)"
    )
    text = (
        f"{counted} of {', '.join(names)} {mode} with gradient tracking on, "
        "none followed by a backward pass"
    )
    same_modules_no_grad = ~grad & outermost & np.isin(rows["module"], module)
    reference = None
    if same_modules_no_grad.any():
        reference = _batches(
            rows["t"][same_modules_no_grad],
            rows["end"][same_modules_no_grad],
            rows["module"][same_modules_no_grad],
        )
    cost, measured_everywhere = _cost(profile, batches, reference, config)
    severity: Severity = "warning"
    title = "Inference runs with autograd on: wrap it in torch.no_grad()"
    numbers: dict[str, float | int | str | None] = {
        "batches": batch_count,
        "forwards": count,
        "eval_mode_forwards": eval_count,
        "eval_mode_batches": eval_batches,
        "modules": ", ".join(names),
    }
    if cost is not None:
        where = memory_name(cost.plot, cost.device)
        text += f"; {where} rose by up to {format_bytes(cost.rise)} during one batch's forwards"
        if cost.no_grad_rise is None:
            text += " (their activations and the graph kept for a backward)"
        else:
            text += (
                f", {format_bytes(cost.no_grad_rise)} for the same modules under no_grad: the "
                f"graph costs about {format_bytes(cost.bytes)} per batch"
            )
        kept = graph_kept_bytes(profile)
        if kept >= config.inference_negligible_bytes:
            # One batch's graph is small, but graphs are kept from batch to batch (outputs
            # stored with their graph): that is the memory, and "too little to matter" would
            # contradict the growth finding whose holder keeps them.
            text += (
                f"; the last census found {format_bytes(kept)} kept alive by autograd graphs "
                "(outputs stored with the graph that made them)"
            )
            numbers["graph_kept_bytes"] = kept
        elif cost.bytes < config.inference_negligible_bytes and measured_everywhere:
            severity = "info"
            title = "Inference runs with autograd on, at little memory cost: torch.no_grad()"
            text += ", too little to matter here"
        numbers.update(
            {
                "cost_bytes": round(cost.bytes),
                "rise_bytes": round(cost.rise),
                "no_grad_rise_bytes": None
                if cost.no_grad_rise is None
                else round(cost.no_grad_rise),
                "measured_batches": cost.measured,
                "cost_plot": cost.plot,
                "device": cost.device,
            }
        )
    first_step, last_step = step_at(profile, float(t.min())), step_at(profile, float(end.max()))
    return [
        Finding(
            RULE_ID,
            severity,
            title,
            EXPLANATION,
            Evidence(
                text,
                float(t.min()),
                float(end.max()),
                None if cost is None else "gpu" if cost.plot == "gpu" else "ram",
                (first_step, last_step) if first_step is not None and last_step else None,
                numbers,
            ),
            ("no-grad-inference",),
            _call_sites(profile, rows["id"][candidate], distinct(module)),
        )
    ]


def _call_sites(profile: Profile, ids: np.ndarray, modules: np.ndarray) -> tuple[Location, ...]:
    """The lines of the user's code that called these modules with autograd on.

    The agent records a line once, at the first forward it made (a `forward_call_site` event);
    only lines whose first forward is among the counted ones are named, when there are any.
    """
    counted = set(int(i) for i in ids)
    wanted = set(int(m) for m in modules)
    sites = []
    for event in profile.events_of("forward_call_site"):
        file, line, module = event.get("file"), event.get("line"), event.get("module")
        if not isinstance(file, str) or not isinstance(line, int) or module not in wanted:
            continue
        first = int(event.get("forward_id") or 0)
        sites.append((first not in counted, first, file, line, event.get("function")))
    sites.sort()
    if any(not later for later, *_ in sites):
        # Lines whose first forward is a counted one; a line that first ran a forward a
        # backward went through (the training step) is not where inference runs.
        sites = [site for site in sites if not site[0]]
    found: list[Location] = []
    for _, _, file, line, function in sites:
        if any(loc.file == file and loc.line == line for loc in found):
            continue
        code = source_line(file, line)
        found.append(Location(file, line, str(function) if function else None, code))
    return tuple(found[:MAX_SITES])
