"""The line of the user's code that adds to a holder: `kept.append(out)`, `total += loss`.

A census names what keeps memory alive (a list, a dict, an attribute, a variable) and where it
lives (a function's frame, a module, a class). Which line *adds* to it is a question about the
source, answered here by reading it: the statements in that function (or module, or class)
that append to, extend, insert into, update, index-assign or augment-assign the holder. The
file is read at diagnosis time; a file that is gone or does not parse gives no line.
"""

from __future__ import annotations

import ast
import functools
import linecache
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Methods that put something into a container.
ADDING_METHODS = frozenset(
    {
        "append",
        "appendleft",
        "extend",
        "extendleft",
        "insert",
        "add",
        "update",
        "setdefault",
        "put",
        "put_nowait",
        "push",
        "__setitem__",
        "__iadd__",
    }
)


@dataclass(frozen=True)
class SourceLine:
    line: int
    code: str


@functools.lru_cache(maxsize=64)
def _parse(path: str) -> tuple[ast.Module, tuple[str, ...]] | None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        # A notebook's cell is a file name with no file (ipykernel's /tmp/ipykernel_N/H.py):
        # its source is in linecache, where IPython puts each cell it runs.
        text = "".join(linecache.getlines(path))
        if not text:
            return None
    try:
        return ast.parse(text, filename=path), tuple(text.splitlines())
    except (SyntaxError, ValueError):
        return None


def _matches(node: ast.expr, name: str, attribute: bool) -> bool:
    """Whether `node` (an expression whose content is changed) is the holder.

    For a variable (local, global, closure cell) the holder is the bare name or something
    indexed in it; for an attribute, any `<obj>.name` (self.cache, model.history).
    """
    if isinstance(node, ast.Subscript):
        return _matches(node.value, name, attribute)
    if attribute:
        return isinstance(node, ast.Attribute) and node.attr == name
    return isinstance(node, ast.Name) and node.id == name


def _adds(statement: ast.AST, name: str, attribute: bool) -> bool:
    if isinstance(statement, ast.AugAssign):
        return _matches(statement.target, name, attribute)
    if isinstance(statement, ast.Assign | ast.AnnAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        value = statement.value
        for target in targets:
            if isinstance(target, ast.Subscript) and _matches(target.value, name, attribute):
                return True  # cache[key] = value
            # total = total + loss: the holder is rebuilt from itself
            if (
                _matches(target, name, attribute)
                and value is not None
                and any(
                    isinstance(n, ast.Name | ast.Attribute) and _matches(n, name, attribute)
                    for n in ast.walk(value)
                )
            ):
                return True
        return False
    if isinstance(statement, ast.Expr | ast.Assign | ast.Return):
        call = statement.value
    else:
        return False
    for node in ast.walk(call) if call is not None else ():
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ADDING_METHODS
            and _matches(node.func.value, name, attribute)
        ):
            return True
    return False


def _scope(tree: ast.Module, first_line: int | None) -> ast.AST:
    """The function (or class) defined at `first_line`, or the whole module."""
    if first_line is None:
        return tree
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            decorated = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first_line in (node.lineno, decorated):
                return node
    return tree


def _binds(statement: ast.AST, name: str, attribute: bool) -> bool:
    """`name = ...`, `self.name: T = ...`, `for name in ...`, `with ... as name`."""
    if isinstance(statement, ast.Assign):
        targets: list[ast.expr] = list(statement.targets)
    elif isinstance(statement, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
        targets = [statement.target]
    elif isinstance(statement, ast.With | ast.AsyncWith):
        targets = [item.optional_vars for item in statement.items if item.optional_vars]
    else:
        return False
    while targets:  # through `a, (b, *c) = ...`, never into `x[k] = ...` (that adds to x)
        target = targets.pop()
        if isinstance(target, ast.Tuple | ast.List):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        elif not isinstance(target, ast.Subscript) and _matches(target, name, attribute):
            return True
    return False


def _line_of(
    path: str,
    name: str,
    attribute: bool,
    first_line: int | None,
    wanted: Callable[[ast.AST, str, bool], bool],
) -> SourceLine | None:
    """The statement in `path` (within the function or class defined at `first_line` when
    given, else anywhere in the module) that `wanted` picks for holder `name`. Among several,
    one inside a loop comes first (what runs every iteration), then the last in the file."""
    parsed = _parse(path)
    if parsed is None:
        return None
    tree, lines = parsed
    scope = _scope(tree, first_line)
    in_loops = {
        id(inner)
        for node in ast.walk(scope)
        if isinstance(node, ast.For | ast.While | ast.AsyncFor)
        for inner in ast.walk(node)
    }
    found = [
        (id(node) in in_loops, node.lineno)
        for node in ast.walk(scope)
        if isinstance(node, ast.stmt) and wanted(node, name, attribute)
    ]
    if not found:
        return None
    _, line = max(found)
    code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return SourceLine(line, code)


def adding_line(
    path: str, name: str, *, attribute: bool = False, first_line: int | None = None
) -> SourceLine | None:
    """The line that adds to holder `name` in `path`: within the function or class defined at
    `first_line` when given (a local's function), else anywhere in the module. Among several,
    one inside a loop comes first (the leak is the one that runs every iteration), then the
    last in the file."""
    return _line_of(path, name, attribute, first_line, _adds)


def binding_line(
    path: str, name: str, *, attribute: bool = False, first_line: int | None = None
) -> SourceLine | None:
    """The line that assigns holder `name` (`x = torch.randn(...)`), chosen as adding_line
    chooses: for a holder that is what it was last set to rather than what was added to it."""
    return _line_of(path, name, attribute, first_line, _binds)


def source_line(path: str, line: int) -> str | None:
    parsed = _parse(path)
    if parsed is None:
        return None
    lines = parsed[1]
    return lines[line - 1].strip() if 0 < line <= len(lines) else None


def enclosing_function(path: str, line: int) -> str | None:
    """The qualified name of the innermost function whose body holds `line` of the file
    (`Trainer.fit`, `main.<locals>.step` as `main.step`), or None at module level or when the
    file cannot be read."""
    parsed = _parse(path)
    if parsed is None:
        return None
    tree, _lines = parsed
    names: list[str] = []
    body: list[ast.stmt] = tree.body
    found: str | None = None
    while True:
        inner = next(
            (
                node
                for node in body
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and node.lineno <= line <= (node.end_lineno or node.lineno)
            ),
            None,
        )
        if inner is None:
            return found
        names.append(inner.name)
        if not isinstance(inner, ast.ClassDef):
            found = ".".join(names)
        body = inner.body
