"""report_html: the HTML report of a 1,000,000-sample profile.

Target (docs/architecture.md): written in ≤ 2 s, ≤ 3 MB, and it opens offline. Timed: loading is not
part of it (load.py measures that); the clock covers the diagnosis, decimating the charts,
rendering the template and writing the file, as `memsight report P --html OUT` does after
loading. Also checked: the charts keep the run's highest sample (decimation keeps peaks).
The profile is load.py's, from benchmarks/synthetic_recording.py (made once, cached).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import large_profile, print_table, verdict, write_result

TARGET_S = 2.0
TARGET_BYTES = 3 * 1000 * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, help="an existing profile (default: make one)")
    p.add_argument("--samples", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3, help="timed writes (default 3)")
    args = p.parse_args()

    from memsight.profiler.profile.storage import load_profile
    from memsight.profiler.report import write_html

    profile = load_profile(args.profile or large_profile(args.samples))
    out = Path(tempfile.mkdtemp(prefix="memsight-report-")) / "report.html"
    times, size = [], 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        size = write_html(profile, out)
        times.append(time.perf_counter() - t0)
    text = out.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="chart-data">(.*?)</script>', text, re.S).group(1))  # type: ignore[union-attr]
    ram_chart = next(c for c in data["charts"] if c["id"] == "ram")
    main_series = next(s for s in ram_chart["series"] if s["name"].startswith("Main process"))
    assert profile.ram is not None
    true_peak = int(profile.ram["rss_peak"].max())
    kept = max(main_series["y"]) == true_peak

    worst = max(times)
    print_table(
        ["measure", "value", "target"],
        [
            ["samples", f"{profile.sample_count:,}", ""],
            ["write, median", f"{statistics.median(times):.2f} s", ""],
            ["write, worst", f"{worst:.2f} s", f"≤ {TARGET_S:g} s"],
            ["file size", f"{size / 1e6:.2f} MB", f"≤ {TARGET_BYTES / 1e6:g} MB"],
            ["chart keeps the highest sample", "yes" if kept else "NO", "yes"],
        ],
        title="report_html",
    )
    passed = worst <= TARGET_S and size <= TARGET_BYTES and kept
    line = verdict(
        "report_html",
        passed,
        f"{profile.sample_count:,} samples: worst {worst:.2f} s (≤ {TARGET_S:g}), "
        f"{size / 1e6:.2f} MB (≤ 3), peak kept: {'yes' if kept else 'no'}",
    )
    write_result(
        "report_html",
        {
            "target": {"seconds": TARGET_S, "bytes": TARGET_BYTES},
            "passed": passed,
            "verdict": line,
            "samples": profile.sample_count,
            "write_s": times,
            "bytes": size,
            "peak_kept": kept,
        },
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
