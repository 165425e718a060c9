"""inference-without-no-grad: forwards that record a graph nobody uses (warning).

A forward pass with grad mode on and an output that requires grad keeps every intermediate
tensor the backward would need. Counted: such forwards that no backward went through, when
the model was in eval mode, or when the run had no backward at all (a pure inference script).
A train-mode forward of a model whose forwards are never linked to a backward in a run that
does have backwards is left out: that is a model whose loss comes from an output the hook did
not see, not an inference.
"""

from __future__ import annotations

import numpy as np

from profiler import protocol
from profiler.diagnosis.config import DiagnosisConfig
from profiler.diagnosis.finding import Evidence, Finding
from profiler.diagnosis.signals import (
    backward_count,
    forward_rows,
    linked_forward_ids,
    step_at,
)
from profiler.profile.model import Profile

RULE_ID = "inference-without-no-grad"
EXPLANATION = (
    "These forward passes ran with autograd recording, so every activation a backward pass "
    "would need was kept until the output was dropped, and no backward pass ever came. "
    "model.eval() only changes layers such as dropout and batch norm; it does not stop "
    "autograd. Under torch.no_grad() or torch.inference_mode() the same forward keeps "
    "nothing, using a fraction of the memory and running faster."
)


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
        modules_with_backward = np.unique(rows["module"][linked])
        seen_module = np.isin(rows["module"], modules_with_backward)
        candidate &= ~training | seen_module
    count = int(candidate.sum())
    if count < config.inference_min_forwards:
        return []
    t, end, module = rows["t"][candidate], rows["end"][candidate], rows["module"][candidate]
    names = sorted({profile.name(m) for m in np.unique(module)})
    eval_count = int((candidate & ~training).sum())
    mode = (
        "in eval mode"
        if eval_count == count
        else "in train mode"
        if eval_count == 0
        else f"({eval_count} in eval mode)"
    )
    text = (
        f"{count} forward passes of {', '.join(names)} {mode} with gradient tracking on, "
        "none followed by a backward pass"
    )
    first_step, last_step = step_at(profile, float(t[0])), step_at(profile, float(end[-1]))
    return [
        Finding(
            RULE_ID,
            "warning",
            "Inference runs with autograd on: wrap it in torch.no_grad()",
            EXPLANATION,
            Evidence(
                text,
                float(t[0]),
                float(end[-1]),
                None,
                (first_step, last_step) if first_step is not None and last_step else None,
                {
                    "forwards": count,
                    "eval_mode_forwards": eval_count,
                    "modules": ", ".join(names),
                },
            ),
            ("no-grad-inference",),
        )
    ]
