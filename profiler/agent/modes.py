"""Mode switches, new modules and epochs, from class-level wrappers.

Module.train (so eval() too), Module.__init__ and DataLoader.__iter__ are wrapped at class
level (instrument.py installs them): a train()/eval() switch is a `mode` event and a new
iterator over a dataset an `epoch` event; both turn detail back on (steps.py: evaluation
starting, or a new pass over data, is recorded in detail). All three start root discovery
again (discovery.py): a new or switched module may be called at the top level.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional

from .clock import now as _now
from .port import AgentPort
from .reader import Reader, forget

MAX_DATASETS = 64  # datasets known by their id alone (no weak reference), at most


class ModeWrappers:
    """Instrumentation's class-level wrappers of train(), __init__ and __iter__ (a mixin: see
    instrument.py)."""

    # Of Instrumentation's other parts.
    agent: AgentPort
    _local: threading.local
    _is_compiling: Callable[[], bool]
    _reader: Reader
    detail: bool
    _discovery: List[Any]
    _start_discovery: Callable[[], None]

    def _init_modes(self) -> None:
        # id(dataset) -> [a weak reference to it (None where it takes none), its type, loader
        # id, epochs]: by identity, never by the dataset's own __hash__ / __eq__.
        self._datasets: Dict[int, List[Any]] = {}
        self._dataset_ids = 0

    def _init_wrapper(self, original: Any) -> Any:
        inst = self

        def __init__(module: Any, *args: Any, **kwargs: Any) -> None:
            original(module, *args, **kwargs)
            # A new module may be called at the top level; not one built by torch.compile or
            # torch.export while they trace (nor one the script builds in a compiled region).
            if not inst._discovery and not inst._is_compiling():
                inst._start_discovery()

        return __init__

    def _train_wrapper(self, original: Any) -> Any:
        inst = self

        def train(module: Any, mode: bool = True) -> Any:
            depth = getattr(inst._local, "train_depth", 0)
            # The flag as nn.Module stores it, never through a property of the module's class:
            # where it cannot be read so, every switch is taken for a change.
            before = inst._training(module)
            inst._local.train_depth = depth + 1
            try:
                result = original(module, mode)
            finally:
                inst._local.train_depth = depth
            if depth == 0:
                after = inst._training(module)
                if after is None:
                    after = mode is not False
                if before is not after:
                    name = inst._reader.name(type(module))
                    inst.agent.event("mode", training=after, module=name)
                    inst.detail = True  # evaluation starting, or training again: in detail
                    inst._start_discovery()
            return result

        return train

    def _training(self, module: Any) -> Optional[bool]:
        """A module's training flag from its instance dict; None where its class defines
        `training` itself (a property: never called) or the flag is no bool."""
        value = self._reader.attribute(module, "training", None)
        return value if type(value) is bool else None

    def _iter_wrapper(self, original: Any) -> Any:
        inst = self

        def __iter__(loader: Any) -> Any:
            start = _now()
            iterator = original(loader)
            try:
                inst._epoch(loader, start)
            except Exception as exc:
                inst.agent.error("epoch", exc)
            return iterator

        return __iter__

    def _epoch(self, loader: Any, start: int) -> None:
        """A new iterator over a dataset starts an epoch of it.

        Keyed by the dataset rather than the DataLoader, because many scripts build a new
        DataLoader every epoch. The dataset is known by its identity, never compared or
        hashed by its own methods (a tensor's == compares elements); one that takes no weak
        reference (a list) by its id and type alone.
        """
        reader = self._reader
        dataset = reader.attribute(loader, "dataset", loader)
        key = id(dataset)
        datasets = self._datasets
        entry = datasets.get(key)
        if entry is not None and (
            entry[1] is not type(dataset) or (entry[0] is not None and entry[0]() is not dataset)
        ):
            entry = None  # another object at a freed one's address
        if entry is None:
            try:
                ref: Any = weakref.ref(dataset, functools.partial(forget, datasets, key))
            except TypeError:
                ref = None
                if len(datasets) >= MAX_DATASETS:  # ids only: drop the oldest
                    for old in [k for k, e in datasets.items() if e[0] is None][
                        : MAX_DATASETS // 2
                    ]:
                        del datasets[old]
            self._dataset_ids += 1
            entry = datasets[key] = [ref, type(dataset), self._dataset_ids, 0]
        entry[3] += 1
        workers = reader.attribute(loader, "num_workers", 0)
        self.agent.event(
            "epoch",
            t=start,
            loader=entry[2],
            index=entry[3],
            num_workers=workers if type(workers) is int else 0,
            persistent_workers=reader.attribute(loader, "persistent_workers", False) is True,
        )
        self.detail = True  # a new pass over data (an epoch, a validation loop): in detail
        self._start_discovery()
