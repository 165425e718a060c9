"""The census walker's state (_WalkState): what it reads torch's tensors and storages with, its
caches by type, its tables (visited ids, the next layer, tensor infos, storages, holders), its
budget (time, objects, its own memory), and what it lets go of at the end.

The walker is one object whose jobs live in modules of their own, as classes that each derive
from those they call: _WalkState (here); _Types (census_types.py: what kind of object a type's
instances are) on it; _Tensors (census_tensors.py: storages and autograd graphs counted under
holders) and _Roots (census_roots.py: the named roots) on _Types; _Walker (census_walk.py: the
walk) on both. They share this state as attributes of self, read in their hot loops exactly
as one class would read them: a collaborator object would cost a lookup more per object.
Stdlib only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

import contextlib
import sys
import time
import types
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Set,
    Tuple,
)

from .census_bytes import _Bitmap, _Ranges, _rss
from .census_holders import _Ctx, _Holder
from .census_limits import MEMORY_FLOOR, MEMORY_SHARE, SET_MAX
from .census_objects import _PLAIN_SEQUENCES, _SPARSE_METHODS, _is_tracked, _shallow, _TypeInfo

if TYPE_CHECKING:
    from .census import CensusProgress

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


class _WalkState:
    """The walker's state and its basic moves: its budget, pushing an object into the walk's
    next layer, the holder a context counts under, and letting go of the program's objects."""

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

    # -- budget --------------------------------------------------------------------------------

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

    # -- the next layer ------------------------------------------------------------------------

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

    # -- holders -------------------------------------------------------------------------------

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
