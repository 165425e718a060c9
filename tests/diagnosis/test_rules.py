"""Each rule fires on its pattern and stays silent on the look-alikes (synthetic profiles)."""

from __future__ import annotations

import pkgutil
import re
from types import ModuleType

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.diagnosis import DEFAULT_CONFIG, diagnose, get_fix
from memsight.profiler.diagnosis import rules as rules_package
from memsight.profiler.diagnosis.rules import ALL_RULES, JOB_RULES
from memsight.profiler.profile.model import Event, Profile, SampleTable
from memsight.profiler.profile.processes import ProcessInfo
from tests.factories import GiB, MiB, census, holder, oom_event, profile, ram, spans, steps, table
from tests.support import ROOT

# Every rule is reached through the registry diagnose() runs, never by importing its module:
# a rule tested by its module but missing from the registry would pass here and never run.
RULES = {rule.RULE_ID: rule for rule in ALL_RULES}

BASE = 800 * MiB
rng = np.random.default_rng(7)


def noise(n: int, scale: float = 2 * MiB) -> np.ndarray:
    return rng.normal(0, scale, n)


# growth-per-iteration ---------------------------------------------------------------------


def test_growth_fires_with_rate_span_and_fit() -> None:
    levels = BASE + 3 * MiB * np.arange(240) + noise(240)
    [finding] = RULES["growth-per-iteration"].check(profile(steps(levels)), DEFAULT_CONFIG)
    assert finding.severity == "warning"
    numbers = finding.evidence.numbers
    assert numbers["bytes_per_iteration"] == pytest.approx(3 * MiB, rel=0.05)
    assert numbers["r2"] > 0.95
    first, last = finding.evidence.iterations or (0, 0)
    assert first > 1 and last == 240  # warm-up steps are not part of the evidence
    assert "per iteration over" in finding.evidence.text


@pytest.mark.parametrize(
    "shape",
    [
        "flat",
        "warmup_then_flat",  # allocator and caches warm up over the first steps
        "cache_fills_once",  # climbs for the first half, then a plateau
        "small_creep",  # a few MiB over the whole run: below the size threshold
        "sawtooth",  # grows within each epoch, released at the epoch's end
    ],
)
def test_growth_is_silent_on_look_alikes(shape: str) -> None:
    i = np.arange(300, dtype=np.float64)
    levels = {
        "flat": BASE + noise(300),
        "warmup_then_flat": BASE + 400 * MiB * (1 - np.exp(-i / 6)) + noise(300),
        "cache_fills_once": BASE + 2 * MiB * np.minimum(i, 150) + noise(300),
        "small_creep": BASE + 0.05 * MiB * i + noise(300, 0.2 * MiB),
        "sawtooth": BASE + 4 * MiB * (i % 50) + noise(300),
    }[shape]
    assert RULES["growth-per-iteration"].check(profile(steps(levels)), DEFAULT_CONFIG) == []


def test_growth_on_the_gpu_is_reported_for_that_device() -> None:
    n = 100
    flat_rss = BASE + noise(n)
    allocated = 2 * GiB + 8 * MiB * np.arange(n)
    p = profile(steps(flat_rss, device=0, allocated=allocated))
    [finding] = RULES["growth-per-iteration"].check(p, DEFAULT_CONFIG)
    assert finding.evidence.plot == "gpu" and finding.evidence.numbers["device"] == 0


def heap(free: np.ndarray, in_use: np.ndarray | int = 300 * MiB, dt: float = 0.1) -> SampleTable:
    """The agent's malloc readings, one per step: bytes in use and bytes free in the heaps."""
    t = 1.0 + dt * np.arange(len(free))
    return table("heap", t, in_use=in_use, free=free)


def retention(
    levels: np.ndarray, free: np.ndarray, in_use: np.ndarray | int = 300 * MiB
) -> Profile:
    return profile(steps(levels), heap(free, in_use))


STEP = np.arange(240, dtype=np.float64)


def test_growth_that_is_freed_memory_malloc_keeps_is_not_a_leak() -> None:
    # RSS climbs 1.5 MiB a step, all of it free bytes in malloc's heaps while its live
    # allocations stay level (a clean Lightning run on CPU, measured): growth-per-iteration is
    # quiet, allocator-retention says why.
    p = retention(
        BASE + 1.5 * MiB * STEP + noise(240),
        10 * MiB + 1.45 * MiB * STEP + noise(240),
        (300 * MiB + 4 * MiB * rng.integers(0, 2, 240)).astype(np.int64),  # + temporaries
    )
    assert RULES["growth-per-iteration"].check(p, DEFAULT_CONFIG) == []
    [finding] = RULES["allocator-retention"].check(p, DEFAULT_CONFIG)
    assert finding.severity == "info" and finding.fixes == ("malloc-trim-threshold",)
    numbers = finding.evidence.numbers
    assert numbers["heap_free_growth_bytes"] == pytest.approx(1.45 * MiB * 215, rel=0.05)
    assert abs(float(numbers["heap_in_use_growth_bytes"] or 0)) < 16 * MiB
    assert "malloc keeps free in its heaps rose" in finding.evidence.text
    assert [f.rule for f in diagnose(p).findings] == ["allocator-retention"]


