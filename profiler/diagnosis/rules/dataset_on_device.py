"""dataset-on-device: a large GPU allocation made before training stays all run (warning).

Before the first training forward, allocated GPU memory beyond the parameters is data put on
the device up front: usually the whole dataset moved with .to("cuda"). If allocated memory
never falls back below it afterwards, it was held for the whole run. Needs the parameter
breakdown, so it applies to training runs (optimizer steps seen).
"""

from __future__ import annotations

import numpy as np

from memsight.profiler.diagnosis.activations import first_training_forward
from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.signals import breakdown, device_total, gpu_devices, gpu_rows
from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes

RULE_ID = "dataset-on-device"
EXPLANATION = (
    "A large block of GPU memory was allocated before training began and held until the end. "
    "When that is the dataset, every batch the model never looks at again still takes device "
    "memory that activations could use. Keeping the data in (pinned) CPU memory and moving "
    "one batch at a time costs little when the copy overlaps compute."
)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    start = first_training_forward(profile)
    state = breakdown(profile, "gpu")
    if start is None or state is None:
        return []
    out = []
    for device in gpu_devices(profile):
        rows = gpu_rows(profile, device)
        if rows is None:
            continue
        t, allocated = rows.t, rows["allocated"]
        before = int(np.searchsorted(t, start, side="left")) - 1
        after = t >= start
        if before < 0 or not after.any():
            continue
        level = int(allocated[before])
        extra = level - state["params"]
        total = device_total(profile, device) or 0
        if extra < max(config.dataset_min_bytes, config.dataset_min_share_of_device * total):
            continue
        lowest = int(allocated[after].min())
        if lowest - state["params"] < config.dataset_stays_fraction * extra:
            continue
        since = np.flatnonzero(allocated >= level * config.dataset_stays_fraction)
        out.append(
            Finding(
                RULE_ID,
                "warning",
                f"{format_bytes(extra)} put on cuda:{device} before training stays all run",
                EXPLANATION,
                Evidence(
                    f"{format_bytes(level)} allocated on cuda:{device} before the first "
                    f"forward, of which {format_bytes(state['params'])} are parameters; "
                    f"allocated never fell below {format_bytes(lowest)} afterwards",
                    float(t[since[0]]) if len(since) else 0.0,
                    float(t[-1]),
                    "gpu",
                    None,
                    {
                        "device": device,
                        "before_training_bytes": level,
                        "params_bytes": state["params"],
                        "extra_bytes": extra,
                        "lowest_after_bytes": lowest,
                    },
                ),
                ("dataset-on-cpu-pinned",),
            )
        )
    return out
