"""`memsight [FILE]`: the desktop app, with a script or a saved profile opened."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def cmd_gui(argv: Sequence[str]) -> int:
    try:
        # The one place the core reaches the app: `memsight` with no command starts it, when
        # this installation has it (a core-only install prints how to work without it).
        from memsight.app.main import run_gui  # type: ignore[import-not-found,unused-ignore]  # noqa: TID251
    except ImportError:
        sys.stderr.write(
            "memsight: the desktop app is not part of this installation; "
            "use `memsight run` and `memsight report` (see `memsight --help`)\n"
        )
        return 2
    return int(run_gui(list(argv)))
