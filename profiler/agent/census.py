"""A census of live tensors and of the named things that hold them.

What a memory timeline cannot say is *what* keeps the memory alive. A census answers it at one
moment: every live tensor storage (found with gc.get_objects(), deduplicated by storage, so
views count once), and for each one the named holder that reaches it first: a module global,
a local of a running frame, an attribute (`Model.kept`), a class attribute, a closure cell, a
mutable default argument. Holders carry a stable `id` (root kind, root name and path), so two
censuses of one process can be compared (profiler/diagnosis/contents.py: changes): the
holder that grows is the leak.

The walk goes downward from named roots, breadth-first, with one visited set: the globals of
the user's modules (not the standard library, not site-packages, not memsight itself), then
the locals of every thread's frames (sys._current_frames(), via f_locals; the user's frames
before libraries', outermost first). From there it follows builtin containers, instance
__dict__ and __slots__, class dictionaries of user classes, closure cells and defaults of user
functions, bound methods, the locals of suspended generators, and nn.Module internals. A
storage counts under the holder that
reaches it in the fewest steps (ties: in that order of roots); a model's parameters, buffers
and grads count under the model's holder (its whole tree of submodules is one step), and
what an optimizer keys or lists them by is walked last. Attributes and short string keys of
small dicts are named steps (`Log.entries[*]["acts"]`: `[*]` is any item of a list, tuple,
set or large dict). A tensor with an autograd graph gets the graph walked afterwards: the
saved tensors that no holder reaches directly are what the graph keeps alive (`total += loss`
holds every iteration's activations through one 4-byte tensor); they count as that holder's
grad_bytes. Tensors that gc finds but no root reaches (held by C++, by a library's globals,
below the depth limit) are unattributed; what their graphs keep is one holder of kind "graph".

Safety, since this runs inside the user's process:
* No user code runs. Objects are read through the C-level descriptors of builtin types
  (type.__dict__["__dict__"], dict.items, list.copy, member descriptors of __slots__), never
  through getattr/isinstance on user objects, so no __getattr__, __getattribute__, __eq__,
  __hash__, __len__, __iter__ or __class__ of theirs is called; visited sets hold ids. Tensor
  subclasses' __torch_function__ is disabled for the census' own thread. Saved tensors are
  read raw (SavedTensor.data), never unpacked: unpacking would run saved-tensor hooks, and
  activation checkpointing's hook recomputes the forward.
* Nothing is written. Python < 3.13 syncs a running function's fast locals into its
  f_locals dict when that is read (as debuggers do); the dict then keeps those values until
  the function returns or the next read re-syncs it.
* Nothing is kept: the Census holds strings and ints only.
* It is bounded: max_seconds (the clock is read every few hundred objects), a depth and an
  object count; a census cut short says so (cost["partial"]). The garbage collector is off
  during the census, so no collection (and no finalizer) runs inside its pause.
Stdlib only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import gc
import heapq
import os
import sys
import threading
import time
import types
import weakref
from itertools import compress, islice
from typing import AbstractSet, Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from ..codefiles import OWN_DIR, is_library_file

SCHEMA = 1
MAX_DEPTH = 12  # steps below a root (a model's whole tree of submodules is one step)
MAX_OBJECTS = 2_000_000
MAX_HOLDERS = 200  # in to_json(), largest first; the rest are summed in holders_left_out
MAX_SHAPES = 5
MAX_NAMED_STEPS = 6  # below this many named steps, the rest of a path folds into its holder
MAX_NAMED_KEYS = 64  # a dict with more entries is a collection: its keys make no holders
MAX_KEY_CHARS = 40
CHECK_EVERY = 256  # objects between two readings of the clock
# A container with more items than BIG is a collection: it is not expanded into the
# breadth-first walk's next layer (4 M items would cost 64 MB of list there alone) but read
# CHUNK items at a time, depth-first, after the walk: its items are anonymous positions, so
# the order changes no name, and the budget is checked between chunks.
BIG = 1024
SHALLOW_ITEMS = 16  # a sequence up to this long is looked into two levels before it is walked
CHUNK = 1024
# A layer of the breadth-first walk holds at most this many objects; the objects met beyond it
# are walked depth-first at once (bounded stack), so a heap of any shape costs bounded memory.
FRONTIER_MAX = 65_536
# The visited set keeps ids in a Python set (about 60 bytes each) up to this many, then in a
# bitmap of one bit per 16 bytes of address space (objects are 16-byte aligned): about 1/128
# of the heap it covers.
SET_MAX = 150_000
# The census' own memory, at most: MEMORY_FLOOR + MEMORY_SHARE of the process' RSS. Past it,
# it stops (stopped_by "memory").
MEMORY_FLOOR = 16 * 2**20
MEMORY_SHARE = 0.01

# Every file of memsight (agent, protocol, units): its frames and modules are not the user's.
_OWN_DIR = OWN_DIR + os.sep
_OWN_PACKAGE = __name__.split(".")[0]
# Whether a module is the user's, by name, with the file it had, and the modules found not to
# be (by name, with the id of the module object): kept from one census to the next (names,
# paths and ids only), since a process that imported torch has thousands of modules.
_USER_MODULES: Dict[str, Tuple[Any, bool]] = {}
_NOT_USER_MODULES: Dict[str, int] = {}

# The C descriptors of `type`: reading a class through them bypasses any metaclass.
_class_dict: Callable[[type], Any] = type.__dict__["__dict__"].__get__
_class_mro: Callable[[type], Tuple[type, ...]] = type.__dict__["__mro__"].__get__
_class_name: Callable[[type], str] = type.__dict__["__name__"].__get__
_class_qualname: Callable[[type], str] = type.__dict__["__qualname__"].__get__
_class_module: Callable[[type], Any] = type.__dict__["__module__"].__get__
_class_bases: Callable[[type], Tuple[type, ...]] = type.__dict__["__bases__"].__get__
_class_flags: Callable[[type], int] = type.__dict__["__flags__"].__get__
_module_type: Any = types.ModuleType
_module_dict: Callable[[Any], Any] = _module_type.__dict__["__dict__"].__get__
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class statement's (or an extension's heap type)
_is_tracked = gc.is_tracked  # untracked objects (ints, str, dicts of them) can hold no tensor

# Kinds of object, by type (cached per census).
(
    K_SKIP,
    K_TENSOR,
    K_SEQ,
    K_DICT,
    K_INSTANCE,
    K_NNMODULE,
    K_CLASS,
    K_FUNCTION,
    K_METHOD,
    K_GENERATOR,
    K_OPAQUE,  # a C type's instance with no __dict__ or slots (an iterator, a map): gc's view
    K_STORAGE,  # a bare UntypedStorage
) = range(12)

# A suspended generator's (coroutine's) frame: its locals are holders, as a running frame's.
_SUSPENDED_FRAME: Dict[type, Callable[[Any], Any]] = {
    tp: vars(tp)[name].__get__
    for tp, name in (
        (types.GeneratorType, "gi_frame"),
        (types.CoroutineType, "cr_frame"),
        (types.AsyncGeneratorType, "ag_frame"),
    )
}
_SKIP_TYPES: Tuple[type, ...] = (
    types.ModuleType,  # a user module is a root of its own; a library's is not walked
    types.FrameType,
    types.TracebackType,
    types.CodeType,
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.MappingProxyType,
    types.CellType,
    property,
    weakref.ref,  # weak references keep nothing alive (WeakMethod, KeyedRef are refs too)
    weakref.ProxyType,
    weakref.CallableProxyType,
)
# Base-type iteration in C, whatever a subclass overrides; list() of it is atomic under the GIL.
_SEQ_ITER: Tuple[Tuple[type, Callable[[Any], Iterable[Any]]], ...] = (
    (list, list.copy),
    (tuple, tuple.__iter__),
    (set, lambda o: list(set.__iter__(o))),
    (frozenset, frozenset.__iter__),
    (collections.deque, lambda o: list(collections.deque.__iter__(o))),
)
# Exactly these types: their gc referents are their items (a subclass' include its __dict__).
# Sets of types are looked up by id: hashing a class would call its metaclass' __hash__.
_PLAIN_SEQUENCES = frozenset(map(id, (list, tuple, set, frozenset, collections.deque)))
_SUSPENDED_FRAME_BY_ID = {id(tp): get for tp, get in _SUSPENDED_FRAME.items()}
_CO_OPTIMIZED = 0x1  # a function's code: its f_locals (before 3.13) is a snapshot dict
_SUSPENDABLE = 0x20 | 0x100 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
# What one pass of gc over the heap (gc.get_referrers) costs, per pymalloc block: about 60 ns
# per tracked object on this 2-core VM, with about 6 blocks a tracked object in a process that
# imported torch, and a margin.
SECONDS_PER_BLOCK = 2.5e-8
_LOCALS_SNAPSHOT = sys.version_info < (3, 13)
_FRAME_LOCALS_PROXY: Optional[type] = None  # 3.13+: a function frame's f_locals, C-level


def _function_locals_proxy_type() -> Optional[type]:
    namespace = sys._getframe().f_locals
    return None if type(namespace) is dict else type(namespace)


_FRAME_LOCALS_PROXY = _function_locals_proxy_type()
# nn.Module's own bookkeeping (torch 2.x): not the user's attributes, so no holders of their own.
_MODULE_INTERNALS = frozenset(
    {
        "_non_persistent_buffers_set",
        "_backward_pre_hooks",
        "_backward_hooks",
        "_is_full_backward_hook",
        "_forward_hooks",
        "_forward_hooks_with_kwargs",
        "_forward_hooks_always_called",
        "_forward_pre_hooks",
        "_forward_pre_hooks_with_kwargs",
        "_state_dict_hooks",
        "_state_dict_pre_hooks",
        "_load_state_dict_pre_hooks",
        "_load_state_dict_post_hooks",
        "_compiled_call_impl",
        "_version",
        "_metadata",
    }
)


def safe_to_run(torch: Any) -> bool:
    """False while the calling code is being traced, compiled or transformed, or while a
    torch function or dispatch mode is active (unsafe_because says which)."""
    return unsafe_because(torch) is None


def unsafe_because(torch: Any) -> Optional[str]:
    """Why a census must wait for a later iteration now, or None. A census reads tensors:
    under torch.jit.trace those reads would enter the trace (its check then fails), under
    torch.compile, torch.export or fx they would be traced, inside a functorch transform
    (vmap, grad) the tensors are wrappers of the transform's, and a mode (a FLOP counter,
    FakeTensorMode) would see the calls."""
    # sys.modules, not getattr(torch, ...): torch imports torch._dynamo lazily, and a census
    # check must not import it.
    for name, function in (
        ("torch.compiler", "is_compiling"),
        ("torch._dynamo", "is_compiling"),
        ("torch.compiler", "is_exporting"),
    ):
        module = sys.modules.get(name)
        check = getattr(module, function, None) if module is not None else None
        if check is None:
            continue
        try:
            if check():
                return "compiling"
        except Exception:
            return "compiling"
    fx = sys.modules.get("torch.fx._symbolic_trace")
    if fx is not None and _module_dict(fx).get("_is_fx_tracing_flag"):
        return "fx tracing"
    c = getattr(torch, "_C", None)
    checks: Tuple[Tuple[str, str, Callable[[Any], bool]], ...] = (
        ("jit tracing", "_get_tracing_state", lambda state: state is not None),
        ("torch function mode", "_is_torch_function_mode_enabled", bool),
        ("dispatch mode", "_len_torch_dispatch_stack", bool),
    )
    for reason, name, active in checks:
        read = getattr(c, name, None)
        if read is None:
            continue
        try:
            if active(read()):
                return reason
        except Exception:
            return reason
    functorch = getattr(c, "_functorch", None)
    level = getattr(functorch, "maybe_current_level", None)
    try:
        if level is not None and level() is not None:
            return "functorch transform"
    except Exception:
        return "functorch transform"
    return None


class Census:
    """The result: strings and ints only (to_json() gives it as event data).

    to_json():
      schema: 1
      tensors: live storages, each once: count, bytes; objects (Python tensors gc found);
        graph_count, graph_bytes (storages only autograd graphs have); by_device and by_dtype
        ({"cuda:0": {"count", "bytes"}}, {"float32": {...}}).
      holders: largest first (bytes + grad_bytes), at most max_holders, each:
        id: stable across censuses of a process: "<kind>:<where>:<path>", e.g.
          "global:__main__:trainer.model.kept", "local:<file>:<function>:<first line>:acts",
          "class:<module>:<Class>.attr", "closure:<file>:<function>:<first line>:total"
        name: as shown: "kept", "Model.kept", 'history["train"]', "cell total"
        kind: "global", "local", "attribute", "class attribute", "closure", "default", "graph"
        container: type name of what the name holds ("list", "dict", "Tensor", "Model")
        owner: module (global), function (local, closure, default), class (attributes)
        function, first_line: the function and its first line (local, closure, default)
        file, line: where it lives (a local: the frame's current line; a global: the module's
          file, line None; an attribute: the class's module file)
        thread: the thread's name (local)
        root: the variable, attribute or cell name the holder starts at ("kept", "entries")
        path: the full path from the root binding: log.entries[*]["acts"]
        count: tensors reached through it; storages, bytes: storages first reached through
          it (views of one storage count once); with_graph: its tensors that have grad_fn;
          grad_storages, grad_bytes: saved tensors that only those graphs keep
        devices, dtypes: names; shapes: up to 5 distinct
      holders_left_out: holders, count, bytes, grad_bytes of the holders past max_holders
      unattributed_bytes, unattributed_count: storages of tensors gc found and no root
        reaches; None when the census is partial (not known then)
      cost: wall_us, cpu_us (the census' thread), objects (walked), graph_nodes, errors
        (objects that could not be read), partial, stopped_by ("time", "objects" or None)
    """

    def __init__(
        self,
        tensors: Dict[str, Any],
        holders: List[Dict[str, Any]],
        holders_left_out: Dict[str, int],
        unattributed_bytes: Optional[int],
        unattributed_count: Optional[int],
        cost: Dict[str, Any],
    ) -> None:
        self.tensors = tensors
        self.holders = holders
        self.holders_left_out = holders_left_out
        self.unattributed_bytes = unattributed_bytes
        self.unattributed_count = unattributed_count
        self.cost = cost

    @property
    def partial(self) -> bool:
        return bool(self.cost.get("partial"))

    def to_json(self) -> Dict[str, Any]:
        return {
            "schema": SCHEMA,
            "tensors": self.tensors,
            "holders": self.holders,
            "holders_left_out": self.holders_left_out,
            "unattributed_bytes": self.unattributed_bytes,
            "unattributed_count": self.unattributed_count,
            "cost": self.cost,
        }


def take_census(
    torch: Any,
    *,
    max_seconds: float = 0.2,
    skip_frames: AbstractSet[int] = frozenset(),
    exclude_threads: AbstractSet[int] = frozenset(),
    max_depth: int = MAX_DEPTH,
    max_objects: int = MAX_OBJECTS,
    max_holders: int = MAX_HOLDERS,
    find_unreached: bool = True,
    traceback: Optional[types.TracebackType] = None,
    progress: Optional[CensusProgress] = None,
    thread_time: bool = False,
) -> Census:
    """Live tensor storages and their holders, now.

    skip_frames: ids of frames whose locals are not roots; exclude_threads: thread idents whose
    stacks are not walked (the agent's own thread, when the census runs there). The census'
    own frames (memsight's files) are always skipped. find_unreached: also list every tensor
    gc tracks, to count the storages no root reaches (unattributed_*): in a process that has
    imported torch, most of a small census' cost; without it those are None and `tensors`
    covers what the roots reach. traceback: an exception's (an out-of-memory error's): the
    locals of its frames are roots too, those the stack no longer holds included (an error
    that ended the script has left every frame by the time it is reported).

    progress: a census in slices. One that runs out of time while it reads collections says
    so (cost["continues"]); a later call with the same progress goes on from there, and the
    census of the slice that ends is the whole one (cost["slices"], "max_pause_us"; wall_us
    and cpu_us are then the slices' sums). thread_time: max_seconds is of the calling thread's
    CPU time, not of wall time (a census from another thread than the script's).
    """
    walker = _Walker(torch, max_seconds, max_depth, max_objects, thread_time)
    walker.find_unreached = find_unreached
    walker.traceback = traceback
    walker.progress = progress
    if progress is not None:
        progress.slices += 1
    # No collection inside the pause: one triggered by the census' own allocations would walk
    # every object again, and run finalizers (the user's __del__) in the middle of the walk.
    collecting = gc.isenabled()
    gc.disable()
    try:
        walker.run(skip_frames, exclude_threads)
        census = walker.result(max_holders)
    finally:
        if collecting:
            gc.enable()
        walker.release()
    if progress is not None:
        unfinished = walker.stopped in ("time", "objects") and walker.carrying
        _add_slice(census.cost, progress, unfinished)
    return census


MAX_SLICES = 200  # a census in slices gives up after this many (stopped_by "slices")


def _add_slice(cost: Dict[str, Any], progress: CensusProgress, unfinished: bool) -> None:
    """A slice's cost into the census' whole, and whether another slice goes on from it."""
    progress.wall_us += cost["wall_us"]
    progress.cpu_us += cost["cpu_us"]
    progress.max_pause_us = max(progress.max_pause_us, cost["wall_us"])
    cost["pause_us"] = cost["wall_us"]  # this slice's own
    progress.objects += cost["objects"]
    progress.errors += cost["errors"]
    continues = unfinished and progress.slices < MAX_SLICES
    if unfinished and not continues:
        cost["stopped_by"] = "slices"
    cost.update(
        wall_us=progress.wall_us,
        cpu_us=progress.cpu_us,
        objects=progress.objects,
        errors=progress.errors,
        slices=progress.slices,
        max_pause_us=progress.max_pause_us,
        continues=continues,
    )


class _Holder:
    """One named holder, and what was attributed to it."""

    __slots__ = (
        "bytes",
        "container",
        "count",
        "devices",
        "dtypes",
        "file",
        "file_bytes",
        "first_line",
        "function",
        "grad_bytes",
        "grad_storages",
        "id",
        "kind",
        "line",
        "name",
        "owner",
        "path",
        "root",
        "shapes",
        "storages",
        "thread",
        "with_graph",
    )

    def __init__(self, ctx: _Ctx) -> None:
        self.id = ctx.root + ctx.path
        self.kind = ctx.kind
        self.name = ctx.name
        self.root = ctx.anchor
        self.path = ctx.path
        self.container = ctx.container
        self.owner = ctx.owner
        self.function = ctx.function
        self.file = ctx.file
        self.line = ctx.line
        self.first_line = ctx.first_line
        self.thread = ctx.thread
        self.count = self.storages = self.bytes = 0
        self.grad_storages = self.grad_bytes = self.with_graph = self.file_bytes = 0
        self.devices: Set[str] = set()
        self.dtypes: Set[str] = set()
        self.shapes: List[Tuple[int, ...]] = []

    def copy(self) -> _Holder:
        other = _Holder.__new__(_Holder)
        for name in _Holder.__slots__:
            setattr(other, name, getattr(self, name))
        other.devices, other.dtypes, other.shapes = set(self.devices), set(self.dtypes), []
        other.shapes.extend(self.shapes)
        return other

    def add(self, other: _Holder) -> None:
        """What other (the same holder, from another slice of the census) counted."""
        self.count += other.count
        self.storages += other.storages
        self.bytes += other.bytes
        self.grad_storages += other.grad_storages
        self.grad_bytes += other.grad_bytes
        self.with_graph += other.with_graph
        self.file_bytes += other.file_bytes
        self.devices |= other.devices
        self.dtypes |= other.dtypes
        for shape in other.shapes:
            if len(self.shapes) < MAX_SHAPES and shape not in self.shapes:
                self.shapes.append(shape)

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "container": self.container,
            "owner": self.owner,
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "first_line": self.first_line,
            "thread": self.thread,
            "root": self.root,
            "path": self.path,
            "count": self.count,
            "storages": self.storages,
            "bytes": self.bytes,
            "grad_bytes": self.grad_bytes,
            "grad_storages": self.grad_storages,
            "with_graph": self.with_graph,
            "file_bytes": self.file_bytes,
            "devices": sorted(self.devices),
            "dtypes": sorted(self.dtypes),
            "shapes": [list(s) for s in self.shapes],
        }


class _Ctx:
    """Where an object was reached: the holder it counts under, and the path to name its
    children. Anonymous positions (list items, set members, dict entries not named by a short
    string key) keep their parent's holder; named steps (attributes, string keys) start one."""

    __slots__ = (
        "anchor",
        "anon",
        "base",
        "container",
        "file",
        "first_line",
        "function",
        "holder",
        "keys",
        "kids",
        "kind",
        "line",
        "module_path",
        "name",
        "named",
        "owner",
        "path",
        "root",
        "thread",
        "variant",
    )

    def __init__(
        self,
        root: str,
        path: str,
        name: str,
        kind: str,
        anchor: str,
        container: str,
        owner: Optional[str] = None,
        file: Optional[str] = None,
        line: Optional[int] = None,
        function: Optional[str] = None,
        first_line: Optional[int] = None,
        thread: Optional[str] = None,
        named: int = 0,
    ) -> None:
        self.root = root  # id prefix: root kind and where the root lives
        self.path = path  # from the root binding: trainer.model.kept[*]["x"]
        self.name = name  # as shown: Model.kept, history["train"], cell total
        self.kind = kind
        self.anchor = anchor  # the variable, attribute or cell name the holder starts at
        self.container = container
        self.owner = owner
        self.file = file
        self.line = line
        self.function = function
        self.first_line = first_line
        self.thread = thread
        self.named = named
        self.anon = False
        self.base: _Ctx = self  # the context whose holder this one counts under
        self.holder: Optional[_Holder] = None
        self.kids: Optional[Dict[str, _Ctx]] = None  # attribute children, by name
        self.keys: Optional[Dict[str, _Ctx]] = None  # dict-key children, by key
        self.variant: Optional[_Ctx] = None
        # A submodule's path below the model the holder reached ("blocks.3.attn"): its
        # attributes are named by it, so that two instances of one class tell apart.
        self.module_path = ""

    def anonymous(self) -> _Ctx:
        """The same holder, one unnamed position further down."""
        if self.anon:
            return self
        v = self.variant
        if v is None:
            v = self.variant = self._copy(self.path)
            v.anon = True
        return v

    def within(self, step: str) -> _Ctx:
        """The same holder, the path one named step further (a submodule of a model)."""
        kids = self.kids
        if kids is None:
            kids = self.kids = {}
        v = kids.get("\0" + step)  # apart from attribute names, the other entries
        if v is None:
            v = kids["\0" + step] = self._copy(self.path + ("[*]" if self.anon else "") + step)
            v.module_path = self.module_path + step if self.module_path else step.lstrip(".")
        return v

    def _copy(self, path: str) -> _Ctx:
        v = _Ctx(
            self.root,
            path,
            self.name,
            self.kind,
            self.anchor,
            self.container,
            self.owner,
            self.file,
            self.line,
            self.function,
            self.first_line,
            self.thread,
            self.named,
        )
        v.base = self.base
        v.module_path = self.module_path
        return v


class _TypeInfo:
    __slots__ = (
        "base",
        "dict_get",
        "items",
        "kind",
        "module",
        "name",
        "optimizer",
        "slots",
        "tp",
        "user",
        "wrapper",
    )

    def __init__(self, tp: type, kind: int, name: str, module: Optional[str]) -> None:
        self.tp = tp  # kept alive while the census keys this by id(tp)
        self.kind = kind
        self.name = name
        self.module = module
        self.items: Optional[Callable[[Any], Iterable[Any]]] = None
        self.base: Any = None  # the builtin container type of a K_SEQ
        self.wrapper = False  # a tensor subclass with a __torch_dispatch__ of its own
        self.dict_get: Optional[Callable[[Any], Any]] = None
        # (attribute name, getter, named): slots of Python classes are named holders
        self.slots: List[Tuple[str, Callable[[Any], Any], bool]] = []
        self.user = False  # defined in the user's code: its class attributes are walked too
        self.optimizer = False  # a torch.optim.Optimizer


_TensorInfo = Tuple[Tuple[str, int], int, str, str]  # storage key, bytes, device, dtype
DONE = -1  # a collection's position once read to its end


class _Level:
    """One level of a depth-first dive: objects (each under ctxs[i], or all under ctx), the
    next index, their depth; a collection's level also reads its chunks and knows its key
    and where its current chunk starts in it."""

    __slots__ = ("batch", "chunks", "ctx", "ctxs", "depth", "i", "key", "marked", "objs", "offset")

    def __init__(
        self,
        objs: List[Any],
        ctxs: Optional[List[_Ctx]],
        ctx: Optional[_Ctx],
        depth: int,
        marked: bool,
    ) -> None:
        self.objs = objs
        self.ctxs = ctxs
        self.ctx = ctx
        self.depth = depth
        self.marked = marked  # the objects are in the visited set already (pushed)
        self.i = 0
        self.batch = 0  # where the batch being walked below this level began
        self.chunks: Optional[Iterator[List[Any]]] = None
        self.key: Optional[Tuple[str, int]] = None
        self.offset = 0


class CensusProgress:
    """What a census cut short by its pause carries to its next slice (take_census(progress=)):
    strings, ints and ids only, so no reference to any object of the program outlives a slice.

    positions: items read so far of each collection, by (its holder's path, its id), where the
    next slice goes on (DONE: read to its end); holders, storages: what the collections' items
    gave so far (storage key -> bytes, device, dtype, holder id, slice). The walk outside the
    collections is done again at every slice, so what it finds is as of the last one."""

    def __init__(self) -> None:
        self.positions: Dict[Tuple[str, int], int] = {}
        self.holders: Dict[str, _Holder] = {}
        self.storages: Dict[Tuple[str, int], Tuple[int, str, str, str, int]] = {}
        self.slices = 0
        self.wall_us = 0
        self.cpu_us = 0
        self.max_pause_us = 0
        self.objects = 0
        self.errors = 0


class _Walker:
    def __init__(
        self,
        torch: Any,
        max_seconds: float,
        max_depth: int,
        max_objects: int,
        thread_time: bool = False,
    ) -> None:
        self.started = time.perf_counter()
        self.cpu_started = time.thread_time()
        self.clock: Callable[[], float] = time.thread_time if thread_time else time.perf_counter
        self.deadline = self.clock() + max(0.0, max_seconds)
        self.max_depth = max_depth
        self.max_objects = max_objects
        self.torch = torch
        c = getattr(torch, "_C", None)
        self.tensor_base: type = getattr(c, "TensorBase", None) or getattr(
            c, "_TensorBase", torch.Tensor
        )
        tb = self.tensor_base.__dict__
        self.storage_of = tb["untyped_storage"]
        self.grad_fn_of = tb["grad_fn"].__get__
        self.grad_of = tb["grad"].__get__
        self.is_leaf = tb["is_leaf"].__get__
        self.device_of = tb["device"].__get__
        self.dtype_of = tb["dtype"].__get__
        self.shape_of = tb["shape"].__get__
        self.layout_of = tb["layout"].__get__
        self.tensor_methods = {n: tb[n] for n in _SPARSE_METHODS if n in tb}
        storage_base = getattr(c, "StorageBase", None)
        self.storage_type: Optional[type] = storage_base
        sb = storage_base.__dict__ if storage_base is not None else {}
        self.storage_ptr: Any = sb.get("data_ptr")
        self.storage_nbytes: Any = sb.get("nbytes")
        device_of_storage = sb.get("device")
        self.storage_device: Any = getattr(device_of_storage, "__get__", None)
        nn = getattr(torch, "nn", None)
        self.nn_module: Optional[type] = getattr(nn, "Module", None)
        self.optimizer: Optional[type] = getattr(getattr(torch, "optim", None), "Optimizer", None)
        # Attributes of these are not read: the user rarely sets any, and reading __dict__
        # would make one for every tensor.
        self.plain_tensor_types = set(
            map(id, (self.tensor_base, torch.Tensor, getattr(nn, "Parameter", None)))
        )
        # Subclasses' __torch_function__ and the active torch function modes (a FLOP counter)
        # must not see the census' own calls.
        self.no_torch_function: Callable[[], Any] = getattr(
            c,
            "DisableTorchFunction",
            getattr(c, "DisableTorchFunctionSubclass", contextlib.nullcontext),
        )
        # Tensor's own __torch_dispatch__: a subclass with another one is a wrapper (its data
        # lives in tensors it holds), and reading its storage or shape would dispatch to it.
        self.plain_dispatch = getattr(torch.Tensor, "__torch_dispatch__", None)

        # Caches by id(type), the type kept alive in the value: a dict keyed by a class would
        # call its metaclass' __hash__ and __eq__.
        self.types: Dict[int, _TypeInfo] = {}
        self.user_modules: Dict[str, bool] = {}
        self.module_files: Dict[str, Optional[str]] = {}
        self.device_names: Dict[Any, str] = {}
        self.dtype_names: Dict[Any, str] = {}
        self.node_layouts: Dict[
            int, Tuple[type, List[Callable[[Any], Any]], Optional[Callable[[Any], Any]]]
        ] = {}

        self.visited: Any = set()  # of ids; a _Bitmap past SET_MAX of them
        self.next_objs: List[Any] = []
        self.next_ctxs: List[_Ctx] = []
        self.find_unreached = True  # list every tensor gc tracks (take_census)
        self.traceback: Optional[types.TracebackType] = None  # its frames are roots too
        self.tensors: List[Any] = []  # found by gc; kept for the census so their ids hold
        self.infos: Dict[int, _TensorInfo] = {}  # id(tensor) -> info
        self.storages: Dict[Tuple[str, int], Tuple[int, str, str]] = {}  # key -> bytes, dev, dt
        self.graph_only: Set[Tuple[str, int]] = set()
        self.claimed: Set[Tuple[str, int]] = set()
        self.holders: Dict[str, _Holder] = {}
        self.graphs: List[Tuple[Any, _Holder]] = []
        self.deferred: List[Tuple[Any, _Ctx]] = []
        # Collections (more than BIG items) met by the walk: read after it, smallest first (a
        # list of kept losses before a dataset of millions of records). A heap of
        # (items, order, collection, context, depth).
        self.collections: List[Tuple[int, int, Any, _Ctx, int]] = []
        self.collections_met = 0
        self.depth = 0  # the breadth-first walk's layer
        # Locals snapshots this census made on running function frames (Python < 3.13):
        # emptied at its end, so that no reference to a local outlives it.
        self.snapshots: List[Tuple[Any, Dict[Any, Any]]] = []
        self.memory_cap = MEMORY_FLOOR + int(MEMORY_SHARE * _rss())  # of the peak RSS
        self.ranges = _Ranges()  # the address ranges of the storages counted so far
        self.generator_codes: List[types.CodeType] = []  # of the user's generator functions
        self.file_maps: Optional[Tuple[List[int], List[int]]] = None
        self.progress: Optional[CensusProgress] = None  # a census in slices: carried state
        self.carrying = False  # reading collections of a census in slices: carry what is found
        self.diving: Optional[List[_Level]] = None  # the dive's stack, while one runs
        self.met: List[Tuple[Any, _Ctx, int]] = []  # collections met by the dive's last batch
        self.graph_seen: Dict[int, Any] = {}
        self.objects = 0
        self.graph_nodes = 0
        self.errors = 0
        self.stopped: Optional[str] = None

    # -- the run -------------------------------------------------------------------------------

    def run(self, skip_frames: AbstractSet[int], exclude_threads: AbstractSet[int]) -> None:
        with self.no_torch_function():
            if self.find_unreached:
                self.find_tensors()
            if self.over_budget():
                return
            objs: List[Any] = []
            ctxs: List[_Ctx] = []
            self.next_objs, self.next_ctxs = objs, ctxs
            self.global_roots()
            self.frame_roots(skip_frames, exclude_threads)
            self.walk(objs, ctxs)
            while (self.deferred or self.collections) and self.stopped is None:
                if self.deferred:
                    later, self.deferred = self.deferred, []
                    objs, ctxs = [], []
                    self.next_objs, self.next_ctxs = objs, ctxs
                    for obj, ctx in later:
                        self.push(obj, ctx)
                    self.walk(objs, ctxs)
                else:
                    _size, _order, obj, ctx, depth = heapq.heappop(self.collections)
                    self.collection(obj, ctx, depth)
                if not self.deferred and not self.collections and self.stopped is None:
                    self.suspended_generators()
            if self.stopped is None:
                self.walk_graphs()

    def over_budget(self) -> bool:
        if self.stopped is not None:
            return True
        if self.clock() >= self.deadline:
            self.stopped = "time"
        elif self.objects >= self.max_objects:
            self.stopped = "objects"
        else:
            visited = self.visited
            if type(visited) is set and len(visited) > SET_MAX:
                self.visited = visited = _Bitmap(visited)
            if self.memory_used() > self.memory_cap:
                self.stopped = "memory"
        return self.stopped is not None

    def memory_used(self) -> int:
        """What the census' own tables hold, in bytes (estimated from their sizes)."""
        visited = self.visited
        held = visited.nbytes() if type(visited) is _Bitmap else 60 * len(visited)
        return held + 16 * (len(self.next_objs) + len(self.deferred)) + 300 * len(self.infos)

    def release_snapshots(self) -> None:
        """Empty the locals snapshots the census made (Python < 3.13: reading a running
        function's f_locals copies its variables into a dict that the frame keeps until it
        returns). Only a snapshot nobody else holds: whoever reads f_locals or locals() next
        gets it filled again, so the script cannot tell; one that the function kept
        (`env = locals()`) is its own and stays as it is."""
        snapshots, self.snapshots = self.snapshots, []
        for _frame, namespace in snapshots:
            # Held by the frame, the census' list, this loop and getrefcount's argument.
            if sys.getrefcount(namespace) <= 4:
                dict.clear(namespace)
        snapshots.clear()

    def release(self) -> None:
        """Drop every reference to the process' objects."""
        self.release_snapshots()
        self.collections = []
        self.generator_codes = []
        self.tensors = []
        self.graphs = []
        self.traceback = None
        self.graph_seen = {}
        self.deferred = []
        self.next_objs = []
        self.infos = {}
        self.types = {}
        self.node_layouts = {}
        self.device_names = {}
        self.dtype_names = {}

    # -- tensors -------------------------------------------------------------------------------

    def find_tensors(self) -> None:
        tensor_types = _subclasses(self.tensor_base)
        objs = gc.get_objects()
        # By exact type's id, and in C (map, compress): no isinstance(), which would read the
        # __class__ of every object (a property of the user's, maybe), no hash of a class (its
        # metaclass' __hash__), and no Python loop.
        is_tensor = tensor_types.__contains__
        self.tensors = list(compress(objs, map(is_tensor, map(id, map(type, objs)))))
        del objs
        for t in self.tensors:
            self.infos[id(t)] = self.info(t)

    def is_tensor_type(self, tp: type) -> bool:
        ti = self.types.get(id(tp))
        if ti is not None:
            return ti.kind == K_TENSOR
        return self.tensor_type(tp)

    def tensor_type(self, tp: type) -> bool:
        try:
            return issubclass(tp, self.tensor_base)
        except Exception as exc:
            _reraise_foreign(exc)
            return False

    def is_wrapper(self, tp: type) -> bool:
        """A tensor subclass with a __torch_dispatch__ of its own (a wrapper: DTensor, a
        FakeTensor, a user's): reading its storage, shape or device would call it."""
        for klass in _class_mro(tp):
            found = _class_dict(klass).get("__torch_dispatch__")
            if found is not None:
                return found is not self.plain_dispatch
        return False

    def info(self, t: Any, record: bool = True) -> _TensorInfo:
        tp = type(t)
        ti = self.types.get(id(tp))
        if ti is None:
            ti = self.classify(tp)
        if ti.wrapper:
            # Its bytes are those of the tensors it holds (its attributes, walked as such).
            key = ("", id(t))
            if record and key not in self.storages:
                self.storages[key] = (0, "?", ti.name)
            return key, 0, "?", ti.name
        try:
            device = self.device_of(t)
            dev = self.device_names.get(device)
            if dev is None:
                dev = self.device_names[device] = str(device)
            dtype = self.dtype_of(t)
            dt = self.dtype_names.get(dtype)
            if dt is None:
                dt = self.dtype_names[dtype] = str(dtype).replace("torch.", "")
        except Exception as exc:
            _reraise_foreign(exc)
            dev, dt = "?", "?"
        try:
            storage = self.storage_of(t)
            ptr = int(storage.data_ptr())
            nbytes = int(storage.nbytes()) if ptr else 0  # meta and empty storages hold nothing
        except Exception as exc:  # sparse, nested, wrapper subclasses: no plain storage
            _reraise_foreign(exc)
            ptr, nbytes = 0, 0
        key = (dev, ptr) if ptr else ("", id(t))
        if record and key not in self.storages:
            self.storages[key] = (nbytes, dev, dt)
        return key, nbytes, dev, dt

    def attribute(self, t: Any, ctx: _Ctx, ti: _TypeInfo) -> None:
        """A tensor reached from a root: it counts under ctx's holder."""
        info = self.infos.get(id(t))
        if info is None:  # created after gc.get_objects() ran
            info = self.infos[id(t)] = self.info(t)
            self.tensors.append(t)
        base = ctx.base
        h = self.holder_of(base)
        if not self.claim(info, h):
            return  # read by an earlier slice: this item is being read again
        h.count += 1
        if not info[0][0] and not ti.wrapper:
            for part in self.parts(t):  # a sparse tensor's indices and values
                self.claim(self.info(part), h)
        if not ti.wrapper:
            h.devices.add(info[2])
            h.dtypes.add(info[3])
        if len(h.shapes) < MAX_SHAPES and not ti.wrapper:
            try:
                shape = tuple(int(n) for n in self.shape_of(t))
            except Exception as exc:
                _reraise_foreign(exc)
                shape = ()
            if shape not in h.shapes:
                h.shapes.append(shape)
        try:
            grad_fn = self.grad_fn_of(t)
            # .grad of a non-leaf warns (and is None): read it on leaves only.
            grad = None if grad_fn is not None or not self.is_leaf(t) else self.grad_of(t)
        except Exception as exc:
            _reraise_foreign(exc)
            return
        if grad_fn is not None:
            h.with_graph += 1
            self.graphs.append((grad_fn, h))
        if grad is not None:
            self.push(grad, ctx.anonymous())
        # Its attributes (`t.mask = m`, a wrapper's real data: DTensor's local tensor), as gc
        # sees them: no __dict__ is made for a tensor that has none. They count under the
        # tensor's holder.
        anon = ctx.anonymous()
        for held in gc.get_referents(t):
            if type(held) is dict:
                self.push_all(list(dict.values(held)), anon)
            elif _is_tracked(held) and not issubclass(type(held), type):
                self.push(held, anon)

    def claim(self, info: _TensorInfo, h: _Holder) -> bool:
        """Count a storage under h unless a holder has it already; its bytes are those of its
        address range that no storage counted so far covers (numpy buffers shared by several
        tensors, storages made over one buffer). False: a census in slices read this storage
        in an earlier slice (the item that holds it is being read again)."""
        key, nbytes, dev, _dt = info
        if self.carrying:
            progress = self.progress
            assert progress is not None
            known = progress.storages.get(key)
            if known is not None:
                return known[4] == progress.slices
            if key in self.claimed:
                return True
            added = self.ranges.add(dev, key[1], nbytes) if key[0] else nbytes
            progress.storages[key] = (added, dev, info[3], h.id, progress.slices)
        else:
            if key in self.claimed:
                return True
            self.claimed.add(key)
            added = self.ranges.add(dev, key[1], nbytes) if key[0] else nbytes
        h.storages += 1
        h.bytes += added
        if added and key[0] == "cpu" and self.file_backed(key[1], nbytes):
            h.file_bytes += added
        return True

    def parts(self, t: Any) -> List[Any]:
        """The tensors a sparse tensor is made of (it has no storage of its own)."""
        try:
            layout = self.layout_of(t)
        except Exception as exc:
            _reraise_foreign(exc)
            return []
        names = _SPARSE_PARTS.get(str(layout), ())
        found = []
        for name in names:
            get = self.tensor_methods.get(name)
            if get is None:
                continue
            try:
                found.append(get(t))
            except Exception as exc:
                _reraise_foreign(exc)
        return found

    def file_backed(self, ptr: int, nbytes: int) -> bool:
        """Whether a CPU storage lies in a mapping of a file (torch.load(mmap=True),
        from_file): the page cache's memory, not the process' own. Only storages of 1 MiB or
        more are looked up, in /proc/self/maps read once per census."""
        if nbytes < 2**20:
            return False
        maps = self.file_maps
        if maps is None:
            maps = self.file_maps = _file_mappings()
        at = bisect.bisect_right(maps[0], ptr) - 1
        return at >= 0 and ptr + nbytes <= maps[1][at]

    def storage(self, storage: Any, ctx: _Ctx) -> None:
        """A bare storage reached from a root (no tensor over it): it counts under ctx's
        holder, as a tensor's would."""
        try:
            ptr = int(self.storage_ptr(storage))
            nbytes = int(self.storage_nbytes(storage)) if ptr else 0
            device = self.storage_device(storage)
            dev = self.device_names.get(device)
            if dev is None:
                dev = self.device_names[device] = str(device)
        except Exception as exc:
            _reraise_foreign(exc)
            return
        if not ptr:
            return
        key = (dev, ptr)
        if key not in self.storages:
            self.storages[key] = (nbytes, dev, "storage")
        base = ctx.base
        h = self.holder_of(base)
        if self.claim((key, nbytes, dev, "storage"), h):
            h.count += 1
            h.devices.add(dev)

    def holder_of(self, base: _Ctx) -> _Holder:
        """The holder base counts under: among those a census in slices carries while it
        reads collections, else this census' own."""
        return self.carried(base) if self.carrying else base.holder or self.holder_for(base)

    def carried(self, base: _Ctx) -> _Holder:
        """The holder, among those a census in slices carries, that base counts under."""
        assert self.progress is not None
        holders = self.progress.holders
        hid = base.root + base.path
        h = holders.get(hid)
        if h is None:
            h = holders[hid] = _Holder(base)
        return h

    def holder_for(self, base: _Ctx) -> _Holder:
        hid = base.root + base.path
        h = self.holders.get(hid)
        if h is None:  # the same function in two frames, one object reached twice: one holder
            h = self.holders[hid] = _Holder(base)
        base.holder = h
        return h

    # -- roots ---------------------------------------------------------------------------------

    def defer(self, obj: Any, ctx: _Ctx) -> None:
        """Reach obj only after everything else: what holds it here is rarely what names it.
        A tensor used as a dict key (an optimizer's state is keyed by the model's
        parameters), an optimizer's param_groups: the model should claim those."""
        self.deferred.append((obj, ctx))

    def push(self, obj: Any, ctx: _Ctx) -> None:
        i = id(obj)
        if i not in self.visited:
            self.visited.add(i)
            self.next_objs.append(obj)
            self.next_ctxs.append(ctx)

    def global_roots(self) -> None:
        not_users = _NOT_USER_MODULES
        for modname, module in list(sys.modules.items()):
            if not_users.get(modname) == id(module):
                continue  # the same module object as in an earlier census: a library's
            if type(modname) is not str or not issubclass(type(module), types.ModuleType):
                continue
            try:
                namespace = _module_dict(module)
            except Exception as exc:
                _reraise_foreign(exc)
                continue
            if type(namespace) is not dict or not self.is_user_module(modname, namespace):
                not_users[modname] = id(module)
                continue
            file = namespace.get("__file__")
            file = file if type(file) is str else None
            root = "global:" + modname + ":"
            for name, value in list(dict.items(namespace)):
                if type(name) is not str or _dunder(name) or not _is_tracked(value):
                    continue
                if id(value) in self.visited:
                    continue
                ctx = _Ctx(root, name, name, "global", name, self.type_name(value), modname, file)
                self.push(value, ctx)

    def is_user_module(self, modname: str, namespace: Dict[str, Any]) -> bool:
        if modname == "__main__":
            return True
        file = namespace.get("__file__")
        known = _USER_MODULES.get(modname)
        if known is not None and known[0] is file:
            return known[1]
        user = not _own(modname) and type(file) is str and not is_library_file(file)
        if type(file) is str or file is None:
            _USER_MODULES[modname] = (file, user)  # a str or None: no object kept alive
        return user

    def frame_roots(self, skip_frames: AbstractSet[int], exclude_threads: AbstractSet[int]) -> None:
        names = _thread_names()
        try:
            main = threading.main_thread().ident
        except Exception as exc:
            _reraise_foreign(exc)
            main = None
        current = sys._current_frames()
        order = sorted(current, key=lambda ident: (ident != main, ident))
        # memsight's own frames are left out of the chains, this one above all: a list held
        # by this frame that held this frame would be a reference cycle keeping every frame
        # on the stack alive, with their locals (the loop's tensors), until gc next ran.
        stacks: List[Tuple[Optional[str], List[types.FrameType]]] = []
        for ident in order:
            if ident in exclude_threads:
                continue
            chain = []
            frame: Optional[types.FrameType] = current[ident]
            while frame is not None:
                if not frame.f_code.co_filename.startswith(_OWN_DIR):
                    chain.append(frame)
                frame = frame.f_back
            chain.reverse()  # outermost first: the loop's frame claims before a callee's
            stacks.append((names.get(ident), chain))
        del current
        on_stacks = {id(frame) for _thread, chain in stacks for frame in chain}
        raised: List[types.FrameType] = []
        tb = self.traceback
        while tb is not None and len(raised) < 1000:
            code = tb.tb_frame.f_code
            if id(tb.tb_frame) not in on_stacks and not code.co_filename.startswith(_OWN_DIR):
                raised.append(tb.tb_frame)
            tb = tb.tb_next
        if raised:
            stacks.append((names.get(threading.get_ident()), raised))
        # The user's frames first, then libraries' (a trainer's loop holding the model).
        for library in (False, True):
            for thread, chain in stacks:
                for frame in chain:
                    code = frame.f_code
                    file = code.co_filename
                    if id(frame) in skip_frames:
                        continue
                    if is_library_file(file) is library:
                        self.frame_locals(frame, code, file, thread)

    def frame_locals(
        self, frame: types.FrameType, code: types.CodeType, file: str, thread: Optional[str]
    ) -> None:
        try:
            namespace: Any = frame.f_locals
            if namespace is frame.f_globals:
                return  # module level: its globals are roots already (if the user's)
            tp = type(namespace)
            if _LOCALS_SNAPSHOT and tp is dict and code.co_flags & _CO_OPTIMIZED:
                self.snapshots.append((frame, namespace))
            if issubclass(tp, dict):
                items = list(dict.items(namespace))
            elif tp is _FRAME_LOCALS_PROXY:
                items = list(namespace.items())  # C: the frame's own variables
            else:
                return  # a mapping of the user's (exec's locals, a metaclass' __prepare__)
        except Exception as exc:
            _reraise_foreign(exc)
            return
        function = getattr(code, "co_qualname", code.co_name)
        first = code.co_firstlineno
        root = "local:" + file + ":" + function + ":" + str(first) + ":"
        line = frame.f_lineno
        for name, value in items:
            if type(name) is not str or not _is_tracked(value) or id(value) in self.visited:
                continue
            ctx = _Ctx(
                root,
                name,
                name,
                "local",
                name,
                self.type_name(value),
                function,
                file,
                line,
                function,
                first,
                thread,
            )
            self.push(value, ctx)

    # -- the walk ------------------------------------------------------------------------------

    def walk(self, objs: List[Any], ctxs: List[_Ctx]) -> None:
        """Breadth-first, one layer of objects at a time. The common objects (builtin lists,
        tuples, sets and dicts) are handled inline: 10^5 of them must cost milliseconds.
        Collections (more than BIG items) wait for dive(); once the next layer holds
        FRONTIER_MAX objects, the rest of this one is walked depth-first at once."""
        tracked = _is_tracked
        plain = _PLAIN_SEQUENCES
        depth = 0
        while objs:
            self.depth = depth
            expand = depth < self.max_depth
            nobjs: List[Any] = []
            nctxs: List[_Ctx] = []
            self.next_objs, self.next_ctxs = nobjs, nctxs
            visited = self.visited
            batch: List[Any] = []  # plain sequences in a row under one context
            batch_ctx: Optional[_Ctx] = None
            batch_items = 0
            n = self.objects
            for i, obj in enumerate(objs):  # zip(strict=) is 3.10+, the agent runs on 3.9
                n += 1
                if not n % CHECK_EVERY:
                    self.objects = n
                    if self.over_budget():
                        return
                    visited = self.visited
                if len(nobjs) >= FRONTIER_MAX:
                    self.objects = n - 1
                    self.sequences(batch, batch_ctx)
                    rest = _Level(objs, ctxs, None, depth, marked=True)
                    rest.i = i
                    self.dive(rest)
                    if self.stopped is not None:
                        return
                    self.depth = depth
                    self.next_objs, self.next_ctxs = nobjs, nctxs
                    n = self.objects
                    batch, batch_ctx, batch_items = [], None, 0
                    break
                ctx = ctxs[i]
                tp = type(obj)
                if id(tp) in plain:
                    if not expand:
                        continue
                    anon = ctx if ctx.anon else ctx.anonymous()
                    size = len(obj)  # an exact builtin's: no method of the user's
                    if size > BIG:
                        self.later(obj, size, anon, depth + 1)
                        continue
                    if anon is not batch_ctx or batch_items + size > 4 * CHUNK:
                        self.sequences(batch, batch_ctx)
                        batch, batch_ctx, batch_items = [], anon, 0
                    batch.append(obj)
                    batch_items += size
                    continue
                try:
                    if tp is dict and expand and len(obj) <= BIG:
                        items = list(dict.items(obj))  # atomic under the GIL
                        named = ctx.named < MAX_NAMED_STEPS and len(items) <= MAX_NAMED_KEYS
                        anon = ctx if ctx.anon else ctx.anonymous()
                        for key, value in items:
                            if tracked(key) and id(key) not in visited:
                                self.defer(key, anon)
                            if not tracked(value) or id(value) in visited:
                                continue
                            if id(type(value)) in plain and _leaf(value):
                                n += 1  # a list of numbers or strings: nothing below it
                                continue
                            visited.add(id(value))
                            nobjs.append(value)
                            child = None
                            if named and type(key) is str:
                                keys = ctx.keys
                                child = keys.get(key) if keys is not None else None
                                if child is None:
                                    child = self.key_child(ctx, key, value)
                            nctxs.append(child if child is not None else anon)
                    else:
                        self.visit(obj, ctx, expand)
                except Exception as exc:  # an object that changed under the walk, a broken one
                    _reraise_foreign(exc)
                    self.errors += 1
            self.objects = n
            self.sequences(batch, batch_ctx)
            objs, ctxs = nobjs, nctxs
            depth += 1

    def sequences(self, batch: List[Any], ctx: Optional[_Ctx]) -> None:
        """Items of plain lists, tuples, sets and deques, all under one context: their
        referents are exactly their items, gathered in C in one call."""
        if not batch or ctx is None:
            return
        # Lists and tuples report their items last to first: both reversals give them in order.
        batch.reverse()
        self.push_all(reversed(gc.get_referents(*batch)), ctx)

    def dive(self, first: _Level) -> None:
        """Depth-first from a level of objects (or a collection's chunks): the stack holds one
        list of at most CHUNK + BIG objects a level, so the memory stays bounded whatever the
        heap's shape. A collection met on the way is a level of its own, read at once."""
        tracked = _is_tracked
        plain = _PLAIN_SEQUENCES
        stack: List[_Level] = [first]
        self.diving = stack
        try:
            while stack:
                level = stack[-1]
                objs, i = level.objs, level.i
                if i >= len(objs):
                    if not self.next_chunk(level):
                        stack.pop()
                    continue
                if self.over_budget():
                    return
                self.depth = depth = level.depth
                expand = depth < self.max_depth
                ctxs, ctx, marked = level.ctxs, level.ctx, level.marked
                nobjs: List[Any] = []
                nctxs: List[_Ctx] = []
                self.next_objs, self.next_ctxs = nobjs, nctxs
                visited = self.visited
                n = self.objects
                end = len(objs)
                level.batch = i
                while i < end and len(nobjs) < CHUNK and not self.met:
                    obj = objs[i]
                    c = ctxs[i] if ctxs is not None else ctx
                    i += 1
                    n += 1
                    if not n % CHECK_EVERY:
                        self.objects = n
                        if self.over_budget():
                            # What this batch found below it is not walked yet: the next
                            # slice reads the batch again.
                            level.i = level.batch
                            return
                        visited = self.visited
                    if not marked:
                        if not tracked(obj):
                            continue
                        tp = type(obj)
                        if id(tp) in plain and _shallow(obj):
                            continue  # a record of numbers, strings and lists of them
                        oid = id(obj)
                        if oid in visited:
                            continue
                        visited.add(oid)
                    else:
                        tp = type(obj)
                    assert c is not None
                    if id(tp) in plain:
                        if not expand:
                            continue
                        anon = c if c.anon else c.anonymous()
                        size = len(obj)
                        if size > BIG:
                            self.later(obj, size, anon, depth + 1)
                        else:
                            self.push_all(reversed(gc.get_referents(obj)), anon)
                        continue
                    try:
                        if tp is dict and expand:
                            self.mapping(obj, c)
                        else:
                            self.visit(obj, c, expand)
                    except Exception as exc:  # an object that changed under the walk
                        _reraise_foreign(exc)
                        self.errors += 1
                self.objects = n
                level.i = i
                if nobjs:
                    stack.append(_Level(nobjs, nctxs, None, depth + 1, marked=True))
                met, self.met = self.met, []
                for obj, ctx, depth in met:
                    entered = self.enter(obj, ctx, depth)
                    if entered is not None:
                        stack.append(entered)
        finally:
            self.diving = None
            self.met = []
            if self.stopped is not None:
                self.note_positions(stack)

    def next_chunk(self, level: _Level) -> bool:
        """Load a collection level's next chunk; False when it has no more (it is read)."""
        more: Optional[List[Any]] = None
        if level.chunks is not None:
            try:
                more = next(level.chunks, None)
            except Exception as exc:  # changed size while it was read: done with it
                _reraise_foreign(exc)
                self.errors += 1
        if more:
            level.offset += len(level.objs)
            level.objs, level.i, level.batch, level.marked = more, 0, 0, False
            return True
        if level.key is not None and self.progress is not None:
            self.progress.positions[level.key] = DONE
        return False

    def note_positions(self, stack: List[_Level]) -> None:
        """The census stopped: where each collection on the stack goes on at the next slice.
        Below the top of the stack, the items of a level's last batch are being walked still,
        and the top's batch was cut short: the next slice reads them again (their storages
        are not counted again)."""
        progress = self.progress
        if progress is None:
            return
        top = len(stack) - 1
        for n, level in enumerate(stack):
            if level.key is not None:
                at = level.i if n == top else level.batch
                progress.positions[level.key] = level.offset + at

    def later(self, obj: Any, size: int, ctx: _Ctx, depth: int) -> None:
        """A collection met at depth - 1: its items are read after the walk (collection), or,
        met while diving, right after the object that holds it."""
        if self.diving is not None:
            self.met.append((obj, ctx, depth))
            return
        self.collections_met += 1  # unique: the heap never compares two collections
        heapq.heappush(self.collections, (size, self.collections_met, obj, ctx, depth))

    def enter(self, obj: Any, ctx: _Ctx, depth: int) -> Optional[_Level]:
        """The level that reads a collection from where an earlier slice left it, or None when
        an earlier slice read it to its end. Known by its holder's path and its id."""
        key = (ctx.root + ctx.path, id(obj))
        at = 0
        if self.progress is not None:
            self.carrying = True  # from here on, what is found is carried to the next slice
            at = self.progress.positions.get(key, 0)
            if at == DONE:
                return None
        level = _Level([], None, ctx, depth, marked=False)
        level.chunks, level.key, level.offset = self.chunks(obj, ctx, at), key, at
        return level

    def collection(self, obj: Any, ctx: _Ctx, depth: int) -> None:
        """A collection's items, CHUNK at a time, and what is below them (dive)."""
        level = self.enter(obj, ctx, depth)
        if level is not None:
            self.dive(level)

    def chunks(self, obj: Any, ctx: _Ctx, at: int = 0) -> Iterator[List[Any]]:
        """A collection's items, at most CHUNK at a time, read by its base type's C methods.
        Of a dict: its values, and its keys that are containers; tensor keys are walked after
        the rest (something else should name them: an optimizer's state is keyed by the
        model's parameters)."""
        tp = type(obj)
        if issubclass(tp, (list, tuple)):
            get = list.__getitem__ if issubclass(tp, list) else tuple.__getitem__
            while True:
                chunk = list(get(obj, slice(at, at + CHUNK)))
                if not chunk:
                    return
                at += CHUNK
                yield chunk
        if issubclass(tp, dict):
            items = iter(dict.items(obj))
            collections.deque(islice(items, at), maxlen=0)  # read by an earlier slice
            while True:
                pairs = list(islice(items, CHUNK))
                if not pairs:
                    return
                chunk = []
                for key, value in pairs:
                    if _is_tracked(key):
                        if self.is_tensor_type(type(key)):
                            self.defer(key, ctx)
                        else:
                            chunk.append(key)
                    chunk.append(value)
                yield chunk
        for base in (set, frozenset, collections.deque):
            if issubclass(tp, base):
                found = iter(base.__iter__(obj))
                collections.deque(islice(found, at), maxlen=0)
                while True:
                    chunk = list(islice(found, CHUNK))
                    if not chunk:
                        return
                    yield chunk

    def visit(self, obj: Any, ctx: _Ctx, expand: bool) -> None:
        tp = type(obj)
        ti = self.types.get(id(tp))
        if ti is None:
            ti = self.classify(tp)
        kind = ti.kind
        if kind == K_TENSOR:
            self.attribute(obj, ctx, ti)
        elif not expand or kind == K_SKIP:
            return
        elif kind == K_SEQ:
            assert ti.base is not None
            size = ti.base.__len__(obj)
            if size > BIG:
                self.later(obj, size, ctx.anonymous(), self.depth + 1)
            else:
                assert ti.items is not None
                self.push_all(ti.items(obj), ctx.anonymous())
            if ti.dict_get is not None or ti.slots:
                self.instance(obj, tp, ti, ctx)
        elif kind == K_DICT:
            self.mapping(obj, ctx)
            if ti.dict_get is not None or ti.slots:
                self.instance(obj, tp, ti, ctx)
        elif kind == K_INSTANCE:
            self.instance(obj, tp, ti, ctx)
        elif kind == K_OPAQUE:
            # What a C object holds, unnamed (a list iterator's list, a map's function and
            # iterable, a partial's arguments), as gc reads it: no method of it runs.
            self.push_all(gc.get_referents(obj), ctx.anonymous())
        elif kind == K_STORAGE:
            self.storage(obj, ctx)
        elif kind == K_NNMODULE:
            self.nn_module_(obj, tp, ti, ctx)
        elif kind == K_CLASS:
            self.klass(obj, ctx)
        elif kind == K_FUNCTION:
            self.function(obj)
        elif kind == K_METHOD:
            anon = ctx.anonymous()
            self.push(_method_self(obj), anon)
            self.push(_method_func(obj), anon)
        elif kind == K_GENERATOR:
            frame = _SUSPENDED_FRAME_BY_ID[id(tp)](obj)  # None once it has finished
            if frame is not None:
                code = frame.f_code
                file = code.co_filename
                if not is_library_file(file):
                    self.frame_locals(frame, code, file, None)

    def push_all(self, items: Iterable[Any], ctx: _Ctx) -> None:
        visited = self.visited
        objs, ctxs = self.next_objs, self.next_ctxs
        tracked = _is_tracked
        plain = _PLAIN_SEQUENCES
        for child in filter(tracked, items):
            i = id(child)
            if i not in visited:
                if id(type(child)) in plain and _shallow(child):
                    self.objects += 1  # a list of numbers or strings: nothing below it
                    continue
                visited.add(i)
                objs.append(child)
                ctxs.append(ctx)

    def mapping(self, d: Any, ctx: _Ctx) -> None:
        """A dict subclass (OrderedDict, defaultdict, the user's): read as a plain dict."""
        size = dict.__len__(d)
        if size > BIG:
            self.later(d, size, ctx.anonymous(), self.depth + 1)
            return
        items = list(dict.items(d))  # atomic under the GIL; no __iter__/items of a subclass
        named = ctx.named < MAX_NAMED_STEPS and len(items) <= MAX_NAMED_KEYS
        anon = ctx.anonymous()
        visited = self.visited
        for key, value in items:
            if _is_tracked(key) and id(key) not in visited:
                self.defer(key, anon)
            if not _is_tracked(value) or id(value) in visited:
                continue
            if id(type(value)) in _PLAIN_SEQUENCES and _leaf(value):
                continue  # a list of numbers or strings: nothing below it
            child = self.key_child(ctx, key, value) if named and type(key) is str else None
            self.push(value, child if child is not None else anon)

    def instance(self, obj: Any, tp: type, ti: _TypeInfo, ctx: _Ctx) -> None:
        # What it holds, as gc reads it in C: its attribute values, and what the C fields of
        # a C type's instance hold (an lru_cache wrapper's cache).
        held = gc.get_referents(obj)
        if not _may_hold_more(held, tp):
            return
        namespace = None
        if ti.dict_get is not None:
            try:
                namespace = ti.dict_get(obj)
            except Exception as exc:
                _reraise_foreign(exc)
            if namespace is not None and issubclass(type(namespace), dict):
                self.attributes(list(dict.items(namespace)), ti, ctx)
        for name, get, named in ti.slots:
            try:
                value = get(obj)
            except Exception as exc:  # an unset slot
                _reraise_foreign(exc)
                continue
            if _is_tracked(value) and id(value) not in self.visited:
                child = self.attribute_child(ctx, name, value, ti) if named else None
                self.push(value, child if child is not None else ctx.anonymous())
        if ti.user and id(tp) not in self.visited:
            self.push(tp, ctx)  # its class attributes
        # The rest, unnamed: what no attribute or slot holds (C fields).
        anon = ctx.anonymous()
        for value in held:
            if value is not namespace and not issubclass(type(value), type):
                self.push(value, anon)

    def attributes(self, items: List[Tuple[Any, Any]], ti: _TypeInfo, ctx: _Ctx) -> None:
        visited = self.visited
        for name, value in items:
            if not _is_tracked(value) or id(value) in visited:
                continue
            child = self.attribute_child(ctx, name, value, ti) if type(name) is str else None
            if ti.optimizer and name == "param_groups":
                self.defer(value, child if child is not None else ctx.anonymous())
            else:
                self.push(value, child if child is not None else ctx.anonymous())

    def attribute_child(self, ctx: _Ctx, name: str, value: Any, ti: _TypeInfo) -> Optional[_Ctx]:
        """The holder of attribute `name` of an object of type ti reached through ctx:
        `Model.kept`, named after the class, of kind "attribute". None past the named steps'
        limit (the value then counts under ctx's holder)."""
        if ctx.named >= MAX_NAMED_STEPS:
            return None
        kids = ctx.kids
        if kids is None:
            kids = ctx.kids = {}
        child = kids.get(name)
        if child is None:
            child = kids[name] = _Ctx(
                ctx.root,
                ctx.path + ("[*]" if ctx.anon else "") + "." + name,
                (ctx.module_path or ti.name) + "." + name,
                "attribute",
                name,
                self.type_name(value),
                ti.name,
                self.module_file(ti.module),
                named=ctx.named + 1,
            )
        return child

    def key_child(self, ctx: _Ctx, key: str, value: Any) -> Optional[_Ctx]:
        """The holder of a short string key of a small dict reached through ctx:
        `history["train"]`, with ctx's kind and place, its name showing the path."""
        if ctx.named >= MAX_NAMED_STEPS or len(key) > MAX_KEY_CHARS:
            return None
        keys = ctx.keys
        if keys is None:
            keys = ctx.keys = {}
        child = keys.get(key)
        if child is None:
            step = ("[*]" if ctx.anon else "") + _subscript(key)
            child = keys[key] = ctx._copy(ctx.path + step)
            child.base = child
            child.name = ctx.name + step
            child.container = self.type_name(value)
            child.named = ctx.named + 1
        return child

    def nn_module_(self, obj: Any, tp: type, ti: _TypeInfo, ctx: _Ctx) -> None:
        """A model: the parameters and buffers (and grads) of its whole tree of submodules
        count under the holder that reached it, all one step below it, so that they are the
        model's before an optimizer's state reaches them; attributes the user set on any of
        its modules are holders of their own (`Block.cache`, path model.blocks.0.cache)."""
        anon = ctx.anonymous()
        tree = [(obj, tp, ti, ctx)]
        for module, mtp, mti, mctx in tree:  # grows while it is read: breadth-first
            if mti.dict_get is None:
                continue
            rest = []
            for name, value in list(dict.items(mti.dict_get(module))):
                if not _is_tracked(value):
                    continue
                if name in ("_parameters", "_buffers") and issubclass(type(value), dict):
                    self.push_all(list(dict.values(value)), anon)
                elif name == "_modules" and issubclass(type(value), dict):
                    for sub, child in list(dict.items(value)):
                        if not _is_tracked(child) or type(sub) is not str:
                            continue
                        if id(child) in self.visited:
                            continue
                        ctp = type(child)
                        cti = self.types.get(id(ctp)) or self.classify(ctp)
                        if cti.kind == K_NNMODULE:
                            self.visited.add(id(child))
                            tree.append((child, ctp, cti, mctx.within("." + sub)))
                        else:
                            self.push(child, mctx.within("." + sub))
                elif name in _MODULE_INTERNALS:
                    self.push(value, anon)  # hooks: their closures may hold tensors
                else:
                    rest.append((name, value))
            self.attributes(rest, mti, mctx)
            if mti.user and id(mtp) not in self.visited:
                self.push(mtp, mctx)

    def klass(self, cls: type, ctx: _Ctx) -> None:
        """A user class: each class attribute is a holder (kind "class attribute")."""
        module = _class_module(cls)
        if type(module) is not str or not self.is_user_class_module(module):
            return
        name = _class_name(cls)
        qualname = _class_qualname(cls)
        file = self.module_file(module)
        root = "class:" + module + ":" + qualname + "."
        for attr, value in list(_class_dict(cls).items()):
            if type(attr) is not str or _dunder(attr):
                continue
            if not _is_tracked(value) or id(value) in self.visited:
                continue
            label = name + "." + attr
            container = self.type_name(value)
            kind = "class attribute"
            self.push(value, _Ctx(root, attr, label, kind, attr, container, name, file))
        self.push_all(_class_bases(cls), ctx)

    def suspended_generators(self) -> None:
        """The user's suspended generators that no root reaches: one that only a running
        `for x in make_batches():` holds is on its frame's value stack, which Python does not
        show. gc finds them through their code, that of the user's generator functions the
        walk met; their locals are holders as a running frame's. One pass of gc over the heap,
        so only where there is time left for it."""
        codes, self.generator_codes = self.generator_codes, []
        if not codes:
            return
        # The pass cannot be cut short: it is made only if it fits in what is left of the
        # pause, as pymalloc's block count (objects, tracked or not) makes it out to take.
        needs = sys.getallocatedblocks() * SECONDS_PER_BLOCK
        if self.clock() + needs > self.deadline:
            return
        ctx = _Ctx("generator:", "", "suspended generators", "local", "", "generator")
        found = [
            g
            for g in gc.get_referrers(*codes)
            if id(type(g)) in _SUSPENDED_FRAME_BY_ID and id(g) not in self.visited
        ]
        objs: List[Any] = []
        ctxs: List[_Ctx] = []
        self.next_objs, self.next_ctxs = objs, ctxs
        for g in found:
            self.push(g, ctx)
        del found
        self.walk(objs, ctxs)

    def function(self, fn: types.FunctionType) -> None:
        """A user function: its closure cells and defaults are holders."""
        code = fn.__code__
        file = code.co_filename
        if is_library_file(file):
            return
        if code.co_flags & _SUSPENDABLE:
            self.generator_codes.append(code)
        qualname = fn.__qualname__
        first = code.co_firstlineno
        where = file + ":" + qualname + ":" + str(first) + ":"
        closure = fn.__closure__
        if closure:
            for i, cell in enumerate(closure):
                var = code.co_freevars[i]
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if _is_tracked(value) and id(value) not in self.visited:
                    kind, label = "closure", "cell " + var
                    self.push(value, self.code_ctx(where, var, label, kind, value, fn, code))
        defaults = fn.__defaults__
        if defaults:
            args = code.co_varnames[: code.co_argcount][-len(defaults) :]
            for i, value in enumerate(defaults):
                arg = args[i]
                if _is_tracked(value) and id(value) not in self.visited:
                    label = "default " + arg
                    self.push(value, self.code_ctx(where, arg, label, "default", value, fn, code))
        kwdefaults = fn.__kwdefaults__
        if kwdefaults:
            for arg, value in list(dict.items(kwdefaults)):
                if _is_tracked(value) and id(value) not in self.visited:
                    label = "default " + str(arg)
                    self.push(
                        value, self.code_ctx(where, str(arg), label, "default", value, fn, code)
                    )

    def code_ctx(
        self,
        where: str,
        var: str,
        label: str,
        kind: str,
        value: Any,
        fn: types.FunctionType,
        code: types.CodeType,
    ) -> _Ctx:
        qualname = fn.__qualname__
        return _Ctx(
            kind + ":" + where,
            var,
            label,
            kind,
            var,
            self.type_name(value),
            qualname,
            code.co_filename,
            code.co_firstlineno,
            qualname,
            code.co_firstlineno,
        )

    # -- autograd graphs -----------------------------------------------------------------------

    def walk_graphs(self) -> None:
        """Saved tensors of the graphs behind tensors with grad_fn, after every holder claimed
        what it reaches directly: what is left is memory only the graph keeps. Then the graphs
        of tensors that no root reaches, under one holder of kind "graph": their saved tensors
        have no Python objects, so gc did not find them."""
        for grad_fn, h in self.graphs:
            if not self.walk_graph(grad_fn, h):
                return
        unreached = _Ctx("graph:", "unreached", "graphs of unreached tensors", "graph", "", "")
        h = _Holder(unreached)
        for t in self.tensors:
            if self.infos[id(t)][0] in self.claimed:
                continue
            try:
                grad_fn = self.grad_fn_of(t)
            except Exception as exc:
                _reraise_foreign(exc)
                continue
            if grad_fn is not None:
                h.count += 1
                h.with_graph += 1
                if not self.walk_graph(grad_fn, h):
                    break
        if h.count:
            self.holders[h.id] = h

    def walk_graph(self, grad_fn: Any, h: _Holder) -> bool:
        """One graph, depth-first; False when the census ran out of budget."""
        # Node objects are wrappers made on access: kept until the census ends, so that an id
        # seen is not reused by the wrapper of another node.
        seen = self.graph_seen
        if id(grad_fn) in seen:
            return True
        seen[id(grad_fn)] = grad_fn
        stack = [grad_fn]
        while stack:
            node = stack.pop()
            self.graph_nodes += 1
            if not self.graph_nodes % 64 and self.over_budget():
                return False
            try:
                self.saved_tensors(node, h)
                following = node.next_functions
            except Exception as exc:
                _reraise_foreign(exc)
                continue
            for pair in following:
                child = pair[0]
                if child is not None and id(child) not in seen:
                    seen[id(child)] = child
                    stack.append(child)
        return True

    def saved_tensors(self, node: Any, h: _Holder) -> None:
        tp = type(node)
        layout = self.node_layouts.get(id(tp))
        if layout is None:
            layout = self.node_layouts[id(tp)] = (tp, *_node_layout(tp))
        _tp, getters, dict_get = layout
        for get in getters:
            try:
                saved = get(node)
            except Exception as exc:  # freed by backward
                _reraise_foreign(exc)
                continue
            for one in _sequence(saved):
                try:
                    data = one.data  # the packed value: never unpacked, so no unpack hook runs
                except Exception as exc:
                    _reraise_foreign(exc)
                    continue
                for value in _sequence(data):  # a pack hook's tuple (offloading) or a tensor
                    self.graph_tensor(value, h)
        if dict_get is not None:
            # A custom Function's ctx: tensors kept as its attributes (ctx.mask = mask).
            try:
                namespace = dict_get(node)
            except Exception as exc:
                _reraise_foreign(exc)
                return
            if issubclass(type(namespace), dict):
                for value in list(dict.values(namespace)):
                    self.graph_tensor(value, h)

    def graph_tensor(self, value: Any, h: _Holder) -> None:
        if not self.is_tensor_type(type(value)):
            return
        # Not cached by id, nor recorded as they are: these tensor objects are temporary.
        key, nbytes, dev, dt = self.info(value, record=False)
        if not key[0]:
            return  # no storage (sparse, meta): nothing to count
        if key not in self.storages:
            self.storages[key] = (nbytes, dev, dt)
            self.graph_only.add(key)  # no Python tensor has this storage
        if key in self.claimed:
            return
        self.claimed.add(key)
        h.grad_storages += 1
        h.grad_bytes += nbytes

    # -- types ---------------------------------------------------------------------------------

    def classify(self, tp: type) -> _TypeInfo:
        module = _class_module(tp)
        ti = _TypeInfo(tp, K_INSTANCE, _class_name(tp), module if type(module) is str else None)
        self.types[id(tp)] = ti
        if self.tensor_type(tp):
            ti.kind = K_TENSOR
            if id(tp) not in self.plain_tensor_types:  # a subclass' attributes are read
                self.instance_layout(tp, ti)
                ti.wrapper = self.is_wrapper(tp)
            return ti
        if issubclass(tp, type):
            ti.kind = K_CLASS
            return ti
        if tp is types.FunctionType:
            ti.kind = K_FUNCTION
            return ti
        if tp is types.MethodType:
            ti.kind = K_METHOD
            return ti
        if id(tp) in _SUSPENDED_FRAME_BY_ID:
            ti.kind = K_GENERATOR
            return ti
        if (
            self.storage_type is not None
            and self.storage_ptr is not None
            and self.storage_device is not None
            and issubclass(tp, self.storage_type)
        ):
            ti.kind = K_STORAGE
            return ti
        if issubclass(tp, _SKIP_TYPES) or _own(ti.module):
            # memsight's own objects (its hooks on a model lead to them) are not the user's.
            ti.kind = K_SKIP
            return ti
        if issubclass(tp, dict):
            ti.kind = K_DICT
        else:
            for base, items in _SEQ_ITER:
                if issubclass(tp, base):
                    ti.kind, ti.items, ti.base = K_SEQ, items, base
                    break
        if self.nn_module is not None and issubclass(tp, self.nn_module):
            ti.kind = K_NNMODULE
        ti.optimizer = self.optimizer is not None and issubclass(tp, self.optimizer)
        self.instance_layout(tp, ti)
        if ti.kind == K_INSTANCE and ti.dict_get is None and not ti.slots:
            ti.kind = K_OPAQUE
        ti.user = ti.module is not None and self.is_user_class_module(ti.module)
        return ti

    def instance_layout(self, tp: type, ti: _TypeInfo) -> None:
        """How to read an instance's attributes without calling any of its methods."""
        dict_found = False
        seen: Set[str] = set()
        for klass in _class_mro(tp):
            python = bool(_class_flags(klass) & _HEAPTYPE)
            for name, desc in list(_class_dict(klass).items()):
                if type(name) is not str or name in seen:
                    continue
                seen.add(name)
                if name == "__dict__":
                    dict_found = True
                    # Only the C descriptor: a class may define __dict__ as its own property.
                    if type(desc) in (types.GetSetDescriptorType, types.MemberDescriptorType):
                        ti.dict_get = desc.__get__
                elif (
                    type(desc) is types.MemberDescriptorType
                    and name != "__weakref__"
                    and (ti.kind == K_INSTANCE or python)  # a builtin container's fields: none
                ):
                    ti.slots.append((name, desc.__get__, python))
        if not dict_found:
            ti.dict_get = None

    def is_user_class_module(self, module: str) -> bool:
        known = self.user_modules.get(module)
        if known is None:
            namespace = sys.modules.get(module)
            try:
                d = _module_dict(namespace) if namespace is not None else None
            except Exception as exc:
                _reraise_foreign(exc)
                d = None
            known = type(d) is dict and self.is_user_module(module, d)
            self.user_modules[module] = known
        return known

    def module_file(self, name: Optional[str]) -> Optional[str]:
        if name is None:
            return None
        known = self.module_files.get(name, "")
        if known == "":
            known = None
            module = sys.modules.get(name)
            try:
                file = _module_dict(module).get("__file__") if module is not None else None
                known = file if type(file) is str else None
            except Exception as exc:
                _reraise_foreign(exc)
                pass
            self.module_files[name] = known
        return known

    def type_name(self, value: Any) -> str:
        tp = type(value)
        ti = self.types.get(id(tp))
        return ti.name if ti is not None else _class_name(tp)

    # -- the result ----------------------------------------------------------------------------

    def carried_holders(self) -> Tuple[Dict[str, _Holder], Set[Tuple[str, int]]]:
        """This slice's holders with what earlier slices carried added (copies: the carried
        ones go on), and every storage claimed. A storage this slice's walk outside the
        collections claimed counts there, not again under a collection's holder."""
        progress = self.progress
        if progress is None:
            return self.holders, self.claimed
        holders = dict(self.holders)
        claimed = set(self.claimed)
        taken: Dict[str, List[int]] = {}
        for key, (nbytes, dev, dt, hid, _slice) in progress.storages.items():
            if key in self.claimed:
                owed = taken.setdefault(hid, [0, 0])
                owed[0] += 1
                owed[1] += nbytes
            else:
                claimed.add(key)
                if key not in self.storages:
                    self.storages[key] = (nbytes, dev, dt)
        for hid, carried in progress.holders.items():
            copy = carried.copy()
            storages, nbytes = taken.get(hid, (0, 0))
            copy.storages -= storages
            copy.bytes -= nbytes
            mine = holders.get(hid)
            if mine is None:
                holders[hid] = copy
            else:
                mine.add(copy)
        return holders, claimed

    def result(self, max_holders: int) -> Census:
        partial = self.stopped is not None
        holders, claimed = self.carried_holders()
        by_device: Dict[str, Dict[str, int]] = {}
        by_dtype: Dict[str, Dict[str, int]] = {}
        total = _union_bytes(self.storages)
        for nbytes, dev, dt in self.storages.values():
            for table, name in ((by_device, dev), (by_dtype, dt)):
                row = table.get(name)
                if row is None:
                    row = table[name] = {"count": 0, "bytes": 0}
                row["count"] += 1
                row["bytes"] += nbytes
        tensors = {
            "count": len(self.storages),
            "bytes": total,
            "objects": len(self.tensors),
            "graph_count": len(self.graph_only),
            "graph_bytes": sum(self.storages[k][0] for k in self.graph_only),
            "by_device": by_device,
            "by_dtype": by_dtype,
        }
        unattributed_bytes: Optional[int] = None
        unattributed_count: Optional[int] = None
        if not partial and self.find_unreached:
            left = {ti[0] for ti in self.infos.values()} - claimed
            unattributed_count = len(left)
            unattributed_bytes = sum(self.storages[k][0] for k in left)
        ranked = sorted(
            (h for h in holders.values() if h.count or h.grad_bytes),
            key=lambda h: (-(h.bytes + h.grad_bytes), -h.count, h.id),
        )
        shown, rest = ranked[: max(0, max_holders)], ranked[max(0, max_holders) :]
        left_out = {
            "holders": len(rest),
            "count": sum(h.count for h in rest),
            "bytes": sum(h.bytes for h in rest),
            "grad_bytes": sum(h.grad_bytes for h in rest),
        }
        cost = {
            "wall_us": int((time.perf_counter() - self.started) * 1e6),
            "cpu_us": int((time.thread_time() - self.cpu_started) * 1e6),
            "objects": self.objects,
            "graph_nodes": self.graph_nodes,
            "errors": self.errors,
            "partial": partial,
            "stopped_by": self.stopped,  # "time", "objects" or "memory" when partial
        }
        return Census(
            tensors,
            [h.to_json() for h in shown],
            left_out,
            unattributed_bytes,
            unattributed_count,
            cost,
        )


def _node_layout(
    tp: type,
) -> Tuple[List[Callable[[Any], Any]], Optional[Callable[[Any], Any]]]:
    """Getters of a graph node type's raw saved variables (SavedTensor objects, or tuples of
    them: `_raw_saved_self`, `_raw_saved_tensors`), and of its __dict__ if it has one (a
    custom Function's ctx). All are the C descriptors of the node's type."""
    getters: List[Callable[[Any], Any]] = []
    dict_get: Optional[Callable[[Any], Any]] = None
    seen: Set[str] = set()
    for klass in _class_mro(tp):
        for name, desc in list(_class_dict(klass).items()):
            if type(name) is not str or name in seen:
                continue
            seen.add(name)
            if name.startswith("_raw_saved_") and type(desc) is types.GetSetDescriptorType:
                getters.append(desc.__get__)
            elif name == "__dict__" and type(desc) is types.GetSetDescriptorType:
                dict_get = desc.__get__
    return getters, dict_get


def _sequence(value: Any) -> Iterable[Any]:
    """The items of a tuple or list (by the base type's C iteration), else the value alone."""
    if value is None:
        return ()
    tp = type(value)
    if issubclass(tp, tuple):
        return tuple.__iter__(value)
    if issubclass(tp, list):
        return list.copy(value)
    return (value,)


def _subclasses(base: type) -> Set[int]:
    """The ids of base and every class derived from it, as the classes themselves record it
    (ids: hashing a class would call its metaclass' __hash__)."""
    found = {id(base)}
    stack = [base]
    while stack:
        subs: List[type] = type.__subclasses__(stack.pop())
        for sub in subs:
            if id(sub) not in found:
                found.add(id(sub))
                stack.append(sub)
    return found


def _thread_names() -> Dict[int, str]:
    names = {}
    for thread in threading.enumerate():
        try:
            state = object.__getattribute__(thread, "__dict__")
            ident, name = state.get("_ident"), state.get("_name")
        except Exception:
            continue
        if type(ident) is int and type(name) is str:
            names[ident] = name
    return names


def _own(module: Optional[str]) -> bool:
    return module is not None and (module == _OWN_PACKAGE or module.startswith(_OWN_PACKAGE + "."))


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _subscript(key: str) -> str:
    if key.isprintable() and '"' not in key and "\\" not in key:
        return '["' + key + '"]'
    return "[" + repr(key) + "]"


def _shallow(seq: Any) -> bool:
    """A small plain sequence (a record: `(doc_id, [token ids])`) whose items are untracked or
    leaves (_leaf): no tensor can be below it, so it needs no place in the visited set. Its
    items are iterated in C (an exact builtin type's): no code of the user's runs."""
    if len(seq) > SHALLOW_ITEMS:
        return _leaf(seq)
    plain = _PLAIN_SEQUENCES
    for item in seq:
        if _is_tracked(item) and not (id(type(item)) in plain and _leaf(item)):
            return False
    return True


def _leaf(seq: Any) -> bool:
    """A small plain sequence whose items are all untracked (numbers, strings): nothing can be
    below it. Not looked into past BIG items."""
    return len(seq) <= BIG and not any(map(_is_tracked, seq))


_method_self: Callable[[Any], Any] = types.MethodType.__dict__["__self__"].__get__
_method_func: Callable[[Any], Any] = types.MethodType.__dict__["__func__"].__get__


def raised_by_the_script(exc: BaseException) -> bool:
    """Whether exc was raised by code that is not memsight's. The census calls no code of the
    user's, so that is a signal handler of the script's (SIGALRM for a per-step timeout) that
    ran in the middle of the census: its exception is the script's, not a failure of ours."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return not tb.tb_frame.f_code.co_filename.startswith(_OWN_DIR)


def scripts_part(tb: Optional[types.TracebackType]) -> Optional[types.TracebackType]:
    """A traceback from its first frame that is not memsight's on (the script's handler)."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN_DIR):
        tb = tb.tb_next
    return tb


def _reraise_foreign(exc: BaseException) -> None:
    """Raise exc again when the script raised it (raised_by_the_script)."""
    if raised_by_the_script(exc):
        raise exc


def _rss() -> int:
    """The process' peak resident set, in bytes (0 where it cannot be read). From getrusage,
    not a file: reading one lets go of the GIL, and with busy threads in the script getting it
    back can take a while."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError, ValueError):
        return 0


class _Bitmap:
    """A set of object addresses, one bit per 16 bytes (CPython's objects are 16-byte aligned),
    in pages of 64 KiB of address space: about 1/128 of the heap it covers, against ~60 bytes
    an object for a set of ids."""

    __slots__ = ("before", "pages")

    def __init__(self, before: Set[int]) -> None:
        self.before = before  # the set it takes over from, kept as it is: no pause to copy it
        self.pages: Dict[int, bytearray] = {}

    def add(self, i: int) -> None:
        page = self.pages.get(i >> 16)
        if page is None:
            page = self.pages[i >> 16] = bytearray(512)
        bit = (i & 0xFFFF) >> 4
        page[bit >> 3] |= 1 << (bit & 7)

    def __contains__(self, i: int) -> bool:
        page = self.pages.get(i >> 16)
        if page is None:
            return i in self.before
        bit = (i & 0xFFFF) >> 4
        return bool(page[bit >> 3] & (1 << (bit & 7))) or i in self.before

    def __len__(self) -> int:
        return len(self.before) + len(self.pages)

    def nbytes(self) -> int:
        # The bytearray, its object and the dict's slot a page; the set's ids.
        return len(self.pages) * (512 + 57 + 100) + 60 * len(self.before)


def _may_hold_more(held: List[Any], tp: type) -> bool:
    """Whether what an instance holds (gc's referents: its values, unnamed, read in C) may lead
    to a tensor: reading its __dict__ makes CPython 3.11+ create one for an instance that had
    its attributes inline, so that is done only for instances worth naming."""
    for value in held:
        if value is tp or not _is_tracked(value):
            continue
        if id(type(value)) in _PLAIN_SEQUENCES and _leaf(value):
            continue
        return True
    return False


# The parts of a sparse tensor, by layout (TensorBase methods; none runs user code).
_SPARSE_PARTS: Dict[str, Tuple[str, ...]] = {
    "torch.sparse_coo": ("_indices", "_values"),
    "torch.sparse_csr": ("crow_indices", "col_indices", "values"),
    "torch.sparse_csc": ("ccol_indices", "row_indices", "values"),
    "torch.sparse_bsr": ("crow_indices", "col_indices", "values"),
    "torch.sparse_bsc": ("ccol_indices", "row_indices", "values"),
}
_SPARSE_METHODS = frozenset(name for names in _SPARSE_PARTS.values() for name in names)


class _Ranges:
    """Address ranges counted so far, per device: what a new storage adds is the part of its
    range none of them covers."""

    __slots__ = ("by_device",)

    def __init__(self) -> None:
        # device -> (starts, ends): sorted, disjoint, not touching
        self.by_device: Dict[str, Tuple[List[int], List[int]]] = {}

    def add(self, device: str, start: int, size: int) -> int:
        """Cover [start, start + size); the bytes it newly covers."""
        if size <= 0:
            return 0
        starts, ends = self.by_device.setdefault(device, ([], []))
        end = start + size
        lo = bisect.bisect_left(ends, start)  # the first range that ends at or after start
        hi = bisect.bisect_right(starts, end)  # past the last range that starts by end
        if lo == hi:
            starts.insert(lo, start)
            ends.insert(lo, end)
            return size
        covered = sum(min(ends[k], end) - max(starts[k], start) for k in range(lo, hi))
        new_start, new_end = min(starts[lo], start), max(ends[hi - 1], end)
        starts[lo:hi] = [new_start]
        ends[lo:hi] = [new_end]
        return size - max(0, covered)


def _file_mappings() -> Tuple[List[int], List[int]]:
    """The process' mappings of files, from /proc/self/maps: sorted starts and their ends."""
    starts: List[int] = []
    ends: List[int] = []
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) < 6 or not fields[5].startswith(b"/"):
                    continue  # anonymous memory, the heap, the stack
                low, _, high = fields[0].partition(b"-")
                starts.append(int(low, 16))
                ends.append(int(high, 16))
    except (OSError, ValueError):
        return [], []
    return starts, ends


def _union_bytes(storages: Dict[Tuple[str, int], Tuple[int, str, str]]) -> int:
    """The bytes of the storages' address ranges, each byte once."""
    ranges = _Ranges()
    total = 0
    for (dev, ptr), (nbytes, _dev, _dt) in sorted(storages.items()):
        total += ranges.add(dev, ptr, nbytes) if dev else nbytes
    return total
