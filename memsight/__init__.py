"""memsight, a memory profiler for PyTorch: the one name it installs under.

The repository keeps its packages at the top level (app/, profiler/, resources/); they install,
and import, as ``memsight.app`` (the desktop app), ``memsight.profiler`` (the Qt-free core and
the agent) and ``memsight.resources`` (data files), so that memsight adds a single name to a
user's environment and never shadows a user's own ``app`` or ``profiler``. In a checkout the
folders memsight/app, memsight/profiler and memsight/resources are links to those packages;
an installed memsight has them as real folders (pyproject.toml, [tool.setuptools]).
"""

from memsight.profiler import __version__

__all__ = ["__version__"]
