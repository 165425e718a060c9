"""The anatomy and the fit as `memsight report` shows them: text (a bar per module group) and
the `report --json` keys "anatomy" and "fit" (docs/architecture.md, report JSON). The one
wording of each part, for the text, the HTML report and the app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memsight.profiler.diagnosis.anatomy import (
    Anatomy,
    anatomies,
    main_anatomy,
    not_measured,
)
from memsight.profiler.diagnosis.fit import (
    MMAP_MAX_BYTES,
    Fit,
    ModuleGroup,
    Projection,
    fit,
    module_groups,
)
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import memory_name
from memsight.profiler.units import format_bytes

# The parts of a module's bytes, in the order the bars stack them: key, label, colour, the
# text bar's character.
PARTS: tuple[tuple[str, str, str, str], ...] = (
    ("activations", "activations saved for backward", "#e6550d", "█"),
    ("parameters", "parameters", "#3182bd", "▓"),
    ("gradients", "gradients", "#9ecae1", "▒"),
    ("optimizer_state", "optimizer state", "#756bb1", "░"),
)
OTHER_LABEL = "other"
OTHER_TEXT = "the batch, temporaries, the allocator's cache"
OTHER_TEXT_RAM = OTHER_TEXT + ", the interpreter and its libraries"
OTHER_COLOR = "#bdbdbd"
FIXED_TEXT = "the allocator's cache"
FIXED_TEXT_RAM = FIXED_TEXT + ", the interpreter and its libraries"
PARTIAL_TEXT = " (partial: the iteration did not finish)"  # after the title, when partial
TEXT_GROUPS = 10  # groups listed by the text report; the rest summed in one line
BAR_WIDTH = 32


def device_name(anatomy: Anatomy) -> str:
    """ "RAM" or "GPU memory (cuda:N)", as every other view names a memory."""
    return memory_name(anatomy.plot, anatomy.cuda_index)


def other_text(anatomy: Anatomy) -> str:
    return OTHER_TEXT_RAM if anatomy.device == "cpu" else OTHER_TEXT


def title(anatomy: Anatomy) -> str:
    """The one heading of an anatomy, wherever it is shown."""
    head = f"What fills the peak: iteration {anatomy.iteration}, {device_name(anatomy)}"
    if anatomy.peak_bytes is not None:
        head += f", peak {format_bytes(anatomy.peak_bytes)}"
    if anatomy.batch_size is not None:
        head += f", batch of {anatomy.batch_size:,}"
    return head


def part_bytes(group: ModuleGroup) -> list[int]:
    return [int(getattr(group, key)) for key, _, _, _ in PARTS]


def composition(anatomy: Anatomy) -> list[tuple[str, str, int]]:
    """The whole peak by part, (label, colour, bytes), in PARTS order then "other": what one
    bar of the peak shows before the modules."""
    totals = (
        anatomy.activations_bytes,
        anatomy.parameters_bytes,
        anatomy.gradients_bytes,
        anatomy.optimizer_state_bytes,
    )
    parts = [
        (label, color, value) for (_, label, color, _), value in zip(PARTS, totals, strict=True)
    ]
    if anatomy.other_bytes is not None:
        parts.append((OTHER_LABEL, OTHER_COLOR, anatomy.other_bytes))
    return parts


@dataclass(frozen=True)
class FitUnavailable:
    reason: str


def fit_for(profile: Profile, budget: int) -> Fit | FitUnavailable:
    """The fit of the main anatomy within `budget`, or why there is none."""
    anatomy = main_anatomy(profile)
    if anatomy is None:
        skipped = not_measured(profile)
        if skipped is not None:
            return FitUnavailable(f"the iteration was not measured: {skipped.reason}")
        return FitUnavailable(
            "no anatomy in this profile (no training iteration with autograd, "
            "`--anatomy off`, or recorded with a memsight before 0.9)"
        )
    if anatomy.batch_size is None:
        return FitUnavailable(
            "the batch size is unknown: the model's inputs do not share a first dimension"
        )
    if anatomy.peak_bytes is None:
        return FitUnavailable(f"no {device_name(anatomy)} sample around the measured iteration")
    found = fit(anatomy, budget)
    if found is None:
        return FitUnavailable("nothing to project from")
    return found


def composition_text(anatomy: Anatomy) -> str:
    """The whole peak by part in words: "activations saved for backward 37.07 MiB, …"."""
    return ", ".join(f"{label} {format_bytes(value)}" for label, _, value in composition(anatomy))


# -- JSON ----------------------------------------------------------------------------------------


def anatomy_json(profile: Profile) -> dict[str, Any] | None:
    """`report --json`'s "anatomy": the device that holds the most of the model; the others
    under "other_devices"."""
    found = anatomies(profile)
    if not found:
        return None
    main = _one_json(found[0])
    main["other_devices"] = [_one_json(a) for a in found[1:]]
    return main


def anatomy_skipped(profile: Profile) -> str | None:
    skipped = not_measured(profile)
    return None if skipped is None else skipped.reason


def _one_json(anatomy: Anatomy) -> dict[str, Any]:
    return {
        "iteration": anatomy.iteration,
        "device": anatomy.device,
        "modules": [
            {
                "path": m.path,
                "type": m.type,
                "activations_bytes": m.activations,
                "parameters_bytes": m.parameters,
                "gradients_bytes": m.gradients,
                "optimizer_state_bytes": m.optimizer_state,
            }
            for m in anatomy.modules
        ],
        "groups": [
            {
                "path": g.path,
                "activations_bytes": g.activations,
                "parameters_bytes": g.parameters,
                "gradients_bytes": g.gradients,
                "optimizer_state_bytes": g.optimizer_state,
            }
            for g in module_groups(anatomy)
        ],
        "other_bytes": anatomy.other_bytes,
        "peak_bytes": anatomy.peak_bytes,
        "peak_t": None if anatomy.peak_t is None else round(anatomy.peak_t, 4),
        "activations_bytes": anatomy.activations_bytes,
        "parameters_bytes": anatomy.parameters_bytes,
        "gradients_bytes": anatomy.gradients_bytes,
        "optimizer_state_bytes": anatomy.optimizer_state_bytes,
        "batch_size": anatomy.batch_size,
        "batch_bytes": anatomy.batch_bytes,
        "partial": anatomy.partial,
    }


def fit_json(found: Fit | FitUnavailable) -> dict[str, Any]:
    """`report --json --fit SIZE`'s "fit" (or {"unavailable": why})."""
    if isinstance(found, FitUnavailable):
        return {"unavailable": found.reason}
    p = found.projection
    return {
        "batch_size": p.batch_size,
        "budget_bytes": found.budget_bytes,
        "largest_batch_size": found.largest_batch_size,
        "projected_peak_bytes": {str(k): v for k, v in found.projected_peaks().items()},
        "device": p.anatomy.device,
        "measured_peak_bytes": p.peak_bytes,
        "per_sample_bytes": round(p.per_sample_bytes),
        "fixed_bytes": p.fixed_bytes,
        "with_changes": [
            {
                "change": change.name,
                "title": change.title,
                "saves_bytes": change.saves_bytes,
                "modules": list(change.modules),
                "largest_batch_size": largest,
            }
            for change, largest in found.changes
        ],
        "with_all_changes": found.combined,
        "malloc_kept_bytes": found.malloc_kept_bytes,
        "malloc_slack_bytes": p.slack_bytes if p.slack_bytes else None,
        "malloc_slack_projected_bytes": (
            {str(k): round(p.slack_bytes + p.slack_growth(k)) for k in found.sizes}
            if p.slack_bytes
            else None
        ),
        "projection": True,
    }


