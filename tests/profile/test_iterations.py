"""The iterations of a run's loop, for every loop shape (profiler.profile.series.iterations)."""

from __future__ import annotations

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import forward_batches, iterations
from memsight.profiler.protocol import BACKWARD_PASSES, FORWARD_PASSES, OPTIMIZER_STEPS
from tests.factories import MiB, loop, profile, steps, table


def test_optimizer_steps_come_first_even_with_backwards_inside_them() -> None:
    p = profile(steps(np.full(10, 100 * MiB)), loop(30, backward=True, dt=0.1 / 3))
    its = iterations(p)
    assert its is not None and its.kind == OPTIMIZER_STEPS and len(its) == 10
    assert list(its.index) == list(range(1, 11))
    assert (its.end >= its.t).all()


def test_without_steps_the_backward_passes_are_the_iterations() -> None:
    its = iterations(profile(loop(25, modules=(1, 2), backward=True)))
    assert its is not None and its.kind == BACKWARD_PASSES and len(its) == 25
    assert its.t[0] == pytest.approx(1.06) and its.end[0] == pytest.approx(1.08)


def test_without_backward_each_batch_of_forwards_is_one_iteration() -> None:
    its = iterations(profile(loop(57, modules=(1, 2), flags=0)))
    assert its is not None and its.kind == FORWARD_PASSES and len(its) == 57
    # a batch runs from its first forward's start to its last forward's end
    assert its.t[0] == pytest.approx(1.0) and its.end[0] == pytest.approx(1.0 + 0.025 + 0.0225)


def test_nested_forwards_are_not_iterations() -> None:
    spans = table(
        "spans",
        [0.0, 0.1, 1.0, 1.1],
        end=[0.5, 0.2, 1.5, 1.2],
        kind=protocol.SPAN_FORWARD,
        id=[1, 2, 3, 4],
        module=[1, 2, 1, 2],
        flags=0,
        depth=[0, 1, 0, 1],
    )
    its = iterations(profile(spans))
    assert its is not None and len(its) == 2


def test_no_module_and_no_optimizer_means_no_iterations() -> None:
    assert iterations(Profile()) is None
    assert iterations(profile()) is None


@pytest.mark.parametrize(
    "modules, batches",
    [
        ([1, 2, 1, 2, 1, 2], [0, 0, 1, 1, 2, 2]),  # model, then criterion
        ([1, 1, 1], [0, 1, 2]),  # the model alone
        ([9, 1, 2, 1, 2], [0, 0, 0, 1, 1]),  # a one-off call first joins the first batch
        ([1, 2, 1, 2, 3, 3, 3], [0, 0, 1, 1, 1, 2, 3]),  # a second loop of another model
        # a decoder called per token: about one batch per call
        ([4, 5, 5, 4, 5, 5], [0, 0, 1, 1, 2, 3]),
        ([], []),
    ],
)
def test_forward_batches(modules: list[int], batches: list[int]) -> None:
    assert forward_batches(np.array(modules, dtype=np.int64)).tolist() == batches