def test_a_leak_that_pins_holes_in_the_heap_is_still_a_leak() -> None:
    # Each step keeps a 256 KiB output between freed temporaries (a Lightning training_step
    # keeping its outputs, measured): live allocations grow 0.25 MiB a step and the holes
    # they pin make the free bytes grow 0.8 MiB a step. The whole climb is the leak's doing.
    p = retention(
        BASE + 1.05 * MiB * STEP + noise(240),
        10 * MiB + 0.8 * MiB * STEP + noise(240),
        (300 * MiB + 0.25 * MiB * STEP + noise(240)).astype(np.int64),
    )
    [finding] = RULES["growth-per-iteration"].check(p, DEFAULT_CONFIG)
    numbers = finding.evidence.numbers
    assert numbers["heap_in_use_growth_bytes"] == pytest.approx(0.25 * MiB * 240, rel=0.2)
    assert "live allocations grew" in finding.evidence.text
    assert RULES["allocator-retention"].check(p, DEFAULT_CONFIG) == []


def test_small_tensors_kept_between_freed_ones_are_a_leak_of_the_holes_they_pin() -> None:
    # Inference keeping an 8 KiB argmax tensor per batch between 2 MiB temporaries (measured:
    # free bytes +2 MiB a batch, one more free chunk a batch, without bound). The live bytes
    # grow by only 8 KiB a batch, under readings that catch 4 MiB of temporaries at random;
    # the floors of the readings still show that steady growth.
    temporaries = 4 * MiB * rng.integers(0, 2, 240)
    p = retention(
        BASE + 2 * MiB * STEP + noise(240),
        10 * MiB + 2 * MiB * STEP + noise(240),
        (92 * MiB + 8 * 1024 * STEP + temporaries).astype(np.int64),
    )
    [finding] = RULES["growth-per-iteration"].check(p, DEFAULT_CONFIG)
    assert float(finding.evidence.numbers["heap_in_use_growth_bytes"] or 0) > 0.5 * 8 * 1024 * 215
    assert RULES["allocator-retention"].check(p, DEFAULT_CONFIG) == []


def test_live_bytes_read_between_iterations_outweigh_the_floors_of_the_others() -> None:
    # A clean Lightning run (measured): RSS climbs 1.5 MiB a step, all of it free bytes
    # malloc keeps. The readings between iterations (in the step hook, one per 30 steps here)
    # stay level. The periodic ones fall anywhere in an iteration: with 4 MiB of activations,
    # or after the gradients were freed, below the level between iterations; here they catch
    # less of the gradients' absence late in the run, so the floors of the slices climb 4 MiB
    # in a straight line. The readings between iterations decide.
    n = 240
    t = 1.0 + 0.1 * np.arange(n)
    between = (np.arange(n) % 30 == 15).astype(np.int64)  # 7 in the fitted span
    periodic = -4 * MiB * (1 - np.arange(n) / n) + 4 * MiB * rng.integers(0, 2, n)
    in_use = 300 * MiB + periodic * (1 - between)
    free = 10 * MiB + 1.45 * MiB * np.arange(n) + noise(n)
    rss = steps(BASE + 1.5 * MiB * STEP + noise(240))
    both = table("heap", t, in_use=in_use.astype(np.int64), free=free, between=between)
    assert [f.rule for f in diagnose(profile(rss, both)).findings] == ["allocator-retention"]
    # The floors alone make it a leak: the same readings, not told apart.
    alone = table("heap", t, in_use=in_use.astype(np.int64), free=free)
    assert [f.rule for f in diagnose(profile(rss, alone)).findings] == ["growth-per-iteration"]


def test_python_objects_beside_allocator_retention_are_still_a_leak() -> None:
    # Half the climb is malloc keeping freed memory; the other half is outside malloc's heaps
    # (Python objects in the interpreter's own arenas): 120 MiB that something holds.
    p = retention(BASE + 1 * MiB * STEP + noise(240), 0.5 * MiB * STEP + noise(240))
    assert [f.rule for f in diagnose(p).findings] == ["growth-per-iteration"]


def test_flat_heap_readings_change_nothing() -> None:
    # Another malloc preloaded: glibc's heap stays empty and explains none of the growth.
    p = retention(BASE + 3 * MiB * STEP + noise(240), np.zeros(240), 0)
    [finding] = RULES["growth-per-iteration"].check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["bytes_per_iteration"] == pytest.approx(3 * MiB, rel=0.05)
    assert "malloc" not in finding.evidence.text
    assert RULES["allocator-retention"].check(p, DEFAULT_CONFIG) == []


