"""What `memsight run` adds to a short script: the fixed cost users pay on every run.

Target: `memsight run -q` of a script that prints one line takes at most 0.3 s more than
`python` running it (median of `--pairs` interleaved pairs; 15 by default). The script is
`print("hi")`; both run with the interpreter this benchmark runs under, bytecode written and
read as an installed memsight's is (PYTHONDONTWRITEBYTECODE is removed from the environment,
and one run of each warms the caches first). Everything memsight does is in the figure: its
own start and imports, the recorder's start, the target's start under the agent, the end of
the recording and the profile's compaction.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import print_table, run_process, verdict, write_result

TARGET_S = 0.3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=15, help="interleaved pairs (15)")
    options = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="memsight-startup-") as folder:
        script = Path(folder) / "hello.py"
        script.write_text('print("hi")\n')
        out = Path(folder) / "hello.memsight"
        plain = [sys.executable, str(script)]
        traced = [sys.executable, "-m", "memsight.profiler.cli", "run", "-q", "--out", str(out),
                  str(script)]  # fmt: skip
        run_process(plain, env=env)  # caches warm: bytecode, the page cache
        run_process(traced, env=env)
        pairs = []
        for pair in range(options.pairs):
            order = [plain, traced] if pair % 2 == 0 else [traced, plain]
            walls = {}
            for argv in order:
                out.unlink(missing_ok=True)
                walls[argv is traced] = run_process(argv, env=env).wall_s
            pairs.append((walls[False], walls[True]))
    added = [t - p for p, t in pairs]
    median_added = statistics.median(added)
    print_table(
        ["", "python", "memsight run -q", "added"],
        [
            [
                "median",
                f"{statistics.median(p for p, _ in pairs):.3f} s",
                f"{statistics.median(t for _, t in pairs):.3f} s",
                f"{median_added:.3f} s",
            ],
            [
                "fastest",
                f"{min(p for p, _ in pairs):.3f} s",
                f"{min(t for _, t in pairs):.3f} s",
                f"{min(t for _, t in pairs) - min(p for p, _ in pairs):.3f} s",
            ],
        ],
        title=f"A one-line script, {options.pairs} interleaved pairs",
    )
    line = verdict(
        "run start and end",
        median_added <= TARGET_S,
        f"median {median_added:.3f} s added (target {TARGET_S} s)",
    )
    write_result("run_startup", {"verdict": line, "pairs": pairs})
    return 0 if median_added <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
