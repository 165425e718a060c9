"""PyTorch instrumentation: iterations, phases, modes, zero_grad, memory breakdown, OOMs.

Installed in the importing thread right after `import torch` (see imports.py), using public
or feature-detected APIs only:

- optimizer steps: the global optimizer step pre/post hooks; each step is a row of the
  `steps` table with the memory state, whether gradients were cleared since the previous
  step or during this one (in a closure passed to step()), and (measured for the first
  steps, then at most once a second) the bytes of parameters, gradients and optimizer state;
- forward spans (rows of the `spans` table): hooks on the *outermost* modules only. Global
  forward hooks run briefly to discover which modules are called at depth 0 ("roots"); each
  root then gets its own instance hooks and the global hooks are removed, so leaf modules
  keep PyTorch's fast path.
  Discovery runs again when a module is constructed, after train()/eval() switches, at
  epoch starts and every 10 s;
- backward spans: a gradient hook on one output tensor of a root forward marks the start,
  and a callback queued on the autograd engine marks the end. No full backward hooks: they
  break in-place operations such as ReLU(inplace=True);
- modes: Module.train (so eval() too), Module.__init__, Optimizer.zero_grad,
  Module.zero_grad and DataLoader.__iter__ are wrapped at class level to record switches,
  new modules, clearing and epochs;
- OOMs: CUDA's allocator OOM observer and forward spans that end in an OOM exception
  (caught by the script or not); the agent adds sys.monitoring RAISE events on Python 3.12+
  and uncaught errors.

Nothing here changes values the script computes: no RNG use, no grad-mode changes, no
tensor writes. Everything inside torch.compile'd regions is skipped. No code of the script's
runs in the hooks: module outputs, modules, optimizers, loaders and tensors are read by exact
type and C-level access, tensors with __torch_function__ off (_Reader); datasets and roots are
known by identity; a step that raised is dropped at the next one (_step_pre).

The roots' instance hooks are bound methods of this object, which holds locks and cannot be
copied or pickled, so they are kept out of what the script does with its models:

- copy, deepcopy, pickle, torch.save: nn.Module gets a class-level __reduce_ex__ that
  returns object.__reduce_ex__'s value with our hooks filtered out of the module's state (a
  filtered copy: the model itself keeps them). A module class with its own __deepcopy__ copies
  them by its own means: that copy then shares them (this object copies as itself);
- TorchScript (torch.jit.script, and torch.jit.trace of modules with exported methods) reads
  the hook tables while it builds a module: torch.jit._recursive.create_script_module is
  wrapped to show it filtered tables for the duration;
- torch.export.export with strict=True cannot capture a model while any global module hook
  exists: discovery is suspended for the duration of an export;
- torch.compile: the hooks return at once while dynamo traces them, and the warning
  OptimizedModule gives when global hooks exist ignores discovery's
  (torch.nn.modules.module._has_any_global_hook is wrapped);
- the gradient hook on a forward's output is marked unserializable, as torch.save expects of
  hooks it should not warn about.

Every wrapper is feature-detected and undone by uninstall().
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import os
import sys
import threading
import time
import types
import weakref
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    Iterator,
    List,
    NoReturn,
    Optional,
    Set,
    Tuple,
)

from ..codefiles import is_library_file
from ..protocol import (
    BACKWARD_PASSES,
    CLEARED_FIRST_STEP,
    CLEARED_GRAD_REPLACED,
    CLEARED_NONE,
    CLEARED_ZERO_GRAD,
    FLAG_AUTOCAST_CPU,
    FLAG_AUTOCAST_CUDA,
    FLAG_GRAD,
    FLAG_REQUIRES_GRAD,
    FLAG_TRAINING,
    FORWARD_PASSES,
    OPTIMIZER_STEPS,
    SPAN_BACKWARD,
    SPAN_FORWARD,
    SPAN_LINK,
    SPAN_TABLE,
    STEP_TABLE,
)
from .census_schedule import (
    ITERATION_RANK,
    CensusSchedule,
)
from .port import AgentPort

MAX_CALL_SITES = 256  # distinct (module class, calling line) pairs recorded per run
DISCOVERY_FORWARDS = 3  # root forwards without a new root before discovery ends
REDISCOVER_NS = 10 * 1_000_000_000
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
# The tables of a module's forward hooks, keyed by hook id; the first two hold the callables.
HOOK_TABLES = (
    "_forward_pre_hooks",
    "_forward_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)
_ABSENT = object()  # an attribute that a wrapper adds rather than replaces


# The clock of every timestamp (rows, events): called several times per step, so bound once.
_now = time.monotonic_ns


class Instrumentation:
    def __init__(self, agent: AgentPort, torch: Any) -> None:
        self.agent = agent
        self.torch = torch
        self._local = threading.local()
        self._handles: List[Any] = []
        self._discovery: List[Any] = []
        self._patches: List[Tuple[Any, str, Any]] = []
        self._suspended = 0  # exports under way: discovery stays off
        self._rediscover = False  # discovery was wanted while suspended
        self.roots = _Roots()
        self._quiet_forwards = 0
        self._next_discovery = 0
        self.phase: Optional[str] = None
        self.steps = 0
        # The frames of torch's step wrapper (profile_hook_step) for the steps under way,
        # outermost first: a step that raised never runs its post-hook, and its frame, no
        # longer on the stack, is dropped at the next step (see _step_pre).
        self._step_frames: List[Any] = []
        self._step_start = 0
        self._forward_ids = 0
        self._backward_start: Optional[int] = None
        self._backward_forwards: List[int] = []
        self._zero_grad_called = False
        self._grad_refs: Dict[int, List[Tuple[Any, Any]]] = {}
        # optimizer id -> (the optimizer, its watched parameters), all weak references
        self._watched_params: Dict[int, Tuple[Any, List[Any]]] = {}
        # optimizer id -> (when the next breakdown is due, breakdowns so far)
        self._breakdowns: Dict[int, Tuple[int, int]] = {}
        # id(dataset) -> [a weak reference to it (None where it takes none), its type, loader
        # id, epochs]: by identity, never by the dataset's own __hash__ / __eq__.
        self._datasets: Dict[int, List[Any]] = {}
        self._dataset_ids = 0
        self._observer_attached = False
        self._cleared = CLEARED_NONE
        self._statm: Optional[int] = None
        self._page_size = 0  # read with the first RSS
        self._rss_read_at = -LIGHT_RSS_EVERY_NS  # the step rows' last RSS: due at the first
        # Sampled detail (DETAIL_EVERY_NS): whether the current step is recorded in detail, when
        # the last detailed one was chosen, the last step's end and the time between two ends.
        self.detail = True
        self._detailed_at = 0
        self._step_end = 0
        self._step_period = 0
        self._sampling_announced = False
        compiler = getattr(torch, "compiler", None)
        self._is_compiling: Callable[[], bool] = getattr(compiler, "is_compiling", lambda: False)
        self._grad_enabled: Callable[[], bool] = torch.is_grad_enabled
        self._tensor_type: Any = getattr(torch, "Tensor", ())
        self._reader = _Reader(torch)
        self._queue_callback = _engine_queue_callback(torch)
        self._backwards = 0
        self._iteration_rank = len(ITERATION_RANK)  # the best kind of iteration seen so far
        # Reads the C heap between iterations (the agent's; a stand-in agent may lack it).
        self._heap_between_iterations: Optional[Callable[[], None]] = getattr(
            agent, "heap_between_iterations", None
        )
        self._call_sites: Set[Tuple[Any, Any, int]] = set()
        # Frames in these folders are torch's or memsight's, not the line of the user's code
        # that called the model (torch.nn.modules.module's _call_impl, the agent's hooks).
        self._library_files: Dict[str, bool] = {}  # codefiles' verdict, by path
        self._outermost_forwards = 0
        self.censuses = CensusSchedule(agent, torch, str(getattr(agent, "census", "never")))

    # -- install / uninstall ----------------------------------------------------------------

    def install(self) -> None:
        """Install every hook and wrapper, or, if any step fails, none of them."""
        try:
            self._install()
        except BaseException:
            self.uninstall()
            raise

    def _install(self) -> None:
        torch = self.torch
        optim = importlib.import_module("torch.optim.optimizer")
        self._handles.append(optim.register_optimizer_step_pre_hook(self._step_pre))
        self._handles.append(optim.register_optimizer_step_post_hook(self._step_post))
        self._wrap(torch.optim.Optimizer, "zero_grad", self._zero_grad_wrapper)
        self._wrap(torch.nn.Module, "zero_grad", self._zero_grad_wrapper)
        self._wrap(torch.nn.Module, "train", self._train_wrapper)
        self._wrap(torch.nn.Module, "__init__", self._init_wrapper)
        self._wrap(torch.utils.data.DataLoader, "__iter__", self._iter_wrapper)
        self._wrap(torch.nn.Module, "__reduce_ex__", self._reduce_wrapper)
        self._wrap_if_present("torch.jit._recursive", "create_script_module", self._script_wrapper)
        self._wrap_if_present("torch.export", "export", self._export_wrapper)
        self._wrap_if_present(
            "torch.nn.modules.module", "_has_any_global_hook", self._global_hook_wrapper
        )
        self._start_discovery()

    def uninstall(self) -> None:
        self._stop_discovery()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for _root, handles in list(self.roots.items()):
            for handle in handles:
                handle.remove()
        self.roots = _Roots()
        for owner, name, original in reversed(self._patches):
            if original is _ABSENT:
                delattr(owner, name)  # added by _wrap: the inherited one shows again
            else:
                setattr(owner, name, original)  # put back exactly the attribute found
        self._patches.clear()

    def _wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Replace owner.name (its own, or else the inherited one) with make(it)."""
        original = owner.__dict__.get(name, _ABSENT)
        current = getattr(owner, name) if original is _ABSENT else original
        wrapper = functools.wraps(current)(make(current))
        self._patches.append((owner, name, original))
        setattr(owner, name, wrapper)

    def _wrap_if_present(self, module: str, name: str, make: Callable[[Any], Any]) -> None:
        """Wrap a function of a torch module that this torch may not have or not load.

        Never imports: installing runs inside the script's `import torch`.
        """
        owner = sys.modules.get(module)
        if owner is not None and callable(getattr(owner, "__dict__", {}).get(name)):
            self._wrap(owner, name, make)

    # Objects holding the hooks must not be copied into the script's models: see the module
    # docstring. What still reaches this object copies it as itself and refuses pickling.

    def __copy__(self) -> "Instrumentation":
        return self

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Instrumentation":
        return self

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError("cannot pickle memsight's instrumentation (a module's forward hook)")

    # -- root discovery -----------------------------------------------------------------------

    def _start_discovery(self) -> None:
        if self._suspended:
            self._rediscover = True
            return
        if self._discovery:
            return
        module = importlib.import_module("torch.nn.modules.module")
        self._quiet_forwards = 0
        self._discovery.append(module.register_module_forward_pre_hook(self._discover_pre))
        self._discovery.append(
            module.register_module_forward_hook(self._discover_post, **_always())
        )
        self._next_discovery = _now() + REDISCOVER_NS

    def _stop_discovery(self) -> None:
        for handle in self._discovery:
            handle.remove()
        self._discovery.clear()

    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def _discover_pre(self, module: Any, args: Any) -> None:
        if self._is_compiling():
            return
        depth = self._depth()
        self._local.depth = depth + 1
        # Adopt only modules called while no root forward is open in this thread: discovery
        # can start in the middle of a forward, where the depth count knows nothing yet.
        if (
            depth == 0
            and not self._stack()
            and module not in self.roots
            and self._reader.name(type(module)) not in _SCRIPTED
        ):
            self._adopt(module, args)

    def _discover_post(self, module: Any, args: Any, output: Any) -> None:
        if self._is_compiling():
            return
        self._local.depth = max(0, self._depth() - 1)

    def _adopt(self, module: Any, args: Any) -> None:
        # nn.Module's own registration, not an override of the module's class.
        nn_module = self.torch.nn.Module
        try:
            handles = [
                nn_module.register_forward_pre_hook(module, self._root_pre),
                nn_module.register_forward_hook(module, self._root_post, **_always()),
            ]
            self.roots[module] = handles
        except Exception as exc:
            self.agent.error("adopt_root", exc)
            return
        self._quiet_forwards = 0
        # This call's instance pre-hooks were listed before the module had ours: open it here.
        self._root_pre(module, args)

    # -- forward / backward spans ---------------------------------------------------------------

    def _stack(self) -> List[List[Any]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    # The two root hooks run at every outermost forward: the helpers they need are inlined
    # and the torch functions bound in __init__ (a step's compute evicts this code from the
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
                # The common case, one tensor out, without _first_grad_tensor's walk.
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
        tensor = _first_grad_tensor(self._reader, output)
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

    # -- optimizer steps ----------------------------------------------------------------------

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

    def _iteration_ended(self, kind: str, index: int) -> None:
        """An iteration of `kind` ended (for forwards: the next one begins). The loop's
        iterations are its optimizer steps, else its backward passes, else its outermost
        forwards (as series.py counts them): the C heap is read at the best kind seen so far,
        paced per iteration (heap.py), and the census schedule decides on a census."""
        rank = ITERATION_RANK[kind]
        if rank <= self._iteration_rank:
            self._iteration_rank = rank
            if self._heap_between_iterations is not None:
                self._heap_between_iterations()
        self.censuses.at_boundary(kind, index)

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
        sizes = _NOT_MEASURED if breakdown is None else _breakdown_row(breakdown)
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

    # -- modes, zero_grad, epochs ---------------------------------------------------------------

    def _zero_grad_wrapper(self, original: Any) -> Any:
        inst = self

        def zero_grad(owner: Any, *args: Any, **kwargs: Any) -> Any:
            inst._zero_grad_called = True
            return original(owner, *args, **kwargs)

        return zero_grad

    def _init_wrapper(self, original: Any) -> Any:
        inst = self

        def __init__(module: Any, *args: Any, **kwargs: Any) -> None:
            original(module, *args, **kwargs)
            # A new module may be called at the top level; not one built by torch.compile or
            # torch.export while they trace (nor one the script builds in a compiled region).
            if not inst._discovery and not inst._is_compiling():
                inst._start_discovery()

        return __init__

    def _train_wrapper(self, original: Any) -> Any:
        inst = self

        def train(module: Any, mode: bool = True) -> Any:
            depth = getattr(inst._local, "train_depth", 0)
            # The flag as nn.Module stores it, never through a property of the module's class:
            # where it cannot be read so, every switch is taken for a change.
            before = inst._training(module)
            inst._local.train_depth = depth + 1
            try:
                result = original(module, mode)
            finally:
                inst._local.train_depth = depth
            if depth == 0:
                after = inst._training(module)
                if after is None:
                    after = mode is not False
                if before is not after:
                    name = inst._reader.name(type(module))
                    inst.agent.event("mode", training=after, module=name)
                    inst.detail = True  # evaluation starting, or training again: in detail
                    inst._start_discovery()
            return result

        return train

    def _training(self, module: Any) -> Optional[bool]:
        """A module's training flag from its instance dict; None where its class defines
        `training` itself (a property: never called) or the flag is no bool."""
        value = self._reader.attribute(module, "training", None)
        return value if type(value) is bool else None

    def _iter_wrapper(self, original: Any) -> Any:
        inst = self

        def __iter__(loader: Any) -> Any:
            start = _now()
            iterator = original(loader)
            try:
                inst._epoch(loader, start)
            except Exception as exc:
                inst.agent.error("epoch", exc)
            return iterator

        return __iter__

    def _epoch(self, loader: Any, start: int) -> None:
        """A new iterator over a dataset starts an epoch of it.

        Keyed by the dataset rather than the DataLoader, because many scripts build a new
        DataLoader every epoch. The dataset is known by its identity, never compared or
        hashed by its own methods (a tensor's == compares elements); one that takes no weak
        reference (a list) by its id and type alone.
        """
        reader = self._reader
        dataset = reader.attribute(loader, "dataset", loader)
        key = id(dataset)
        datasets = self._datasets
        entry = datasets.get(key)
        if entry is not None and (
            entry[1] is not type(dataset) or (entry[0] is not None and entry[0]() is not dataset)
        ):
            entry = None  # another object at a freed one's address
        if entry is None:
            try:
                ref: Any = weakref.ref(dataset, functools.partial(_forget, datasets, key))
            except TypeError:
                ref = None
                if len(datasets) >= MAX_DATASETS:  # ids only: drop the oldest
                    for old in [k for k, e in datasets.items() if e[0] is None][
                        : MAX_DATASETS // 2
                    ]:
                        del datasets[old]
            self._dataset_ids += 1
            entry = datasets[key] = [ref, type(dataset), self._dataset_ids, 0]
        entry[3] += 1
        workers = reader.attribute(loader, "num_workers", 0)
        self.agent.event(
            "epoch",
            t=start,
            loader=entry[2],
            index=entry[3],
            num_workers=workers if type(workers) is int else 0,
            persistent_workers=reader.attribute(loader, "persistent_workers", False) is True,
        )
        self.detail = True  # a new pass over data (an epoch, a validation loop): in detail
        self._start_discovery()

    # -- keeping the hooks out of copies, pickles, TorchScript and exports --------------------

    def _is_ours(self, hook: Any) -> bool:
        return type(hook) is types.MethodType and hook.__self__ is self

    def _our_ids(self, module: Any) -> List[Any]:
        """Ids of our hooks in a module's tables (usually none: only roots have them)."""
        state = self._reader.instance_dict(module)
        if state is None:
            return []
        ids = []
        for name in ("_forward_pre_hooks", "_forward_hooks"):
            table: Any = dict.get(state, name)
            if issubclass(type(table), dict):
                ids += [key for key, hook in list(dict.items(table)) if self._is_ours(hook)]
        return ids

    def _reduce_wrapper(self, original: Any) -> Any:
        inst = self

        def __reduce_ex__(module: Any, protocol: Any, /) -> Any:
            reduced = original(module, protocol)
            try:
                return inst._without_our_hooks(module, reduced)
            except Exception as exc:
                inst.agent.error("reduce_ex", exc)
                return reduced

        return __reduce_ex__

    def _without_our_hooks(self, module: Any, reduced: Any) -> Any:
        """A module's __reduce_ex__ value, with our hooks left out of the state it carries.

        Looks for the module's attributes (a dict holding its own hook tables) where
        object.__reduce_ex__ puts them (the state, or its first half beside __slots__ values)
        and, for classes with their own __reduce__ (fx.GraphModule), among the arguments.
        """
        ids = self._our_ids(module)
        if not ids or not issubclass(type(reduced), tuple) or tuple.__len__(reduced) < 2:
            return reduced
        own = self._reader.instance_dict(module)
        if own is None:
            return reduced
        tables = {name: dict.get(own, name) for name in HOOK_TABLES}
        # Read by the base types' own methods: the state or arguments of a class's own
        # __reduce__ may be the script's objects.

        def filtered(value: Any) -> Any:
            tp = type(value)
            if issubclass(tp, dict) and any(
                dict.get(value, name) is table
                for name, table in tables.items()
                if table is not None
            ):
                value = dict.copy(value)
                for name, table in tables.items():
                    if issubclass(type(table), dict) and value.get(name) is table:
                        kept = _copy_table(table)
                        for key in ids:
                            kept.pop(key, None)
                        value[name] = kept
            elif issubclass(tp, tuple) and tuple.__len__(value):
                items = list(tuple.__iter__(value))
                if issubclass(type(items[0]), dict):
                    first = filtered(items[0])
                    if first is not items[0]:
                        value = (first, *items[1:])
            return value

        items = list(tuple.__iter__(reduced))
        if issubclass(type(items[1]), tuple):
            given = list(tuple.__iter__(items[1]))
            args = [filtered(arg) for arg in given]
            if any(arg is not given[i] for i, arg in enumerate(args)):
                items[1] = tuple(args)
        if len(items) > 2:
            items[2] = filtered(items[2])
        return tuple(items)

    def _script_wrapper(self, original: Any) -> Any:
        inst = self

        def create_script_module(nn_module: Any, *args: Any, **kwargs: Any) -> Any:
            hidden = inst._hide_hooks(nn_module)
            try:
                return original(nn_module, *args, **kwargs)
            finally:
                inst._show_hooks(hidden)

        return create_script_module

    def _hide_hooks(self, root: Any) -> List[Tuple[Dict[str, Any], str, Any, Any]]:
        """Give modules in root's tree hook tables without ours until _show_hooks.

        TorchScript compiles every callable it finds in a module's hook tables. The tables
        themselves are left untouched (handles and hook order stay valid): a filtered copy
        stands in for each in the module's __dict__, set directly so that no __setattr__ runs.
        """
        hidden: List[Tuple[Dict[str, Any], str, Any, Any]] = []
        try:
            for module in root.modules():
                ids = self._our_ids(module)
                if not ids:
                    continue
                state = self._reader.instance_dict(module)
                if state is None:
                    continue
                for name in ("_forward_pre_hooks", "_forward_hooks"):
                    table: Any = dict.get(state, name)
                    if issubclass(type(table), dict) and any(
                        dict.__contains__(table, key) for key in ids
                    ):
                        kept = _copy_table(table)
                        for key in ids:
                            kept.pop(key, None)
                        state[name] = kept
                        hidden.append((state, name, table, kept))
        except Exception as exc:
            self.agent.error("hide_hooks", exc)
        return hidden

    def _show_hooks(self, hidden: List[Tuple[Dict[str, Any], str, Any, Any]]) -> None:
        for state, name, table, kept in reversed(hidden):
            if state.get(name) is kept:  # (plain dict operations: nothing here can raise)
                state[name] = table

    def _export_wrapper(self, original: Any) -> Any:
        inst = self

        def export(*args: Any, **kwargs: Any) -> Any:
            inst._suspend_discovery()
            try:
                return original(*args, **kwargs)
            finally:
                inst._resume_discovery()

        return export

    def _suspend_discovery(self) -> None:
        """No global module hooks until _resume_discovery: strict export refuses them."""
        self._suspended += 1
        if self._discovery:
            self._rediscover = True
            try:
                self._stop_discovery()
            except Exception as exc:
                self.agent.error("suspend_discovery", exc)

    def _resume_discovery(self) -> None:
        self._suspended = max(0, self._suspended - 1)
        if not self._suspended and self._rediscover:
            self._rediscover = False
            try:
                self._start_discovery()
            except Exception as exc:
                self.agent.error("resume_discovery", exc)

    def _global_hook_wrapper(self, original: Any) -> Any:
        inst = self

        def _has_any_global_hook() -> Any:
            result = original()
            if result and inst._discovery:
                try:
                    return inst._other_global_hooks()
                except Exception as exc:
                    inst.agent.error("global_hooks", exc)
            return result

        return _has_any_global_hook

    def _other_global_hooks(self) -> bool:
        """Whether global module hooks other than discovery's are registered."""
        module = sys.modules["torch.nn.modules.module"]
        ours = {handle.id for handle in self._discovery}
        for name in ("_global_backward_pre_hooks", "_global_backward_hooks"):
            if getattr(module, name, None):
                return True
        for name in (
            "_global_forward_pre_hooks",
            "_global_forward_hooks",
            "_global_forward_hooks_always_called",
        ):
            if any(key not in ours for key in getattr(module, name, ())):
                return True
        return False

    # -- memory state -----------------------------------------------------------------------

    def memory_state(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {}
        rss = self._rss()
        if rss is not None:
            state["rss"] = rss
        cuda = self._cuda_state()
        if cuda is not None:
            state["cuda"] = cuda
        return state

    def _cuda_in_use(self) -> bool:
        # Looked up each time, not bound once: torch.cuda may be replaced after install
        # (tests and some launchers stand in their own).
        cuda = getattr(self.torch, "cuda", None)
        return cuda is not None and bool(cuda.is_initialized())

    def _cuda_state(self) -> Optional[Dict[str, Any]]:
        """The current device and its allocator's counters; None without CUDA in use."""
        cuda = getattr(self.torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None
        try:
            device = int(cuda.current_device())
            stats = self.agent.cuda_reader().read(device)
            return {"device": device, **stats}
        except Exception as exc:
            self.agent.error("memory_state", exc)
            return None

    def _rss(self) -> Optional[int]:
        try:
            if self._statm is None:
                self._page_size = os.sysconf("SC_PAGE_SIZE")
                self._statm = os.open("/proc/self/statm", os.O_RDONLY)
            return int(os.pread(self._statm, 256, 0).split()[1]) * self._page_size
        except (OSError, ValueError, IndexError, AttributeError):
            return None

    # -- out-of-memory capture ----------------------------------------------------------------

    def _attach_oom_observer(self) -> None:
        cuda = getattr(self.torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return
        self._observer_attached = True
        attach = getattr(
            getattr(self.torch, "_C", None), "_cuda_attach_out_of_memory_observer", None
        )
        if attach is None:
            return
        try:
            attach(self._oom_observed)
        except Exception as exc:
            self.agent.error("oom_observer", exc)

    def _oom_observed(self, device: int, requested: int, limit: int, free: int) -> None:
        try:
            self.agent.event(
                "oom_observed",
                device=int(device),
                requested=int(requested),
                limit=int(limit),
                free=int(free),
                phase=self.phase,
                iteration=self.steps,
                memory=self.memory_state(),
            )
            # The allocator's block list (and a snapshot under --cuda-history): agent/snapshots.py
            cuda_oom = getattr(self.agent, "cuda_oom", None)
            if cuda_oom is not None:
                cuda_oom(int(device), int(requested))
        except Exception as exc:
            self.agent.error("oom_observed", exc)

    def observe_exception(self, exc: BaseException, where: str) -> None:
        self.agent.report_exception(exc, where=where)


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


def _breakdown_row(breakdown: Dict[str, Dict[str, int]]) -> Tuple[int, ...]:
    """params, grads, state bytes, each on the CPU and on accelerators (any other device)."""
    row = []
    for kind in ("params", "grads", "state"):
        by_device = breakdown[kind]
        cpu = by_device.get("cpu", 0)
        row += [cpu, sum(by_device.values()) - cpu]
    return tuple(row)


def measure_breakdown(
    optimizer: Any, reader: Optional[_Reader] = None
) -> Dict[str, Dict[str, int]]:
    """Bytes of parameters, gradients and optimizer state, by device type.

    Storages are counted once even when several tensors share them (tied weights, flat
    parameter buffers). Read without running the script's code (see _Reader): tensors of a
    class with its own __torch_dispatch__ (wrapper subclasses, whose storage is not theirs to
    tell) are left out.
    """
    if reader is None:
        reader = _Reader(sys.modules["torch"])
    totals: Dict[str, Dict[str, int]] = {"params": {}, "grads": {}, "state": {}}
    seen: Set[Tuple[str, Any, int]] = set()
    storage_of, device_of = reader.storage_of, reader.device_of

    def add(kind: str, tensor: Any) -> None:
        storage = storage_of(tensor)
        device = device_of(tensor)
        key = (device.type, device.index, storage.data_ptr())
        if key in seen or storage.data_ptr() == 0:
            return
        seen.add(key)
        bucket = totals[kind]
        bucket[device.type] = bucket.get(device.type, 0) + storage.nbytes()

    plain = reader.is_plain_tensor
    with reader.no_torch_function():
        for group in reader.sequence(reader.attribute(optimizer, "param_groups", None)):
            for param in reader.sequence(reader.item(group, "params")):
                if plain(param):
                    add("params", param)
                    grad = reader.grad_of(param)
                    if grad is not None and plain(grad):
                        add("grads", grad)
        for state in reader.values(reader.attribute(optimizer, "state", None)):
            for value in reader.values(state):
                if plain(value) and reader.dim_of(value) > 0:
                    add("state", value)
    return totals


def _always() -> Dict[str, Any]:
    """always_call=True where this torch has it (2.1+): a forward that raises still ends."""
    import inspect

    try:
        import torch.nn.modules.module as module_mod

        params = inspect.signature(module_mod.register_module_forward_hook).parameters
    except (ImportError, TypeError, ValueError):
        return {}
    return {"always_call": True} if "always_call" in params else {}


class _BackwardHook(functools.partial):  # type: ignore[type-arg]
    """The gradient hook on a root's output: torch.save of that tensor must not warn of it."""

    __slots__ = ()
    __torch_unserializable__ = True


def _first_grad_tensor(reader: _Reader, output: Any, budget: int = 16) -> Any:
    """The first tensor in a forward's output that requires grad and has a grad_fn.

    Looks into tuples, lists and dicts (and subclasses: a ModelOutput) by the base types' own
    methods; called with __torch_function__ off.
    """
    pending = [output]
    while pending and budget > 0:
        budget -= 1
        item = pending.pop(0)
        kind = reader.kind(type(item))
        if kind in (_TENSOR, _WRAPPER):
            if reader.requires_grad_of(item) and reader.grad_fn_of(item) is not None:
                return item
        elif kind == _TUPLE:
            pending.extend(tuple.__getitem__(item, _FIRST_ITEMS))
        elif kind == _LIST:
            pending.extend(list.__getitem__(item, _FIRST_ITEMS))
        elif kind == _DICT:
            pending.extend(list(dict.values(item))[:8])
    return None


def _engine_queue_callback(torch: Any) -> Optional[Callable[[Callable[[], None]], None]]:
    variable = getattr(getattr(torch, "autograd", None), "Variable", None)
    engine = getattr(variable, "_execution_engine", None)
    return getattr(engine, "queue_callback", None)


# -- reading the script's objects without running its code -----------------------------------

# What the hooks look into, by an object's exact type (_Reader.kind).
_OTHER, _TENSOR, _WRAPPER, _TUPLE, _LIST, _DICT = range(6)
_FIRST_ITEMS = slice(0, 8)  # of a tuple or list in a forward's output
_KNOWN_TYPES = 4096  # per-type decisions kept; past that they are made again
MAX_DATASETS = 64  # datasets known by their id alone (no weak reference), at most
_SCRIPTED = frozenset(("RecursiveScriptModule", "ScriptModule", "TopLevelTracedModule"))
# Attributes read from instance dicts (_Reader.attribute): where a class in the object's MRO
# defines one itself (a property, say), it is never read.
_ATTRIBUTES = ("training", "param_groups", "state", "dataset", "num_workers", "persistent_workers")
_PLAIN_DICTS = (dict, collections.OrderedDict)
_class_dict: Callable[[type], Any] = type.__dict__["__dict__"].__get__
_class_mro: Callable[[type], Tuple[type, ...]] = type.__dict__["__mro__"].__get__
_class_name: Callable[[type], str] = type.__dict__["__name__"].__get__


class _Reader:
    """Reads the script's objects as the hooks need them, without running the script's code.

    Objects are known by their exact type (`type(x)`, never `x.__class__` or isinstance, which
    reads a __class__ property) and issubclass against torch's and the builtins' classes;
    containers are read by the base type's own C methods (tuple.__getitem__, list.copy,
    dict.values: a subclass' overrides do not run); attributes (_ATTRIBUTES) from the instance
    dict, through the C descriptor; tensor fields through TensorBase's own descriptors, and
    only with __torch_function__ off (no_torch_function: neither a subclass' nor a mode's sees
    them). Tensors of a class with its own __torch_dispatch__ (wrapper subclasses) are never
    asked anything that dispatches (their size, device or storage). Per-type decisions are
    cached by id(type), with the type kept alive in the value: a class' own __hash__ or
    __eq__ (a metaclass') never runs.
    """

    def __init__(self, torch: Any) -> None:
        c = getattr(torch, "_C", None)
        self.no_torch_function: Callable[[], Any] = getattr(
            c, "DisableTorchFunction", contextlib.nullcontext
        )
        tensor = getattr(torch, "Tensor", None)
        base = getattr(c, "TensorBase", None) or getattr(c, "_TensorBase", None) or tensor
        self.tensor_base: Optional[type] = base if isinstance(base, type) else None
        fields: Any = _class_dict(base) if isinstance(base, type) else {}

        def field(name: str) -> Callable[..., Any]:
            """TensorBase's own getter or method `name` (a class' override never runs)."""
            descriptor = fields.get(name)
            if type(descriptor) is types.GetSetDescriptorType:
                get: Callable[[Any], Any] = descriptor.__get__
                return get
            if callable(descriptor):
                method: Callable[..., Any] = descriptor
                return method
            return lambda t: getattr(t, name)  # another torch: as the tensor has it

        self.grad_of = field("grad")
        self.grad_fn_of = field("grad_fn")
        self.requires_grad_of = field("requires_grad")
        self.device_of = field("device")
        self.storage_of = field("untyped_storage")
        self.dim_of = field("dim")
        self.register_hook: Callable[[Any, Any], Any] = getattr(
            tensor, "register_hook", lambda t, hook: t.register_hook(hook)
        )
        self._no_dispatch = getattr(c, "_disabled_torch_dispatch_impl", None)
        self._kinds: Dict[int, Tuple[type, int]] = {}
        self._layouts: Dict[int, _Layout] = {}
        self._names: Dict[int, Tuple[type, str]] = {}

    def kind(self, tp: type) -> int:
        known = self._kinds.get(id(tp))
        if known is not None:
            return known[1]
        kind = self._classify(tp)
        if len(self._kinds) >= _KNOWN_TYPES:
            self._kinds.clear()
        self._kinds[id(tp)] = (tp, kind)
        return kind

    def _classify(self, tp: type) -> int:
        base = self.tensor_base
        if base is not None and issubclass(tp, base):
            for klass in _class_mro(tp):
                if klass is base:
                    break
                dispatch = _class_dict(klass).get("__torch_dispatch__")
                if dispatch is not None and dispatch is not self._no_dispatch:
                    return _WRAPPER
            return _TENSOR
        if issubclass(tp, tuple):
            return _TUPLE
        if issubclass(tp, list):
            return _LIST
        if issubclass(tp, dict):
            return _DICT
        return _OTHER

    def is_tensor(self, value: Any) -> bool:
        return self.kind(type(value)) in (_TENSOR, _WRAPPER)

    def is_plain_tensor(self, value: Any) -> bool:
        """A tensor whose size, device and storage can be read without dispatching."""
        return self.kind(type(value)) == _TENSOR

    def sequence(self, value: Any) -> Iterable[Any]:
        """The items of a list or tuple (of a subclass too), else none."""
        kind = self.kind(type(value))
        if kind == _LIST:
            items: List[Any] = list.copy(value)
            return items
        if kind == _TUPLE:
            return tuple.__iter__(value)
        return ()

    def values(self, value: Any) -> Iterable[Any]:
        """The values of a dict (of a subclass too: a defaultdict), else none."""
        return list(dict.values(value)) if self.kind(type(value)) == _DICT else ()

    def item(self, value: Any, key: str) -> Any:
        """value[key] of a dict (of a subclass too, without __getitem__/__missing__), or None."""
        return dict.get(value, key) if self.kind(type(value)) == _DICT else None

    def name(self, tp: type) -> str:
        """A class' __name__, as type stores it (no metaclass' attribute lookup runs)."""
        known = self._names.get(id(tp))
        if known is not None:
            return known[1]
        name = _class_name(tp)
        if len(self._names) >= _KNOWN_TYPES:
            self._names.clear()
        self._names[id(tp)] = (tp, name)
        return name

    def _layout(self, tp: type) -> _Layout:
        """The C getter of tp's instance dict (None where it has none, or a class defines its
        own __dict__), and which of _ATTRIBUTES a class in its MRO defines itself."""
        known = self._layouts.get(id(tp))
        if known is not None:
            return known
        dict_of: Optional[Callable[[Any], Any]] = None
        found = False
        defined: Set[str] = set()
        for klass in _class_mro(tp):
            namespace = _class_dict(klass)
            if not found and "__dict__" in namespace:
                found = True
                descriptor = namespace["__dict__"]
                if type(descriptor) is types.GetSetDescriptorType:
                    dict_of = descriptor.__get__
            defined.update(name for name in _ATTRIBUTES if name in namespace)
        layout = (tp, dict_of, frozenset(defined))
        if len(self._layouts) >= _KNOWN_TYPES:
            self._layouts.clear()
        self._layouts[id(tp)] = layout
        return layout

    def instance_dict(self, obj: Any) -> Optional[Dict[str, Any]]:
        """obj's own __dict__, through its class' C descriptor; None where it has none."""
        dict_of = self._layout(type(obj))[1]
        if dict_of is None:
            return None
        try:
            namespace = dict_of(obj)
        except Exception:
            return None
        return namespace if issubclass(type(namespace), dict) else None

    def attribute(self, obj: Any, name: str, default: Any) -> Any:
        """obj.name (one of _ATTRIBUTES) from its instance dict, else `default`: also where a
        class of obj defines the name itself (a property is never called)."""
        _, dict_of, defined = self._layout(type(obj))
        if dict_of is None or name in defined:
            return default
        try:
            namespace = dict_of(obj)
        except Exception:
            return default
        if not issubclass(type(namespace), dict):
            return default
        return dict.get(namespace, name, default)


# A class, its instance dict's C getter, the _ATTRIBUTES its MRO defines (_Reader._layout).
_Layout = Tuple[type, Optional[Callable[[Any], Any]], FrozenSet[str]]


class _Roots:
    """The outermost modules and their hook handles, by identity: a module's own __hash__
    and __eq__ never run (a class with __eq__ alone is unhashable). Held weakly."""

    def __init__(self) -> None:
        self._by_id: Dict[int, Tuple[Any, List[Any]]] = {}

    def __setitem__(self, module: Any, handles: List[Any]) -> None:
        key = id(module)
        forget = functools.partial(_forget, self._by_id, key)
        self._by_id[key] = (weakref.ref(module, forget), handles)

    def __contains__(self, module: Any) -> bool:
        entry = self._by_id.get(id(module))
        return entry is not None and entry[0]() is module

    def items(self) -> List[Tuple[Any, List[Any]]]:
        found = []
        for ref, handles in list(self._by_id.values()):
            module = ref()
            if module is not None:
                found.append((module, handles))
        return found

    def __iter__(self) -> Iterator[Any]:
        return iter([module for module, _ in self.items()])

    def __len__(self) -> int:
        return len(self.items())


def _forget(table: Dict[int, Any], key: int, ref: Any) -> None:
    """A weak reference's callback: drop table[key] if it is still the entry of that ref."""
    entry = table.get(key)
    if entry is not None and entry[0] is ref:
        del table[key]


def _copy_table(table: Any) -> Any:
    """A copy of a module's hook table (torch's OrderedDict), the same type where it is ours."""
    return table.copy() if type(table) in _PLAIN_DICTS else dict.copy(table)
