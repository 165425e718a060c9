"""Size and load time of a profile with 1,000,000 samples.

Target (docs/architecture.md): the file is at most 40 MB and `load_profile` reads it in at most 1 s.

The profile is benchmarks/synthetic_recording.py's: what a 10 ms recording of a 2.8-hour GPU
training run holds (ram, gpu, children, steps, spans, JSON events; described below), written
through the recorder's own writing path, not a shortcut: Recording's frame sink, its
profiler.recorder.blocks.TableBuffer per table drained every FLUSH_S (200 ms) of simulated
time into profiler.profile.writer.ProfileWriter. Then profiler.profile.storage.compact_profile
rewrites it, as Recording.finish does after a clean end. Both files are measured: the verdict
is on the finished (compacted) one, which is what users normally load; the file as recorded
is what a killed recording leaves behind (and what the live view decodes).

The write and the compaction are timed (information), then `load_profile` runs --repeat
times on each file (the file is in the page cache); the verdict uses the median. Each file is
then loaded once more and checked against the generated data (row counts, every value of
every column of the five tables, event counts per type, name ids, the run's metadata, and
several steps and spans rows read back the way a viewer reads them), so a fast load of wrong
data cannot pass.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import synthetic_recording as synthetic
from _common import print_table, verdict, write_result

from memsight.profiler.profile.storage import compact_profile, load_profile

NAME = "load"
TARGET_MB = 40.0
TARGET_LOAD_S = 1.0
MB = 1_000_000  # the target's "MB": decimal megabytes, as a file manager shows them
T = TypeVar("T")


def parse_args() -> argparse.Namespace:
    # The help ends with the generator's description of what the profile holds.
    _, marker, contents = (synthetic.__doc__ or "").partition("What a 10 ms recording")
    p = argparse.ArgumentParser(
        description=__doc__,
        epilog=marker + contents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    synthetic.add_arguments(p)
    p.add_argument("--repeat", type=int, default=3, help="timed loads (default 3)")
    p.add_argument("--keep", metavar="PATH", help="write the profile here and keep it")
    return p.parse_args()


def timed(label: str, fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = fn()
    elapsed = time.perf_counter() - start
    print(f"  {label}: {elapsed:.2f} s", flush=True)
    return value, elapsed


@dataclass
class Measured:
    """One file's size, what it holds, load times and round-trip problems."""

    size: int
    parts: dict[str, int]  # bytes per table / events / other (synthetic.file_breakdown)
    loads: list[float]
    problems: list[str]

    @property
    def best(self) -> float:
        return min(self.loads)

    @property
    def median(self) -> float:
        return statistics.median(self.loads)

    @property
    def passed(self) -> bool:
        return self.size / MB <= TARGET_MB and self.median <= TARGET_LOAD_S and not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "file_bytes": self.size,
            "file_mb": self.size / MB,
            "bytes_per_part": self.parts,
            "load_s": self.loads,
            "load_best_s": self.best,
            "load_median_s": self.median,
            "problems": self.problems,
            "passed": self.passed,
        }


def measure(path: Path, data: synthetic.Timeline, repeat: int) -> Measured:
    loads = []
    for _ in range(repeat):
        start = time.perf_counter()
        load_profile(path)
        loads.append(time.perf_counter() - start)
    problems = synthetic.verify(load_profile(path), data)
    return Measured(path.stat().st_size, synthetic.file_breakdown(path), loads, problems)


def row_counts(data: synthetic.Timeline) -> dict[str, int]:
    counts = {name: len(rows) for name, rows in data.rows().items()}
    counts["events"] = sum((data.event_counts | data.recorder_event_counts()).values())
    return counts


