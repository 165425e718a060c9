"""The anatomy of one training iteration: what each module's forward saves for backward, and
each module's parameters, gradients and optimizer state (an "anatomy" event).

Measured once: by default on the first training forward, so that an out-of-memory error in
the first iteration has it too (`--anatomy N` names the N-th iteration instead, `--anatomy
off` none). From `import torch` (or the end of iteration N-1) until that forward:

- global module hooks keep the stack of modules whose forward runs. The outermost module
  called with autograd on is a root: its modules are named by their paths
  ("blocks.3.attn"; a second root by its class name), its inputs are the batch (their bytes,
  and the batch size when all of them share a first dimension);
- torch.autograd.graph.saved_tensors_hooks, pushed at the first root forward and kept until
  the first backward, sees every tensor saved for backward (the loss's too): what is still
  alive at the backward's first read of a saved tensor is charged, each storage once, to the
  innermost module whose forward saved it; the parameters' storages are not activations, and
  the inputs' count as the batch. The pack hook returns a detached tensor and its version
  (never the tensor itself, which would make a reference cycle through its grad_fn); unpack
  gives it back after autograd's own check that it was not changed in place;
- at the end of that iteration (its optimizer step, or its backward in a loop without an
  optimizer), each parameter's gradient and optimizer state are read and charged to the
  module that owns the parameter, and the event is sent. An out-of-memory error or the end
  of the script before then sends what was measured (`partial`).

Not measured (the event says why) where measuring could change what the program does:
saved-tensor hooks of the script's own in place (save_on_cpu, a checkpoint around the whole
model) or disabled (FSDP), a compiled model, tensor subclasses as parameters, a torch without
always-called forward hooks, a torch.export under way. The script's objects are read without
running its code (reader.py).
"""

from __future__ import annotations

import importlib
import inspect
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..protocol import BACKWARD_PASSES, OPTIMIZER_STEPS
from .clock import now as _now
from .port import AgentPort
from .reader import Reader

MAX_MODULES = 4096  # module rows in one anatomy event (the largest by bytes)
MAX_SIZES = 512  # distinct storage sizes listed per device (saved_sizes, gradient_sizes)
# A module's byte counts, by device, in this order.
_ACTIVATIONS, _ACTIVATIONS_FP32, _PARAMETERS, _GRADIENTS, _STATE = range(5)
_COUNTS = 5
OUTSIDE_MODULES = "(outside modules)"  # the path of what code outside any module saved


class _Module:
    __slots__ = ("bytes", "input_bytes", "input_device", "input_keys", "path", "type")

    def __init__(self, path: str, type_name: str) -> None:
        self.path = path
        self.type = type_name
        self.bytes: Dict[str, List[int]] = {}  # device -> counts
        # Its first input tensor's storage, summed over its calls (each storage once): what
        # checkpointing it keeps. A module called twice in the iteration (a GAN's
        # discriminator, an RNN cell) saves for each call, and a checkpoint keeps each input.
        self.input_bytes = 0
        self.input_device = ""  # its first call's
        self.input_keys: Optional[Set[Tuple[str, int]]] = None

    def add(self, device: str, index: int, nbytes: int) -> None:
        counts = self.bytes.get(device)
        if counts is None:
            counts = self.bytes[device] = [0] * _COUNTS
        counts[index] += nbytes


class _NotMeasured(Exception):
    """Why the iteration is not measured: measuring could change what the program does."""


