"""Optimizer steps: the rows of the `steps` table, sampled detail and gradient clearing.

Each optimizer step (the global optimizer step pre/post hooks) is a row of the `steps` table
with the memory state, whether gradients were cleared since the previous step or during this
one (in a closure passed to step()), and (measured for the first steps, then at most once a
second) the bytes of parameters, gradients and optimizer state (breakdown.py).
Optimizer.zero_grad and Module.zero_grad are wrapped at class level to record the clearing.

A step that raised is dropped at the next one (_step_pre). The steps also pace the rest:
whether the next step's forwards and backward are recorded in detail (DETAIL_EVERY_NS), and
when discovery.py runs again.
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..protocol import (
    CLEARED_FIRST_STEP,
    CLEARED_GRAD_REPLACED,
    CLEARED_NONE,
    CLEARED_ZERO_GRAD,
    OPTIMIZER_STEPS,
    STEP_TABLE,
)
from .breakdown import breakdown_row, measure_breakdown
from .clock import now as _now
from .port import AgentPort
from .reader import Reader

BREAKDOWN_WARMUP_STEPS = 3
BREAKDOWN_EVERY_NS = 1_000_000_000
# Past the warm-up, breakdowns also come further apart than BREAKDOWN_EVERY_NS when one walk
# costs more than this share of the time between two: a model with thousands of tensors
# (~1 ms a walk) then spends no more on it than a small one.
BREAKDOWN_SHARE = 0.0005
# The step row's RSS is read at most this often (-1 on steps in between): a read of
# /proc/self/statm costs ~10 us between two steps' compute, 1 % of a 1 ms step by itself.
RSS_EVERY_NS = 5_000_000
# The same on light steps (see DETAIL_EVERY_NS), whose rows still give the level between
# iterations fifty times a second.
LIGHT_RSS_EVERY_NS = 20_000_000
# ... except on the first RSS_EVERY_STEP steps, each read (~2 ms in all): a short loop of fast
# steps has as many levels between iterations as a slow one (on a busy machine), not fewer.
RSS_EVERY_STEP = 200
# Steps in detail: a step whose forwards and backward are recorded as spans (and whose CUDA
# counters are read) costs ~100-400 us in the hooks, 10-40 % of a 1 ms step. Past the first
# DETAIL_WARMUP_STEPS, steps that come faster than DETAIL_EVERY_NS are detailed one per
# DETAIL_EVERY_NS; the others ("light" steps) still write their step row (time, cleared
# gradients, the RSS when due) but their forwards only mark the phase. A train()/eval()
# switch, a new DataLoader iterator and a forward well after the last step (validation) turn
# detail back on until the next step ends. A "step_detail" event says from which step on
# this sampling holds.
DETAIL_WARMUP_STEPS = 10
DETAIL_EVERY_NS = 100_000_000


class StepHooks:
    """Instrumentation's optimizer steps (a mixin: see instrument.py)."""

    # Of Instrumentation's other parts.
    agent: AgentPort
    _reader: Reader
    phase: Optional[str]
    _observer_attached: bool
    _backward_start: Optional[int]
    _queue_callback: Optional[Callable[[Callable[[], None]], None]]
    _discovery: List[Any]
    _next_discovery: int
    _start_discovery: Callable[[], None]
    _stop_discovery: Callable[[], None]
    _backward_finished: Callable[[], None]
    _cuda_in_use: Callable[[], bool]
    _attach_oom_observer: Callable[[], None]
    _cuda_state: Callable[[], Optional[Dict[str, Any]]]
    _rss: Callable[[], Optional[int]]
    _iteration_ended: Callable[[str, int], None]

    def _init_steps(self) -> None:
        self.steps = 0
        # The frames of torch's step wrapper (profile_hook_step) for the steps under way,
        # outermost first: a step that raised never runs its post-hook, and its frame, no
        # longer on the stack, is dropped at the next step (see _step_pre).
        self._step_frames: List[Any] = []
        self._step_start = 0
        self._zero_grad_called = False
        self._grad_refs: Dict[int, List[Tuple[Any, Any]]] = {}
        # optimizer id -> (the optimizer, its watched parameters), all weak references
        self._watched_params: Dict[int, Tuple[Any, List[Any]]] = {}
        # optimizer id -> (when the next breakdown is due, breakdowns so far)
        self._breakdowns: Dict[int, Tuple[int, int]] = {}
        self._cleared = CLEARED_NONE
        self._rss_read_at = -LIGHT_RSS_EVERY_NS  # the step rows' last RSS: due at the first
        # Sampled detail (DETAIL_EVERY_NS): whether the current step is recorded in detail, when
        # the last detailed one was chosen, the last step's end and the time between two ends.
        self.detail = True
        self._detailed_at = 0
        self._step_end = 0
        self._step_period = 0
        self._sampling_announced = False

    def _step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        frames = self._step_frames
        if frames:  # an optimizer wrapping another, or a step that raised
            self._drop_ended_steps(frames)
        # Called by torch's step wrapper, whose frame also calls the post-hook.
        frames.append(sys._getframe(1))
        if len(frames) > 1:
            return  # an optimizer wrapping another: count the outermost step only
        if self._backward_start is not None and self._queue_callback is None:
            self._backward_finished()
        if self.detail and not self._observer_attached and self._cuda_in_use():
            self._attach_oom_observer()
        self._step_start = _now()
        with self._reader.no_torch_function():
            self._cleared = self._cleared_how(optimizer)
        self.phase = "optimizer"

    def _drop_ended_steps(self, frames: List[Any]) -> None:
        """Forget the steps whose wrapper frame is no longer on this thread's stack: they
        raised (the script may catch it and go on), so their post-hook never ran."""
        live: Set[int] = set()
        frame: Any = sys._getframe(2)
        while frame is not None:
            live.add(id(frame))  # (every frame in `frames` is alive: ids cannot collide)
            frame = frame.f_back
        frames[:] = [f for f in frames if id(f) in live]

    def _step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        frames = self._step_frames
        caller = sys._getframe(1)
        while frames:  # this step's frame, and any of steps inside it that raised
            if frames.pop() is caller:
                break
        if frames:
            return  # a step inside another
        self.steps += 1
        end = _now()
        detail = self.detail
        agent = self.agent
        with self._reader.no_torch_function():
            if self._cleared != CLEARED_ZERO_GRAD:
                # Cleared during the step counts for this step: a closure (LBFGS, Lightning)
                # calls zero_grad after the pre-hook ran, and the post-hook resets the flag.
                during = self._cleared_how(optimizer)
                if during == CLEARED_ZERO_GRAD or self._cleared == CLEARED_NONE:
                    self._cleared = during
            rss_due = self.steps <= RSS_EVERY_STEP or end - self._rss_read_at >= (
                RSS_EVERY_NS if detail else LIGHT_RSS_EVERY_NS
            )
            # A light step reads memory only with the RSS: mostly a row of -1s.
            memory = (
                self._step_memory(optimizer, end, detail, rss_due)
                if detail or rss_due
                else _NOT_READ
            )
            agent.row(
                STEP_TABLE,
                (
                    self._step_start,
                    end,
                    self.steps,
                    agent.name_id(self._reader.name(type(optimizer))),
                    self._cleared,
                    *memory,
                ),
            )
            self._zero_grad_called = False
            self._remember_grads(optimizer, 4 if detail else 1)
        self.phase = None
        self._choose_detail(end)
        if self._discovery:
            self._stop_discovery()
        elif end >= self._next_discovery:
            self._start_discovery()
        self._iteration_ended(OPTIMIZER_STEPS, self.steps)

    def _step_memory(
        self, optimizer: Any, end: int, detail: bool, rss_due: bool
    ) -> Tuple[int, ...]:
        """The step row's memory columns: the RSS (when due), the CUDA counters and, on a
        detailed step, the breakdown when due; -1 for each not read."""
        rss = -1
        if rss_due:
            self._rss_read_at = end
            read = self._rss()
            rss = -1 if read is None else read
        cuda = self._cuda_state() if self._cuda_in_use() else None
        if cuda is not None:
            gpu = tuple(cuda.get(k, -1) for k in _STEP_CUDA_FIELDS)
            device = cuda.get("device", -1)
        else:
            gpu, device = _NO_CUDA, -1
        breakdown = None
        if detail:
            # Mostly not due: the time check is made here, _breakdown is called only to measure.
            due = self._breakdowns.get(id(optimizer))
            if due is None or due[1] < BREAKDOWN_WARMUP_STEPS or end >= due[0]:
                breakdown = self._breakdown(optimizer, end)
        sizes = _NOT_MEASURED if breakdown is None else breakdown_row(breakdown)
        return (rss, device, *gpu, *sizes)

    def _choose_detail(self, end: int) -> None:
        """Whether the next step is recorded in detail (see DETAIL_EVERY_NS)."""
        if self._step_end:
            self._step_period = end - self._step_end
        self._step_end = end
        if self.steps < DETAIL_WARMUP_STEPS or end - self._detailed_at >= DETAIL_EVERY_NS:
            self.detail = True
            self._detailed_at = end
            return
        self.detail = False
        if not self._sampling_announced:
            self._sampling_announced = True
            self.agent.event(
                "step_detail", from_step=self.steps + 1, every_ns=DETAIL_EVERY_NS, t=end
            )

    def _cleared_how(self, optimizer: Any) -> int:
        """How the gradients were cleared since this optimizer's previous step (CLEARED_*).

        Asked before the step and, unless that answer was CLEARED_ZERO_GRAD, again after it: a
        closure passed to step() may clear (zero_grad, or .grad set to None) while it runs.
        """
        if self._zero_grad_called:
            return CLEARED_ZERO_GRAD
        refs = self._grad_refs.get(id(optimizer))
        if refs is None:
            return CLEARED_FIRST_STEP
        grad_of = self._reader.grad_of
        for param_ref, grad_ref in refs:
            param = param_ref()
            if param is None:
                continue
            grad = grad_of(param)
            if grad is None or grad is not grad_ref():
                return CLEARED_GRAD_REPLACED  # set to None (or replaced) and recomputed
        return CLEARED_NONE

    def _remember_grads(self, optimizer: Any, watched: int) -> None:
        """Weak references to (up to) `watched` parameters' gradients, for _cleared_how.

        The parameters are the first four with a gradient, found once per optimizer and
        looked for again only when one of them is gone or has none. A light step watches the
        first of them only: clearing by zero_grad or by setting .grad to None (by hand or by
        a framework) replaces every gradient alike.
        """
        key = id(optimizer)
        watching = self._watched_params.get(key)
        reader = self._reader
        grad_of = reader.grad_of
        # (An optimizer freed and a new one at its address would otherwise inherit its list.)
        if watching is not None and watching[0]() is optimizer:
            refs = []
            for param_ref in watching[1][:watched]:
                param = param_ref()
                grad = None if param is None else grad_of(param)
                if grad is None:
                    break
                refs.append((param_ref, weakref.ref(grad)))
            else:
                self._grad_refs[key] = refs
                return
        refs = []
        for group in reader.sequence(reader.attribute(optimizer, "param_groups", None)):
            for param in reader.sequence(reader.item(group, "params")):
                grad = grad_of(param) if reader.is_tensor(param) else None
                if grad is not None:
                    refs.append((weakref.ref(param), weakref.ref(grad)))
                    if len(refs) >= 4:
                        break
            if len(refs) >= 4:
                break
        self._grad_refs[key] = refs
        self._watched_params[key] = (weakref.ref(optimizer), [param for param, _ in refs])

    def _breakdown(self, optimizer: Any, now: int) -> Optional[Dict[str, Dict[str, int]]]:
        next_at, measured = self._breakdowns.get(id(optimizer), (0, 0))
        if measured >= BREAKDOWN_WARMUP_STEPS and now < next_at:
            return None
        # CPU time, as heap.py paces its reads: a wake-up delay is no cost of the walk.
        began = time.thread_time_ns()
        try:
            result = measure_breakdown(optimizer, self._reader)
        except Exception as exc:
            self.agent.error("breakdown", exc)
            return None
        cost = time.thread_time_ns() - began
        wait = max(BREAKDOWN_EVERY_NS, int(cost / BREAKDOWN_SHARE))
        self._breakdowns[id(optimizer)] = (now + wait, measured + 1)
        return result

    def _zero_grad_wrapper(self, original: Any) -> Any:
        inst = self

        def zero_grad(owner: Any, *args: Any, **kwargs: Any) -> Any:
            inst._zero_grad_called = True
            return original(owner, *args, **kwargs)

        return zero_grad


_STEP_CUDA_FIELDS = (
    "allocated",
    "reserved",
    "allocated_peak",
    "reserved_peak",
    "active",
    "inactive_split",
    "alloc_retries",
    "ooms",
)
_NO_CUDA = (-1,) * len(_STEP_CUDA_FIELDS)
_NOT_MEASURED = (-1,) * 6
_NOT_READ = (-1, -1, *_NO_CUDA, *_NOT_MEASURED)  # a light step row's memory columns
