"""What the script's threads hand to the agent: events, table rows, names, agent errors.

Appending only, under one lock, never blocking on I/O: the agent's thread (client.Agent)
takes the queue and sends it. Kept apart from the socket so that the same queueing can be
measured on its own (benchmarks/hook_cost.py) and used without a recorder.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from ..protocol import AGENT_TABLES, TableSchema

# This process's id, kept current by a fork handler: a row is queued several times per
# training step, and os.getpid() there was a system call each time. (A fork made in C with no
# Python handlers that goes on running Python is not seen: its rows stay in a buffer nobody
# sends, as before the check existed.)
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class Outbox:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._events: List[Dict[str, Any]] = []
        self._rows: Dict[int, bytearray] = {schema.id: bytearray() for schema in AGENT_TABLES}
        self._names: Dict[str, int] = {}
        self._closed = False
        self._errors: Set[str] = set()

    def event(self, type_: str, t: Optional[int] = None, **data: Any) -> None:
        if self._closed or _pid != self.pid:
            return
        data["t"] = time.monotonic_ns() if t is None else t
        data["type"] = type_
        with self._lock:
            self._events.append(data)

    def row(self, schema: TableSchema, values: Tuple[int, ...]) -> None:
        """Queue one row of an agent table (cheaper than an event at high rates)."""
        if self._closed or _pid != self.pid:
            return
        packed = schema.row.pack(*values)
        with self._lock:
            self._rows[schema.id] += packed

    def name_id(self, name: str) -> int:
        """A small number standing for `name` in table rows; announced once by a "name" event."""
        known = self._names.get(name)
        if known is not None:
            return known
        with self._lock:
            known = self._names.get(name)
            fresh = known is None
            if known is None:
                known = self._names[name] = len(self._names) + 1
        if fresh:
            self.event("name", id=known, name=name)
        return known

    def error(self, where: str, exc: BaseException) -> None:
        """Report an agent failure once per place; the script is never disturbed."""
        if where in self._errors:
            return
        self._errors.add(where)
        self.event("agent_error", where=where, error="%s: %s" % (type(exc).__name__, exc))