# -- text ----------------------------------------------------------------------------------------


def format_anatomy(profile: Profile) -> str:
    """The anatomy section of `memsight report` ("" when the profile has none)."""
    anatomy = main_anatomy(profile)
    if anatomy is None:
        reason = anatomy_skipped(profile)
        return "" if reason is None else f"What fills the peak: not measured: {reason}.\n"
    groups = module_groups(anatomy)
    shown, rest = groups[:TEXT_GROUPS], groups[TEXT_GROUPS:]
    largest = max([g.total for g in shown] + [1])
    width = max([len(g.label) for g in shown] + [len(OTHER_LABEL), 12])
    lines = [
        title(anatomy) + (PARTIAL_TEXT if anatomy.partial else ""),
        "  " + composition_text(anatomy),
        "  By module, largest first:",
    ]
    for group in shown:
        lines.append(
            f"  {group.label:<{width}}  {format_bytes(group.total):>10}  "
            + _bar(part_bytes(group), largest)
        )
    if rest:
        total = sum(g.total for g in rest)
        lines.append(f"  {f'{len(rest)} more':<{width}}  {format_bytes(total):>10}")
    other = anatomy.other_bytes
    if other is not None:
        lines.append(
            f"  {OTHER_LABEL:<{width}}  {format_bytes(other):>10}  ({other_text(anatomy)})"
        )
    lines.append("  " + "  ".join(f"{char} {label}" for _, label, _, char in PARTS))
    return "\n".join(lines) + "\n"


