"""no-mixed-precision: CUDA training entirely in fp32 while activations dominate (info).

Fires with activations-dominate on a CUDA device when no training forward ran under CUDA
autocast. Limit: a model converted to half or bfloat16 by hand (model.half()) without autocast
is not seen as mixed precision.
"""

from __future__ import annotations

from memsight.profiler import protocol
from memsight.profiler.diagnosis.activations import dominates, estimates
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.signals import forward_rows
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes

RULE_ID = "no-mixed-precision"
EXPLANATION = (
    "Every training forward ran in float32, and activations are most of the GPU memory. Under "
    "autocast most activations are kept in 16-bit (bfloat16 or float16), roughly halving them, "
    "and matrix multiplies run on tensor cores."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    rows = forward_rows(profile)
    if rows is None:
        return []
    flags = rows["flags"]
    training = (flags & protocol.FLAG_TRAINING) != 0
    if ((flags & protocol.FLAG_AUTOCAST_CUDA) != 0)[training].any():
        return []
    out = []
    for e in estimates(profile):
        if e.plot != "gpu" or not dominates(e, config):
            continue
        out.append(
            Finding(
                RULE_ID,
                "info",
                f"Training on cuda:{e.device} runs entirely in float32",
                EXPLANATION,
                Evidence(
                    f"{int(training.sum())} training forwards, none under autocast; about "
                    f"{format_bytes(e.activations)} of activations at the peak",
                    e.start,
                    e.peak_t,
                    "gpu",
                    None,
                    {"training_forwards": int(training.sum()), "activation_bytes": e.activations},
                ),
                ("mixed-precision",),
            )
        )
    return out