def test_growth_over_time_of_freed_memory_is_not_a_leak() -> None:
    # No iterations at all: the RAM timeline climbs 20 MiB/s for 12 s, all of it kept free.
    t = np.arange(0, 12, 0.01)
    ram_table = ram(12, BASE + 20 * MiB * t)
    heap_table = table("heap", t[::10], in_use=300 * MiB, free=20 * MiB * t[::10])
    p = profile(ram_table, heap_table)
    assert RULES["growth-per-iteration"].check(p, DEFAULT_CONFIG) == []
    [finding] = RULES["allocator-retention"].check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["iterations_are"] is None
    assert finding.evidence.iterations is None and "MiB/s" in finding.evidence.text


def test_growth_needs_enough_iterations() -> None:
    levels = BASE + 50 * MiB * np.arange(10)
    assert RULES["growth-per-iteration"].check(profile(steps(levels)), DEFAULT_CONFIG) == []


# missing-zero-grad ------------------------------------------------------------------------


def _cleared(pattern: list[int], repeat: int) -> np.ndarray:
    return np.array((pattern * repeat)[: len(pattern) * repeat])


def test_missing_zero_grad_fires_on_a_long_uncleared_run() -> None:
    cleared = np.full(50, protocol.CLEARED_NONE)
    cleared[0] = protocol.CLEARED_FIRST_STEP
    [finding] = RULES["missing-zero-grad"].check(
        profile(steps(np.full(50, BASE), cleared=cleared)), DEFAULT_CONFIG
    )
    assert finding.evidence.iterations == (2, 50)
    assert finding.fixes[0] == "zero-grad-set-to-none"


def test_missing_zero_grad_fires_on_a_short_run_that_never_clears() -> None:
    cleared = [protocol.CLEARED_FIRST_STEP] + [protocol.CLEARED_NONE] * 4
    assert RULES["missing-zero-grad"].check(
        profile(steps(np.full(5, BASE), cleared=cleared)), DEFAULT_CONFIG
    )


def test_missing_zero_grad_names_the_first_of_the_longest_uncleared_runs() -> None:
    # Two runs of 30 uncleared steps (3-32 and 42-71), a shorter one between: the evidence is
    # the first of the two longest.
    cleared = np.full(80, protocol.CLEARED_ZERO_GRAD)
    cleared[0] = protocol.CLEARED_FIRST_STEP
    cleared[2:32] = cleared[35:38] = cleared[41:71] = protocol.CLEARED_NONE
    [finding] = RULES["missing-zero-grad"].check(
        profile(steps(np.full(80, BASE), cleared=cleared)), DEFAULT_CONFIG
    )
    assert finding.evidence.iterations == (3, 32)


@pytest.mark.parametrize(
    "cleared",
    [
        [protocol.CLEARED_ZERO_GRAD] * 60,  # zero_grad every step
        [protocol.CLEARED_GRAD_REPLACED] * 60,  # set_to_none / grads replaced
        # periodic clearing: a step every micro-batch, zero_grad every fourth
        _cleared([protocol.CLEARED_ZERO_GRAD] + [protocol.CLEARED_NONE] * 3, 15).tolist(),
    ],
    ids=["zero_grad", "replaced", "periodic"],
)
def test_missing_zero_grad_silent_when_gradients_are_cleared(cleared: list[int]) -> None:
    p = profile(steps(np.full(len(cleared), BASE), cleared=cleared))
    assert RULES["missing-zero-grad"].check(p, DEFAULT_CONFIG) == []


# inference-without-no-grad ----------------------------------------------------------------

TRAIN = protocol.FLAG_TRAINING | protocol.FLAG_GRAD | protocol.FLAG_REQUIRES_GRAD
EVAL_WITH_GRAD = protocol.FLAG_GRAD | protocol.FLAG_REQUIRES_GRAD
EVAL_NO_GRAD = 0


def test_eval_with_grad_and_no_backward_fires() -> None:
    forwards = [(TRAIN, 1)] * 20 + [(EVAL_WITH_GRAD, 1)] * 10
    p = profile(spans(forwards, linked=list(range(1, 21))))
    p.names[1] = "TinyNet"
    [finding] = RULES["inference-without-no-grad"].check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["forwards"] == 10
    assert "TinyNet" in finding.evidence.text and "eval mode" in finding.evidence.text


def test_validation_in_train_mode_with_grad_on_fires() -> None:
    # 20 training forwards with a backward each, then 10 validation forwards without one
    forwards = [(TRAIN, 1)] * 30
    [finding] = RULES["inference-without-no-grad"].check(
        profile(spans(forwards, linked=list(range(1, 21)))), DEFAULT_CONFIG
    )
    assert finding.evidence.numbers["forwards"] == 10 and "in train mode" in finding.evidence.text


