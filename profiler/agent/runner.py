"""Run the target script or module exactly as plain ``python`` would.

The target sees the sys.argv, __main__ module, sys.path[0], working directory, stdin and
environment it would see under ``python SCRIPT`` / ``python -m MODULE``; an uncaught exception
prints the traceback python would print (without our frames) and exits the same way.
"""

from __future__ import annotations

import json
import os
import sys
from types import TracebackType
from typing import Any, Dict, List, Optional

from ..protocol import AGENT_ENV


def main(argv: List[str], package_root: str) -> None:
    config = _take_config()
    agent = None
    if config is not None:
        try:
            from .client import start_agent

            agent = start_agent(config)
        except Exception:  # the agent is a guest: without it the script still runs
            agent = None
    if argv[:1] == ["-m"]:
        if len(argv) < 2:
            sys.stderr.write("Argument expected for the -m option\n")
            raise SystemExit(2)
        _guarded(agent, package_root, _run_module, argv[1], argv[2:])
    else:
        if not argv:
            sys.stderr.write("memsight agent: no script given\n")
            raise SystemExit(2)
        _guarded(agent, package_root, _run_script, argv[0], argv[1:])


def _take_config() -> Optional[Dict[str, Any]]:
    raw = os.environ.pop(AGENT_ENV, None)
    if raw is None:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def _guarded(agent: Any, package_root: str, run: Any, target: str, args: List[str]) -> None:
    try:
        run(target, args)
    except SystemExit:
        raise
    except BaseException as exc:
        tb = _strip_own_frames(exc.__traceback__, package_root)
        exc.__traceback__ = tb
        if agent is not None:
            agent.report_exception(exc, where="uncaught", uncaught=True)
        sys.excepthook(type(exc), exc, tb)
        # Re-raise so the interpreter ends the process exactly as it would have (exit status 1,
        # or death by SIGINT for KeyboardInterrupt), with the traceback already printed above.
        sys.excepthook = _already_printed
        raise


def _already_printed(*_args: Any) -> None:
    pass


def _strip_own_frames(tb: Optional[TracebackType], package_root: str) -> Optional[TracebackType]:
    prefix = os.path.join(package_root, "")
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(prefix):
        tb = tb.tb_next
    return tb


def _fresh_main() -> Dict[str, Any]:
    """The real __main__ namespace, reset to what the interpreter gives a new script."""
    namespace = sys.modules["__main__"].__dict__
    for key in list(namespace):
        if key not in ("__name__", "__builtins__", "__annotations__"):
            del namespace[key]
    namespace.update({"__doc__": None, "__package__": None, "__spec__": None, "__cached__": None})
    if "__annotations__" in namespace:
        namespace["__annotations__"] = {}
    return namespace


def _run_script(script: str, args: List[str]) -> None:
    import importlib.machinery

    sys.argv[:] = [script, *args]
    path = os.path.abspath(script)
    if os.path.isdir(path) or _is_zipfile(path):
        # A directory or zip with __main__.py, as ``python DIR`` runs it.
        import runpy

        sys.path.insert(0, script)
        _fresh_main()
        runpy._run_module_as_main("__main__", alter_argv=False)  # type: ignore[attr-defined]
        return
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        sys.stderr.write(
            "%s: can't open file %r: [Errno %d] %s\n"
            % (sys.executable, path, exc.errno or 0, exc.strerror)
        )
        raise SystemExit(2) from None
    sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
    namespace = _fresh_main()
    namespace["__file__"] = path
    namespace["__loader__"] = importlib.machinery.SourceFileLoader("__main__", path)
    code = compile(source, path, "exec", dont_inherit=True)
    exec(code, namespace)


def _run_module(module: str, args: List[str]) -> None:
    import runpy

    sys.argv[:] = ["-m", *args]
    sys.path.insert(0, os.getcwd())
    _fresh_main()
    runpy._run_module_as_main(module, alter_argv=True)  # type: ignore[attr-defined]


def _is_zipfile(path: str) -> bool:
    if not os.path.isfile(path) or path.endswith(".py"):
        return False
    import zipfile

    return zipfile.is_zipfile(path)
