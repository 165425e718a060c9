"""Whose code a source file is: the user's, or a library's (PyTorch, an installed package, the
standard library, memsight itself). The one definition used by the agent (a census' roots, the
line that called a model) and by the diagnosis (the frame of a traceback to show).

A profile may be read by another interpreter, or on another machine, than the one that
recorded it, so a library is told first by its path's shape: a `site-packages` or
`dist-packages` folder, a `torch` package folder (an editable PyTorch build), a standard library
folder `lib/python3.X`, the interpreter's `<frozen ...>` modules; then by this interpreter's own
installation folders and memsight's own package folder. Pseudo files (`<string>`, `<stdin>`,
`<ipython-input-…>`) are not a library's: they hold code the user typed.

Shipped with the agent: standard library only, Python 3.9+.
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from typing import Tuple

# Folders installed packages live in, whichever interpreter recorded the run.
PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})
# Package folders that are never the user's, even when installed from a checkout (an
# editable PyTorch build), and the name memsight's agent runs under inside the target.
LIBRARY_PACKAGES = frozenset({"torch", "_memsight_profiler"})
# A standard library folder of any CPython on a POSIX system: lib/python3.12, lib64/python3.9t.
_STDLIB_DIR = re.compile(r"python\d+(\.\d+)?t?")
# memsight's own package (`memsight.profiler`, or `_memsight_profiler` inside the target), as
# imported and as on disk: in a checkout memsight/profiler is a link to profiler/, and the
# agent's frames carry the real path.
OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_OWN_REAL_DIR = os.path.dirname(os.path.realpath(__file__))


def is_pseudo_file(file: str) -> bool:
    """`<frozen runpy>`, `<string>`, `<stdin>`: code with no file to open."""
    return file.startswith("<") and file.endswith(">")


@lru_cache(maxsize=None)
def installation_dirs() -> Tuple[str, ...]:
    """This interpreter's standard library and package folders, and its base installation's."""
    import sysconfig  # only when first needed: the agent must start fast

    dirs = set()
    for scheme_vars in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        try:
            paths = sysconfig.get_paths(vars=scheme_vars)
        except Exception:  # an odd installation: the path's shape still decides
            continue
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            if paths.get(key):
                dirs.add(os.path.normpath(paths[key]))
    return tuple(sorted(dirs))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@lru_cache(maxsize=8192)
def is_library_file(file: str) -> bool:
    """Whether `file` is PyTorch's, an installed package's, the standard library's (the
    interpreter's frozen modules included) or memsight's own code rather than the user's."""
    if file.startswith("<frozen"):
        return True
    if is_pseudo_file(file):
        return False
    path = os.path.normpath(file)
    folders = path.split(os.sep)[:-1]
    if PACKAGE_DIRS.intersection(folders) or LIBRARY_PACKAGES.intersection(folders):
        return True
    for i in range(1, len(folders)):  # itertools.pairwise is 3.10+
        if folders[i - 1].lower() in ("lib", "lib64") and _STDLIB_DIR.fullmatch(folders[i]):
            return True
    if _within(path, OWN_DIR) or _within(path, _OWN_REAL_DIR):
        return True
    return any(_within(path, d) for d in installation_dirs())
