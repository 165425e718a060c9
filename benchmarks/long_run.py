"""long_run: a real training run of hours under `memsight run`, at the default 10 ms interval.

Targets (issue 34, a day-long run): the recorder's memory stays flat, the profile stays under
250 MB for a day (checked here pro rata: the bytes per hour times 24), `memsight report`
answers in ≤ 5 s and the HTML report stays under 3 MB. The app's open and its pan and zoom
on the same profile: `python benchmarks/gui_load.py --profile P`.

The workload is workloads/long_train.py: an MLP trained on DataLoader batches from worker
processes, a step every 50 ms and asleep between them, so the machine stays mostly free while
it runs (censuses and the anatomy at their defaults). Every `--every` seconds the memsight
process' RSS (the recording runs in it) and the profile's size are read; the recorder's
memory is flat when its last hour is within a few MiB of its first.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import WORKLOADS, memsight_cmd, print_table, verdict, write_result

PROFILE_DAY_BYTES = 250 * 1000 * 1000
REPORT_S = 5.0
HTML_BYTES = 3 * 1000 * 1000
FLAT_BYTES = 16 * 2**20  # the recorder's RSS may move this much over the run, no more


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * 4096
    except (OSError, ValueError, IndexError):
        return None


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=7200, help="the run's length (7200)")
    p.add_argument("--every", type=float, default=60, help="read the recorder this often (60)")
    p.add_argument("--out", type=Path, default=Path("long_run.memsight"), help="the profile")
    args = p.parse_args()
    cmd = memsight_cmd(
        WORKLOADS / "long_train.py", args.out, ["--seconds", str(args.seconds)], options=["-q"]
    )
    started = time.monotonic()
    run = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    readings: list[tuple[float, int, int]] = []  # (seconds, recorder RSS, profile bytes)
    while run.poll() is None:
        time.sleep(min(args.every, 5.0) if not readings else args.every)
        rss = rss_bytes(run.pid)
        size = args.out.stat().st_size if args.out.exists() else 0
        if rss:  # 0 once it has exited and not yet been reaped
            readings.append((time.monotonic() - started, rss, size))
            print(f"{readings[-1][0]:8.0f} s  recorder {rss / 2**20:7.1f} MiB  "
                  f"profile {size / 1e6:7.1f} MB", flush=True)  # fmt: skip
    if run.returncode != 0:
        print(f"memsight run ended with status {run.returncode}", file=sys.stderr)
        return 1
    hours = (time.monotonic() - started) / 3600
    size = args.out.stat().st_size
    report_s = statistics.median(
        timed([sys.executable, "-m", "memsight.profiler.cli", "report", str(args.out)])
        for _ in range(3)
    )
    html = args.out.with_suffix(".html")
    html_s = timed(
        [
            sys.executable,
            "-m",
            "memsight.profiler.cli",
            "report",
            str(args.out),
            "--html",
            str(html),
        ]
    )
    # The recorder's memory after its first tenth (start-up and the first censuses) against
    # its highest later on.
    settled = [r for r in readings if r[0] >= readings[-1][0] / 10] or readings
    growth = max(r[1] for r in settled) - settled[0][1]
    per_day = size / hours * 24
    checks = {
        "recorder memory flat": growth <= FLAT_BYTES,
        "profile per day": per_day <= PROFILE_DAY_BYTES,
        "report": report_s <= REPORT_S,
        "html size": html.stat().st_size <= HTML_BYTES,
    }
    print_table(
        ["measure", "value", "target"],
        [
            ["run", f"{hours:.2f} h", ""],
            ["recorder RSS, settled / highest", f"{settled[0][1] / 2**20:.1f} / "
             f"{max(r[1] for r in settled) / 2**20:.1f} MiB", f"+{FLAT_BYTES / 2**20:.0f} MiB"],
            ["profile", f"{size / 1e6:.1f} MB ({per_day / 1e6:.0f} MB per day)",
             f"{PROFILE_DAY_BYTES / 1e6:.0f} MB per day"],
            ["memsight report", f"{report_s:.2f} s", f"≤ {REPORT_S:.0f} s"],
            ["report --html", f"{html_s:.2f} s, {html.stat().st_size / 1e6:.2f} MB",
             f"≤ {HTML_BYTES / 1e6:.0f} MB"],
        ],
        title=f"long_run: {hours:.2f} h of training under memsight run",
    )  # fmt: skip
    passed = all(checks.values())
    line = verdict(
        "long_run", passed, ", ".join(f"{k} {'ok' if v else 'FAIL'}" for k, v in checks.items())
    )
    write_result(
        "long_run",
        {"verdict": line, "hours": hours, "profile_bytes": size, "report_s": report_s,
         "html_s": html_s, "html_bytes": html.stat().st_size, "readings": readings},
    )  # fmt: skip
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
