"""Tracebacks as plain data for events: the innermost frames, each file, line, function, source."""

from __future__ import annotations

import traceback
from types import TracebackType
from typing import Any, List, Optional


def format_traceback(tb: Optional[TracebackType], limit: int = 64) -> List[List[Any]]:
    """[file, line, function, source line] for the innermost `limit` frames."""
    frames = traceback.extract_tb(tb)[-limit:]
    return [[f.filename, f.lineno or 0, f.name, (f.line or "")[:300]] for f in frames]
