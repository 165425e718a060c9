"""Root discovery: which modules are the outermost ones, whose forwards become spans.

Forward spans (spans.py) come from hooks on the *outermost* modules only. Global forward
hooks run briefly to discover which modules are called at depth 0 ("roots"); each root then
gets its own instance hooks and the global hooks are removed, so leaf modules keep PyTorch's
fast path. Discovery runs again when a module is constructed, after train()/eval() switches,
at epoch starts (modes.py) and every 10 s (REDISCOVER_NS, checked at the ends of outermost
forwards and steps).

torch.export.export with strict=True cannot capture a model while any global module hook
exists: discovery is suspended for the duration of an export (transparency.py wraps export).

Roots are known by identity (Roots): a module's own __hash__ and __eq__ never run.
"""

from __future__ import annotations

import functools
import importlib
import threading
import weakref
from typing import Any, Callable, Dict, Iterator, List, Tuple

from .clock import now as _now
from .port import AgentPort
from .reader import Reader, forget

DISCOVERY_FORWARDS = 3  # root forwards without a new root before discovery ends
REDISCOVER_NS = 10 * 1_000_000_000
_SCRIPTED = frozenset(("RecursiveScriptModule", "ScriptModule", "TopLevelTracedModule"))


class RootDiscovery:
    """Instrumentation's root discovery (a mixin: see instrument.py)."""

    # Of Instrumentation's other parts.
    agent: AgentPort
    torch: Any
    _local: threading.local
    _is_compiling: Callable[[], bool]
    _reader: Reader
    _root_pre: Callable[[Any, Any], None]
    _root_post: Callable[[Any, Any, Any], None]
    _stack: Callable[[], List[List[Any]]]

    def _init_discovery(self) -> None:
        self._discovery: List[Any] = []
        self._suspended = 0  # exports under way: discovery stays off
        self._rediscover = False  # discovery was wanted while suspended
        self.roots = Roots()
        self._quiet_forwards = 0
        self._next_discovery = 0

    def _start_discovery(self) -> None:
        if self._suspended:
            self._rediscover = True
            return
        if self._discovery:
            return
        module = importlib.import_module("torch.nn.modules.module")
        self._quiet_forwards = 0
        self._discovery.append(module.register_module_forward_pre_hook(self._discover_pre))
        self._discovery.append(
            module.register_module_forward_hook(self._discover_post, **_always())
        )
        self._next_discovery = _now() + REDISCOVER_NS

    def _stop_discovery(self) -> None:
        for handle in self._discovery:
            handle.remove()
        self._discovery.clear()

    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def _discover_pre(self, module: Any, args: Any) -> None:
        if self._is_compiling():
            return
        depth = self._depth()
        self._local.depth = depth + 1
        # Adopt only modules called while no root forward is open in this thread: discovery
        # can start in the middle of a forward, where the depth count knows nothing yet.
        if (
            depth == 0
            and not self._stack()
            and module not in self.roots
            and self._reader.name(type(module)) not in _SCRIPTED
        ):
            self._adopt(module, args)

    def _discover_post(self, module: Any, args: Any, output: Any) -> None:
        if self._is_compiling():
            return
        self._local.depth = max(0, self._depth() - 1)

    def _adopt(self, module: Any, args: Any) -> None:
        # nn.Module's own registration, not an override of the module's class.
        nn_module = self.torch.nn.Module
        try:
            handles = [
                nn_module.register_forward_pre_hook(module, self._root_pre),
                nn_module.register_forward_hook(module, self._root_post, **_always()),
            ]
            self.roots[module] = handles
        except Exception as exc:
            self.agent.error("adopt_root", exc)
            return
        self._quiet_forwards = 0
        # This call's instance pre-hooks were listed before the module had ours: open it here.
        self._root_pre(module, args)

    def _suspend_discovery(self) -> None:
        """No global module hooks until _resume_discovery: strict export refuses them."""
        self._suspended += 1
        if self._discovery:
            self._rediscover = True
            try:
                self._stop_discovery()
            except Exception as exc:
                self.agent.error("suspend_discovery", exc)

    def _resume_discovery(self) -> None:
        self._suspended = max(0, self._suspended - 1)
        if not self._suspended and self._rediscover:
            self._rediscover = False
            try:
                self._start_discovery()
            except Exception as exc:
                self.agent.error("resume_discovery", exc)


def _always() -> Dict[str, Any]:
    """always_call=True where this torch has it (2.1+): a forward that raises still ends."""
    import inspect

    try:
        import torch.nn.modules.module as module_mod

        params = inspect.signature(module_mod.register_module_forward_hook).parameters
    except (ImportError, TypeError, ValueError):
        return {}
    return {"always_call": True} if "always_call" in params else {}


class Roots:
    """The outermost modules and their hook handles, by identity: a module's own __hash__
    and __eq__ never run (a class with __eq__ alone is unhashable). Held weakly."""

    def __init__(self) -> None:
        self._by_id: Dict[int, Tuple[Any, List[Any]]] = {}

    def __setitem__(self, module: Any, handles: List[Any]) -> None:
        key = id(module)
        callback = functools.partial(forget, self._by_id, key)
        self._by_id[key] = (weakref.ref(module, callback), handles)

    def __contains__(self, module: Any) -> bool:
        entry = self._by_id.get(id(module))
        return entry is not None and entry[0]() is module

    def items(self) -> List[Tuple[Any, List[Any]]]:
        found = []
        for ref, handles in list(self._by_id.values()):
            module = ref()
            if module is not None:
                found.append((module, handles))
        return found

    def __iter__(self) -> Iterator[Any]:
        return iter([module for module, _ in self.items()])

    def __len__(self) -> int:
        return len(self.items())