def _bar(parts: list[int], largest: int) -> str:
    out = ""
    for value, (_, _, _, char) in zip(parts, PARTS, strict=True):
        out += char * round(BAR_WIDTH * value / largest)
    return out


def format_fit(found: Fit | FitUnavailable) -> str:
    """`memsight report --fit SIZE`'s text."""
    if isinstance(found, FitUnavailable):
        return f"Will it fit: no projection ({found.reason}).\n"
    p = found.projection
    anatomy = p.anatomy
    budget = format_bytes(found.budget_bytes)
    lines = [
        f"Will it fit in {budget} of {device_name(anatomy)}? A projection from one measured "
        "iteration, not a measurement.",
        f"  Measured: a batch of {p.batch_size:,} at iteration {anatomy.iteration}, peak "
        f"{format_bytes(p.peak_bytes)}.",
        f"  Per sample: {format_bytes(p.per_sample_bytes)} (the activations saved for "
        f"backward, the batch, and the backward's working set); {_fixed_text(p)}.",
    ]
    if found.largest_batch_size:
        lines.append(f"  Largest batch that fits: {found.largest_batch_size:,}.")
    else:
        lines.append("  Not even a batch of 1 fits: the fixed part alone is over the budget.")
    for change, largest in found.changes:
        lines.append(
            f"  With {change.title}: {largest:,} (saves {format_bytes(change.saves_bytes)} at "
            f"a batch of {p.batch_size:,})."
        )
    if found.combined is not None:
        lines.append(f"  With all of these: {found.combined:,}.")
    peaks = ", ".join(
        f"{size:,}: {format_bytes(peak)}" for size, peak in found.projected_peaks().items()
    )
    lines.append(f"  Projected peak by batch size: {peaks}.")
    lines += _kept_lines(found)
    left_out = "memory that grows with the sequence length (this is for the batch size alone)"
    left_out += ", algorithms that change with the size (workspaces)"
    if p.slack_bytes:
        left_out += ", and how far malloc's slack strays from that scaling (run to run)"
    else:
        left_out = "an allocator that fragments more as tensors grow, " + left_out
    lines.append(f"  Left out: {left_out}.")
    return "\n".join(lines) + "\n"


def _fixed_text(p: Projection) -> str:
    """The fixed part in words: with the memory malloc kept apart where it is projected."""
    if p.slack_bytes:
        return (
            f"fixed: {format_bytes(p.fixed_bytes - p.slack_bytes)} (parameters, gradients, "
            "optimizer state, the interpreter and its libraries); and malloc's slack, which "
            "changes with the batch (below)"
        )
    cache = FIXED_TEXT_RAM if p.anatomy.device == "cpu" else FIXED_TEXT
    return f"fixed: {format_bytes(p.fixed_bytes)} (parameters, gradients, optimizer state, {cache})"


def _kept_lines(found: Fit) -> list[str]:
    """What malloc kept at the measured peak, and how the projection carries it."""
    kept = found.malloc_kept_bytes
    if not kept:
        return []
    line = (
        f"  Measured beside the peak: malloc kept {format_bytes(kept)} of freed memory in "
        "its heaps at most, which RSS holds though no tensor does."
    )
    p = found.projection
    if not p.slack_bytes:
        line += (
            " It is counted as fixed here; where it grows with the batch (the freed "
            "activations' room reused unevenly), a larger batch peaks higher than projected."
        )
        return [line]
    shown = found.largest_batch_size or max(found.sizes)
    line += (
        f" Its slack, {format_bytes(p.slack_bytes)} beyond the room of the iteration's own "
        "per-sample tensors (free between iterations, theirs again at the peak), is projected "
        "to change with what the heaps turn over each iteration: the per-sample tensors "
        f"under {MMAP_MAX_BYTES >> 20} MiB (glibc maps larger ones on their own and returns "
        "them when freed) and the gradients; "
        f"{format_bytes(p.slack_bytes + p.slack_growth(shown))} at a batch of {shown:,}."
    )
    return [line]


__all__ = [
    "PARTS",
    "FitUnavailable",
    "anatomy_json",
    "anatomy_skipped",
    "fit_for",
    "fit_json",
    "format_anatomy",
    "format_fit",
]