class AnatomyHooks:
    """Instrumentation's anatomy of one iteration (a mixin: see instrument.py)."""

    # Of Instrumentation's other parts.
    agent: AgentPort
    torch: Any
    _reader: Reader
    _is_compiling: Callable[[], bool]
    _backwards: int
    _watched_params: Dict[int, Tuple[Any, List[Any]]]

    def _init_anatomy(self, setting: str) -> None:
        # The iterations to let pass before the measured one (-1: none is measured).
        wait = 0
        if setting == "off":
            wait = -1
        elif setting.isdigit() and int(setting) >= 1:
            wait = int(setting) - 1
        self._anatomy_wait = wait
        self._anatomy_kind: Optional[str] = None  # the iterations counted, once known
        self._anatomy: Optional[_Measurement] = None
        self._anatomy_closing: Optional[_Measurement] = None  # sent, its hooks still to remove

    def _start_anatomy(self) -> None:
        """At install: measure the first training forward, when that is the one."""
        if self._anatomy_wait == 0:
            self._anatomy_wait = -1
            self._anatomy = _Measurement(self)

    def _stop_anatomy(self) -> None:
        """Uninstall: the hooks go; what was measured is sent."""
        self.send_anatomy()
        self._remove_closed_anatomy()

    def _remove_closed_anatomy(self) -> None:
        closing = self._anatomy_closing
        if closing is not None:
            closing.remove()
            if not closing.closing:
                self._anatomy_closing = None

    def _finish_anatomy(self, measuring: "_Measurement", partial: bool) -> None:
        self._anatomy = None
        measuring.finish(self, partial)
        if measuring.closing:
            self._anatomy_closing = measuring

    def _anatomy_global_hooks(self) -> List[Any]:
        return [
            handle
            for measuring in (self._anatomy, self._anatomy_closing)
            if measuring is not None
            for handle in measuring.global_handles
        ]

    def send_anatomy(self) -> None:
        """The script ended, or failed with an out-of-memory error: send what was measured,
        if the measured forward ran."""
        measuring = self._anatomy
        if measuring is not None and (measuring.forwards or measuring.skipped):
            self._finish_anatomy(measuring, partial=not measuring.backwards_seen)
        elif measuring is not None:
            measuring.remove()
            self._anatomy = None

    def drop_anatomy(self) -> None:
        """A fork child (a DataLoader worker): it measures nothing. The hooks it inherited are
        taken out (the saved-tensor hooks where this thread pushed them; a child has only the
        thread that forked) and nothing is ever sent."""
        self._anatomy_wait = -1
        for measuring in (self._anatomy, self._anatomy_closing):
            if measuring is not None:
                measuring.skipped = measuring.skipped or "a fork child"
                measuring.remove()
        self._anatomy = self._anatomy_closing = None

    def _suspend_anatomy(self) -> None:
        """torch.export is under way: strict export refuses global module hooks."""
        measuring = self._anatomy
        if measuring is not None:
            measuring.skip("torch.export ran while it was measured")

    def _anatomy_at_boundary(self, kind: str, index: int) -> None:
        """An iteration of `kind` ended (instrument.py's _iteration_ended)."""
        if kind == OPTIMIZER_STEPS:
            self._anatomy_kind = kind
        elif kind != BACKWARD_PASSES:
            return
        elif self._anatomy_kind is None:
            self._anatomy_kind = kind
        self._remove_closed_anatomy()
        measuring = self._anatomy
        if measuring is not None:
            if not measuring.forwards and not measuring.skipped:
                return
            if kind == BACKWARD_PASSES:
                measuring.backwards_seen += 1
                # A loop without an optimizer ends its iterations with backward passes; one
                # that accumulates gradients has steps a few backwards apart.
                if self._anatomy_kind == OPTIMIZER_STEPS or measuring.backwards_seen < 8:
                    return
            measuring.kind = kind
            self._finish_anatomy(measuring, partial=False)
            return
        if self._anatomy_wait > 0 and kind == self._anatomy_kind and index >= self._anatomy_wait:
            self._anatomy_wait = -1
            self._anatomy = _Measurement(self)


