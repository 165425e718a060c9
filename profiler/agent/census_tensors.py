"""Tensors and storages counted under the holders that reach them: a tensor's storage, device,
dtype and shape read through TensorBase's C descriptors (census.py, "Safety"); each storage
claimed once, by the holder that reaches it first, for the bytes of its address range that no
storage counted so far covers; bare storages and the parts of sparse tensors; then the
autograd graphs behind tensors with grad_fn, whose saved tensors that no holder reached count
as that holder's grad_bytes (read raw: unpacking would run saved-tensor hooks).

Kept apart from the walk, which decides where a tensor is reached: this decides what it
counts. Stdlib only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

import bisect
import gc
import types
from itertools import compress
from typing import Any, Callable, Iterable, List, Optional, Set, Tuple

from .census_bytes import _file_mappings
from .census_holders import _Ctx, _Holder
from .census_limits import MAX_SHAPES
from .census_objects import _SPARSE_PARTS, _class_dict, _class_mro, _is_tracked, _TypeInfo
from .census_own import _reraise_foreign
from .census_state import _TensorInfo
from .census_types import _Types


class _Tensors(_Types):
    """Tensors, bare storages and autograd graphs, counted under the holders that reach them."""

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
