"""The anatomy by module group, the changes it suggests and the projection against batch size
(diagnosis/fit.py), on anatomies whose numbers are known."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from memsight.profiler.diagnosis.anatomy import Anatomy, ModuleBytes, anatomies, anatomy_for
from memsight.profiler.diagnosis.fit import (
    bf16_change,
    checkpoint_change,
    fit,
    group_of,
    module_groups,
    projection,
    savings,
)
from memsight.profiler.profile.model import Event
from tests import factories

MiB = 1 << 20


def module(path: str, type_: str = "Linear", act: int = 0, params: int = 0, fp32: bool = True,
           input_bytes: int = 0) -> ModuleBytes:  # fmt: skip
    return ModuleBytes(path, type_, act, act if fp32 else 0, params, params, 2 * params,
                       input_bytes)  # fmt: skip


def gpt(blocks: int = 4, batch: int = 8, peak: int = 1000 * MiB, largest: int = 4 * MiB) -> Anatomy:
    modules = [module(f"blocks.{i}", "Block", input_bytes=2 * MiB) for i in range(blocks)]
    for i in range(blocks):
        modules.append(module(f"blocks.{i}.attn", act=6 * MiB, params=3 * MiB))
        modules.append(module(f"blocks.{i}.mlp.fc", act=10 * MiB, params=5 * MiB))
    modules += [module("lm_head", act=4 * MiB, params=8 * MiB), module("", "GPT", params=MiB)]
    return Anatomy(
        iteration=1,
        device="cpu",
        modules=tuple(modules),
        batch_size=batch,
        batch_bytes=MiB,
        largest_saved_bytes=largest,
        peak_bytes=peak,
        peak_t=1.0,
        partial=False,
        t=2.0,
    )


@pytest.mark.parametrize(
    ("path", "group"),
    [
        ("blocks.3.attn.c_attn", "blocks.3"),
        ("blocks.3", "blocks.3"),
        ("transformer.h.11.mlp", "transformer.h.11"),
        ("lm_head", "lm_head"),
        ("encoder.layer_norm", "encoder"),
        ("2", "2"),
        ("", ""),
        ("(outside modules)", "(outside modules)"),
    ],
)
def test_a_module_belongs_to_its_block_or_its_top_level_module(path: str, group: str) -> None:
    assert group_of(path) == group


def test_groups_sum_their_modules_and_come_largest_first() -> None:
    groups = module_groups(gpt())
    assert [g.path for g in groups][:5] == [
        "blocks.0",
        "blocks.1",
        "blocks.2",
        "blocks.3",
        "lm_head",
    ]
    block = groups[0]
    assert (block.activations, block.parameters, block.optimizer_state) == (
        16 * MiB,
        8 * MiB,
        16 * MiB,
    )
    assert block.input_bytes == 2 * MiB and block.repeated
    assert block.label == "blocks.0 (Block)"
    assert groups[-1].label == "(GPT)"
    assert sum(g.total for g in groups) == gpt().modules_bytes


def test_equal_blocks_come_in_their_models_order() -> None:
    groups = module_groups(gpt(blocks=12))
    assert [g.path for g in groups][:12] == [f"blocks.{i}" for i in range(12)]


def test_checkpointing_the_blocks_keeps_only_their_inputs() -> None:
    change = checkpoint_change(gpt())
    assert change is not None
    assert change.modules == ("blocks.0", "blocks.1", "blocks.2", "blocks.3")
    assert change.saves_bytes == 4 * (16 - 2) * MiB
    assert "blocks.0 … blocks.3" in change.title


def test_bf16_halves_the_float32_activations_and_is_not_offered_for_half_precision() -> None:
    change = bf16_change(gpt())
    assert change is not None and change.saves_bytes == gpt().activations_fp32_bytes // 2
    half = gpt()
    half = Anatomy(**{**half.__dict__, "modules": tuple(
        module(m.path, m.type, m.activations, m.parameters, fp32=False) for m in half.modules
    )})  # fmt: skip
    assert bf16_change(half) is None


def test_the_projection_is_linear_in_the_batch_from_the_measured_point() -> None:
    anatomy = gpt()
    found = projection(anatomy)
    assert found is not None
    per_batch = anatomy.activations_bytes + anatomy.batch_bytes + 2 * anatomy.largest_saved_bytes
    assert found.per_sample_bytes == per_batch / 8
    assert found.fixed_bytes == 1000 * MiB - per_batch
    assert found.projected_peak(8) == 1000 * MiB
    assert found.projected_peak(32) == found.fixed_bytes + 4 * per_batch


def test_the_largest_batch_that_fits_is_the_last_whose_projection_is_within_the_budget() -> None:
    found = fit(gpt(), 2000 * MiB)
    assert found is not None
    p = found.projection
    largest = found.largest_batch_size
    assert p.projected_peak(largest) <= 2000 * MiB < p.projected_peak(largest + 1)
    # Each change lets a larger batch fit; both together the largest.
    [(checkpoint, with_checkpoint), (bf16, with_bf16)] = found.changes
    assert (checkpoint.name, bf16.name) == ("checkpoint", "bf16_autocast")
    assert largest < with_bf16 < with_checkpoint
    assert found.combined is not None and found.combined > with_checkpoint
    assert found.projected_peaks()[8] == 1000 * MiB
    assert largest in found.sizes


def test_a_budget_below_the_fixed_part_fits_no_batch() -> None:
    found = fit(gpt(), 100 * MiB)
    assert found is not None and found.largest_batch_size == 0


def test_no_projection_without_a_batch_size_or_a_peak() -> None:
    anatomy = gpt()
    assert projection(Anatomy(**{**anatomy.__dict__, "batch_size": None})) is None
    assert projection(Anatomy(**{**anatomy.__dict__, "peak_bytes": None})) is None


def test_what_a_finding_says_names_the_largest_activations_and_the_biggest_saving_first() -> None:
    found = savings(gpt())
    assert found is not None
    assert [g.path for g in found.largest] == ["blocks.0", "blocks.1", "blocks.2"]
    assert [name for name, _, _ in found.changes] == ["checkpoint", "half_batch", "bf16_autocast"]
    assert found.text().startswith(
        "the largest activations (iteration 1): blocks.0 (Block) 16.00 MiB"
    )
    fixes = (
        "smaller-batch",
        "mixed-precision",
        "activation-checkpointing",
        "gradient-accumulation",
    )
    assert found.fixes(fixes) == (
        "activation-checkpointing", "smaller-batch", "mixed-precision", "gradient-accumulation"
    )  # fmt: skip


def anatomy_event(t: float, device: str, *modules: dict[str, object]) -> Event:
    return Event(
        t,
        "anatomy",
        {
            "iteration": 2, "counted": "optimizer steps", "batch_size": 16, "batch_bytes": MiB,
            "largest_saved": {device: 8 * MiB}, "modules": list(modules),
            "modules_left_out": 0, "partial": False, "skipped": "",
        },
    )  # fmt: skip


def row(path: str, device: str, act: int, params: int) -> dict[str, object]:
    return {
        "path": path, "type": "Linear", "device": device, "activations": act,
        "activations_fp32": act, "parameters": params, "gradients": params,
        "optimizer_state": 2 * params, "input_bytes": 0,
    }  # fmt: skip


def test_a_cuda_anatomy_is_read_against_that_devices_reserved_peak_over_its_iterations() -> None:
    # Steps end at 1.01, 1.11, 1.21, ...: iteration 2 runs from 1.01 to 1.11, and the peak is
    # read over it and the next two (to 1.31). The allocator's reserved peak on cuda:1 there.
    t = np.arange(0.0, 2.0, 0.01)
    reserved = np.where((t > 1.05) & (t < 1.3), 3000 * MiB, 1000 * MiB)
    reserved[150] = 9000 * MiB  # after the window: not this iteration's
    gpu = factories.table(
        "gpu", t, device=1, allocated=500 * MiB, allocated_peak=600 * MiB,
        reserved=reserved, reserved_peak=reserved,
    )  # fmt: skip
    cuda = "cuda:1"
    p = factories.profile(
        factories.steps([1, 1, 1, 1, 1, 1]),
        gpu,
        factories.ram(2.0, 400 * MiB),
        events=[
            anatomy_event(
                1.2,
                cuda,
                row("fc", cuda, 100 * MiB, 50 * MiB),
                row("head", cuda, 20 * MiB, 10 * MiB),
            ),
        ],
    )
    [anatomy] = anatomies(p)
    assert (anatomy.device, anatomy.plot, anatomy.cuda_index) == (cuda, "gpu", 1)
    assert anatomy.peak_bytes == 3000 * MiB
    assert anatomy.other_bytes == 3000 * MiB - (120 + 4 * 60) * MiB
    assert anatomy_for(p, "gpu", 1) == anatomy and anatomy_for(p, "ram", None) is None
    found = projection(anatomy)
    assert found is not None
    assert found.per_sample_bytes == (120 * MiB + MiB + 16 * MiB) / 16


def kept_anatomy(kept: int = 100 * MiB) -> Anatomy:
    """gpt() on CPU with the storage sizes the agent lists and the memory malloc kept."""
    return replace(
        gpt(),
        saved_sizes=((4 * MiB, 4), (2 * MiB, 8)),
        gradient_sizes=((40 * MiB, 1), (8 * MiB, 1)),  # 40 MiB: mapped on its own, not kept
        malloc_kept_bytes=kept,
    )


def test_on_cpu_the_slack_malloc_kept_grows_with_what_its_heaps_turn_over() -> None:
    anatomy = kept_anatomy()
    found = projection(anatomy)
    assert found is not None
    linear = projection(replace(anatomy, malloc_kept_bytes=None))
    assert linear is not None and linear.slack_bytes == 0
    # Of the 100 MiB malloc kept, the room of the iteration's own per-sample storages is
    # theirs at the peak (68 MiB of activations, the batch, twice the largest): the rest is
    # the slack that changes with the batch.
    assert found.slack_bytes == (100 - 68 - 1 - 8) * MiB
    # At the measured batch of 8 the heaps turn over the activations' storages, the
    # backward's two of the largest (4 MiB), the batch (1 MiB) and the 8 MiB gradient.
    measured = (16 + 16 + 8 + 1 + 8) * MiB
    assert found.heap_turnover(8) == measured
    assert found.projected_peak(8) == 1000 * MiB == linear.projected_peak(8)
    # Twice the batch: every per-sample storage twice as large, all still in the heaps.
    doubled = 2 * (16 + 16 + 8 + 1) * MiB + 8 * MiB
    assert found.heap_turnover(16) == doubled
    grown = found.slack_bytes * (doubled / measured - 1)
    assert found.projected_peak(16) == round(linear.projected_peak(16) + grown)


def test_storages_that_reach_mallocs_largest_mmap_threshold_leave_its_heaps() -> None:
    # At 8 times the batch the 4 MiB storages are 32 MiB: mapped on their own and returned
    # when freed, so only the 2 MiB ones (16 MiB then), the batch and the gradient remain.
    found = projection(kept_anatomy())
    assert found is not None
    assert found.heap_turnover(64) == (8 * 16 + 8 + 8) * MiB
    # A model whose every per-sample storage leaves the heaps keeps less than measured.
    large = projection(
        replace(kept_anatomy(300 * MiB), saved_sizes=((16 * MiB, 4),),
                largest_saved_bytes=16 * MiB, batch_bytes=0, gradient_sizes=())
    )  # fmt: skip
    assert large is not None and large.slack_bytes == (300 - 68 - 32) * MiB
    assert large.slack_growth(8) == 0
    assert large.slack_growth(16) == -large.slack_bytes  # every storage 32 MiB: none turns over


@pytest.mark.parametrize("kept", [0, 100 * MiB, 600 * MiB])
def test_the_largest_batch_that_fits_is_the_largest_within_the_budget_as_storages_leave_the_heaps(
    kept: int,
) -> None:
    found = projection(kept_anatomy(kept))
    assert found is not None
    peaks = {size: found.projected_peak(size) for size in range(1, 400)}
    for budget in range(900 * MiB, 4000 * MiB, 37 * MiB):
        within = [size for size, peak in peaks.items() if peak <= budget]
        assert found.largest_batch_size(budget) == max(within, default=0), budget


def test_the_storage_sizes_and_what_malloc_kept_are_read_with_the_cpu_anatomy() -> None:
    t = np.arange(0.0, 2.0, 0.01)
    event = anatomy_event(1.2, "cpu", row("fc", "cpu", 100 * MiB, 50 * MiB))
    event.data["saved_sizes"] = {
        "cpu": [[8 * MiB, 2], [MiB, 84], ["x", 1], [0, 3], [5], [MiB, -1]],
        "cuda:0": [[MiB, 1]],
    }
    event.data["gradient_sizes"] = {"cpu": [[50 * MiB, 1]]}
    free = np.where((t > 1.05) & (t < 1.3), 170 * MiB, 10 * MiB)
    free[150] = 900 * MiB  # after the iterations around the measured one: not its peak's
    p = factories.profile(
        factories.steps([1, 1, 1, 1, 1, 1]),
        factories.ram(2.0, 400 * MiB),
        factories.table("heap", t, in_use=200 * MiB, free=free),
        events=[event],
    )
    [anatomy] = anatomies(p)
    assert anatomy.saved_sizes == ((8 * MiB, 2), (MiB, 84))  # the malformed rows left out
    assert anatomy.gradient_sizes == ((50 * MiB, 1),)
    assert anatomy.malloc_kept_bytes == 170 * MiB
    found = projection(anatomy)
    # Its slack: beyond the activations (100 MiB), the batch and twice the largest (8 MiB).
    assert found is not None and found.slack_bytes == (170 - 100 - 1 - 16) * MiB
    assert found.gradient_turnover_bytes == 0  # a 50 MiB gradient is mapped on its own
    # Without the sizes (a profile recorded before they were listed) the kept memory stays
    # in the fixed part, as it was projected then.
    del event.data["saved_sizes"]
    [older] = anatomies(p)
    assert older.saved_sizes == () and projection(older).slack_bytes == 0  # type: ignore[union-attr]
