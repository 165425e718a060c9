"""memsight, a memory profiler for PyTorch: the one name it installs under.

The repository keeps its packages at the top level (app/, profiler/, resources/); they install,
and import, as ``memsight.app`` (the desktop app), ``memsight.profiler`` (the Qt-free core and
the agent) and ``memsight.resources`` (data files), so that memsight adds a single name to a
user's environment and never shadows a user's own ``app`` or ``profiler``. In a checkout the
folders memsight/app, memsight/profiler and memsight/resources are links to those packages;
an installed memsight has them as real folders (pyproject.toml, [tool.setuptools]).

The public API is what ``__all__`` names: ``record`` (a block of this process recorded into a
profile, as a context manager or a decorator), ``RecordError``, and the IPython extension
(``%load_ext memsight``: the ``%%memsight`` cell magic and ``%memsight_report``). Everything
else is private and may change.
"""

from typing import TYPE_CHECKING, Any

from memsight.profiler import __version__

if TYPE_CHECKING:
    from memsight.profiler.inprocess.record import RecordError, record


def __getattr__(name: str) -> Any:
    """``record`` and ``RecordError``, imported on first use: ``memsight run`` and the app,
    which import this package too, never pay for them (PEP 562)."""
    if name in ("record", "RecordError"):
        from memsight.profiler.inprocess import record as module

        return getattr(module, name)
    raise AttributeError(f"module 'memsight' has no attribute {name!r}")


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext memsight``: register the ``%%memsight`` and ``%memsight_report`` magics."""
    from memsight.profiler.inprocess.notebook import register

    register(ipython)


__all__ = ["RecordError", "__version__", "load_ipython_extension", "record"]
