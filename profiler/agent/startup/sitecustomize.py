# The profiled interpreter imports this file at start-up, before the target's first line: memsight
# puts this folder first on PYTHONPATH and runs the target as plain ``python SCRIPT ARGS...``,
# and Python's site module imports ``sitecustomize`` from the path (coverage.py, ddtrace-run
# and opentelemetry-instrument enter a process the same way).
#
# It takes this folder off sys.path again, starts the agent (which puts the environment back
# as the user had it), then runs the sitecustomize the environment would have run without us,
# so the target finds sys.path, os.environ and sys.modules["sitecustomize"] as plain python
# leaves them. Standard library only; Python 3.9+.


def _memsight_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    for index, entry in enumerate(sys.path):
        if os.path.abspath(entry or os.curdir) == here:
            del sys.path[index]
            break
    try:
        name = "_memsight_profiler"
        package = sys.modules.get(name)
        if package is None:
            # The agent's package under a private name, so the target's own modules called
            # `profiler` (or an installed memsight) are never shadowed or touched.
            root = os.path.dirname(os.path.dirname(here))
            spec = importlib.util.spec_from_file_location(
                name, os.path.join(root, "__init__.py"), submodule_search_locations=[root]
            )
            assert spec is not None and spec.loader is not None
            package = importlib.util.module_from_spec(spec)
            sys.modules[name] = package
            spec.loader.exec_module(package)
        __import__(name + ".agent.entry", fromlist=["start"]).start()
    except Exception:  # the agent is a guest: without it the target still runs, unobserved
        pass

    # The sitecustomize that plain python would have imported, if there is one.
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        # What the import of a missing sitecustomize raises; site.py ignores exactly this.
        raise ImportError("No module named 'sitecustomize'", name="sitecustomize")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)  # its errors reach site.py as they would have


_memsight_sitecustomize()