class _Measurement:
    """One iteration being measured: the hooks it added, and what they saw."""

    def __init__(self, owner: AnatomyHooks) -> None:
        self.owner = owner
        self.agent = owner.agent
        self.reader = owner._reader
        self.torch = owner.torch
        self.kind: Optional[str] = None
        self.iteration = 0
        self.thread = 0  # the thread of the measured forward, once it starts
        self.global_handles: List[Any] = []
        self.modules: Dict[int, _Module] = {}  # id(module) -> its row
        self.roots: Dict[int, Any] = {}  # id(root) -> root (held while measuring)
        self.root_names: Set[str] = set()
        self.param_owner: Dict[int, Tuple[_Module, Any]] = {}  # id(param) -> (row, param)
        self.param_storages: Set[Tuple[str, int]] = set()
        self.batch_keys: Set[Tuple[str, int]] = set()  # the inputs' storages
        # Each tensor saved while measuring, in order: (its detached tensor, weakly: alive
        # while the graph keeps it; the module charged; storage key; bytes; float32). What is
        # still alive when the backward starts is charged then (charge_alive), once per
        # storage: a graph freed before (a forward without backward) is not in the peak, and
        # an address freed and reused is not mistaken for one already counted.
        self.saved: List[Tuple[Any, _Module, Tuple[str, int], int, bool]] = []
        self.charged = False
        self.stack: List[Optional[_Module]] = []  # the modules whose forward runs
        self.pushed: Any = None  # our saved-tensor hooks, while pushed
        self.closing = False  # ended where its hooks cannot be popped: removed at the next chance
        self.outside = _Module(OUTSIDE_MODULES, "")  # what the code outside modules saved
        self.largest: Dict[str, int] = {}  # the largest storage saved, by device
        # device -> {storage bytes: storages}: the activations charged and the gradients read,
        # for the fit's model of what malloc keeps (diagnosis/fit.py).
        self.saved_sizes: Dict[str, Dict[int, int]] = {}
        self.gradient_sizes: Dict[str, Dict[int, int]] = {}
        self.forwards = 0
        self.backwards = -1  # backward passes before the measured forward
        self.backwards_seen = 0  # since
        self.batch_size = -1
        self.batch_bytes = 0
        self.batch_pending = False  # the root had no input tensor: its first module's
        self.skipped = ""
        self.fp32 = getattr(self.torch, "float32", None)
        self.dtype_of = self.reader.dtype_of
        self.version_of = self.reader.version_of
        self.size_of = getattr(getattr(self.torch, "Tensor", None), "size", None)
        graph = getattr(getattr(self.torch, "autograd", None), "graph", None)
        self.hooks_class: Any = getattr(graph, "saved_tensors_hooks", None)
        try:
            self.skipped = self._why_not()
            if not self.skipped:
                module = importlib.import_module("torch.nn.modules.module")
                self.global_handles.append(module.register_module_forward_pre_hook(self._pre))
                self.global_handles.append(
                    module.register_module_forward_hook(self._post, always_call=True)
                )
        except Exception as exc:
            self.agent.error("anatomy", exc)
            self.skipped = "its hooks could not be installed"
            self.remove()

    def _why_not(self) -> str:
        autograd_c = getattr(getattr(self.torch, "_C", None), "_autograd", None)
        if self.hooks_class is None or autograd_c is None:
            return "this torch has no saved-tensor hooks"
        module = importlib.import_module("torch.nn.modules.module")
        if "always_call" not in inspect.signature(module.register_module_forward_hook).parameters:
            return "this torch has no always-called forward hooks (torch 2.1+)"
        return ""

    def skip(self, why: str) -> None:
        if not self.skipped:
            self.skipped = why
        self.remove()

    # -- the hooks ----------------------------------------------------------------------------

    def _pre(self, module: Any, args: Any) -> None:
        thread = threading.get_ident()
        if self.thread and thread != self.thread:
            return
        if self.closing:
            self.remove()  # the measured iteration ended in another thread
            return
        if self.skipped or self.owner._is_compiling():
            return
        stack = self.stack
        if stack:  # a module inside a forward
            row = self.modules.get(id(module))
            stack.append(row)
            if row is not None and stack[0] is not None:  # (not in a forward left unmeasured)
                self._note_input(row, args)
            return
        if self.thread and (self._past_backward() or not self.torch.is_grad_enabled()):
            stack.append(None)  # a forward that saves nothing measured
            return
        if not self.thread and not self.torch.is_grad_enabled():
            return
        try:
            self._open_root(module, args)
        except _NotMeasured as why:
            self.skip(str(why))
        except Exception as exc:
            self.agent.error("anatomy", exc)
            self.skip("its hooks failed")

    def _past_backward(self) -> bool:
        owner: Any = self.owner
        return owner._backwards != self.backwards or owner._backward_start is not None

    def _open_root(self, module: Any, args: Any) -> None:
        """A root's forward with autograd on starts: push the saved-tensor hooks (they stay
        until the backward: what the loss computed outside any module is saved too)."""
        name = self.reader.name(type(module))
        if name in ("OptimizedModule", "RecursiveScriptModule", "TopLevelTracedModule"):
            raise _NotMeasured("the model is compiled (torch.compile or TorchScript)")
        if self.pushed is None:
            autograd_c = self.torch._C._autograd
            enabled = getattr(autograd_c, "_saved_tensors_hooks_is_enabled", None)
            if enabled is not None and not enabled():
                raise _NotMeasured("saved-tensor hooks are disabled here (FSDP or functorch)")
            top = getattr(autograd_c, "_top_saved_tensors_default_hooks", None)
            if top is not None and _has_hooks(top):
                raise _NotMeasured("the script's own saved-tensor hooks are in place")
        if id(module) not in self.roots:
            self._name_modules(module, name)
        if not self.thread:
            self.thread = threading.get_ident()
            self.backwards = self.owner._backwards
            self.iteration = self._iteration()
            self._read_batch(args)
        self.forwards += 1
        if self.pushed is None:
            hooks = self.hooks_class(self._pack, self._unpack)
            hooks.__enter__()
            self.pushed = hooks
        self.stack.append(self.modules.get(id(module)))

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self.stack and threading.get_ident() == self.thread:
            self.stack.pop()

    def _pack(self, tensor: Any) -> Any:
        reader = self.reader
        with reader.no_torch_function():
            detached = self.torch.Tensor.detach(tensor)
            try:
                if not self.closing and not self.charged and not self._past_backward():
                    self._note(tensor, detached)
            except Exception as exc:
                self.agent.error("anatomy_pack", exc)
            # With saved-tensor hooks autograd no longer checks that a saved tensor was left
            # unchanged: the version is kept here and checked at unpack, as autograd would.
            return detached, self.version_of(tensor)

    def _unpack(self, packed: Tuple[Any, int]) -> Any:
        """A backward reads a saved tensor. The first read comes before the backward has
        freed any (a node frees its saved tensors only after reading them): what is alive
        then is what the iteration's peak holds. Any thread; it only reads."""
        if not self.charged:
            try:
                self.charge_alive()
            except Exception as exc:
                self.agent.error("anatomy", exc)
        return _check_version(packed)

    def _note(self, tensor: Any, detached: Any) -> None:
        """A saved tensor, for the innermost module whose forward runs (or for the code
        outside modules: the loss); the parameters and the batch are not activations."""
        reader = self.reader
        key = _storage_key(reader, tensor)
        if key is None or key in self.param_storages or key in self.batch_keys:
            return
        row = self._innermost() or self.outside
        fp32 = self.dtype_of(tensor) is self.fp32
        self.saved.append((weakref.ref(detached), row, key, _nbytes(reader, tensor), fp32))

    def charge_alive(self) -> None:
        """Charge each storage saved and still alive to the first module that saved it: at
        the first backward's first read (the iteration's peak), or at the end without one."""
        if self.charged:
            return
        self.charged = True
        seen: Set[Tuple[str, int]] = set()
        for ref, row, key, nbytes, fp32 in self.saved:
            if key in seen or ref() is None:
                continue
            seen.add(key)
            if nbytes > self.largest.get(key[0], 0):
                self.largest[key[0]] = nbytes
            _count_size(self.saved_sizes, key[0], nbytes)
            row.add(key[0], _ACTIVATIONS, nbytes)
            if fp32:
                row.add(key[0], _ACTIVATIONS_FP32, nbytes)
        del self.saved[:]

    def _innermost(self) -> Optional[_Module]:
        for row in reversed(self.stack):
            if row is not None:
                return row
        return None

    # -- what the hooks read ------------------------------------------------------------------

    def _iteration(self) -> int:
        owner: Any = self.owner
        if self.owner._anatomy_kind == BACKWARD_PASSES:
            return int(self.owner._backwards) + 1
        return int(getattr(owner, "steps", 0)) + 1

    def _name_modules(self, root: Any, name: str) -> None:
        """Every module under a new root by its path, and every parameter by its module."""
        prefix = ""
        if self.roots:  # a second root: by its class name
            prefix = name
            number = 2
            while prefix in self.root_names:
                prefix, number = "%s#%d" % (name, number), number + 1
        self.root_names.add(prefix)
        self.roots[id(root)] = root
        reader = self.reader
        pending: List[Tuple[str, Any]] = [(prefix, root)]
        with reader.no_torch_function():
            while pending:
                path, module = pending.pop()
                if id(module) in self.modules:
                    continue  # a module reachable twice (shared): its first path
                row = _Module(path, reader.name(type(module)))
                self.modules[id(module)] = row
                attrs = reader.instance_dict(module) or {}
                self._own_parameters(row, attrs.get("_parameters"))
                children = attrs.get("_modules")
                if type(children) is dict:
                    for child_name, child in reversed(list(dict.items(children))):
                        if child is not None:
                            child_path = "%s.%s" % (path, child_name) if path else child_name
                            pending.append((child_path, child))

    def _own_parameters(self, row: _Module, parameters: Any) -> None:
        reader = self.reader
        if type(parameters) is not dict:
            return
        for param in dict.values(parameters):
            if param is None or id(param) in self.param_owner:
                continue
            if not reader.is_plain_tensor(param):
                raise _NotMeasured("the parameters are tensor subclasses (DTensor, FSDP)")
            self.param_owner[id(param)] = (row, param)
            key = _storage_key(reader, param)
            if key is not None and key not in self.param_storages:
                self.param_storages.add(key)
                row.add(key[0], _PARAMETERS, _nbytes(reader, param))

    def _read_batch(self, args: Any) -> None:
        """The batch: the root's input tensors (at the top level, or one level into a tuple,
        list or dict), their storages counted once, and their shared first dimension. A root
        called with keywords only shows no input here: its first module's input stands in."""
        reader = self.reader
        tensors: List[Any] = []
        for value in reader.sequence(args):
            if reader.is_plain_tensor(value):
                tensors.append(value)
            else:
                inner = reader.values(value) if type(value) is dict else reader.sequence(value)
                tensors.extend(v for v in inner if reader.is_plain_tensor(v))
        if not tensors:
            self.batch_pending = True
            return
        sizes: Set[int] = set()
        with reader.no_torch_function():
            for tensor in tensors:
                self._count_batch(tensor)
                if reader.dim_of(tensor) >= 1 and self.size_of is not None:
                    sizes.add(int(self.size_of(tensor, 0)))
        if len(sizes) == 1:
            self.batch_size = sizes.pop()

    def _count_batch(self, tensor: Any) -> None:
        key = _storage_key(self.reader, tensor)
        if key is not None and key not in self.batch_keys:
            self.batch_keys.add(key)
            self.batch_bytes += _nbytes(self.reader, tensor)

    def _note_input(self, row: _Module, args: Any) -> None:
        reader = self.reader
        for value in reader.sequence(args):
            if reader.is_plain_tensor(value):
                with reader.no_torch_function():
                    key = _storage_key(reader, value)
                    seen = row.input_keys
                    if seen is None:
                        seen = row.input_keys = set()
                        row.input_device = key[0] if key is not None else ""
                    if key is None or key not in seen:
                        if key is not None:
                            seen.add(key)
                        row.input_bytes += _nbytes(reader, value)
                    if self.batch_pending:
                        self.batch_pending = False
                        self._count_batch(value)
                        if reader.dim_of(value) >= 1 and self.size_of is not None:
                            self.batch_size = int(self.size_of(value, 0))
                return

    # -- the end ------------------------------------------------------------------------------

    def finish(self, owner: AnatomyHooks, partial: bool) -> None:
        """The measured iteration ended (or the script did): read gradients and optimizer
        state, and send the event."""
        self.remove()
        try:
            self.charge_alive()
            if not self.skipped:
                self._read_gradients_and_state(owner)
            self._send(_now(), partial)
        except Exception as exc:
            self.agent.error("anatomy", exc)
        self.roots.clear()
        self.param_owner.clear()

    def remove(self) -> None:
        """Take the hooks out. The saved-tensor hooks are a per-thread stack, and autograd runs
        a backward (its callbacks, a checkpoint's recomputation) on a copy of it: they are
        popped only in the thread that pushed them, outside any backward, and only while
        they are on top. Until then the removal waits for the next module call or step."""
        if not self._pop_if_safe():
            self.closing = True
            return
        self.closing = False
        for handle in self.global_handles:
            handle.remove()
        del self.global_handles[:]
        del self.stack[:]

    def _pop_if_safe(self) -> bool:
        hooks = self.pushed
        if hooks is None:
            return True
        if threading.get_ident() != self.thread:
            return False
        torch_c = self.torch._C
        graph_task = getattr(torch_c, "_current_graph_task_id", None)
        if graph_task is not None and graph_task() != -1:
            return False
        top = torch_c._autograd._top_saved_tensors_default_hooks(False)
        if top is None or getattr(top[0], "__self__", None) is not self:
            return False
        self.pushed = None
        hooks.__exit__(None, None, None)
        return True

    def _read_gradients_and_state(self, owner: AnatomyHooks) -> None:
        reader = self.reader
        seen: Set[Tuple[str, int]] = set()
        with reader.no_torch_function():
            for row, param in self.param_owner.values():
                grad = reader.grad_of(param)
                if grad is not None and reader.is_plain_tensor(grad):
                    key = _storage_key(reader, grad)
                    if key is not None and key not in seen:
                        seen.add(key)
                        nbytes = _nbytes(reader, grad)
                        _count_size(self.gradient_sizes, key[0], nbytes)
                        row.add(key[0], _GRADIENTS, nbytes)
            for optimizer_ref, _ in list(owner._watched_params.values()):
                optimizer = optimizer_ref()
                state = reader.attribute(optimizer, "state", None) if optimizer else None
                if not isinstance(state, dict):
                    continue
                for param, values in dict.items(state):
                    owned = self.param_owner.get(id(param))
                    if owned is None:
                        continue
                    for value in reader.values(values):
                        if reader.is_plain_tensor(value) and reader.dim_of(value) > 0:
                            key = _storage_key(reader, value)
                            if key is not None and key not in seen:
                                seen.add(key)
                                owned[0].add(key[0], _STATE, _nbytes(reader, value))

    def _send(self, end: int, partial: bool) -> None:
        rows = []
        for row in [*self.modules.values(), self.outside]:
            for device, counts in row.bytes.items():
                if any(counts):
                    rows.append((row, device, counts))
            if row.input_bytes and row.input_device not in row.bytes:
                # Nothing of its own, but its input: what checkpointing it would keep.
                rows.append((row, row.input_device, [0] * _COUNTS))
        rows.sort(
            key=lambda r: (
                -(r[2][_ACTIVATIONS] + r[2][_PARAMETERS] + r[2][_GRADIENTS] + r[2][_STATE])
            )
        )
        modules = [
            {
                "path": row.path,
                "type": row.type,
                "device": device,
                "activations": counts[_ACTIVATIONS],
                "activations_fp32": counts[_ACTIVATIONS_FP32],
                "parameters": counts[_PARAMETERS],
                "gradients": counts[_GRADIENTS],
                "optimizer_state": counts[_STATE],
                "input_bytes": row.input_bytes,
            }
            for row, device, counts in rows[:MAX_MODULES]
        ]
        self.agent.event(
            "anatomy",
            t=end,
            iteration=self.iteration,
            counted=self.kind or "",
            batch_size=self.batch_size,
            batch_bytes=self.batch_bytes,
            largest_saved=self.largest,
            saved_sizes={d: _size_list(sizes) for d, sizes in self.saved_sizes.items()},
            gradient_sizes={d: _size_list(sizes) for d, sizes in self.gradient_sizes.items()},
            modules=modules,
            modules_left_out=max(0, len(rows) - MAX_MODULES),
            partial=partial,
            skipped=self.skipped,
        )


