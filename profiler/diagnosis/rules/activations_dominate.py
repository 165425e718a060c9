"""activations-dominate: the training peak is several times the model's own state (info).

Estimate, per iteration: the highest memory between two optimizer steps, less the level read
at the first of them (which holds the parameters, kept gradients, optimizer state and
anything else that persists, leaks included), less the gradients and optimizer state once
more (they may be rebuilt within the iteration). The first iteration is measured from the
level just before the first training forward. What remains lives only during forward and
backward: the activations saved for backward and the batch. The largest iteration counts.
Done for RAM when the parameters are on the CPU, and for each CUDA device holding parameters.
"""

from __future__ import annotations

from typing import Any

from memsight.profiler.diagnosis.activations import ActivationEstimate, dominates, estimates
from memsight.profiler.diagnosis.anatomy import anatomy_for
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.fit import savings
from memsight.profiler.diagnosis.signals import step_at
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import memory_name
from memsight.profiler.units import format_bytes

RULE_ID = "activations-dominate"
EXPLANATION = (
    "Most of the memory at the peak is not the model (parameters, gradients, optimizer state) "
    "but what forward passes keep for backward: the activations, which grow with batch size, "
    "sequence length and depth. Fixes that cut activations help most here; cutting the "
    "model's own state would barely move the peak."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    return [_finding(profile, e) for e in estimates(profile) if dominates(e, config)]


def _finding(profile: Profile, e: ActivationEstimate) -> Finding:
    where = memory_name(e.plot, e.device)
    ratio = e.activations / max(e.model_bytes, 1)
    text = (
        f"{where} peak {format_bytes(e.peak)}: about {format_bytes(e.activations)} of "
        f"activations against {format_bytes(e.model_bytes)} of parameters, gradients and "
        f"optimizer state ({ratio:.1f} times)"
    )
    facts: dict[str, Any] = {
        "peak_bytes": e.peak,
        "activation_bytes": e.activations,
        "params_bytes": e.state["params"],
        "grads_bytes": e.state["grads"],
        "optimizer_state_bytes": e.state["state"],
        "ratio": round(ratio, 2),
        "device": e.device,
    }
    fixes: tuple[str, ...] = (
        "activation-checkpointing",
        "mixed-precision",
        "smaller-batch",
        "gradient-accumulation",
    )
    anatomy = anatomy_for(profile, e.plot, e.device)
    saved = savings(anatomy) if anatomy is not None else None
    if saved is not None:
        # Measured by module on one iteration: which modules, and what each fix would save.
        text += "; " + saved.text()
        facts.update(saved.facts())
        fixes = saved.fixes(fixes)
    steps = profile.steps
    done = step_at(profile, e.peak_t) or 0
    start, end = e.start, e.peak_t
    if steps is not None and 0 < done < len(steps):
        start, end = float(steps["end"][done - 1]), float(steps["end"][done])
    return Finding(
        RULE_ID,
        "info",
        f"Activations take most of the {'RAM' if e.plot == 'ram' else 'GPU memory'} at the peak",
        EXPLANATION,
        Evidence(
            text,
            start,
            end,
            "ram" if e.plot == "ram" else "gpu",
            (done, done + 1) if done else None,
            facts,
        ),
        fixes,
    )
