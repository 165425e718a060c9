"""Where in the user's code an exception points: the recorded traceback, read once for all.

The agent records a traceback as a list of `[file, line, function, source]` lists, outermost
first (profiler/agent/tracebacks.py); profiles from earlier versions hold objects with those
keys. Both read the same here. Of the frames, the one to show a user is the innermost in their
own code: not PyTorch, not an installed package, not the standard library, not memsight, and
not a pseudo file such as `<frozen runpy>` or `<string>` unless nothing else is left.

Which files are a library's is profiler/codefiles.py's one definition, shared with the agent.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from memsight.profiler.codefiles import is_library_file, is_pseudo_file
from memsight.profiler.diagnosis.finding import Location
from memsight.profiler.profile.model import RunInfo

SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")
# "'(' was never closed (train.py, line 3)": where a SyntaxError is; Python names the file
# by its base name only.
SYNTAX_WHERE = re.compile(r"\((?P<file>[^()]+), line (?P<line>\d+)\)\s*$")
CODE_CHARS = 160  # of a source line quoted in an evidence text


@dataclass(frozen=True)
class Frame:
    """One frame of a recorded traceback."""

    file: str
    line: int | None
    function: str
    source: str  # the source line, stripped; empty when unknown

    def location(self) -> Location:
        return Location(
            file=self.file,
            line=self.line or 0,
            function=self.function or None,
            code=self.source or None,
        )


def parse_traceback(value: object) -> list[Frame]:
    """The frames of a recorded traceback, outermost first; lists and objects alike.

    Anything that is not a frame (a profile written by a buggy or foreign agent) is skipped."""
    if not isinstance(value, list | tuple):
        return []
    frames = []
    for item in value:
        if isinstance(item, Mapping):
            values = [item.get(key) for key in ("file", "line", "function", "source")]
        elif isinstance(item, list | tuple) and len(item) >= 2:
            values = [*item, None, None][:4]
        else:
            continue
        file, line, function, source = values
        frames.append(
            Frame(
                file=str(file or "?"),
                line=line if isinstance(line, int) and not isinstance(line, bool) else None,
                function=str(function or ""),
                source=str(source or "").strip(),
            )
        )
    return frames


def _is_script(file: str, script: str | None) -> bool:
    if not script:
        return False
    if file == script:
        return True
    # A script given by a relative path runs with its absolute path as __file__.
    return not os.path.isabs(script) and file.endswith(os.sep + os.path.normpath(script))


def is_user_frame(frame: Frame, script: str | None = None) -> bool:
    """Whether a frame runs the user's own code: the script's, or any file that is not a
    library's (pseudo files included, but not the interpreter's `<frozen ...>` modules)."""
    if _is_script(frame.file, script):
        return True
    return not is_library_file(frame.file)


def user_frame(frames: Iterable[Frame], script: str | None = None) -> Frame | None:
    """The innermost frame in the user's own code, or None when every frame is a library's.

    The script's own frames are the user's wherever the script lives. A pseudo file
    (`<string>` of `python -c`, `<stdin>`) counts only when no real file of the user's is on
    the traceback."""
    mine = [f for f in frames if is_user_frame(f, script)]
    real = [f for f in mine if not is_pseudo_file(f.file)]
    if real:
        return real[-1]
    return mine[-1] if mine else None


def script_path(info: RunInfo) -> str | None:
    """The script the run executed, as its frames name it (absolute for a relative path)."""
    if not info.script:
        return None
    if os.path.isabs(info.script) or not info.cwd:
        return info.script
    return os.path.normpath(os.path.join(info.cwd, info.script))


def syntax_error_location(
    exc_type: str, message: str, script: str | None = None
) -> Location | None:
    """Where a SyntaxError (or IndentationError, TabError) says the code does not parse.

    Python names the file by its base name: when that is the script's, the script's path is
    given instead, so that the location can be opened."""
    if exc_type.rsplit(".", 1)[-1] not in SYNTAX_ERRORS:
        return None
    match = SYNTAX_WHERE.search(" ".join(message.split()))
    if match is None:
        return None
    file = match["file"]
    if script and os.path.basename(script) == file:
        file = script
    return Location(file=file, line=int(match["line"]))


def exception_locations(data: Mapping[str, Any], script: str | None = None) -> tuple[Location, ...]:
    """Where to look for a recorded exception, most important first.

    A SyntaxError's own file and line come first. Then the innermost frame of the user's code,
    then the frame that raised when that is elsewhere (inside a library). With no frame of the
    user's on the traceback, only the frame that raised."""
    frames = [f for f in parse_traceback(data.get("traceback")) if f.line is not None]
    out: list[Location] = []
    syntax = syntax_error_location(
        str(data.get("exc_type") or ""), str(data.get("message") or ""), script
    )
    if syntax is not None:
        out.append(syntax)
    mine = user_frame(frames, script)
    if mine is not None:
        out.append(mine.location())
    innermost = next((f for f in reversed(frames) if not f.file.startswith("<frozen")), None)
    if innermost is not None and innermost != mine:
        out.append(innermost.location())
    unique: list[Location] = []
    for location in out:
        if all((location.file, location.line) != (u.file, u.line) for u in unique):
            unique.append(location)
    return tuple(unique)


def add_locations(where: tuple[Location, ...], more: Iterable[Location]) -> tuple[Location, ...]:
    """`where` with `more` after it, one location per line of code. A line already there
    without a holder takes the holder of the same line in `more`: when the line that raised an
    OOM is also the one that allocated the live blocks (`kept.append(torch.empty(...))`), it
    says both."""
    out = list(where)
    for location in more:
        same = [i for i, w in enumerate(out) if (w.file, w.line) == (location.file, location.line)]
        if not same:
            out.append(location)
        elif out[same[0]].holder is None and location.holder is not None:
            out[same[0]] = replace(out[same[0]], holder=location.holder, bytes=location.bytes)
    return tuple(out)


def describe(location: Location) -> str:
    """`train.py:25 in train(): loss = model(x)`: the file's name and line, the function (but
    `<module>`, a script's top level) and the source line, as far as they are known."""
    text = f"{os.path.basename(location.file) or location.file}:{location.line}"
    if location.function and location.function != "<module>":
        text += f" in {location.function}()"
    if location.code:
        code = location.code
        text += f": {code[: CODE_CHARS - 1]}…" if len(code) > CODE_CHARS else f": {code}"
    return text
