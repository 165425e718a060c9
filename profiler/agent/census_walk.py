"""The census' walk (_Walker): from the named roots (census_roots.py) over everything they
reach, breadth-first, one layer at a time, so that a storage counts under the holder that
reaches it in the fewest steps. Builtin lists, tuples, sets and dicts are read inline; a layer
that grows past FRONTIER_MAX is walked depth-first at once (a bounded stack); collections
(more than BIG items) are read CHUNK items at a time after the walk, smallest first, and go on
in the next slice when a pause ends (CensusProgress). Instances, nn.Modules, user classes and
small dicts name their attributes and short string keys as holders. Then the user's
suspended generators that no root reached, and the autograd graphs (census_tensors.py).

Its state, its budget and the jobs it builds on are in the classes it derives from
(census_state.py says which). Stdlib only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

import collections
import gc
import heapq
import sys
from itertools import islice
from typing import AbstractSet, Any, Iterator, List, Optional, Tuple

from ..codefiles import is_library_file
from .census_holders import _Ctx, _dunder, _subscript
from .census_limits import (
    BIG,
    CHECK_EVERY,
    CHUNK,
    FRONTIER_MAX,
    MAX_KEY_CHARS,
    MAX_NAMED_KEYS,
    MAX_NAMED_STEPS,
)
from .census_objects import (
    _PLAIN_SEQUENCES,
    _SUSPENDED_FRAME_BY_ID,
    K_CLASS,
    K_DICT,
    K_FUNCTION,
    K_GENERATOR,
    K_INSTANCE,
    K_METHOD,
    K_NNMODULE,
    K_OPAQUE,
    K_SEQ,
    K_SKIP,
    K_STORAGE,
    K_TENSOR,
    _class_bases,
    _class_dict,
    _class_module,
    _class_name,
    _class_qualname,
    _is_tracked,
    _leaf,
    _may_hold_more,
    _method_func,
    _method_self,
    _shallow,
    _TypeInfo,
)
from .census_own import _reraise_foreign
from .census_roots import _Roots
from .census_state import DONE, _Level
from .census_tensors import _Tensors

# What one pass of gc over the heap (gc.get_referrers) costs, per pymalloc block: about 60 ns
# per tracked object on this 2-core VM, with about 6 blocks a tracked object in a process that
# imported torch, and a margin.
SECONDS_PER_BLOCK = 2.5e-8
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


class _Walker(_Roots, _Tensors):
    """A census' walk from the named roots, within its budget: run() fills the tables that
    census.py turns into the result."""

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

    # -- suspended generators ------------------------------------------------------------------

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
