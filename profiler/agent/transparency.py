"""Keeping memsight's hooks out of what the script does with its models.

The roots' instance hooks are bound methods of the Instrumentation (instrument.py), which
holds locks and cannot be copied or pickled, so they are kept out of what the script does with
its models:

- copy, deepcopy, pickle, torch.save: nn.Module gets a class-level __reduce_ex__ that
  returns object.__reduce_ex__'s value with our hooks filtered out of the module's state (a
  filtered copy: the model itself keeps them). A module class with its own __deepcopy__ copies
  them by its own means: that copy then shares them (the Instrumentation copies as itself);
- TorchScript (torch.jit.script, and torch.jit.trace of modules with exported methods) reads
  the hook tables while it builds a module: torch.jit._recursive.create_script_module is
  wrapped to show it filtered tables for the duration;
- torch.export.export with strict=True cannot capture a model while any global module hook
  exists: discovery is suspended for the duration of an export (discovery.py);
- torch.compile: the hooks return at once while dynamo traces them, and the warning
  OptimizedModule gives when global hooks exist ignores discovery's
  (torch.nn.modules.module._has_any_global_hook is wrapped);
- the gradient hook on a forward's output is marked unserializable, as torch.save expects of
  hooks it should not warn about (spans.py).
"""

from __future__ import annotations

import collections
import sys
import types
from typing import Any, Callable, Dict, List, Tuple

from .port import AgentPort
from .reader import Reader

