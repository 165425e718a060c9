"""What kind of object a type's instances are, for the census' walk (_Types.classify): a tensor
(a wrapper subclass or not), a builtin container, an instance with a __dict__ or slots, an
nn.Module, a class, function, method or generator, or something not walked; how to read an
instance's attributes without calling any of its methods (instance_layout); and whether a
module is the user's (its globals are roots, its classes' attributes are holders).

Kept per census by id(type) (a dict keyed by a class would call its metaclass' __hash__), the
user-module verdicts from one census to the next. Stdlib only; runs on the target's
interpreter (Python 3.9+).
"""

from __future__ import annotations

import sys
import types
from typing import Any, Dict, Optional, Set, Tuple

from ..codefiles import is_library_file
from .census_objects import (
    _HEAPTYPE,
    _SEQ_ITER,
    _SKIP_TYPES,
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
    _class_dict,
    _class_flags,
    _class_module,
    _class_mro,
    _class_name,
    _module_dict,
    _TypeInfo,
)
from .census_own import _own, _reraise_foreign
from .census_state import _WalkState

# Whether a module is the user's, by name, with the file it had, and the modules found not to
# be (by name, with the id of the module object): kept from one census to the next (names,
# paths and ids only), since a process that imported torch has thousands of modules.
_USER_MODULES: Dict[str, Tuple[Any, bool]] = {}
_NOT_USER_MODULES: Dict[str, int] = {}


class _Types(_WalkState):
    """What kind of object a type's instances are, and whether a module is the user's."""

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