def test_pure_inference_script_with_grad_on_fires() -> None:
    p = profile(spans([(EVAL_WITH_GRAD, 1)] * 8, linked=[]))
    assert RULES["inference-without-no-grad"].check(p, DEFAULT_CONFIG)


@pytest.mark.parametrize(
    "forwards, linked",
    [
        ([(TRAIN, 1)] * 20 + [(EVAL_NO_GRAD, 1)] * 10, list(range(1, 21))),  # eval under no_grad
        # a frozen teacher: grad on, but its outputs do not require grad
        ([(TRAIN, 1), (protocol.FLAG_GRAD, 2)] * 10, list(range(1, 21, 2))),
        # a model whose backward the hook never sees (loss from another output), train mode
        ([(TRAIN, 1), (TRAIN, 2)] * 10, list(range(1, 21, 2))),
        ([(EVAL_WITH_GRAD, 1)] * 2, []),  # too few to matter
    ],
    ids=["no_grad_eval", "frozen_teacher", "unseen_backward", "two_forwards"],
)
def test_inference_rule_silent_on_legitimate_forwards(
    forwards: list[tuple[int, int]], linked: list[int]
) -> None:
    assert (
        RULES["inference-without-no-grad"].check(profile(spans(forwards, linked)), DEFAULT_CONFIG)
        == []
    )


# out-of-memory and near-capacity ----------------------------------------------------------


def test_gpu_oom_is_critical_with_the_numbers_from_the_message() -> None:
    event = oom_event(
        "gpu",
        requested=2 * GiB,
        free=GiB,
        total=80 * GiB,
        allocated=70 * GiB,
        reserved_unallocated=100 * MiB,
    )
    p = profile(ram(6, BASE), steps(np.full(20, BASE)), events=[event], exit_code=1)
    [finding] = RULES["out-of-memory"].check(p, DEFAULT_CONFIG)
    assert finding.severity == "critical"
    assert "in backward after 12 optimizer steps" in finding.title
    assert "asked for 2.00 GiB" in finding.evidence.text
    assert finding.evidence.numbers["requested_bytes"] == 2 * GiB
    assert finding.fixes[0] == "smaller-batch"


def test_gpu_oom_with_much_reserved_but_unallocated_puts_the_allocator_fix_first() -> None:
    event = oom_event("gpu", requested=GiB, reserved_unallocated=6 * GiB)
    [finding] = RULES["out-of-memory"].check(profile(events=[event]), DEFAULT_CONFIG)
    assert finding.fixes[0] == "allocator-config"


def test_gpu_oom_names_the_modules_that_saved_the_most_and_what_would_save_memory() -> None:
    event = oom_event("gpu", requested=2 * GiB)
    [finding] = RULES["out-of-memory"].check(
        profile(events=[anatomy("cuda:0"), event]), DEFAULT_CONFIG
    )
    assert (
        "the largest activations (iteration 1): blocks.0 (Block) 4.00 GiB" in finding.evidence.text
    )
    assert finding.fixes[0] == "activation-checkpointing"
    savings = finding.evidence.numbers["savings"]
    assert savings[0] == {"change": "checkpoint", "saves_bytes": 12 * GiB}


def test_gpu_oom_names_what_held_the_most_in_the_census_taken_at_that_error() -> None:
    event = oom_event("gpu", requested=2 * GiB)
    event.data["exc_id"] = 2
    earlier_error = census(3.0, 10, holder("old", "local", 9 * GiB))
    earlier_error.data.update(at="oom", exc_id=1)  # a caught OOM the script recovered from
    at_error = census(
        4.9,
        12,
        holder("acts", "local", 3 * GiB, file=None),  # no place: in the text, not in where
        holder("cache", "global", 2 * GiB, line=None),
        holder("tiny", "local", 1024),  # under oom_holder_min_bytes
    )
    at_error.data.update(at="oom", exc_id=2)
    p = profile(events=[earlier_error, at_error, event], exit_code=1)
    [finding] = RULES["out-of-memory"].check(p, DEFAULT_CONFIG)
    text = finding.evidence.text
    assert "at the error, `acts` (list, local of `train()`) held 3.00 GiB" in text
    assert "`cache` (Tensor, global of train) held 2.00 GiB" in text
    assert "old" not in text and "tiny" not in text
    assert [h["bytes"] for h in finding.evidence.numbers["holders"]] == [3 * GiB, 2 * GiB]


def test_caught_oom_that_did_not_end_the_run_is_not_out_of_memory() -> None:
    event = oom_event("gpu")
    event.data["uncaught"] = False
    assert RULES["out-of-memory"].check(profile(events=[event], exit_code=0), DEFAULT_CONFIG) == []