def _count_size(sizes: Dict[str, Dict[int, int]], device: str, nbytes: int) -> None:
    counts = sizes.setdefault(device, {})
    counts[nbytes] = counts.get(nbytes, 0) + 1


def _size_list(counts: Dict[int, int]) -> List[List[int]]:
    """[[bytes, storages], ...], the largest first; past MAX_SIZES sizes, the smallest are
    folded into one last entry of their mean size (their bytes kept)."""
    listed = sorted(dict.items(counts), reverse=True)
    if len(listed) <= MAX_SIZES:
        return [[size, n] for size, n in listed]
    rest = listed[MAX_SIZES - 1 :]
    storages = sum(n for _, n in rest)
    total = sum(size * n for size, n in rest)
    return [[size, n] for size, n in listed[: MAX_SIZES - 1]] + [[total // storages, storages]]


def _check_version(packed: Tuple[Any, int]) -> Any:
    """The saved tensor, or autograd's own error when the script changed it in place since
    (the detached tensor shares the original's version counter)."""
    tensor, version = packed
    now = tensor._version
    if now != version:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            "inplace operation: [%s %s], is at version %d; expected version %d instead. Hint: "
            "enable anomaly detection to find the operation that failed to compute its "
            "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
            % (tensor.type(), list(tensor.shape), now, version)
        )
    return tensor


def _has_hooks(top: Callable[..., Any]) -> bool:
    """Whether saved-tensor hooks are pushed already (torch's own API, by its signature)."""
    try:
        return top(False) is not None
    except TypeError:
        return top() is not None


def _storage_key(reader: Reader, tensor: Any) -> Optional[Tuple[str, int]]:
    storage = reader.storage_of(tensor)
    pointer = storage.data_ptr()
    if not pointer:
        return None
    device = reader.device_of(tensor)
    name = device.type if device.index is None else "%s:%d" % (device.type, device.index)
    return name, pointer


def _nbytes(reader: Reader, tensor: Any) -> int:
    return int(reader.storage_of(tensor).nbytes())
