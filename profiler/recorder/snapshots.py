"""CUDA memory snapshots: from the agent's private folder into the profile, as bytes.

Under `memsight run --cuda-history` the agent pickles `torch.cuda.memory._snapshot()` (at an
out-of-memory error and at exit) into a folder the recorder created for this run alone, then
sends a small `cuda_snapshot` event naming the file. A snapshot can be far larger than a frame
may be on the socket (4 MiB), so it never crosses the socket: the recorder's own thread here
copies the file into the profile as ATTACHMENT frames of 4 MiB each, writes an `attachment`
event describing it, and deletes the file.

The target is not trusted: its event is only a name, which must be one the agent would write
(`snapshot-N.pickle`) and is looked up in the recorder's folder alone; the file is opened
without following links, must be a regular file, is read up to its size at the open and up to
MAX_SNAPSHOT_BYTES. Its bytes are stored as they are: nothing here (or anywhere in memsight)
unpickles them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from memsight.profiler import protocol

SNAPSHOT_NAME = re.compile(r"snapshot-(\d{1,6})\.pickle")
REASONS = frozenset({"oom", "exception", "exit"})
MAX_SNAPSHOT_BYTES = 1 << 30  # pytorch.org/memory_viz does not open larger ones anyway
MAX_TOTAL_BYTES = 2 << 30  # all snapshots of one run together
MAX_SNAPSHOTS = 16


class SnapshotStore:
    """Takes the agent's snapshot files into the profile on a thread of its own.

    `write` appends one frame to the profile file (not to a live view: the app has no use for
    the bytes), `event` writes a recorder event, `mark` tells the file it now holds
    attachments (format version 2).
    """

    def __init__(
        self,
        write: Callable[[bytes], None],
        event: Callable[..., None],
        mark: Callable[[], None],
    ) -> None:
        self.folder = tempfile.mkdtemp(prefix="memsight-snapshots-")  # mode 0700
        self._write = write
        self._event = event
        self._mark = mark
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._seen: set[str] = set()
        self._next_id = 1
        self._total = 0
        self._thread = threading.Thread(target=self._run, name="memsight-snapshots", daemon=True)
        self._thread.start()

    def request(self, event: dict[str, Any]) -> None:
        """A `cuda_snapshot` event from the agent: store the file it names (once)."""
        name = event.get("file")
        if not isinstance(name, str) or SNAPSHOT_NAME.fullmatch(name) is None:
            return
        if name in self._seen:
            return
        self._seen.add(name)
        self._queue.put(event)

    def finish(self) -> None:
        """Store what is queued and any finished file whose event never came, then remove
        the folder. Called once the agent can send nothing more."""
        self._queue.put(None)
        self._thread.join()
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(self.folder)):
                if SNAPSHOT_NAME.fullmatch(name) and name not in self._seen:
                    self._seen.add(name)
                    self._store({"file": name})
        shutil.rmtree(self.folder, ignore_errors=True)

    def _run(self) -> None:
        while True:
            request = self._queue.get()
            if request is None:
                return
            self._store(request)

    def _store(self, request: dict[str, Any]) -> None:
        name = str(request["file"])
        match = SNAPSHOT_NAME.fullmatch(name)
        assert match is not None
        number = int(match[1])
        reason = request.get("reason")
        details: dict[str, Any] = {
            "snapshot": number,
            "reason": reason if reason in REASONS else None,
        }
        device = request.get("device")
        if isinstance(device, int) and not isinstance(device, bool):
            details["device"] = device
        t = request.get("t")
        path = os.path.join(self.folder, name)
        try:
            self._copy(path, details, t if isinstance(t, int) else None)
        except (OSError, ValueError) as exc:
            self._event(
                "warning",
                message=f"CUDA memory snapshot {number} could not be stored: "
                f"{getattr(exc, 'strerror', None) or exc}",
            )
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _copy(self, path: str, details: dict[str, Any], t: int | None) -> None:
        if self._next_id > MAX_SNAPSHOTS:
            raise ValueError(f"the run already stored {MAX_SNAPSHOTS} snapshots")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ValueError("not a regular file")
            size = info.st_size
            if size > MAX_SNAPSHOT_BYTES:
                raise ValueError(f"{size} bytes, over the limit of {MAX_SNAPSHOT_BYTES}")
            if self._total + size > MAX_TOTAL_BYTES:
                raise ValueError(f"the run's snapshots would exceed {MAX_TOTAL_BYTES} bytes")
            attachment_id = self._next_id
            self._next_id += 1
            self._mark()
            digest = hashlib.sha256()
            done = 0
            while done < size:
                chunk = os.read(fd, min(protocol.ATTACHMENT_CHUNK, size - done))
                if not chunk:
                    break  # shorter than it was at the open: store what there is
                digest.update(chunk)
                self._write(protocol.attachment_frame(attachment_id, done, chunk))
                done += len(chunk)
        finally:
            os.close(fd)
        self._total += done
        extra = {"t": t} if t is not None else {}
        self._event(
            "attachment",
            id=attachment_id,
            kind="cuda_snapshot",
            name=os.path.basename(path),
            bytes=done,
            sha256=digest.hexdigest(),
            **details,
            **extra,
        )