def test_sigkill_near_the_limit_reads_as_the_oom_killer() -> None:
    total = 8 * GiB
    rising = ram(10, lambda t: (0.5 + 0.045 * t) * total)
    p = profile(rising, ram_total=total, signal=9)
    [finding] = RULES["out-of-memory"].check(p, DEFAULT_CONFIG)
    assert "killed" in finding.title
    assert RULES["near-capacity"].check(p, DEFAULT_CONFIG) == []  # the OOM says it already


def test_sigkill_with_memory_to_spare_is_not_an_oom() -> None:
    p = profile(ram(10, 2 * GiB), ram_total=16 * GiB, signal=9)
    assert RULES["out-of-memory"].check(p, DEFAULT_CONFIG) == []


def test_near_capacity_against_the_run_budget() -> None:
    p = profile(ram(5, lambda t: BASE + 100 * MiB * t), ram_budget_bytes=1300 * MiB)
    [finding] = RULES["near-capacity"].check(p, DEFAULT_CONFIG)
    assert finding.evidence.plot == "ram" and "budget" in finding.title
    assert finding.evidence.numbers["share"] >= 0.9
    assert finding.evidence.start_s == pytest.approx((0.9 * 1300 - 800) / 100, abs=0.02)


def test_near_capacity_on_a_gpu_uses_device_used_memory() -> None:
    t = np.arange(0, 5, 0.1)
    gpu = table(
        "gpu",
        t,
        device=0,
        allocated=60 * GiB,
        allocated_peak=60 * GiB,
        reserved=70 * GiB,
        reserved_peak=70 * GiB,
        alloc_retries=0,
    )
    nvml = table("nvml", t, device=0, used=np.where(t > 3, 75 * GiB, 71 * GiB), total=80 * GiB)
    [finding] = RULES["near-capacity"].check(
        profile(gpu, nvml, devices=[(0, 80 * GiB)]), DEFAULT_CONFIG
    )
    assert finding.evidence.plot == "gpu" and finding.evidence.start_s > 3


def test_near_capacity_silent_with_room_to_spare() -> None:
    t = np.arange(0, 5, 0.1)
    gpu = table(
        "gpu",
        t,
        device=0,
        allocated=30 * GiB,
        allocated_peak=30 * GiB,
        reserved=40 * GiB,
        reserved_peak=40 * GiB,
    )
    p = profile(ram(5, 4 * GiB), gpu, devices=[(0, 80 * GiB)])
    assert RULES["near-capacity"].check(p, DEFAULT_CONFIG) == []


# activations-dominate / no-mixed-precision / dataset-on-device / fragmentation -------------


def gpu_training(
    *,
    before: float,
    peak: float,
    params: float = 1 * GiB,
    autocast: bool = False,
    lowest_after: float | None = None,
    retries: int = 0,
    reserved_extra: float = 512 * MiB,
    ooms: int = 0,
) -> Profile:
    t = np.arange(0, 10, 0.05)
    training = t >= 2.0
    allocated = np.where(
        training,
        np.where((t * 10).astype(int) % 5 == 0, peak, lowest_after or before + params),
        before,
    )
    gpu = table(
        "gpu",
        t,
        device=0,
        allocated=allocated,
        allocated_peak=allocated,
        reserved=allocated + reserved_extra,
        reserved_peak=allocated + reserved_extra,
        alloc_retries=np.where(t > 6, retries, 0),
        ooms=np.where(t > 6, ooms, 0),
    )
    flags = TRAIN | (protocol.FLAG_AUTOCAST_CUDA if autocast else 0)
    n = 60
    st = steps(
        np.full(n, BASE),
        start=2.05,
        dt=0.13,
        device=0,
        allocated=before + params,
        params_gpu=int(params),
        grads_gpu=int(params),
        state_gpu=int(2 * params),
        params_cpu=0,
        grads_cpu=0,
        state_cpu=0,
    )
    sp = spans([(flags, 1)] * n, linked=list(range(1, n + 1)), start=2.0)
    return profile(gpu, st, sp, devices=[(0, 80 * GiB)])


def test_activations_dominate_and_no_mixed_precision_fire_together() -> None:
    p = gpu_training(before=1 * GiB, peak=30 * GiB)
    [act] = RULES["activations-dominate"].check(p, DEFAULT_CONFIG)
    assert act.severity == "info" and act.evidence.plot == "gpu"
    assert act.evidence.numbers["activation_bytes"] == 30 * GiB - 1 * GiB - 3 * GiB
    [amp] = RULES["no-mixed-precision"].check(p, DEFAULT_CONFIG)
    assert amp.fixes == ("mixed-precision",)


