"""How the census reads the program's objects without running any of their code.

Every read goes through a C-level descriptor of a builtin type (type.__dict__["__dict__"],
dict.items, list.copy, the member descriptors of __slots__), never through getattr or
isinstance on a user object, so no __getattr__, __class__, __eq__ or __hash__ of the user's
runs (census.py, "Safety"). Here are those readers, the kinds of object the walk tells apart
(K_*, and _TypeInfo: what the walk knows of one type), the types it skips or reads as builtin
containers, and the tests that tell, without walking it, a container below which no tensor can
be (_leaf, _shallow, _may_hold_more): plain tables and functions that every part of the walk
shares. Stdlib only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

import collections
import gc
import types
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from .census_limits import BIG, SHALLOW_ITEMS

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


class _TypeInfo:
    """What the walk knows of one type: its kind, and how its instances are read."""

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


_method_self: Callable[[Any], Any] = types.MethodType.__dict__["__self__"].__get__
_method_func: Callable[[Any], Any] = types.MethodType.__dict__["__func__"].__get__

# The parts of a sparse tensor, by layout (TensorBase methods; none runs user code).
_SPARSE_PARTS: Dict[str, Tuple[str, ...]] = {
    "torch.sparse_coo": ("_indices", "_values"),
    "torch.sparse_csr": ("crow_indices", "col_indices", "values"),
    "torch.sparse_csc": ("ccol_indices", "row_indices", "values"),
    "torch.sparse_bsr": ("crow_indices", "col_indices", "values"),
    "torch.sparse_bsc": ("ccol_indices", "row_indices", "values"),
}
_SPARSE_METHODS = frozenset(name for names in _SPARSE_PARTS.values() for name in names)


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