def print_contents(data: synthetic.Timeline, raw: Measured, done: Measured) -> None:
    counts = row_counts(data)
    print_table(
        ["part", "rows", "as recorded", "bytes/row", "finished", "bytes/row"],
        [
            [
                name,
                counts.get(name, "-"),
                raw.parts[name],
                raw.parts[name] / counts[name] if counts.get(name) else "-",
                done.parts[name],
                done.parts[name] / counts[name] if counts.get(name) else "-",
            ]
            for name in raw.parts
        ],
        title="bytes each part takes in the file (frame headers included; events: the "
        f"agent's {sum(data.event_counts.values())} and the recorder's "
        f"{sum(data.recorder_event_counts().values())}; other: header, RUN, schemas)",
    )


def print_summary(
    samples: int, raw: Measured, done: Measured, write_s: float, compact_s: float
) -> None:
    def loads(m: Measured) -> str:
        return ", ".join(f"{x:.3f}" for x in m.loads)

    def check(m: Measured) -> str:
        return "ok" if not m.problems else f"{len(m.problems)} problems"

    print_table(
        ["measure", "as recorded", "finished (compacted)", "target"],
        [
            ["file size MB", raw.size / MB, done.size / MB, f"<= {TARGET_MB:g}"],
            ["load median s", raw.median, done.median, f"<= {TARGET_LOAD_S:g}"],
            ["load best s", raw.best, done.best, ""],
            ["loads s", loads(raw), loads(done), ""],
            ["bytes per sample", raw.size / samples, done.size / samples, "(all tables)"],
            ["round-trip check", check(raw), check(done), "ok"],
            ["write s (info)", write_s, "-", ""],
            ["compact s (info)", "-", compact_s, ""],
        ],
        title=f"profile of {samples:,} samples",
    )
    for label, m in (("as recorded", raw), ("finished", done)):
        for problem in m.problems:
            print(f"  problem ({label}): {problem}")


def main() -> int:
    opts = parse_args()
    params = synthetic.Params.from_args(opts)
    print(
        f"generating {params.samples:,} samples at {params.interval_ms:g} ms "
        f"({params.samples * params.interval_ms / 1000 / 3600:.2f} h of simulated run)"
    )
    data, gen_s = timed("generate data (numpy)", lambda: synthetic.generate(params))
    with tempfile.TemporaryDirectory(prefix="memsight-load-") as tmp:
        path = Path(opts.keep) if opts.keep else Path(tmp) / "million.memsight"
        written = synthetic.write_recording(path, data)
        print(f"  write through Recording's TableBuffers + ProfileWriter: {written.write_s:.2f} s")
        # As recorded: what a killed recording leaves, and what a live view decodes.
        raw = measure(path, data, opts.repeat)
        # What Recording.finish leaves after a clean end: the file users normally load.
        _, compact_s = timed(
            "compact_profile (as Recording.finish does)", lambda: compact_profile(path)
        )
        done = measure(path, data, opts.repeat)

    print_contents(data, raw, done)
    print_summary(params.samples, raw, done, written.write_s, compact_s)
    line = verdict(
        NAME,
        done.passed,
        f"finished profile: {done.size / MB:.1f} MB (<= {TARGET_MB:g}), load median "
        f"{done.median:.3f} s / best {done.best:.3f} s (<= {TARGET_LOAD_S:g}), round trip "
        f"{'ok' if not done.problems else 'FAILED'}",
    )
    if not raw.passed:
        print(
            f"      (as recorded, before compaction, e.g. after a crash: {raw.size / MB:.1f} MB, "
            f"load median {raw.median:.3f} s)"
        )
    write_result(
        NAME,
        {
            "target": {
                "file_mb_max": TARGET_MB,
                "load_s_max": TARGET_LOAD_S,
                "judged": "finished (compacted) profile",
            },
            "passed": done.passed,
            "verdict": line,
            "settings": vars(opts),
            "generator": {
                "version": synthetic.GENERATOR_VERSION,
                "cache_key": synthetic.cache_key(params),
            },
            "rows": row_counts(data),
            "events": data.event_counts | data.recorder_event_counts(),
            "event_frames_from_agent": len(data.payloads),
            "generate_s": gen_s,
            "write_s": written.write_s,
            "compact_s": compact_s,
            "as_recorded": raw.to_json(),
            "finished": done.to_json(),
        },
    )
    return 0 if done.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
