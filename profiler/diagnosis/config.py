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
    # A holder in the census taken at an OOM is named when it keeps at least this much.
    oom_holder_min_bytes: int = 1 * MiB
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
    # RAM levels that fail the line or still-growing test are judged again on malloc's live
    # allocations per iteration. Those are read exactly between iterations, with none of an
    # iteration's temporaries in them, so their floor is lower than RSS's.
    #
    # Kept tensors pin holes between freed temporaries: Lightning keeping 0.25 MiB of output a
    # step climbed RSS by 63-114 MiB over 86 steps in twelve runs, and in some RSS stood
    # still for the last epoch as malloc reused those holes; its live allocations climbed
    # 19.6-22.2 MiB in a straight line in every run.
    #
    # Both the live growth and RSS's rise over the same iterations must pass this floor.
    growth_min_bytes_live: int = 12 * MiB
    # RAM that climbs because the C allocator keeps freed memory is not a leak (the agent's
    # heap table, from glibc's mallinfo2): allocator-retention (info) replaces the warning
    # when live malloc allocations did not grow steadily (a line through the readings taken
    # between iterations, where the span has at least heap_slices of them, else through the
    # floors of heap_slices equal slices of the span, rose less than heap_live_min_bytes, or
    # fits with r² below heap_live_min_r2), the bytes malloc keeps free grew by at least
    # heap_retention_min_share of the climb, and the rest of the climb fails the size tests.
    heap_slices: int = 5
    heap_live_min_bytes: int = 512 * 1024
    heap_live_min_r2: float = 0.8
    heap_retention_min_share: float = 0.5

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
    worker_warmup_s: float = 0.5
    worker_min_samples: int = 4

    # non-pytorch-gpu-memory: device memory used beyond PyTorch's reserved pool
    non_pytorch_min_bytes: int = 2 * GiB
    non_pytorch_min_share: float = 0.10  # of the device's capacity

    # -- honest verdicts: run-failed, too-short-to-judge, fixes ordered by the OOM's evidence --
    # out-of-memory: one request of at least this share of the memory it failed on (the CUDA
    # device's total, or the RAM capacity), outside the optimizer step, means a single input is
    # too large: the fixes about the input's size and activation checkpointing come before a
    # smaller batch.
    oom_single_request_share: float = 0.25
    # too-short-to-judge: a run with fewer steps than growth_min_iterations is reported when
    # memory at iteration boundaries rose by the growth rule's own size thresholds
    # (growth_min_bytes_ram / _gpu, growth_min_relative) across at least this many steps after
    # the warm-up the growth rule leaves out.
    too_short_min_measured: int = 2

    # -- every loop shape: iterations without torch.optim, growth over time, inference cost --
    # growth-per-iteration, loops without optimizer steps: levels between iterations are the
    # floor of the RAM / GPU samples; where samples are sparser than iterations, one floor per
    # group of consecutive iterations holding at least this many samples.
    growth_samples_per_level: int = 3
    # growth-per-iteration, runs with no iterations at all (tensor code, no module): a line
    # fitted to the floor of each of growth_time_slices equal slices of the run after torch
    # was imported, leaving out the first growth_warmup_fraction of that time (at least
    # growth_time_warmup_min_s). Judged only over at least growth_time_min_s, with r² at least
    # growth_time_min_r2; the size and still-growing tests are the per-iteration ones
    # (growth_min_bytes_ram / _gpu, growth_min_relative, growth_tail_fraction / _share).
    growth_time_min_s: float = 5.0
    growth_time_warmup_min_s: float = 1.0
    growth_time_slices: int = 50
    growth_time_min_r2: float = 0.9
    # ... ending at the script's end (span.py). Only without that mark (a killed run, an older
    # profile): ending before the first slice within the run's last growth_time_teardown_s
    # that is lower than the one before, since exiting frees what the script kept.
    growth_time_teardown_s: float = 1.0
    # inference-without-no-grad: the memory one batch's forwards raised above the level before
    # them (less what the same modules' forwards under no_grad raised), at its largest, is the
    # cost of the graph. Measured on at least inference_cost_min_batches batches and below
    # inference_negligible_bytes, the finding is info rather than a warning.
    inference_negligible_bytes: int = 32 * MiB
    inference_cost_min_batches: int = 3

    # -- dataloader-worker-growth: DataLoader workers only, rise to a plateau or steady growth --
    # Judged per worker life from when the recorder saw it become a DataLoader worker (its
    # process named pt_data_worker). Its USS is smoothed by a running median of
    # worker_smooth_samples samples; the first smoothed value is its first level, the highest
    # its plateau. The rise (plateau - first level, at least worker_growth_min_bytes above)
    # counts when at least worker_copied_min_share of it came without RSS growth (shared pages
    # copied into the worker: copy-on-access), or when the worker was still growing at its
    # end: the last worker_tail_fraction of its judged time holds at least worker_tail_share
    # of the rise. The rise ends where the smoothed USS first reaches worker_plateau_share of
    # it. worker_warmup_s and worker_min_samples (above) keep their meaning for children whose
    # role was not recorded (older recordings, torch before 2.5): those count as workers when
    # named pt_data_worker or started within worker_epoch_window_s after a DataLoader epoch
    # with workers, and are judged after their first worker_warmup_s.
    worker_smooth_samples: int = 3
    worker_copied_min_share: float = 0.5
    worker_tail_fraction: float = 0.4
    worker_tail_share: float = 0.2
    worker_plateau_share: float = 0.9
    worker_epoch_window_s: float = 2.0

    # rank-imbalance: the largest rank's peak (RAM, else GPU allocated) against the median of
    # the other ranks' peaks: at least rank_imbalance_factor times it and
    # rank_imbalance_min_bytes above it.
    rank_imbalance_factor: float = 1.5
    rank_imbalance_min_bytes: int = 256 * MiB


DEFAULT_CONFIG = DiagnosisConfig()
