"""PyTorch instrumentation: iterations, phases, modes, zero_grad, memory breakdown, OOMs.

Installed in the importing thread right after `import torch` (see imports.py), using public
or feature-detected APIs only. Instrumentation is the one object the agent installs and
uninstalls; its jobs live in modules of their own, one mixin each:

- optimizer steps (steps.py): the global optimizer step pre/post hooks write the rows of the
  `steps` table (memory state, gradient clearing, the breakdown of breakdown.py) and decide
  which steps are recorded in detail;
- forward and backward spans (spans.py): hooks on the *outermost* modules only, found by root
  discovery (discovery.py);
- modes (modes.py): Module.train (so eval() too), Module.__init__ and DataLoader.__iter__ are
  wrapped at class level to record switches, new modules and epochs (Optimizer.zero_grad and
  Module.zero_grad: steps.py);
- transparency (transparency.py): the hooks kept out of copies, pickles, checkpoints,
  TorchScript and exports;
- memory state and OOMs (memory.py);
- the anatomy of one iteration (anatomy.py): what each module saves for backward, and its
  parameters, gradients and optimizer state.

Mixins of one object rather than collaborators: the hooks are bound methods of this object,
which copies as itself and refuses pickling (see __copy__), and they read each other's state at
every forward and step, where an attribute lookup more per access would cost (see spans.py).
Each mixin declares what it uses of the others as class annotations without values: for mypy
only, so nothing defined there can shadow the part that defines it. The objects of the script
are read by reader.py.

Nothing here changes values the script computes: no RNG use, no grad-mode changes, no
tensor writes. Everything inside torch.compile'd regions is skipped. No code of the script's
runs in the hooks (reader.py); a step that raised is dropped at the next one (steps.py).

Every wrapper is feature-detected and undone by uninstall().
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple

from .anatomy import AnatomyHooks
from .census_schedule import (
    ITERATION_RANK,
    CensusSchedule,
)
from .discovery import RootDiscovery, Roots
from .memory import MemoryState
from .modes import ModeWrappers
from .port import AgentPort
from .reader import Reader
from .spans import SpanHooks
from .steps import StepHooks
from .transparency import HookTransparency

_ABSENT = object()  # an attribute that a wrapper adds rather than replaces


class Instrumentation(
    SpanHooks, StepHooks, RootDiscovery, ModeWrappers, HookTransparency, MemoryState, AnatomyHooks
):
    """The hooks and wrappers on the script's torch, installed and uninstalled together."""

    def __init__(self, agent: AgentPort, torch: Any) -> None:
        self.agent = agent
        self.torch = torch
        self._local = threading.local()
        self._handles: List[Any] = []
        self._patches: List[Tuple[Any, str, Any]] = []
        self.phase: Optional[str] = None
        compiler = getattr(torch, "compiler", None)
        self._is_compiling: Callable[[], bool] = getattr(compiler, "is_compiling", lambda: False)
        self._reader = Reader(torch)
        self._init_discovery()
        self._init_steps()
        self._init_spans(torch)
        self._init_modes()
        self._init_memory()
        self._init_anatomy(str(getattr(agent, "anatomy", "auto")))
        self._iteration_rank = len(ITERATION_RANK)  # the best kind of iteration seen so far
        # Reads the C heap between iterations (the agent's; a stand-in agent may lack it).
        self._heap_between_iterations: Optional[Callable[[], None]] = getattr(
            agent, "heap_between_iterations", None
        )
        self.censuses = CensusSchedule(agent, torch, str(getattr(agent, "census", "never")))

    # -- install / uninstall ----------------------------------------------------------------

    def install(self) -> None:
        """Install every hook and wrapper, or, if any step fails, none of them."""
        try:
            self._install()
        except BaseException:
            self.uninstall()
            raise

    def _install(self) -> None:
        torch = self.torch
        optim = importlib.import_module("torch.optim.optimizer")
        self._handles.append(optim.register_optimizer_step_pre_hook(self._step_pre))
        self._handles.append(optim.register_optimizer_step_post_hook(self._step_post))
        self._wrap(torch.optim.Optimizer, "zero_grad", self._zero_grad_wrapper)
        self._wrap(torch.nn.Module, "zero_grad", self._zero_grad_wrapper)
        self._wrap(torch.nn.Module, "train", self._train_wrapper)
        self._wrap(torch.nn.Module, "__init__", self._init_wrapper)
        self._wrap(torch.utils.data.DataLoader, "__iter__", self._iter_wrapper)
        self._wrap(torch.nn.Module, "__reduce_ex__", self._reduce_wrapper)
        self._wrap_if_present("torch.jit._recursive", "create_script_module", self._script_wrapper)
        self._wrap_if_present("torch.export", "export", self._export_wrapper)
        self._wrap_if_present(
            "torch.nn.modules.module", "_has_any_global_hook", self._global_hook_wrapper
        )
        self._start_discovery()
        self._start_anatomy()

    def uninstall(self) -> None:
        self._stop_discovery()
        self._stop_anatomy()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for _root, handles in list(self.roots.items()):
            for handle in handles:
                handle.remove()
        self.roots = Roots()
        for owner, name, original in reversed(self._patches):
            if original is _ABSENT:
                delattr(owner, name)  # added by _wrap: the inherited one shows again
            else:
                setattr(owner, name, original)  # put back exactly the attribute found
        self._patches.clear()

    def _wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Replace owner.name (its own, or else the inherited one) with make(it)."""
        original = owner.__dict__.get(name, _ABSENT)
        current = getattr(owner, name) if original is _ABSENT else original
        wrapper = functools.wraps(current)(make(current))
        self._patches.append((owner, name, original))
        setattr(owner, name, wrapper)

    def _wrap_if_present(self, module: str, name: str, make: Callable[[Any], Any]) -> None:
        """Wrap a function of a torch module that this torch may not have or not load.

        Never imports: installing runs inside the script's `import torch`.
        """
        owner = sys.modules.get(module)
        if owner is not None and callable(getattr(owner, "__dict__", {}).get(name)):
            self._wrap(owner, name, make)

    # Objects holding the hooks must not be copied into the script's models: see
    # transparency.py. What still reaches this object copies it as itself and refuses pickling.

    def __copy__(self) -> "Instrumentation":
        return self

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Instrumentation":
        return self

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError("cannot pickle memsight's instrumentation (a module's forward hook)")

    # -- iterations ---------------------------------------------------------------------------

    def _iteration_ended(self, kind: str, index: int) -> None:
        """An iteration of `kind` ended (for forwards: the next one begins). The loop's
        iterations are its optimizer steps, else its backward passes, else its outermost
        forwards (as series.py counts them): the C heap is read at the best kind seen so far,
        paced per iteration (heap.py), and the census schedule decides on a census."""
        rank = ITERATION_RANK[kind]
        if rank <= self._iteration_rank:
            self._iteration_rank = rank
            if self._heap_between_iterations is not None:
                self._heap_between_iterations()
        self._anatomy_at_boundary(kind, index)
        self.censuses.at_boundary(kind, index)
