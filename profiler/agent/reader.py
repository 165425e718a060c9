"""Reading the script's objects without running its code: what the hooks look into.

No code of the script's runs in the hooks: module outputs, modules, optimizers, loaders and
tensors are read by exact type and C-level access, tensors with __torch_function__ off
(Reader); datasets and roots are known by identity (forget: the weak references' callback that
drops an entry once its object is gone). first_grad_tensor finds, by the same rules, the tensor
of a forward's output whose backward the spans watch (spans.py).

Runs inside the user's interpreter, in hooks on every forward and optimizer step: stdlib only.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

# What the hooks look into, by an object's exact type (Reader.kind).
_OTHER, _TENSOR, _WRAPPER, _TUPLE, _LIST, _DICT = range(6)
_FIRST_ITEMS = slice(0, 8)  # of a tuple or list in a forward's output
_KNOWN_TYPES = 4096  # per-type decisions kept; past that they are made again
# Attributes read from instance dicts (Reader.attribute): where a class in the object's MRO
# defines one itself (a property, say), it is never read.
_ATTRIBUTES = ("training", "param_groups", "state", "dataset", "num_workers", "persistent_workers")
_class_dict: Callable[[type], Any] = type.__dict__["__dict__"].__get__
_class_mro: Callable[[type], Tuple[type, ...]] = type.__dict__["__mro__"].__get__
_class_name: Callable[[type], str] = type.__dict__["__name__"].__get__


class Reader:
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
        self.dtype_of = field("dtype")
        self.version_of = field("_version")
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


# A class, its instance dict's C getter, the _ATTRIBUTES its MRO defines (Reader._layout).
_Layout = Tuple[type, Optional[Callable[[Any], Any]], FrozenSet[str]]


def first_grad_tensor(reader: Reader, output: Any, budget: int = 16) -> Any:
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


def forget(table: Dict[int, Any], key: int, ref: Any) -> None:
    """A weak reference's callback: drop table[key] if it is still the entry of that ref."""
    entry = table.get(key)
    if entry is not None and entry[0] is ref:
        del table[key]
