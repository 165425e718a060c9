# Entry point of the profiled process: ``python bootstrap.py [-m MODULE | SCRIPT] ARGS...``.
#
# This file runs as the real __main__ module, which the target's code then reuses, so it
# defines one function, deletes it before the target runs, and has no docstring, imports or
# __future__ statements at module level: the target must find __main__ exactly as plain
# python leaves it.


def _memsight_bootstrap() -> None:
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        del sys.path[0]
    root = os.path.dirname(here)
    name = "_memsight_profiler"
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(root, "__init__.py"), submodule_search_locations=[root]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    runner = importlib.import_module(name + ".agent.runner")
    del globals()["_memsight_bootstrap"]
    runner.main(sys.argv[1:], root)


_memsight_bootstrap()
