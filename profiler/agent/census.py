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

The code, by job: this module is the entry (take_census, a census in slices, safe_to_run) and
the result (Census, from the walk's tables); census_walk.py walks from the roots of
census_roots.py, with the kinds of census_types.py and the tensors of census_tensors.py, over
the state of census_state.py; census_objects.py reads objects without running their code,
census_holders.py holds the holders and the paths that name them, census_bytes.py counts
bytes, census_limits.py bounds it all, and census_own.py tells memsight's own code and
exceptions from the script's.
"""

from __future__ import annotations

import gc
import sys
import time
import types
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Set, Tuple

from .census_bytes import _union_bytes
from .census_holders import _Holder
from .census_limits import MAX_DEPTH, MAX_HOLDERS, MAX_OBJECTS
from .census_objects import _module_dict
from .census_walk import _Walker

SCHEMA = 1


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
        census = _result(walker, max_holders)
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


def _carried_holders(walker: _Walker) -> Tuple[Dict[str, _Holder], Set[Tuple[str, int]]]:
    """This slice's holders with what earlier slices carried added (copies: the carried
    ones go on), and every storage claimed. A storage this slice's walk outside the
    collections claimed counts there, not again under a collection's holder."""
    progress = walker.progress
    if progress is None:
        return walker.holders, walker.claimed
    holders = dict(walker.holders)
    claimed = set(walker.claimed)
    taken: Dict[str, List[int]] = {}
    for key, (nbytes, dev, dt, hid, _slice) in progress.storages.items():
        if key in walker.claimed:
            owed = taken.setdefault(hid, [0, 0])
            owed[0] += 1
            owed[1] += nbytes
        else:
            claimed.add(key)
            if key not in walker.storages:
                walker.storages[key] = (nbytes, dev, dt)
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


def _result(walker: _Walker, max_holders: int) -> Census:
    """The census: what the walk (and the slices before it) found, as strings and ints."""
    partial = walker.stopped is not None
    holders, claimed = _carried_holders(walker)
    by_device: Dict[str, Dict[str, int]] = {}
    by_dtype: Dict[str, Dict[str, int]] = {}
    total = _union_bytes(walker.storages)
    for nbytes, dev, dt in walker.storages.values():
        for table, name in ((by_device, dev), (by_dtype, dt)):
            row = table.get(name)
            if row is None:
                row = table[name] = {"count": 0, "bytes": 0}
            row["count"] += 1
            row["bytes"] += nbytes
    tensors = {
        "count": len(walker.storages),
        "bytes": total,
        "objects": len(walker.tensors),
        "graph_count": len(walker.graph_only),
        "graph_bytes": sum(walker.storages[k][0] for k in walker.graph_only),
        "by_device": by_device,
        "by_dtype": by_dtype,
    }
    unattributed_bytes: Optional[int] = None
    unattributed_count: Optional[int] = None
    if not partial and walker.find_unreached:
        left = {ti[0] for ti in walker.infos.values()} - claimed
        unattributed_count = len(left)
        unattributed_bytes = sum(walker.storages[k][0] for k in left)
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
        "wall_us": int((time.perf_counter() - walker.started) * 1e6),
        "cpu_us": int((time.thread_time() - walker.cpu_started) * 1e6),
        "objects": walker.objects,
        "graph_nodes": walker.graph_nodes,
        "errors": walker.errors,
        "partial": partial,
        "stopped_by": walker.stopped,  # "time", "objects" or "memory" when partial
    }
    return Census(
        tensors,
        [h.to_json() for h in shown],
        left_out,
        unattributed_bytes,
        unattributed_count,
        cost,
    )
