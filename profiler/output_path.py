"""Every file memsight writes where the user said: one rule, defined here, used by all.

`memsight report --html`, `compare --html`, `merge -o`, `export --memory-viz` and the compaction
of `memsight run --out`'s profile all go through `write_output`:

- a regular file (or none yet) is replaced atomically: the bytes go to a temporary beside it,
  which then takes its place (os.replace), so a failure leaves the old file as it was and no
  temporary behind; a symlink to a regular file replaces the file it points to, never the link;
- a character or block device, or a FIFO, is written into, as a shell redirection would (open
  for writing and write): `--html /dev/null` discards the page and leaves /dev/null a device;
- `-` is standard output;
- a directory, a path whose folder does not exist, or anything else (a socket) is refused
  before anything is written, with one line (`OutputError`; exit status 1, as for an output
  that cannot be written).

Nothing here decides whether an existing file may be replaced (`--force`): the caller asks
`OutputTarget.exists`, which is true only for a regular file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

STDOUT = "-"


class OutputError(Exception):
    """An output path memsight will not write to. str() is one line."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


@dataclass(frozen=True)
class OutputTarget:
    """Where the bytes for a path the user named will go, decided before any is written."""

    path: str  # as the user named it
    real: str  # the file itself: a symlink's final target
    replace: bool  # True: a regular file, or none yet, replaced atomically; False: written into
    exists: bool  # a regular file is there now (what `--force` is about)

    @property
    def stdout(self) -> bool:
        return self.path == STDOUT


def unused_path(path: Path) -> Path:
    """`path`, or the first of PATH~1, PATH~2, ... (before the suffix) that does not exist:
    a default name never replaces an earlier profile."""
    n = 1
    while path.exists():
        path = path.with_name(f"{path.stem.rsplit('~', 1)[0]}~{n}{path.suffix}")
        n += 1
    return path


def output_target(path: str | os.PathLike[str]) -> OutputTarget:
    """What writing to `path` would do, or OutputError when it must not be written at all."""
    name = os.fspath(path)
    if name == STDOUT:
        return OutputTarget(name, name, replace=False, exists=False)
    if not name:
        raise OutputError("an empty path")
    real = os.path.realpath(name)
    try:
        try:
            info = os.stat(real)
        except FileNotFoundError:
            # /dev/stdout of a process writing into a pipe: /proc/self/fd/1 is a link to
            # "pipe:[…]", which realpath cannot follow but the kernel can.
            info = os.stat(name)
            real = name
    except FileNotFoundError:
        folder = os.path.dirname(real)
        if not os.path.isdir(folder):
            shown = os.path.dirname(name) or "."
            raise OutputError(f"no such directory: {shown}") from None
        return OutputTarget(name, real, replace=True, exists=False)
    except OSError as exc:  # a symlink loop, a name too long, a folder that denies access
        raise OutputError(f"{name}: {exc.strerror or exc}") from None
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        raise OutputError(f"{name} is a directory")
    if stat.S_ISREG(mode):
        return OutputTarget(name, real, replace=True, exists=True)
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
        return OutputTarget(name, real, replace=False, exists=False)
    raise OutputError(f"{name} is not a file, a device or a pipe")


def write_output(target: OutputTarget | str | os.PathLike[str], chunks: Iterable[bytes]) -> int:
    """Write `chunks` to the target by the rule above; the number of bytes written.

    Raises OutputError (nothing written) for a path that must not be written, and OSError when
    writing fails (a full disk, /dev/full, a closed pipe): a regular file then stays as it was.
    An exception from `chunks` itself propagates the same way.
    """
    if not isinstance(target, OutputTarget):
        target = output_target(target)
    if target.stdout:
        return _write_into_stdout(chunks)
    if not target.replace:
        # Opened as a shell's `>` opens it: a FIFO waits for its reader, a device is written.
        with open(target.real, "wb") as stream:
            return _copy(chunks, stream.write)
    return _replace(target, chunks)


def _write_into_stdout(chunks: Iterable[bytes]) -> int:
    stream = sys.stdout.buffer
    written = _copy(chunks, stream.write)
    stream.flush()
    return written


def _copy(chunks: Iterable[bytes], write: object) -> int:
    total = 0
    for chunk in chunks:
        write(chunk)  # type: ignore[operator]
        total += len(chunk)
    return total


def _replace(target: OutputTarget, chunks: Iterable[bytes]) -> int:
    folder, name = os.path.split(target.real)
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder)
    try:
        with os.fdopen(fd, "wb") as stream:
            written = _copy(chunks, stream.write)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, _mode_for(target))
        os.replace(temporary, target.real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return written


def _mode_for(target: OutputTarget) -> int:
    """The replaced file's own permissions; a new file gets what open() would give it."""
    if target.exists:
        with contextlib.suppress(OSError):
            return stat.S_IMODE(os.stat(target.real).st_mode)
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def failure_text(exc: OSError) -> str:
    """An OSError from writing as the end of one line: 'no space left on device'."""
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    reason = exc.strerror or str(exc) or type(exc).__name__
    return reason[:1].lower() + reason[1:]


# The exit status of a command whose output cannot be written, whether refused before a byte
# (a directory, a missing folder) or failed while writing (a full disk): 1, as every command
# has documented it since it first wrote a file (docs/architecture.md#exit-statuses).
CANNOT_WRITE = 1


def output_failure(exc: OutputError | OSError, path: str) -> tuple[int, str]:
    """The exit status and the problem, one line, for an output that could not be written."""
    if isinstance(exc, OutputError):
        return CANNOT_WRITE, exc.problem
    return CANNOT_WRITE, f"cannot write {path}: {failure_text(exc)}"
