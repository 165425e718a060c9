"""Carry the agent into the Python processes the target starts (torchrun's ranks, a
`multiprocessing` spawn, `subprocess.run([sys.executable, ...])`).

The target's own environment is the user's (agent/entry.py removes memsight's variables before
its first line), so a child would start without the agent. Every way Python starts a program
ends in `_posixsubprocess.fork_exec` (subprocess, multiprocessing's spawn and forkserver) or
`os.posix_spawn[p]` (subprocess on some systems): those are wrapped here to give the child's
environment memsight's two variables, exactly as the launcher gave them to the target, built
on the child's own PYTHONPATH. The target still sees its os.environ untouched; a child that is
not Python carries the two variables on, so a Python grandchild started by a shell script is
recorded too. Nothing changes for the program: the same arguments reach the same calls.
Standard library only; Python 3.9+.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional

from ..protocol import AGENT_ENV

PYTHONPATH = "PYTHONPATH"
STARTUP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")


class ChildEnvironment:
    """What a child's environment gains: the agent's variable and the startup folder."""

    def __init__(self, config: Dict[str, Any], startup_dir: str = STARTUP_DIR) -> None:
        self.config = {k: v for k, v in config.items() if k != "pythonpath"}
        self.startup_dir = startup_dir

    def variables(self, pythonpath: Optional[str]) -> Dict[str, str]:
        """AGENT_ENV and PYTHONPATH for a child whose own PYTHONPATH is `pythonpath`."""
        config = dict(self.config, pythonpath=pythonpath)
        path = self.startup_dir + os.pathsep + pythonpath if pythonpath else self.startup_dir
        return {AGENT_ENV: json.dumps(config), PYTHONPATH: path}

    def mapping(self, env: Optional[Mapping[str, str]]) -> Dict[str, str]:
        """`env` (None: the process' own) with the agent's variables added."""
        result: Dict[Any, Any] = dict(os.environ if env is None else env)
        if any(isinstance(key, bytes) for key in result):  # a bytes environment stays bytes
            encoded = self.entries([k + b"=" + v for k, v in result.items()])
            return dict(e.partition(b"=")[::2] for e in encoded)  # type: ignore[misc]
        if AGENT_ENV not in result:  # set by the program itself: its choice stands
            result.update(self.variables(result.get(PYTHONPATH)))
        return result

    def entries(self, env: Optional[List[bytes]]) -> List[bytes]:
        """fork_exec's environment list (None: the process' own) with the variables added."""
        if env is None:
            env = [key + b"=" + value for key, value in os.environb.items()]
        found: Dict[bytes, bytes] = {}
        for entry in env:
            key, _, value = bytes(entry).partition(b"=")
            found.setdefault(key, value)
        if AGENT_ENV.encode() in found:
            return list(env)
        user = found.get(PYTHONPATH.encode())
        added = self.variables(os.fsdecode(user) if user is not None else None)
        kept = [e for e in env if bytes(e).partition(b"=")[0] != PYTHONPATH.encode()]
        return kept + [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in added.items()]


def install(children: ChildEnvironment) -> None:
    """Wrap the calls that start programs so that their environment carries the agent."""
    try:
        import _posixsubprocess
    except ImportError:  # not a POSIX system
        return
    original = _posixsubprocess.fork_exec
    wrapped = _wrap_fork_exec(original, children)
    _posixsubprocess.fork_exec = wrapped
    subprocess = sys.modules.get("subprocess")
    if subprocess is not None and getattr(subprocess, "_fork_exec", None) is original:
        subprocess._fork_exec = wrapped  # type: ignore[attr-defined]
    for name in ("posix_spawn", "posix_spawnp"):
        spawn = getattr(os, name, None)
        if spawn is not None:
            setattr(os, name, _wrap_posix_spawn(spawn, children))


def _wrap_fork_exec(original: Callable[..., Any], children: ChildEnvironment) -> Callable[..., Any]:
    def fork_exec(*args: Any) -> Any:
        # (args, executable_list, close_fds, pass_fds, cwd, env, ...) on every Python since 3.7.
        if len(args) > 5:
            with contextlib.suppress(Exception):  # never the reason a program does not start
                args = (*args[:5], children.entries(args[5]), *args[6:])
        return original(*args)

    return fork_exec


def _wrap_posix_spawn(
    original: Callable[..., Any], children: ChildEnvironment
) -> Callable[..., Any]:
    def posix_spawn(path: Any, argv: Any, env: Any, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            env = children.mapping(env)
        return original(path, argv, env, *args, **kwargs)

    posix_spawn.__name__ = getattr(original, "__name__", "posix_spawn")
    posix_spawn.__doc__ = getattr(original, "__doc__", None)
    return posix_spawn
