"""gui_load: open a 1,000,000-sample profile in the window, then pan and zoom it.

Targets (docs/architecture.md, issue 4): the profile is on screen within 1.5 s of asking to open it, and
panning / zooming redraws at 30 frames per second or more (every frame within 33 ms). A profile
with a stored overview (a day-long run's; profiler/profile/overview.py) is on screen when its
overview is; the time until the whole run has replaced it is printed too.

The profile is the one load.py measures, from benchmarks/synthetic_recording.py (written
through the recorder's own write path and compaction, verified, cached in the temporary
folder under its cache key). "On screen" means load_profile, the model handed to every view,
and one complete render of the window (QWidget.grab forces the paint).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import large_profile, percentile, print_table, verdict, write_result

OPEN_TARGET_S = 1.5
FRAME_TARGET_MS = 1000 / 30


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, help="an existing profile to open (default: make one)")
    p.add_argument(
        "--samples", type=int, default=1_000_000, help="samples in the generated profile"
    )
    p.add_argument(
        "--frames", type=int, default=120, help="pan/zoom frames to render (default 120)"
    )
    p.add_argument("--size", default="1600x1000", help="window size (default 1600x1000)")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    path = args.profile or large_profile(args.samples)
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from memsight.app.main import use_small_pages
    from memsight.app.mainwindow import MainWindow

    use_small_pages()  # as the app's start does (run_gui)
    app = QApplication.instance() or QApplication([])
    width, height = (int(v) for v in args.size.split("x"))
    store = QSettings(str(Path(tempfile.mkdtemp()) / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(store)
    window.resize(width, height)
    window.show()
    app.processEvents()
    window.grab()  # the empty window, painted once, as a user would see it before opening

    started = time.perf_counter()
    assert window.open_profile(str(path)), "the profile did not open"
    app.processEvents()
    window.grab()
    open_s = time.perf_counter() - started
    # A profile with a stored overview is on screen from it; the whole run is read behind it.
    overview_first = window.reader.reading is not None
    window.reader.join()
    # The whole run takes the overview's place in the GUI thread: the window is still then.
    swap_started = time.perf_counter()
    window.reader.wait()
    app.processEvents()
    window.grab()
    whole_s = time.perf_counter() - started
    swap_s = time.perf_counter() - swap_started
    samples = window.profile.sample_count if window.profile else 0

    # Pan and zoom across the whole run: wide views (all million samples decimated), close
    # views (raw samples and phase bars) and everything between.
    duration = window.profile.duration if window.profile else 1.0
    frames_ms = []
    for i in range(args.frames):
        fraction = 0.5 * (1 + __import__("math").sin(i / 7))
        width_s = duration * (10 ** (-3 * fraction))  # from the whole run down to 1/1000 of it
        centre = duration * (i / args.frames)
        low = max(0.0, centre - width_s / 2)
        t0 = time.perf_counter()
        window.timeline.lane.setXRange(low, low + width_s, padding=0)
        window.timeline.graphics.grab()  # one full render, as one screen refresh would do
        frames_ms.append((time.perf_counter() - t0) * 1000)

    worst = max(frames_ms)
    p95 = percentile(frames_ms, 95)
    fps = 1000 / statistics.median(frames_ms)
    print_table(
        ["measure", "value", "target"],
        [
            ["samples in the profile", f"{samples:,}", "1,000,000"],
            ["file size", f"{path.stat().st_size / 1e6:.1f} MB", ""],
            [
                "open → on screen" + (" (its overview)" if overview_first else ""),
                f"{open_s:.2f} s",
                f"≤ {OPEN_TARGET_S} s",
            ],
            ["open → the whole run on screen", f"{whole_s:.2f} s", ""],
            *(
                [["the window held still as the whole run replaces it", f"{swap_s:.2f} s", ""]]
                if overview_first
                else []
            ),
            [
                "pan/zoom frame, median",
                f"{statistics.median(frames_ms):.1f} ms ({fps:.0f} fps)",
                "",
            ],
            ["pan/zoom frame, p95", f"{p95:.1f} ms", f"≤ {FRAME_TARGET_MS:.1f} ms"],
            ["pan/zoom frame, worst", f"{worst:.1f} ms", ""],
        ],
        title="gui_load",
    )
    passed = open_s <= OPEN_TARGET_S and p95 <= FRAME_TARGET_MS
    line = verdict(
        "gui_load",
        passed,
        f"open {open_s:.2f} s (≤ {OPEN_TARGET_S}), pan/zoom p95 {p95:.1f} ms ≈ {1000 / p95:.0f} fps (≥ 30)",
    )
    write_result(
        "gui_load",
        {
            "target": {"open_s_max": OPEN_TARGET_S, "frame_ms_p95_max": FRAME_TARGET_MS},
            "passed": passed,
            "verdict": line,
            "samples": samples,
            "file_bytes": path.stat().st_size,
            "open_s": open_s,
            "overview_first": overview_first,
            "whole_s": whole_s,
            "swap_s": swap_s if overview_first else None,
            "frame_ms": frames_ms,
            "frame_ms_median": statistics.median(frames_ms),
            "frame_ms_p95": p95,
            "frame_ms_max": worst,
            "window": args.size,
        },
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