def anatomy(device: str, blocks: int = 4) -> Event:
    """An agent's anatomy on `device`: `blocks` blocks saving 4 GiB each (1 GiB of it their
    input), a head saving 1 GiB, a batch of 16."""

    def row(
        path: str, type_: str, act: float, params: float = 0, input_bytes: float = 0
    ) -> dict[str, object]:
        return {
            "path": path, "type": type_, "device": device, "activations": int(act),
            "activations_fp32": int(act), "parameters": int(params), "gradients": int(params),
            "optimizer_state": int(2 * params), "input_bytes": int(input_bytes),
        }  # fmt: skip

    modules = [row(f"blocks.{i}", "Block", 4 * GiB, 200 * MiB, GiB) for i in range(blocks)]
    modules.append(row("head", "Linear", GiB, 100 * MiB))
    return Event(
        3.0,
        "anatomy",
        {
            "iteration": 1, "counted": "optimizer steps", "batch_size": 16,
            "batch_bytes": 64 * MiB, "largest_saved": {device: 512 * MiB},
            "modules": modules, "modules_left_out": 0, "partial": False, "skipped": "",
        },
    )  # fmt: skip


def test_activations_dominate_names_the_largest_modules_and_orders_fixes_by_their_savings() -> None:
    p = gpu_training(before=1 * GiB, peak=30 * GiB)
    p.events.append(anatomy("cuda:0"))
    [act] = RULES["activations-dominate"].check(p, DEFAULT_CONFIG)
    assert "the largest activations (iteration 1): blocks.0 (Block) 4.00 GiB" in act.evidence.text
    assert "checkpointing blocks.0 … blocks.3 would save 12.00 GiB" in act.evidence.text
    largest = act.evidence.numbers["largest_activations"]
    assert [m["module"] for m in largest] == ["blocks.0", "blocks.1", "blocks.2"]
    # Checkpointing saves 12 GiB, half the batch about 8.6 GiB, bf16 8.5 GiB: in that order.
    assert act.fixes[:3] == ("activation-checkpointing", "smaller-batch", "mixed-precision")


def test_an_anatomy_of_another_device_says_nothing_of_this_one() -> None:
    p = gpu_training(before=1 * GiB, peak=30 * GiB)
    p.events.append(anatomy("cpu"))
    [act] = RULES["activations-dominate"].check(p, DEFAULT_CONFIG)
    assert "largest activations" not in act.evidence.text
    assert act.fixes[0] == "activation-checkpointing"


def test_no_mixed_precision_silent_under_autocast_and_when_the_model_dominates() -> None:
    assert (
        RULES["no-mixed-precision"].check(
            gpu_training(before=GiB, peak=30 * GiB, autocast=True), DEFAULT_CONFIG
        )
        == []
    )
    small = gpu_training(before=GiB, peak=6 * GiB)  # 2 GiB of activations vs 4 GiB of state
    assert RULES["activations-dominate"].check(small, DEFAULT_CONFIG) == []
    assert RULES["no-mixed-precision"].check(small, DEFAULT_CONFIG) == []


def test_dataset_on_device_fires_when_data_stays_all_run() -> None:
    p = gpu_training(before=10 * GiB, peak=20 * GiB)  # 9 GiB beyond the 1 GiB of parameters
    [finding] = RULES["dataset-on-device"].check(p, DEFAULT_CONFIG)
    assert finding.evidence.numbers["extra_bytes"] == 9 * GiB
    assert finding.fixes == ("dataset-on-cpu-pinned",)


def test_dataset_on_device_silent_when_only_parameters_were_there_or_it_was_freed() -> None:
    assert (
        RULES["dataset-on-device"].check(gpu_training(before=GiB, peak=20 * GiB), DEFAULT_CONFIG)
        == []
    )
    freed = gpu_training(before=10 * GiB, peak=20 * GiB, lowest_after=2 * GiB)
    assert RULES["dataset-on-device"].check(freed, DEFAULT_CONFIG) == []


def test_the_retry_of_an_out_of_memory_error_is_not_fragmentation() -> None:
    """PyTorch frees its cache and retries once before every OOM it raises (seen on an H200):
    that retry is the error's own, not a sign of fragmentation."""
    oom_only = gpu_training(before=GiB, peak=20 * GiB, retries=1, ooms=1)
    assert RULES["fragmentation"].check(oom_only, DEFAULT_CONFIG) == []
    [finding] = RULES["fragmentation"].check(
        gpu_training(before=GiB, peak=20 * GiB, retries=3, ooms=1), DEFAULT_CONFIG
    )
    assert finding.evidence.numbers["alloc_retries"] == 2
    assert "retried 2 times" in finding.evidence.text


