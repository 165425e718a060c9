"""output_relay: a script that writes a lot to stdout, under python and under memsight.

Target (docs/architecture.md): a script's output costs it no more than 1.5x its time under
plain python, whatever its stdout is. A file or a pipe is the script's own under memsight
(inherited, never relayed), so there memsight adds only its start and end; a terminal is
relayed, through the pseudo-terminal memsight gives the target, to memsight's own terminal.

The script writes `--mib` MiB of 100-character lines with `sys.stdout.write` in 64 KiB
chunks and exits; the clock covers the whole process, start to exit, as a user's shell
sees it. Each run is paired with one of the same script writing nothing, so memsight's
fixed cost (starting its recorder, writing the profile: a few tenths of a second, measured
by first_sample.py and overhead.py) is told apart from what the output costs: the verdict
is on the output's own time, (time writing N MiB) - (time writing nothing), under memsight
over under python; the whole-process ratio is printed beside it. The terminal here is a real pseudo-terminal whose far side this benchmark drains
as fast as it can (as a terminal emulator does); the pipe is drained the same way; the file
is a temporary file. Runs of python and memsight alternate, `--repeat` pairs each; the
verdict uses the median ratio for each kind of stdout.
"""

from __future__ import annotations

import argparse
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import memsight_cmd, print_table, python_cmd, verdict, write_result
from tests.load import CpuHogs

RATIO_TARGET = 1.5
WRITER = """
import sys
line = "x" * 99 + "\\n"
chunk = line * 655  # 64 KiB
total = int(sys.argv[1]) * 2**20
written = 0
while written < total:
    sys.stdout.write(chunk)
    written += len(chunk)
sys.stdout.flush()
"""


def _drain(fd: int, counted: list[int]) -> None:
    """Read `fd` until its writers are gone, as a terminal emulator or a pipe reader does."""
    total = 0
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except OSError:  # EIO: the pseudo-terminal's last writer closed it
            break
        if not data:
            break
        total += len(data)
    counted.append(total)


def timed_run(cmd: list[str], stdout_kind: str, folder: Path) -> tuple[float, int]:
    """(seconds from start to exit, bytes that reached the far side of stdout)."""
    counted: list[int] = []
    reader: threading.Thread | None = None
    if stdout_kind == "terminal":
        far, near = pty.openpty()
        stdin, stdout, stderr = near, near, near
    elif stdout_kind == "pipe":
        far, near = os.pipe()
        stdin, stdout, stderr = subprocess.DEVNULL, near, subprocess.DEVNULL
    else:
        target = folder / "out.txt"
        near = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        far = -1
        stdin, stdout, stderr = subprocess.DEVNULL, near, subprocess.DEVNULL
    if far >= 0:
        reader = threading.Thread(target=_drain, args=(far, counted), daemon=True)
        reader.start()
    started = time.perf_counter()
    process = subprocess.Popen(
        cmd, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True
    )
    os.close(near)
    process.wait()
    elapsed = time.perf_counter() - started
    if reader is not None:
        reader.join(timeout=30)
        os.close(far)
        received = counted[0] if counted else 0
    else:
        received = (folder / "out.txt").stat().st_size
    if process.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} ... exited with {process.returncode}")
    return elapsed, received


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=200, help="MiB the script writes (default 200)")
    p.add_argument("--repeat", type=int, default=5, help="pairs of runs per stdout (default 5)")
    p.add_argument(
        "--kinds",
        default="terminal,pipe,file",
        help="kinds of stdout, comma-separated (default terminal,pipe,file)",
    )
    p.add_argument(
        "--hogs",
        type=int,
        default=0,
        help="busy loops running beside every run, as a test suite keeps the cores busy "
        "(default 0; 2 per core is the suite's --cpu-hogs=auto)",
    )
    args = p.parse_args()
    hogs = CpuHogs(args.hogs)
    hogs.start()
    try:
        return measure(args)
    finally:
        hogs.stop()


def measure(args: argparse.Namespace) -> int:

    folder = Path(tempfile.mkdtemp(prefix="memsight-output-relay-"))
    script = folder / "writer.py"
    script.write_text(WRITER)
    expected = ((args.mib * 2**20 + 65499) // 65500) * 65500
    rows = []
    results: dict[str, dict[str, object]] = {}
    passed = True
    for kind in args.kinds.split(","):
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.repeat):
            for mib in (args.mib, 0):
                for who in ("python", "memsight"):
                    cmd = (
                        python_cmd(script, [str(mib)])
                        if who == "python"
                        else memsight_cmd(
                            script, folder / "run.memsight", [str(mib)], options=["-q"]
                        )
                    )
                    elapsed, received = timed_run(cmd, kind, folder)
                    # A terminal turns each \n into \r\n on its way out: count what was written.
                    wanted = (expected if mib else 0) * (101 / 100 if kind == "terminal" else 1)
                    if received < wanted * 0.999:
                        raise RuntimeError(f"{who} on a {kind}: {received:,} of {wanted:,.0f} B")
                    times.setdefault((who, mib), []).append(elapsed)
        plain, plain_0 = times["python", args.mib], times["python", 0]
        ours, ours_0 = times["memsight", args.mib], times["memsight", 0]
        output_plain = statistics.median(plain) - statistics.median(plain_0)
        output_ours = statistics.median(ours) - statistics.median(ours_0)
        ratio = output_ours / max(output_plain, 1e-9)
        whole = statistics.median(ours) / statistics.median(plain)
        passed = passed and ratio <= RATIO_TARGET
        rows.append(
            [
                kind,
                f"{statistics.median(plain):.2f} s",
                f"{statistics.median(ours):.2f} s",
                f"{output_plain:.2f} s / {output_ours:.2f} s",
                f"{ratio:.2f}x",
                f"{whole:.2f}x",
                f"≤ {RATIO_TARGET}x",
            ]
        )
        results[kind] = {
            "times_s": {f"{who}_{mib}mib": v for (who, mib), v in times.items()},
            "output_ratio": ratio,
            "whole_ratio": whole,
        }
    print_table(
        [
            "stdout",
            "python",
            "memsight",
            "output's own time (python / memsight)",
            "output ratio",
            "whole ratio",
            "target",
        ],
        rows,
        title=f"output_relay: {args.mib} MiB to stdout, {args.repeat} pairs each"
        + (f", beside {args.hogs} busy loops" if args.hogs else ""),
    )
    line = verdict(
        "output_relay",
        passed,
        ", ".join(f"{k} {v['output_ratio']:.2f}x" for k, v in results.items())
        + f" for the output's own time (≤ {RATIO_TARGET}x)",
    )
    write_result(
        "output_relay",
        {
            "target": {"ratio_max": RATIO_TARGET},
            "passed": passed,
            "verdict": line,
            "mib": args.mib,
            "repeat": args.repeat,
            "hogs": args.hogs,
            "kinds": results,
        },
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
