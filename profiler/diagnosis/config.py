"""Every threshold the diagnosis rules use, in one frozen object.

Defaults are chosen so that a clean training loop (DataLoader workers, periodic evaluation,
allocator warm-up, a cache that fills once) stays quiet while the documented problems fire on
the example scripts in examples/. docs/rules.md explains each number.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024**2
GiB = 1024**3


@dataclass(frozen=True)
class DiagnosisConfig:
    # near-capacity / out-of-memory: "near the limit" is this fraction of the capacity.
    near_capacity_fraction: float = 0.90
    # A SIGKILL counts as the OOM killer's when memory was this close to the limit in the
    # last seconds of the run.
    oom_kill_fraction: float = 0.85
    oom_kill_window_s: float = 2.0
    # The evidence of such a kill starts where the tree first reached this share of its peak.
    oom_kill_evidence_from_share: float = 0.5
    # A CUDA OOM with this much reserved-but-unallocated memory puts the allocator settings
    # (expandable segments) first among its fixes: the memory was there, only fragmented.
    oom_fragmented_min_bytes: int = 512 * MiB
    # near-capacity: when the DataLoader workers hold this share of the tree's peak, the
    # workers' fix comes first.
    near_capacity_workers_share: float = 0.3

    # growth-per-iteration
    growth_min_iterations: int = 20
    growth_warmup_fraction: float = 0.1  # leading share of steps ignored (allocator warm-up)
    growth_warmup_min_steps: int = 3
    growth_min_bytes_ram: int = 64 * MiB  # fitted growth over the run, after warm-up
    growth_min_bytes_gpu: int = 32 * MiB
    growth_min_relative: float = 0.05  # ... and at least this share of the starting level
    growth_min_r2: float = 0.8
    # Still growing at the end: the last part's slope is at least this share of the whole
    # run's. A cache that fills once, then stays, fails this.
    growth_tail_fraction: float = 0.4
    growth_tail_share: float = 0.5

    # inference-without-no-grad
    inference_min_forwards: int = 3

    # missing-zero-grad: this many optimizer steps in a row on uncleared gradients; or every
    # step after the first in a run of at least zero_grad_short_run_min_steps (a short run
    # that never clears is still the bug).
    zero_grad_min_uncleared_run: int = 8
    zero_grad_short_run_min_steps: int = 3

    # activations-dominate: the memory that comes and goes within an iteration is this many
    # times parameters + gradients + optimizer state, and at least activations_min_bytes.
    activations_ratio: float = 3.0
    activations_min_bytes: int = 256 * MiB

    # dataset-on-device
    dataset_min_bytes: int = 256 * MiB
    dataset_min_share_of_device: float = 0.05
    dataset_stays_fraction: float = 0.9  # allocated never drops below this share of it

    # fragmentation: reserved but unallocated at the peak or at an OOM
    fragmentation_min_bytes: int = 512 * MiB
    fragmentation_min_share: float = 0.25  # of reserved

    # dataloader-worker-growth: per worker, over its life after the first seconds
    worker_growth_min_bytes: int = 64 * MiB
    worker_growth_min_r2: float = 0.7
    worker_warmup_s: float = 0.5
    worker_min_samples: int = 4

    # non-pytorch-gpu-memory: device memory used beyond PyTorch's reserved pool
    non_pytorch_min_bytes: int = 2 * GiB
    non_pytorch_min_share: float = 0.10  # of the device's capacity


DEFAULT_CONFIG = DiagnosisConfig()