# The tables of a module's forward hooks, keyed by hook id; the first two hold the callables.
HOOK_TABLES = (
    "_forward_pre_hooks",
    "_forward_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)
_PLAIN_DICTS = (dict, collections.OrderedDict)


class HookTransparency:
    """Instrumentation's wrappers that hide its hooks (a mixin: see instrument.py)."""

    # Of Instrumentation's other parts.
    agent: AgentPort
    _reader: Reader
    _discovery: List[Any]
    _suspend_discovery: Callable[[], None]
    _resume_discovery: Callable[[], None]
    _suspend_anatomy: Callable[[], None]
    _anatomy_global_hooks: Callable[[], List[Any]]

    def _is_ours(self, hook: Any) -> bool:
        return type(hook) is types.MethodType and hook.__self__ is self

    def _our_ids(self, module: Any) -> List[Any]:
        """Ids of our hooks in a module's tables (usually none: only roots have them)."""
        state = self._reader.instance_dict(module)
        if state is None:
            return []
        ids = []
        for name in ("_forward_pre_hooks", "_forward_hooks"):
            table: Any = dict.get(state, name)
            if issubclass(type(table), dict):
                ids += [key for key, hook in list(dict.items(table)) if self._is_ours(hook)]
        return ids

    def _reduce_wrapper(self, original: Any) -> Any:
        inst = self

        def __reduce_ex__(module: Any, protocol: Any, /) -> Any:
            reduced = original(module, protocol)
            try:
                return inst._without_our_hooks(module, reduced)
            except Exception as exc:
                inst.agent.error("reduce_ex", exc)
                return reduced

        return __reduce_ex__

    def _without_our_hooks(self, module: Any, reduced: Any) -> Any:
        """A module's __reduce_ex__ value, with our hooks left out of the state it carries.

        Looks for the module's attributes (a dict holding its own hook tables) where
        object.__reduce_ex__ puts them (the state, or its first half beside __slots__ values)
        and, for classes with their own __reduce__ (fx.GraphModule), among the arguments.
        """
        ids = self._our_ids(module)
        if not ids or not issubclass(type(reduced), tuple) or tuple.__len__(reduced) < 2:
            return reduced
        own = self._reader.instance_dict(module)
        if own is None:
            return reduced
        tables = {name: dict.get(own, name) for name in HOOK_TABLES}
        # Read by the base types' own methods: the state or arguments of a class's own
        # __reduce__ may be the script's objects.

        def filtered(value: Any) -> Any:
            tp = type(value)
            if issubclass(tp, dict) and any(
                dict.get(value, name) is table
                for name, table in tables.items()
                if table is not None
            ):
                value = dict.copy(value)
                for name, table in tables.items():
                    if issubclass(type(table), dict) and value.get(name) is table:
                        kept = _copy_table(table)
                        for key in ids:
                            kept.pop(key, None)
                        value[name] = kept
            elif issubclass(tp, tuple) and tuple.__len__(value):
                items = list(tuple.__iter__(value))
                if issubclass(type(items[0]), dict):
                    first = filtered(items[0])
                    if first is not items[0]:
                        value = (first, *items[1:])
            return value

        items = list(tuple.__iter__(reduced))
        if issubclass(type(items[1]), tuple):
            given = list(tuple.__iter__(items[1]))
            args = [filtered(arg) for arg in given]
            if any(arg is not given[i] for i, arg in enumerate(args)):
                items[1] = tuple(args)
        if len(items) > 2:
            items[2] = filtered(items[2])
        return tuple(items)

    def _script_wrapper(self, original: Any) -> Any:
        inst = self

        def create_script_module(nn_module: Any, *args: Any, **kwargs: Any) -> Any:
            hidden = inst._hide_hooks(nn_module)
            try:
                return original(nn_module, *args, **kwargs)
            finally:
                inst._show_hooks(hidden)

        return create_script_module

    def _hide_hooks(self, root: Any) -> List[Tuple[Dict[str, Any], str, Any, Any]]:
        """Give modules in root's tree hook tables without ours until _show_hooks.

        TorchScript compiles every callable it finds in a module's hook tables. The tables
        themselves are left untouched (handles and hook order stay valid): a filtered copy
        stands in for each in the module's __dict__, set directly so that no __setattr__ runs.
        """
        hidden: List[Tuple[Dict[str, Any], str, Any, Any]] = []
        try:
            for module in root.modules():
                ids = self._our_ids(module)
                if not ids:
                    continue
                state = self._reader.instance_dict(module)
                if state is None:
                    continue
                for name in ("_forward_pre_hooks", "_forward_hooks"):
                    table: Any = dict.get(state, name)
                    if issubclass(type(table), dict) and any(
                        dict.__contains__(table, key) for key in ids
                    ):
                        kept = _copy_table(table)
                        for key in ids:
                            kept.pop(key, None)
                        state[name] = kept
                        hidden.append((state, name, table, kept))
        except Exception as exc:
            self.agent.error("hide_hooks", exc)
        return hidden

    def _show_hooks(self, hidden: List[Tuple[Dict[str, Any], str, Any, Any]]) -> None:
        for state, name, table, kept in reversed(hidden):
            if state.get(name) is kept:  # (plain dict operations: nothing here can raise)
                state[name] = table

    def _export_wrapper(self, original: Any) -> Any:
        inst = self

        def export(*args: Any, **kwargs: Any) -> Any:
            inst._suspend_discovery()
            inst._suspend_anatomy()
            try:
                return original(*args, **kwargs)
            finally:
                inst._resume_discovery()

        return export

    def _global_hook_wrapper(self, original: Any) -> Any:
        inst = self

        def _has_any_global_hook() -> Any:
            result = original()
            if result and (inst._discovery or inst._anatomy_global_hooks()):
                try:
                    return inst._other_global_hooks()
                except Exception as exc:
                    inst.agent.error("global_hooks", exc)
            return result

        return _has_any_global_hook

    def _other_global_hooks(self) -> bool:
        """Whether global module hooks other than discovery's are registered."""
        module = sys.modules["torch.nn.modules.module"]
        ours = {handle.id for handle in self._discovery + self._anatomy_global_hooks()}
        for name in ("_global_backward_pre_hooks", "_global_backward_hooks"):
            if getattr(module, name, None):
                return True
        for name in (
            "_global_forward_pre_hooks",
            "_global_forward_hooks",
            "_global_forward_hooks_always_called",
        ):
            if any(key not in ours for key in getattr(module, name, ())):
                return True
        return False


def _copy_table(table: Any) -> Any:
    """A copy of a module's hook table (torch's OrderedDict), the same type where it is ours."""
    return table.copy() if type(table) in _PLAIN_DICTS else dict.copy(table)
