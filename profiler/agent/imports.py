"""Run a callback in the importing thread the moment `torch` has finished importing.

Installing hooks from the agent's own thread could mutate torch's hook dictionaries while the
script's thread iterates them; doing it at the end of `import torch`, in the thread that
imports it, cannot. The finder wraps the real loader's exec_module for that one import and
takes itself out of sys.meta_path afterwards.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Optional


class TorchImportWatcher:
    def __init__(self, on_import: Callable[[Any], None], name: str = "torch") -> None:
        self.on_import = on_import
        self.name = name
        self.fired = False

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Optional[Any]:
        if fullname != self.name or self.fired:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        loader: Any = getattr(spec, "loader", None)
        original = getattr(loader, "exec_module", None)
        if spec is None or original is None:
            return spec

        def exec_module(module: Any) -> None:
            try:
                original(module)
            finally:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module  # back to the loader's own method
            self.fired = True
            self.uninstall()
            # The agent must never break the script's `import torch`.
            with contextlib.suppress(Exception):
                self.on_import(module)

        loader.exec_module = exec_module
        return spec
