"""Entry point of the standalone build (packaging/memsight.spec).

The same executable is the app, the command line, and, started again with
profiler.launch.runtime.RECORDER_HOST_FLAG, the recording process the app runs each recording in.
"""

from __future__ import annotations

import sys

from memsight.profiler.launch.runtime import RECORDER_HOST_FLAG


def main() -> int:
    if sys.argv[1:2] == [RECORDER_HOST_FLAG]:
        from memsight.profiler.recorder.host import main as recorder_host

        return recorder_host()
    from memsight.profiler.cli import main as cli

    return cli()


if __name__ == "__main__":
    sys.exit(main())