def test_fragmentation_from_retries_and_from_the_gap_at_the_peak() -> None:
    [by_retries] = RULES["fragmentation"].check(
        gpu_training(before=GiB, peak=20 * GiB, retries=3), DEFAULT_CONFIG
    )
    assert by_retries.evidence.numbers["alloc_retries"] == 3
    [by_gap] = RULES["fragmentation"].check(
        gpu_training(before=GiB, peak=20 * GiB, reserved_extra=9 * GiB), DEFAULT_CONFIG
    )
    assert by_gap.evidence.numbers["reserved_unallocated_bytes"] == 9 * GiB
    assert (
        RULES["fragmentation"].check(gpu_training(before=GiB, peak=20 * GiB), DEFAULT_CONFIG) == []
    )


def test_activations_on_the_cpu_use_rss() -> None:
    t = np.arange(0, 10, 0.01)
    rss = np.where(
        t < 2, BASE, np.where((t * 10).astype(int) % 3 == 0, BASE + 2 * GiB, BASE + 60 * MiB)
    )
    st = steps(
        np.full(40, BASE),
        start=2.05,
        dt=0.2,
        params_cpu=20 * MiB,
        grads_cpu=20 * MiB,
        state_cpu=40 * MiB,
        params_gpu=0,
        grads_gpu=0,
        state_gpu=0,
    )
    sp = spans([(TRAIN, 1)] * 40, linked=list(range(1, 41)), start=2.0)
    [finding] = RULES["activations-dominate"].check(profile(ram(10, rss), st, sp), DEFAULT_CONFIG)
    assert finding.evidence.plot == "ram"


# dataloader-worker-growth -----------------------------------------------------------------


def workers(growth_per_s: float, count: int = 2) -> SampleTable:
    t = np.arange(0.5, 20, 0.5)
    tables = []
    for pid in range(100, 100 + count):
        tables.append(
            (np.full(len(t), pid), t, 30 * MiB + growth_per_s * (t - 0.5) + noise(len(t), MiB))
        )
    pids = np.concatenate([p for p, _, _ in tables])
    ts = np.concatenate([x for _, x, _ in tables])
    uss = np.concatenate([u for _, _, u in tables])
    order = np.argsort(ts, kind="stable")
    return table(
        "children", ts[order], pid=pids[order], uss=uss[order], rss=uss[order], pss=uss[order]
    )


def test_worker_growth_fires_per_worker() -> None:
    [finding] = RULES["dataloader-worker-growth"].check(
        profile(workers(15 * MiB, count=3)), DEFAULT_CONFIG
    )
    assert finding.evidence.numbers["workers"] == 3
    assert finding.evidence.numbers["mean_growth_bytes"] == pytest.approx(15 * MiB * 18.5, rel=0.1)


def test_worker_growth_silent_on_steady_workers() -> None:
    assert (
        RULES["dataloader-worker-growth"].check(profile(workers(0.2 * MiB)), DEFAULT_CONFIG) == []
    )


# non-pytorch-gpu-memory -------------------------------------------------------------------


def test_other_processes_on_the_gpu() -> None:
    t = np.arange(0, 5, 0.1)
    gpu = table(
        "gpu",
        t,
        device=0,
        allocated=10 * GiB,
        reserved=12 * GiB,
        allocated_peak=10 * GiB,
        reserved_peak=12 * GiB,
    )
    nvml = table(
        "nvml", t, device=0, used=40 * GiB, total=80 * GiB, process_used=12 * GiB + 500 * MiB
    )
    [finding] = RULES["non-pytorch-gpu-memory"].check(
        profile(gpu, nvml, devices=[(0, 80 * GiB)]), DEFAULT_CONFIG
    )
    assert finding.evidence.numbers["other_processes_bytes"] == 40 * GiB - 12 * GiB - 500 * MiB
    # the CUDA context alone is normal
    quiet = table(
        "nvml",
        t,
        device=0,
        used=12 * GiB + 500 * MiB,
        total=80 * GiB,
        process_used=12 * GiB + 500 * MiB,
    )
    assert (
        RULES["non-pytorch-gpu-memory"].check(
            profile(gpu, quiet, devices=[(0, 80 * GiB)]), DEFAULT_CONFIG
        )
        == []
    )


# all rules together ---------------------------------------------------------------------


def test_diagnose_orders_by_severity_and_a_broken_rule_is_named_not_fatal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    levels = BASE + 3 * MiB * np.arange(240)
    event = oom_event("cpu", t=30.0)
    p = profile(ram(30, BASE), steps(levels), events=[event], exit_code=1)

    def broken(profile: object, config: object) -> list[object]:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(RULES["fragmentation"], "check", broken)
    result = diagnose(p)
    assert [f.rule for f in result.findings] == ["out-of-memory", "growth-per-iteration"]
    assert result.failed == {"fragmentation": "ZeroDivisionError: boom"}


# every registered rule -------------------------------------------------------------------


def error_event(exc_type: str, message: str, line: int = 1, t: float = 0.05) -> Event:
    """The uncaught exception that ended a script, raised at train.py:`line`."""
    frame = ["/work/train.py", line, "<module>", f"raise {exc_type}({message!r})"]
    data = {"exc_id": 1, "exc_type": f"builtins.{exc_type}", "message": message}
    return Event(t, "exception", {**data, "traceback": [frame], "uncaught": True, "oom": None})


