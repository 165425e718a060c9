"""The census' named roots: the globals of the user's modules, the locals of every thread's
frames (the user's before libraries', outermost first) and of an exception's traceback, the
locals of suspended generators, and the closure cells and default arguments of the user's
functions. Each root is a _Ctx whose id says where it lives ("global:__main__:",
"local:<file>:<function>:<first line>:"), so that what is below it is named from it.

Kept apart from the walk: where a census starts is one question, how it goes down from there
another (census_walk.py). Stdlib only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

import sys
import threading
import types
from typing import AbstractSet, Any, Dict, List, Optional, Tuple

from ..codefiles import is_library_file
from .census_holders import _Ctx, _dunder
from .census_objects import _is_tracked, _module_dict
from .census_own import _OWN_DIR, _reraise_foreign
from .census_types import _NOT_USER_MODULES, _Types

_CO_OPTIMIZED = 0x1  # a function's code: its f_locals (before 3.13) is a snapshot dict
_SUSPENDABLE = 0x20 | 0x100 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
_LOCALS_SNAPSHOT = sys.version_info < (3, 13)
_FRAME_LOCALS_PROXY: Optional[type] = None  # 3.13+: a function frame's f_locals, C-level


def _function_locals_proxy_type() -> Optional[type]:
    namespace = sys._getframe().f_locals
    return None if type(namespace) is dict else type(namespace)


_FRAME_LOCALS_PROXY = _function_locals_proxy_type()


def _running_file(namespace: Dict[str, Any]) -> Optional[str]:
    """The file of the code running in a module that has no file of its own: a notebook's
    __main__, whose code is the cell being run (an ipykernel cell file, read from linecache)."""
    try:
        for frame in sys._current_frames().values():
            while frame is not None:
                if frame.f_globals is namespace:
                    name = frame.f_code.co_filename
                    return name if type(name) is str and not name.startswith("<") else None
                frame = frame.f_back  # type: ignore[assignment]
    except Exception as exc:
        _reraise_foreign(exc)
    return None


class _Roots(_Types):
    """The named roots the walk starts from, and the holders a user function names (its
    closure cells and defaults)."""

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
            file = file if type(file) is str else _running_file(namespace)
            root = "global:" + modname + ":"
            for name, value in list(dict.items(namespace)):
                if type(name) is not str or _dunder(name) or not _is_tracked(value):
                    continue
                if id(value) in self.visited:
                    continue
                ctx = _Ctx(root, name, name, "global", name, self.type_name(value), modname, file)
                self.push(value, ctx)

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
