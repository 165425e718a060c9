"""One module per diagnosis rule, each with RULE_ID and check(profile, config), or, for a rule
about the whole job, check_job(views, config)."""

from __future__ import annotations

from memsight.profiler.diagnosis.rules import (
    activations_dominate,
    allocator_retention,
    child_failed,
    child_killed,
    dataloader_worker_growth,
    dataset_on_device,
    fragmentation,
    growth_per_iteration,
    inference_without_no_grad,
    missing_zero_grad,
    near_capacity,
    no_mixed_precision,
    non_pytorch_gpu_memory,
    out_of_memory,
    rank_imbalance,
    run_failed,
    too_short_to_judge,
)

ALL_RULES = (
    out_of_memory,
    run_failed,
    near_capacity,
    growth_per_iteration,
    inference_without_no_grad,
    missing_zero_grad,
    activations_dominate,
    dataset_on_device,
    fragmentation,
    dataloader_worker_growth,
    no_mixed_precision,
    non_pytorch_gpu_memory,
    too_short_to_judge,
    allocator_retention,
    child_killed,
    child_failed,
)

# Rules that need the whole job (every process at once): check_job(views, config).
JOB_RULES = (rank_imbalance,)