# A profile each rule fires on (the patterns tested above). The registry says which rules must be
# here: a rule registered without a case fails test_every_registered_rule_fires_on_its_pattern.
FIRES = {
    "out-of-memory": lambda: profile(events=[oom_event("gpu", requested=GiB)], exit_code=1),
    "near-capacity": lambda: profile(
        ram(5, lambda t: BASE + 100 * MiB * t), ram_budget_bytes=1300 * MiB
    ),
    "growth-per-iteration": lambda: profile(steps(BASE + 3 * MiB * np.arange(240))),
    "inference-without-no-grad": lambda: profile(spans([(EVAL_WITH_GRAD, 1)] * 8, linked=[])),
    "missing-zero-grad": lambda: profile(
        steps(
            np.full(50, BASE), cleared=[protocol.CLEARED_FIRST_STEP] + [protocol.CLEARED_NONE] * 49
        )
    ),
    "activations-dominate": lambda: gpu_training(before=GiB, peak=30 * GiB),
    "dataset-on-device": lambda: gpu_training(before=10 * GiB, peak=20 * GiB),
    "fragmentation": lambda: gpu_training(before=GiB, peak=20 * GiB, retries=3),
    "dataloader-worker-growth": lambda: profile(workers(15 * MiB, count=3)),
    "no-mixed-precision": lambda: gpu_training(before=GiB, peak=30 * GiB),
    "non-pytorch-gpu-memory": lambda: profile(
        table("gpu", [0.0, 1.0], device=0, allocated=10 * GiB, reserved=12 * GiB),
        table("nvml", [0.0, 1.0], device=0, used=40 * GiB, total=80 * GiB, process_used=12 * GiB),
        devices=[(0, 80 * GiB)],
    ),
    "run-failed": lambda: profile(events=[error_event("ValueError", "boom")], exit_code=1),
    "too-short-to-judge": lambda: profile(steps(BASE + 23 * MiB * np.arange(19)), exit_code=0),
    "allocator-retention": lambda: retention(BASE + 1.5 * MiB * STEP, 1.5 * MiB * STEP),
    "child-killed": lambda: child(profile(ram(2, BASE)), signal=9),
    "child-failed": lambda: child(profile(events=[error_event("ValueError", "boom")]), code=1),
}


def child(p: Profile, code: int | None = None, signal: int | None = None) -> Profile:
    """`p` as a child's view in a job: process 1, ended with `code` or `signal`."""
    p.process = ProcessInfo(1, pid=4242, parent=100, ended=2.0, exit_code=code, signal=signal)
    p.info.exit_code, p.info.signal = code, signal
    return p


def test_every_rule_module_is_registered_once_under_its_own_id() -> None:
    modules = sorted(m.name for m in pkgutil.iter_modules(rules_package.__path__))
    every = (*ALL_RULES, *JOB_RULES)  # per process, and over the whole job
    registered = sorted(rule.__name__.rpartition(".")[2] for rule in every)
    assert registered == modules  # no rule module left out, none registered twice
    assert len(RULES) == len(ALL_RULES)
    for rule in every:
        module = rule.__name__.rpartition(".")[2]
        assert module.replace("_", "-") == rule.RULE_ID


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.RULE_ID)
def test_every_registered_rule_is_silent_on_a_run_without_data(rule: ModuleType) -> None:
    assert rule.check(Profile(), DEFAULT_CONFIG) == []
    assert rule.check(profile(), DEFAULT_CONFIG) == []


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.RULE_ID)
def test_every_registered_rule_fires_on_its_pattern(rule: ModuleType) -> None:
    rule_id = rule.RULE_ID
    assert rule_id in FIRES, f"add a profile {rule_id} fires on to FIRES"
    p = FIRES[rule_id]()
    findings = rule.check(p, DEFAULT_CONFIG)
    assert findings
    for finding in findings:
        assert finding.rule == rule_id and finding.severity in ("critical", "warning", "info")
        assert finding.title and finding.explanation and finding.evidence.text
        assert finding.fixes and all(get_fix(fix) for fix in finding.fixes)
    assert rule_id in {f.rule for f in diagnose(p).findings}  # and diagnose() runs it


def test_the_rules_with_a_case_here_are_exactly_the_registered_ones() -> None:
    assert set(FIRES) == set(RULES)


def test_every_registered_rule_is_documented_and_only_those() -> None:
    documented = re.findall(r"^### `([a-z-]+)`", (ROOT / "docs" / "rules.md").read_text(), re.M)
    assert sorted(documented) == sorted([*RULES, *(rule.RULE_ID for rule in JOB_RULES)])
