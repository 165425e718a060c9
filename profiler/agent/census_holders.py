"""Holders and the paths that name them: _Holder, one named holder and what was attributed to
it (a row of the census' result), and _Ctx, where the walk reached an object (the holder it
counts under, and the path that names its children).

A holder's id (its root's kind, where the root lives, the path from it) is stable across the
censuses of a process, so that two of them can be compared (profiler/diagnosis/contents.py):
these records are what the census reports, kept apart from the walk that fills them. Stdlib
only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from .census_limits import MAX_SHAPES


class _Holder:
    """One named holder, and what was attributed to it."""

    __slots__ = (
        "bytes",
        "container",
        "count",
        "devices",
        "dtypes",
        "file",
        "file_bytes",
        "first_line",
        "function",
        "grad_bytes",
        "grad_storages",
        "id",
        "kind",
        "line",
        "name",
        "owner",
        "path",
        "root",
        "shapes",
        "storages",
        "thread",
        "with_graph",
    )

    def __init__(self, ctx: _Ctx) -> None:
        self.id = ctx.root + ctx.path
        self.kind = ctx.kind
        self.name = ctx.name
        self.root = ctx.anchor
        self.path = ctx.path
        self.container = ctx.container
        self.owner = ctx.owner
        self.function = ctx.function
        self.file = ctx.file
        self.line = ctx.line
        self.first_line = ctx.first_line
        self.thread = ctx.thread
        self.count = self.storages = self.bytes = 0
        self.grad_storages = self.grad_bytes = self.with_graph = self.file_bytes = 0
        self.devices: Set[str] = set()
        self.dtypes: Set[str] = set()
        self.shapes: List[Tuple[int, ...]] = []

    def copy(self) -> _Holder:
        other = _Holder.__new__(_Holder)
        for name in _Holder.__slots__:
            setattr(other, name, getattr(self, name))
        other.devices, other.dtypes, other.shapes = set(self.devices), set(self.dtypes), []
        other.shapes.extend(self.shapes)
        return other

    def add(self, other: _Holder) -> None:
        """What other (the same holder, from another slice of the census) counted."""
        self.count += other.count
        self.storages += other.storages
        self.bytes += other.bytes
        self.grad_storages += other.grad_storages
        self.grad_bytes += other.grad_bytes
        self.with_graph += other.with_graph
        self.file_bytes += other.file_bytes
        self.devices |= other.devices
        self.dtypes |= other.dtypes
        for shape in other.shapes:
            if len(self.shapes) < MAX_SHAPES and shape not in self.shapes:
                self.shapes.append(shape)

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "container": self.container,
            "owner": self.owner,
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "first_line": self.first_line,
            "thread": self.thread,
            "root": self.root,
            "path": self.path,
            "count": self.count,
            "storages": self.storages,
            "bytes": self.bytes,
            "grad_bytes": self.grad_bytes,
            "grad_storages": self.grad_storages,
            "with_graph": self.with_graph,
            "file_bytes": self.file_bytes,
            "devices": sorted(self.devices),
            "dtypes": sorted(self.dtypes),
            "shapes": [list(s) for s in self.shapes],
        }


class _Ctx:
    """Where an object was reached: the holder it counts under, and the path to name its
    children. Anonymous positions (list items, set members, dict entries not named by a short
    string key) keep their parent's holder; named steps (attributes, string keys) start one."""

    __slots__ = (
        "anchor",
        "anon",
        "base",
        "container",
        "file",
        "first_line",
        "function",
        "holder",
        "keys",
        "kids",
        "kind",
        "line",
        "module_path",
        "name",
        "named",
        "owner",
        "path",
        "root",
        "thread",
        "variant",
    )

    def __init__(
        self,
        root: str,
        path: str,
        name: str,
        kind: str,
        anchor: str,
        container: str,
        owner: Optional[str] = None,
        file: Optional[str] = None,
        line: Optional[int] = None,
        function: Optional[str] = None,
        first_line: Optional[int] = None,
        thread: Optional[str] = None,
        named: int = 0,
    ) -> None:
        self.root = root  # id prefix: root kind and where the root lives
        self.path = path  # from the root binding: trainer.model.kept[*]["x"]
        self.name = name  # as shown: Model.kept, history["train"], cell total
        self.kind = kind
        self.anchor = anchor  # the variable, attribute or cell name the holder starts at
        self.container = container
        self.owner = owner
        self.file = file
        self.line = line
        self.function = function
        self.first_line = first_line
        self.thread = thread
        self.named = named
        self.anon = False
        self.base: _Ctx = self  # the context whose holder this one counts under
        self.holder: Optional[_Holder] = None
        self.kids: Optional[Dict[str, _Ctx]] = None  # attribute children, by name
        self.keys: Optional[Dict[str, _Ctx]] = None  # dict-key children, by key
        self.variant: Optional[_Ctx] = None
        # A submodule's path below the model the holder reached ("blocks.3.attn"): its
        # attributes are named by it, so that two instances of one class tell apart.
        self.module_path = ""

    def anonymous(self) -> _Ctx:
        """The same holder, one unnamed position further down."""
        if self.anon:
            return self
        v = self.variant
        if v is None:
            v = self.variant = self._copy(self.path)
            v.anon = True
        return v

    def within(self, step: str) -> _Ctx:
        """The same holder, the path one named step further (a submodule of a model)."""
        kids = self.kids
        if kids is None:
            kids = self.kids = {}
        v = kids.get("\0" + step)  # apart from attribute names, the other entries
        if v is None:
            v = kids["\0" + step] = self._copy(self.path + ("[*]" if self.anon else "") + step)
            v.module_path = self.module_path + step if self.module_path else step.lstrip(".")
        return v

    def _copy(self, path: str) -> _Ctx:
        v = _Ctx(
            self.root,
            path,
            self.name,
            self.kind,
            self.anchor,
            self.container,
            self.owner,
            self.file,
            self.line,
            self.function,
            self.first_line,
            self.thread,
            self.named,
        )
        v.base = self.base
        v.module_path = self.module_path
        return v


def _dunder(name: str) -> bool:
    """A name of Python's own (`__file__`, `__doc__`): it names no holder."""
    return name.startswith("__") and name.endswith("__")


def _subscript(key: str) -> str:
    """A string key as a step of a path: `["train"]`, or its repr where that would mislead."""
    if key.isprintable() and '"' not in key and "\\" not in key:
        return '["' + key + '"]'
    return "[" + repr(key) + "]"
