"""Will it fit: the peak projected against batch size from one measured iteration.

The anatomy (anatomy.py) splits the measured iteration's peak into a part that grows with the
batch and a part that does not:

- per sample: what the forward saved for backward (activations) and the batch itself, plus
  the backward's working set, taken as twice the largest saved tensor (the gradient of that
  activation and of its input exist together while the backward passes it); all of it is
  proportional to the batch size;
- fixed: the rest of the peak (parameters, gradients, optimizer state, the interpreter and
  libraries, the allocator's cache and what its fragmentation costs at this batch size).

projected_peak(b) = fixed + per_sample * b, plus on CPU the growth of what glibc's malloc
keeps (below). It leaves out attention whose memory grows with the sequence (the projection
is for the batch size at a fixed sequence length) and a framework that changes its algorithm
with the size (cuDNN workspaces). benchmarks/fit_projection.py checks it against real runs.

On CPU the peak's RSS also holds freed memory that malloc keeps in its heaps, and it does not
stay fixed as the batch grows: a transformer's grew five times for a batch four times as
large, a CNN's shrank. The most the heaps held free around the measured iteration
(anatomy.malloc_kept) is read between iterations, when the iteration's own per-sample storages
are free too; at the peak that room holds them again, and the per-sample part counts it. What
malloc keeps beyond it (the slack) is what the peak holds though no tensor does. glibc serves a
request under its mmap threshold from its heaps, where freed memory stays, and maps a larger
one on its own, returned when freed; the threshold rises with the largest block freed, up to
MMAP_MAX_BYTES. So the slack is taken to scale with what the heaps turn over each iteration:
the per-sample storages (activations, the backward's working set, the batch) that are under
MMAP_MAX_BYTES at the batch size projected, and the gradients under it (freed and made again
every iteration by zero_grad's default, set_to_none). A change (below) is taken to leave the
slack as it is without it.

The suggested changes, each measured from the anatomy:
- checkpointing (torch.utils.checkpoint) of the repeated blocks, or else of the top-level
  modules, with the largest activations: each then keeps only its input until its backward;
- bf16 autocast: float32 activations saved in bfloat16, half their bytes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from memsight.profiler.diagnosis.anatomy import Anatomy, ModuleBytes
from memsight.profiler.units import format_bytes

# Batch sizes shown in the projection: powers of two up to past the largest that fits.
MAX_PROJECTED_SIZES = 12
# A block to checkpoint must save at least this share of the activations (one of several).
CHECKPOINT_MIN_SHARE = 0.02
# A change is suggested when it saves at least this share of the activations.
CHANGE_MIN_SHARE = 0.1
# glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, 4 * 1024 * 1024 *
# sizeof(long)): requests from this size up are always mapped on their own.
MMAP_MAX_BYTES = 32 * 1024 * 1024
_INDEXED = re.compile(r"^(.*?\.?\d+)(?:\.|$)")


@dataclass(frozen=True)
class ModuleGroup:
    """Modules shown together: a repeated block ("blocks.3") or a top-level module ("lm_head"),
    with everything under it."""

    path: str
    type: str
    activations: int
    parameters: int
    gradients: int
    optimizer_state: int
    activations_fp32: int
    input_bytes: int  # the group's own module's input, summed over its calls
    repeated: bool  # one of a list of blocks (its path ends in an index)

    @property
    def total(self) -> int:
        return self.activations + self.parameters + self.gradients + self.optimizer_state

    @property
    def label(self) -> str:
        """The path, with the class where the path is only a position ("blocks.3 (Block)",
        "2 (Linear)"); the root by its class ("(GPT)")."""
        if not self.path:
            return f"({self.type})"
        if self.type and self.path.rsplit(".", 1)[-1].isdigit():
            return f"{self.path} ({self.type})"
        return self.path


def group_of(path: str) -> str:
    """The group a module's path belongs to: up to its first index ("blocks.3.attn.c_attn"
    -> "blocks.3"), else its first name ("lm_head.weight" -> "lm_head"); "" stays the root."""
    if not path or path.startswith("("):
        return path
    match = _INDEXED.match(path)
    if match is not None:
        return match.group(1)
    return path.split(".", 1)[0]


def module_groups(anatomy: Anatomy) -> list[ModuleGroup]:
    """The anatomy by group, largest first: what people read at a glance."""
    sums: dict[str, list[int]] = {}
    heads: dict[str, ModuleBytes] = {}
    for module in anatomy.modules:
        key = group_of(module.path)
        row = sums.setdefault(key, [0, 0, 0, 0, 0])
        row[0] += module.activations
        row[1] += module.parameters
        row[2] += module.gradients
        row[3] += module.optimizer_state
        row[4] += module.activations_fp32
        if module.path == key:
            heads[key] = module
    groups = []
    for key, (act, params, grads, state, fp32) in sums.items():
        if not act + params + grads + state:
            continue  # a container with nothing of its own or below it (its input only)
        head = heads.get(key)
        groups.append(
            ModuleGroup(
                path=key,
                type=head.type if head is not None else "",
                activations=act,
                parameters=params,
                gradients=grads,
                optimizer_state=state,
                activations_fp32=fp32,
                input_bytes=head.input_bytes if head is not None else 0,
                repeated=bool(re.search(r"\d$", key)) and not key.isdigit(),
            )
        )
    # Equal groups (a model's identical blocks) in their model's order: blocks.2 before blocks.10.
    groups.sort(key=lambda g: (-g.total, _natural(g.path)))
    return groups


@dataclass(frozen=True)
class Change:
    """A suggested change and what it saves per iteration at the measured batch size."""

    name: str  # "checkpoint", "bf16_autocast"
    title: str  # "checkpoint blocks.0 … blocks.11 (torch.utils.checkpoint)"
    saves_bytes: int
    modules: tuple[str, ...]


def checkpoint_change(anatomy: Anatomy) -> Change | None:
    """Checkpointing the repeated blocks (else the top-level modules) that save the most:
    each keeps only its input until its backward, which recomputes the rest."""
    groups = [g for g in module_groups(anatomy) if g.path and not g.path.startswith("(")]
    total = anatomy.activations_bytes
    if not total:
        return None
    blocks = [g for g in groups if g.repeated]
    chosen = blocks if len(blocks) >= 2 else [g for g in groups if "." not in g.path]
    chosen = [g for g in chosen if g.activations >= CHECKPOINT_MIN_SHARE * total]
    saves = sum(max(0, g.activations - g.input_bytes) for g in chosen)
    if len(chosen) < 2 or saves < CHANGE_MIN_SHARE * total:
        return None  # one module checkpointed whole keeps as much for its recomputation
    names = tuple(g.path for g in sorted(chosen, key=lambda g: _natural(g.path)))
    shown = names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}"
    return Change(
        "checkpoint",
        f"checkpoint {shown} (torch.utils.checkpoint, {len(names)} modules)",
        saves,
        names,
    )


def bf16_change(anatomy: Anatomy) -> Change | None:
    """bf16 autocast: the float32 activations saved in half the bytes."""
    saves = anatomy.activations_fp32_bytes // 2
    if not saves or saves < CHANGE_MIN_SHARE * anatomy.activations_bytes:
        return None
    return Change("bf16_autocast", "bf16 autocast (torch.autocast)", saves, ())


def _natural(path: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


@dataclass(frozen=True)
class Projection:
    """The peak against batch size, from the measured iteration."""

    anatomy: Anatomy
    batch_size: int
    peak_bytes: int  # measured at batch_size
    per_sample_bytes: float
    fixed_bytes: int
    backward_bytes: int  # of the per-sample part at batch_size: the backward's working set
    # On CPU (else 0 and empty): the slack (what malloc kept beyond the room of the measured
    # iteration's per-sample storages, part of fixed_bytes there), those storages at
    # batch_size as (bytes, storages), and the gradients' bytes under MMAP_MAX_BYTES. See the
    # module's docstring.
    slack_bytes: int = 0
    heap_sizes: tuple[tuple[int, int], ...] = ()
    gradient_turnover_bytes: int = 0

    def projected_peak(self, batch_size: int, saves_bytes: int = 0) -> int:
        """The peak at `batch_size`, less what a change saves at the measured size (scaled)."""
        per_sample = self.per_sample_bytes - saves_bytes / self.batch_size
        return round(self.fixed_bytes + per_sample * batch_size + self.slack_growth(batch_size))

    def heap_turnover(self, batch_size: int) -> float:
        """What malloc's heaps turn over per iteration at `batch_size`: the per-sample storages
        still under MMAP_MAX_BYTES at that size, and the gradients."""
        scale = batch_size / self.batch_size
        turnover = sum(
            size * n * scale for size, n in self.heap_sizes if size * scale < MMAP_MAX_BYTES
        )
        return turnover + self.gradient_turnover_bytes

    @cached_property
    def _measured_turnover(self) -> float:
        return self.heap_turnover(self.batch_size)

    def slack_growth(self, batch_size: int) -> float:
        """How much more (or less) slack malloc keeps at `batch_size` than at the measured
        size."""
        measured = self._measured_turnover
        if not self.slack_bytes or measured <= 0:
            return 0.0
        return self.slack_bytes * (self.heap_turnover(batch_size) / measured - 1)

    def largest_batch_size(self, budget: int, saves_bytes: int = 0) -> int:
        """The largest batch whose projected peak is within `budget` (0: not even one)."""
        per_sample = self.per_sample_bytes - saves_bytes / self.batch_size
        if per_sample <= 0:
            return self.batch_size if self.projected_peak(1, saves_bytes) <= budget else 0
        size = max(
            (self._largest_in(part, per_sample, budget) for part in self._parts()), default=0
        )
        while size > 0 and self.projected_peak(size, saves_bytes) > budget:
            size -= 1  # rounding
        return size

    def _parts(self) -> list[tuple[int, float, float]]:
        """The batch sizes as ranges over which the same storages stay in the heaps, each as
        (first size, last size or inf, heap turnover per sample in it)."""
        edges = sorted(
            {math.ceil(MMAP_MAX_BYTES * self.batch_size / size) for size, _ in self.heap_sizes}
        )
        starts = [1, *(e for e in edges if e > 1)]
        parts = []
        for i, first in enumerate(starts):
            last = starts[i + 1] - 1 if i + 1 < len(starts) else math.inf
            # Within the range the storages' turnover is proportional to the size.
            per_sample = (self.heap_turnover(first) - self.gradient_turnover_bytes) / first
            parts.append((first, last, per_sample))
        return parts

    def _largest_in(self, part: tuple[int, float, float], per_sample: float, budget: int) -> int:
        """The largest size in `part` whose projected peak is within `budget`, else 0: there
        the peak is linear in the size."""
        first, last, heap_per_sample = part
        measured = self._measured_turnover
        base, slope = float(self.fixed_bytes), per_sample
        if self.slack_bytes and measured > 0:
            base += self.slack_bytes * (self.gradient_turnover_bytes / measured - 1)
            slope += self.slack_bytes * heap_per_sample / measured
        size = math.floor((budget - base) / slope)
        if size < first:
            return 0
        return int(min(size, last))


def projection(anatomy: Anatomy) -> Projection | None:
    """None without a batch size or a peak: nothing to scale from."""
    size = anatomy.batch_size
    peak = anatomy.peak_bytes
    if size is None or size < 1 or peak is None:
        return None
    backward = 2 * anatomy.largest_saved_bytes
    per_batch = anatomy.activations_bytes + anatomy.batch_bytes + backward
    per_batch = min(per_batch, peak)
    # The slack: the most the heaps held free, less the room of the iteration's own
    # per-sample storages (free when it was read, theirs again at the peak).
    slack = max(0, (anatomy.malloc_kept_bytes or 0) - round(per_batch))
    heap: tuple[tuple[int, int], ...] = ()
    gradients = 0
    if slack and anatomy.saved_sizes:
        heap = (*anatomy.saved_sizes, (anatomy.largest_saved_bytes, 2))
        if anatomy.batch_bytes:
            heap += ((anatomy.batch_bytes, 1),)
        gradients = sum(s * n for s, n in anatomy.gradient_sizes if s < MMAP_MAX_BYTES)
    return Projection(
        anatomy=anatomy,
        batch_size=size,
        peak_bytes=peak,
        per_sample_bytes=per_batch / size,
        fixed_bytes=peak - per_batch,
        backward_bytes=backward,
        slack_bytes=slack if heap else 0,
        heap_sizes=heap,
        gradient_turnover_bytes=gradients,
    )


@dataclass(frozen=True)
class Fit:
    """`report --fit SIZE`: the largest batch that fits, with and without the changes."""

    projection: Projection
    budget_bytes: int
    largest_batch_size: int
    changes: tuple[tuple[Change, int], ...]  # (change, largest batch size with it)
    combined: int | None  # the largest batch with every change, when there are several
    sizes: tuple[int, ...]  # the batch sizes projected

    @property
    def malloc_kept_bytes(self) -> int | None:
        """On CPU: freed memory malloc kept around the measured peak (anatomy.malloc_kept),
        whose slack the projection scales; None elsewhere."""
        return self.projection.anatomy.malloc_kept_bytes

    def projected_peaks(self) -> dict[int, int]:
        return {size: self.projection.projected_peak(size) for size in self.sizes}


def fit(anatomy: Anatomy, budget: int) -> Fit | None:
    found = projection(anatomy)
    if found is None:
        return None
    largest = found.largest_batch_size(budget)
    changes = [c for c in (checkpoint_change(anatomy), bf16_change(anatomy)) if c is not None]
    with_changes = tuple((c, found.largest_batch_size(budget, c.saves_bytes)) for c in changes)
    combined = None
    if len(changes) > 1:
        # bf16 halves what checkpointing leaves of the float32 activations.
        checkpointed = changes[0].saves_bytes if changes[0].name == "checkpoint" else 0
        kept_fp32 = max(0, anatomy.activations_fp32_bytes - checkpointed)
        combined = found.largest_batch_size(budget, checkpointed + kept_fp32 // 2)
    return Fit(
        projection=found,
        budget_bytes=budget,
        largest_batch_size=largest,
        changes=with_changes,
        combined=combined,
        sizes=_sizes(found.batch_size, largest),
    )


def _sizes(measured: int, largest: int) -> tuple[int, ...]:
    """Powers of two around the measured size up to past the largest that fits, the measured
    size and the largest among them."""
    sizes = {measured}
    if largest > 0:
        sizes.add(largest)
    power = 1
    while power <= max(largest, measured) * 2 and len(sizes) < MAX_PROJECTED_SIZES:
        if power >= measured // 4:
            sizes.add(power)
        power *= 2
    return tuple(sorted(sizes))


# -- what the findings say ---------------------------------------------------------------------

# The change a fix in resources/fixes/ stands for: activations-dominate and out-of-memory
# order those fixes by what each saves, as measured.
FIX_OF_CHANGE = {
    "checkpoint": "activation-checkpointing",
    "bf16_autocast": "mixed-precision",
    "half_batch": "smaller-batch",
}
LARGEST_SHOWN = 3  # module groups a finding names


@dataclass(frozen=True)
class Savings:
    """What a finding says from the anatomy: the groups with the largest activations and
    what each change would save at the measured batch size, largest first."""

    anatomy: Anatomy
    largest: tuple[ModuleGroup, ...]
    changes: tuple[tuple[str, str, int], ...]  # (change name, words, bytes saved)

    def text(self) -> str:
        named = ", ".join(f"{g.label} {format_bytes(g.activations)}" for g in self.largest)
        out = f"the largest activations (iteration {self.anatomy.iteration}): {named}"
        if self.changes:
            out += "; " + ", ".join(
                f"{words} would save {format_bytes(saved)}" for _, words, saved in self.changes
            )
        return out

    def facts(self) -> dict[str, object]:
        return {
            "largest_activations": [
                {"module": g.path, "activations_bytes": g.activations} for g in self.largest
            ],
            "savings": [{"change": name, "saves_bytes": saved} for name, _, saved in self.changes],
        }

    def fixes(self, fixes: tuple[str, ...]) -> tuple[str, ...]:
        """`fixes` with those of the measured changes first, the largest saving first."""
        first = [FIX_OF_CHANGE[name] for name, _, _ in self.changes if name in FIX_OF_CHANGE]
        first = [f for f in first if f in fixes]
        return (*first, *[f for f in fixes if f not in first])


def savings(anatomy: Anatomy) -> Savings | None:
    """None when the anatomy saw no activations."""
    groups = [g for g in module_groups(anatomy) if g.activations > 0]
    if not groups:
        return None
    groups.sort(key=lambda g: (-g.activations, _natural(g.path)))
    changes: list[tuple[str, str, int]] = []
    checkpoint = checkpoint_change(anatomy)
    if checkpoint is not None:
        changes.append(
            ("checkpoint", f"checkpointing {_blocks(checkpoint)}", checkpoint.saves_bytes)
        )
    bf16 = bf16_change(anatomy)
    if bf16 is not None:
        changes.append(("bf16_autocast", "bf16 autocast", bf16.saves_bytes))
    found = projection(anatomy)
    if found is not None and found.batch_size >= 2:
        half = found.batch_size // 2
        saved = found.peak_bytes - found.projected_peak(half)
        if saved > 0:
            changes.append(
                ("half_batch", f"a batch of {half:,} instead of {found.batch_size:,}", saved)
            )
    changes.sort(key=lambda c: -c[2])
    return Savings(anatomy, tuple(groups[:LARGEST_SHOWN]), tuple(changes))


def _blocks(change: Change) -> str:
    names = change.modules
    return names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}"
