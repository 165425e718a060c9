"""missing-zero-grad: optimizer steps on gradients never cleared (warning).

The agent records, for every step, how gradients were cleared since the previous one
(zero_grad, gradients replaced, first step, or not at all). Gradient accumulation clears once
per optimizer step, or at least periodically; a long unbroken run of uncleared steps means
each step adds to every earlier step's gradients.
"""

from __future__ import annotations

import numpy as np

from memsight.profiler import protocol
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.profile.model import Profile

RULE_ID = "missing-zero-grad"
EXPLANATION = (
    "backward() adds to the .grad already stored on each parameter; it never overwrites it. "
    "Without zero_grad() between optimizer steps, every step applies the sum of all gradients "
    "since the start, so updates grow and training goes wrong even though memory looks fine. "
    "Accumulating on purpose over a few micro-batches is fine when the gradients are cleared "
    "after each optimizer step."
)


def _longest_run(mask: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True, the first of the longest; (0, 0) for none.
    By its edges, not a loop over the steps (a day-long run has 864,000)."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(starts):
        return 0, 0
    longest = int(np.argmax(ends - starts))
    return int(starts[longest]), int(ends[longest] - starts[longest])


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    steps = profile.steps
    if steps is None:
        return []
    uncleared = steps["cleared"] == protocol.CLEARED_NONE
    start, length = _longest_run(uncleared)
    every_later_step = (
        length == len(uncleared) - 1
        and length >= config.zero_grad_short_run_min_steps
        and not uncleared[0]
    )
    if length < config.zero_grad_min_uncleared_run and not every_later_step:
        return []
    first, last = int(steps["index"][start]), int(steps["index"][start + length - 1])
    total = int(uncleared.sum())
    text = (
        f"optimizer steps {first} to {last} ({length} in a row) ran with gradients never cleared "
        f"since the step before; {total} of {len(uncleared)} steps in all"
    )
    return [
        Finding(
            RULE_ID,
            "warning",
            "Gradients are never cleared between optimizer steps",
            EXPLANATION,
            Evidence(
                text,
                float(steps.t[start]),
                float(steps["end"][start + length - 1]),
                None,
                (first, last),
                {"uncleared_in_a_row": length, "uncleared_steps": total, "steps": len(uncleared)},
            ),
            ("zero-grad-set-to-none", "gradient-accumulation"),
        )
    ]
