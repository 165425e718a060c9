"""Forward and backward spans: the rows of the `spans` table, timed around the roots' calls.

- forward spans: instance hooks on the outermost modules only ("roots", found by
  discovery.py), so leaf modules keep PyTorch's fast path. The first outermost forward with
  autograd on from each line of the user's code is named (forward_call_site);
- backward spans: a gradient hook on one output tensor of a root forward marks the start,
  and a callback queued on the autograd engine marks the end. No full backward hooks: they
  break in-place operations such as ReLU(inplace=True). The gradient hook is marked
  unserializable (_BackwardHook), as torch.save expects of hooks it should not warn about.

A light step's forwards (steps.py: sampled detail) only mark the phase. The outputs are read
without running the script's code (reader.py).
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple

from ..codefiles import is_library_file
from ..protocol import (
    BACKWARD_PASSES,
    FLAG_AUTOCAST_CPU,
    FLAG_AUTOCAST_CUDA,
    FLAG_GRAD,
    FLAG_REQUIRES_GRAD,
    FLAG_TRAINING,
    FORWARD_PASSES,
    SPAN_BACKWARD,
    SPAN_FORWARD,
    SPAN_LINK,
    SPAN_TABLE,
)
from .clock import now as _now
from .discovery import DISCOVERY_FORWARDS
from .port import AgentPort
from .reader import Reader, first_grad_tensor

MAX_CALL_SITES = 256  # distinct (module class, calling line) pairs recorded per run


class SpanHooks:
    """Instrumentation's forward and backward spans (a mixin: see instrument.py)."""

    # Of Instrumentation's other parts.
    agent: AgentPort
    torch: Any
    _local: threading.local
    _is_compiling: Callable[[], bool]
    _reader: Reader
    phase: Optional[str]
    detail: bool
    _step_end: int
    _step_period: int
    _observer_attached: bool
    _discovery: List[Any]
    _quiet_forwards: int
    _next_discovery: int
    _start_discovery: Callable[[], None]
    _stop_discovery: Callable[[], None]
    _cuda_in_use: Callable[[], bool]
    _attach_oom_observer: Callable[[], None]
    _iteration_ended: Callable[[str, int], None]
    if TYPE_CHECKING:  # (called with a keyword, which a Callable annotation cannot name)

        def observe_exception(self, exc: BaseException, where: str) -> None: ...

    def _init_spans(self, torch: Any) -> None:
        self._forward_ids = 0
        self._backward_start: Optional[int] = None
        self._backward_forwards: List[int] = []
        self._grad_enabled: Callable[[], bool] = torch.is_grad_enabled
        self._tensor_type: Any = getattr(torch, "Tensor", ())
        self._queue_callback = _engine_queue_callback(torch)
        self._backwards = 0
        self._call_sites: Set[Tuple[Any, Any, int]] = set()
        # Frames in these folders are torch's or memsight's, not the line of the user's code
        # that called the model (torch.nn.modules.module's _call_impl, the agent's hooks).
        self._library_files: Dict[str, bool] = {}  # codefiles' verdict, by path
        self._outermost_forwards = 0

    def _stack(self) -> List[List[Any]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    # The two root hooks run at every outermost forward: the helpers they need are inlined
    # and the torch functions bound in _init_spans (a step's compute evicts this code from the
    # CPU's caches, so each call and attribute lookup costs several times its warm cost).

    def _root_pre(self, module: Any, args: Any) -> None:
        if self._is_compiling():
            return
        if not self.detail:
            # A light step's forward: only the phase. A forward that comes well after the
            # training loop's last step (validation, a second loop) is recorded in detail.
            if _now() - self._step_end <= self._step_period * 2:
                self.phase = "forward"
                return
            self.detail = True
        local = self._local
        try:
            stack = local.stack
        except AttributeError:
            stack = local.stack = []
        if len(stack) > 64:  # spans left open by KeyboardInterrupt and the like
            stack.clear()
        if not self._observer_attached and self._cuda_in_use():
            self._attach_oom_observer()
        self._forward_ids += 1
        grad = bool(self._grad_enabled())
        if not stack:
            self._outermost_forwards += 1
            if grad:
                self._note_call_site(module)
            self._iteration_ended(FORWARD_PASSES, self._outermost_forwards)
        # The module's training flag as nn.Module stores it, never through a property of its
        # class (unknown: counted as training, nn.Module's default).
        training = self._reader.attribute(module, "training", None) is not False
        stack.append([module, _now(), self._forward_ids, training, grad, self._autocast()])
        self.phase = "forward"

    def _root_post(self, module: Any, args: Any, output: Any) -> None:
        if self._is_compiling():
            return
        stack = getattr(self._local, "stack", None)
        if not stack or stack[-1][0] is not module:
            if not self.detail:  # a light step's forward ended
                self.phase = None
                failed = sys.exc_info()[1]
                if failed is not None:
                    self.observe_exception(failed, where="forward")
            return
        _, start, forward_id, training, grad, autocast = stack.pop()
        end = _now()
        failed = sys.exc_info()[1]  # set when the forward raised (always_call hooks)
        flags = (FLAG_TRAINING if training else 0) | (FLAG_GRAD if grad else 0)
        if autocast is not None:
            flags |= FLAG_AUTOCAST_CUDA if autocast == "cuda" else FLAG_AUTOCAST_CPU
        if failed is not None:
            self.observe_exception(failed, where="forward")
        elif grad:
            # The output is read by its exact type and C-level access only (no isinstance, no
            # method of its class) and the tensor reads with __torch_function__ (subclasses',
            # modes') off: the script sees none of them.
            with self._reader.no_torch_function():
                # The common case, one tensor out, without first_grad_tensor's walk.
                if type(output) is self._tensor_type:
                    if output.grad_fn is not None and self._watch(output, forward_id):
                        flags |= FLAG_REQUIRES_GRAD
                elif self._watch_backward(output, forward_id):
                    flags |= FLAG_REQUIRES_GRAD
        agent = self.agent
        module_id = agent.name_id(self._reader.name(type(module)))
        agent.row(SPAN_TABLE, (start, end, SPAN_FORWARD, forward_id, module_id, flags, len(stack)))
        if stack:
            return
        self.phase = "backward" if self._backward_start is not None else None
        if failed is not None:
            return
        if self._discovery:
            self._quiet_forwards += 1
            if self._quiet_forwards >= DISCOVERY_FORWARDS:
                self._stop_discovery()
        elif end >= self._next_discovery:
            self._start_discovery()

    def _note_call_site(self, module: Any) -> None:
        """Record, once per place, the line of the user's code that called an outermost module
        with autograd on (inference-without-no-grad names it). The walk up the stack stops at
        the first frame of the user's code (not torch, not a framework such as Lightning that
        called the model, not memsight; profiler/codefiles.py decides): a few microseconds per
        forward, and an event only for a (module class, line) pair not seen before."""
        frame: Any = sys._getframe(2)
        known = self._library_files
        for _ in range(60):
            if frame is None:
                return
            path = frame.f_code.co_filename
            library = known.get(path)
            if library is None:
                library = known[path] = is_library_file(path)
            if not library:
                break
            frame = frame.f_back
        else:
            return
        key = (type(module), frame.f_code, frame.f_lineno)
        if key in self._call_sites or len(self._call_sites) >= MAX_CALL_SITES:
            return
        self._call_sites.add(key)
        self.agent.event(
            "forward_call_site",
            forward_id=self._forward_ids,
            module=self.agent.name_id(self._reader.name(type(module))),
            file=frame.f_code.co_filename,
            line=frame.f_lineno,
            function=frame.f_code.co_name,
        )

    def _autocast(self) -> Optional[str]:
        torch = self.torch
        try:
            for device in ("cuda", "cpu"):
                if torch.is_autocast_enabled(device):
                    return device
            return None
        except TypeError:  # torch < 2.4: no device argument
            if torch.is_autocast_enabled():
                return "cuda"
            cpu = getattr(torch, "is_autocast_cpu_enabled", None)
            return "cpu" if cpu is not None and cpu() else None

    def _watch_backward(self, output: Any, forward_id: int) -> bool:
        tensor = first_grad_tensor(self._reader, output)
        if tensor is None:
            return False
        return self._watch(tensor, forward_id)

    def _watch(self, tensor: Any, forward_id: int) -> bool:
        """Mark the start of the backward through `tensor` (one that has a grad_fn).

        torch.Tensor's register_hook, not an override of the tensor's class; called with
        __torch_function__ off (_root_post).
        """
        try:
            self._reader.register_hook(tensor, _BackwardHook(self._backward_started, forward_id))
        except Exception:
            return False
        return True

    def _backward_started(self, forward_id: int, _grad: Any) -> None:
        if self._backward_start is not None:
            self._backward_forwards.append(forward_id)
            return None
        self._backward_start = _now()
        self._backward_forwards = [forward_id]
        self.phase = "backward"
        if self._queue_callback is not None:
            try:
                self._queue_callback(self._backward_finished)
            except Exception as exc:
                self.agent.error("queue_callback", exc)
        return None

    def _backward_finished(self) -> None:
        start, self._backward_start = self._backward_start, None
        if start is None:
            return
        end = _now()
        forwards, self._backward_forwards = self._backward_forwards, []
        self.agent.row(SPAN_TABLE, (start, end, SPAN_BACKWARD, forwards[0], 0, 0, 0))
        for forward_id in forwards:
            self.agent.row(SPAN_TABLE, (start, end, SPAN_LINK, forward_id, 0, 0, 0))
        if self.phase == "backward":
            self.phase = None
        self._backwards += 1
        self._iteration_ended(BACKWARD_PASSES, self._backwards)


class _BackwardHook(functools.partial):  # type: ignore[type-arg]
    """The gradient hook on a root's output: torch.save of that tensor must not warn of it."""

    __slots__ = ()
    __torch_unserializable__ = True


def _engine_queue_callback(torch: Any) -> Optional[Callable[[Callable[[], None]], None]]:
    variable = getattr(getattr(torch, "autograd", None), "Variable", None)
    engine = getattr(variable, "_execution_engine", None)
    return getattr(engine, "queue_callback", None)
