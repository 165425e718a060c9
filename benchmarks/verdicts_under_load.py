"""verdicts_under_load: the same findings on a quiet machine and on a busy one.

Target: every CPU example (examples/, as tests/test_examples.py runs them) and every program
of the clients tier (tests/clients/test_frameworks.py's cases) gives the same verdict in each
of --runs runs on a quiet machine and --runs runs beside 2 busy loops per core (tests/load.py's
CPU hogs, as `python -m pytest --cpu-hogs=auto` runs the suite).

Each run is `memsight run` of the program in a fresh folder, exactly as its test runs it, and
the rules of `profiler.diagnosis.diagnose` on the profile it leaves. The quiet and the loaded
runs of a program alternate, so a change in the machine's own load falls on both. A run's
verdict is the set of its findings as (rule id, severity), less what the program's test
allows to vary from run to run even on a quiet machine: an example's optional rules (its
`memsight-expect:` ids written with a trailing "?") and a client program's findings of
severity info (its test compares those of severity warning and worse). `--strict` compares
every finding. A run that fails, times out or leaves no loadable profile is a verdict of its
own ("error: ...") and differs from any other.

`--condition quiet` or `--condition loaded` records one half only, and `--merge A.json B.json`
compares saved halves as if recorded together: so the loaded half can run beside other work
that keeps the machine busy (`--external-load`: no busy loops of its own; each run records the
load average it saw), and the quiet half when the machine is quiet.

The table lists each run's findings (those not compared in brackets) and its time; then, per
program, whether all twice --runs verdicts are identical and whether they are the verdict its
test expects. Exit status 1 when any program's verdicts differ.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import RESULTS_DIR, environment, machine_busy_s, verdict
from examples.catalog import Example, examples
from memsight.profiler.diagnosis import diagnose
from memsight.profiler.profile.storage import ProfileError
from tests.clients.test_frameworks import CASES, Case, _argv
from tests.load import CpuHogs, cores, one_thread_per_program
from tests.support import PYTHON, Completed, run_memsight

NAME = "verdicts_under_load"
SERIOUS = ("warning", "critical")
CLIENTS = ("transformers", "lightning", "accelerate")  # the clients extra


@dataclass(frozen=True)
class Program:
    name: str
    # Runs the program under memsight in a scratch folder, with a time limit.
    record: Callable[[Path, float], Completed]
    ok_status: tuple[int, ...]  # exit statuses its test accepts
    varies: Callable[[str, str], bool]  # (rule, severity) -> left out of the verdict
    expected: Callable[[frozenset[tuple[str, str]]], bool]  # its test's check, on all findings


@dataclass
class Run:
    loaded: bool
    number: int
    findings: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    wall_s: float = 0.0
    busy_cores: float | None = None  # the whole machine's, this run included
    load: float | None = None  # the 1-minute load average as the run ended

    def compared(self, program: Program, strict: bool) -> frozenset[tuple[str, str]]:
        """The findings that make its verdict."""
        return frozenset(f for f in self.findings if strict or not program.varies(*f))

    def verdict(self, program: Program, strict: bool) -> frozenset[tuple[str, str]] | str:
        if self.error is not None:
            return f"error: {self.error}"
        return self.compared(program, strict)


def example_program(example: Example) -> Program:
    def record(folder: Path, timeout: float) -> Completed:
        script = folder / example.path.name
        shutil.copy(example.path, script)
        return run_memsight([*example.options, str(script)], folder, timeout=timeout)

    def expected(found: frozenset[tuple[str, str]]) -> bool:
        rules = {rule for rule, _ in found}
        return example.expect <= rules <= example.expect | example.may

    return Program(example.name, record, (0, 1), lambda rule, _: rule in example.may, expected)


def client_program(case: Case) -> Program:
    def record(folder: Path, timeout: float) -> Completed:
        argv = ["--python", PYTHON, *_argv(case, folder)]
        return run_memsight(argv, folder, stdin="", timeout=timeout)

    def expected(found: frozenset[tuple[str, str]]) -> bool:
        return {rule for rule, severity in found if severity in SERIOUS} == case.warnings

    return Program(
        f"clients/{case.id}", record, (0,), lambda _, severity: severity not in SERIOUS, expected
    )


def all_programs() -> list[Program]:
    programs = [example_program(e) for e in examples()]
    if all(importlib.util.find_spec(m) for m in CLIENTS):
        programs += [client_program(c) for c in CASES]
    else:
        print(
            "note: the clients extra is missing, so its programs are left out "
            '(pip install -c constraints.txt -e ".[test,clients]")'
        )
    return programs


def record_once(program: Program, run: Run, timeout: float) -> None:
    busy_before = machine_busy_s()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memsight-verdicts-") as scratch:
        try:
            result = program.record(Path(scratch), timeout)
            if result.returncode not in program.ok_status:
                tail = result.stderr.strip().splitlines()[-1:] or ["no stderr"]
                run.error = f"exit status {result.returncode} ({tail[0][:120]})"
            else:
                diagnosis = diagnose(result.profile())
                run.findings = sorted({(f.rule, f.severity) for f in diagnosis.findings})
                if diagnosis.failed:
                    run.error = f"rules failed: {', '.join(sorted(diagnosis.failed))}"
        except subprocess.TimeoutExpired:
            run.error = f"timed out after {timeout:g} s"
        except ProfileError as problem:
            run.error = f"profile: {problem}"
        except Exception as problem:
            run.error = f"{type(problem).__name__}: {str(problem)[:120]}"
    run.wall_s = time.perf_counter() - start
    with contextlib.suppress(OSError, AttributeError):
        run.load = os.getloadavg()[0]
    busy_after = machine_busy_s()
    if busy_before is not None and busy_after is not None and run.wall_s > 0:
        run.busy_cores = (busy_after - busy_before) / run.wall_s


def describe(run: Run, program: Program, strict: bool) -> str:
    if run.error is not None:
        return f"error: {run.error}"
    shown = [
        f"[{rule}:{severity}]"
        if not strict and program.varies(rule, severity)
        else f"{rule}:{severity}"
        for rule, severity in run.findings
    ]
    return " ".join(shown) or "none"


def print_rows(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=3, help="runs per program and condition (default 3)")
    p.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="a program's name or a glob (growth_*.py, clients/*); repeat for more",
    )
    p.add_argument(
        "--hogs", type=int, default=None, help="busy loops when loaded (default 2 per core)"
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (default 1800)")
    p.add_argument("--strict", action="store_true", help="compare every finding, optional ones too")
    p.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help=f"where to save the results (default benchmarks/results/{NAME}.json)",
    )
    p.add_argument(
        "--condition",
        choices=("both", "quiet", "loaded"),
        default="both",
        help="record quiet and loaded runs, alternating (default), or only one condition; "
        "--merge then compares the saved halves",
    )
    p.add_argument(
        "--external-load",
        action="store_true",
        help="loaded runs start no busy loops of their own: the machine is already kept busy "
        "(by the suite under --cpu-hogs, say); each run records the load average it saw",
    )
    p.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="record nothing: compare the runs saved in these results files (of --condition "
        "quiet and --condition loaded, say) as if recorded together",
    )
    p.add_argument("--list", action="store_true", help="list the programs and exit")
    args = p.parse_args()
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def select(programs: list[Program], only: list[str] | None) -> list[Program]:
    if not only:
        return programs
    unknown = [n for n in only if not any(fnmatch.fnmatchcase(p.name, n) for p in programs)]
    if unknown:
        sys.exit(f"--only: no program named {', '.join(unknown)} (see --list)")
    return [p for p in programs if any(fnmatch.fnmatchcase(p.name, n) for n in only)]


def record_all(
    programs: list[Program], args: argparse.Namespace, hogs: int
) -> dict[str, list[Run]]:
    conditions = {"both": (False, True), "quiet": (False,), "loaded": (True,)}[args.condition]
    runs: dict[str, list[Run]] = {}
    total, done = len(conditions) * args.runs * len(programs), 0
    for program in programs:
        runs[program.name] = []
        for number in range(1, args.runs + 1):
            for loaded in conditions:
                run = Run(loaded, number)
                with CpuHogs(hogs if loaded and not args.external_load else 0):
                    record_once(program, run, args.timeout)
                runs[program.name].append(run)
                done += 1
                condition = "loaded" if loaded else "quiet"
                load = "" if run.load is None else f", load {run.load:.1f}"
                print(
                    f"[{done}/{total}] {program.name} {condition} {number}: "
                    f"{describe(run, program, args.strict)} ({run.wall_s:.1f} s{load})",
                    flush=True,
                )
    return runs


def load_saved(paths: list[Path], programs: list[Program]) -> dict[str, list[Run]]:
    """The runs saved in results files of this benchmark, numbered anew per condition."""
    runs: dict[str, list[Run]] = {p.name: [] for p in programs}
    for path in paths:
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            entries = saved["programs"]
        except (OSError, ValueError, KeyError, TypeError) as problem:
            sys.exit(f"--merge: {path}: not a results file of {NAME} ({problem})")
        for entry in entries:
            if entry.get("program") not in runs:
                continue  # not selected, or no longer a program
            kept = runs[entry["program"]]
            for r in entry["runs"]:
                run = Run(bool(r["loaded"]), 1 + sum(k.loaded == bool(r["loaded"]) for k in kept))
                run.findings = sorted((f["rule"], f["severity"]) for f in r["findings"])
                run.error, run.wall_s = r["error"], float(r["wall_s"])
                run.busy_cores, run.load = r.get("busy_cores"), r.get("load")
                kept.append(run)
    missing = [name for name, kept in runs.items() if not kept]
    if missing:
        print(f"note: no saved runs of {', '.join(missing)}")
    return {name: kept for name, kept in runs.items() if kept}


def main() -> int:
    args = parse_args()
    programs = select(all_programs(), args.only)
    if args.list:
        print("\n".join(p.name for p in programs))
        return 0
    hogs = 2 * cores() if args.hogs is None else args.hogs
    if args.merge:
        runs = load_saved(args.merge, programs)
        programs = [p for p in programs if p.name in runs]
        print(f"{len(programs)} programs, runs saved in {len(args.merge)} files")
    else:
        # One intra-op thread in both conditions, as the suite under load has (tests/load.py:
        # with every core busy, torch's spinning OpenMP threads make a program ~40 times
        # slower): the load is then the only difference between a quiet run and a loaded one.
        one_thread_per_program(os.environ)
        load = "the load already there" if args.external_load else f"{hogs} busy loops"
        print(
            f"{len(programs)} programs, {args.runs} runs each ({args.condition}); "
            f"loaded: {load} on {cores()} cores"
        )
        runs = record_all(programs, args, hogs)

    rows: list[list[str]] = []
    summary: list[list[str]] = []
    results: list[dict[str, Any]] = []
    differing: list[str] = []
    unexpected: list[str] = []
    for program in programs:
        verdicts = [r.verdict(program, args.strict) for r in runs[program.name]]
        same = all(v == verdicts[0] for v in verdicts)
        as_expected = all(
            not isinstance(v, str) and program.expected(frozenset(r.findings))
            for v, r in zip(verdicts, runs[program.name], strict=True)
        )
        differing += [] if same else [program.name]
        unexpected += [] if as_expected else [program.name]
        for r in runs[program.name]:
            condition = f"{'loaded' if r.loaded else 'quiet'} {r.number}"
            busy = "" if r.busy_cores is None else f"{r.busy_cores:.1f}"
            load = "" if r.load is None else f"{r.load:.1f}"
            rows.append(
                [
                    program.name,
                    condition,
                    describe(r, program, args.strict),
                    f"{r.wall_s:.1f}",
                    busy,
                    load,
                ]
            )
        summary.append([program.name, "yes" if same else "NO", "yes" if as_expected else "NO"])
        results.append(
            {
                "program": program.name,
                "identical": same,
                "as_expected": as_expected,
                "runs": [
                    {
                        "loaded": r.loaded,
                        "run": r.number,
                        "findings": [{"rule": f, "severity": s} for f, s in r.findings],
                        "compared": None
                        if r.error is not None
                        else sorted(f"{f}:{s}" for f, s in r.compared(program, args.strict)),
                        "error": r.error,
                        "wall_s": round(r.wall_s, 2),
                        "busy_cores": None if r.busy_cores is None else round(r.busy_cores, 2),
                        "load": None if r.load is None else round(r.load, 2),
                    }
                    for r in runs[program.name]
                ],
            }
        )

    note = (
        ""
        if args.strict
        else " ([...]: not compared: an example's optional rules, a client's info findings)"
    )
    print_rows(
        ["program", "run", "findings", "wall s", "busy cores", "load"],
        rows,
        f"Findings of each run{note}",
    )
    print_rows(["program", "identical", "as expected"], summary, "Verdicts, quiet and loaded")

    path = args.json or RESULTS_DIR / f"{NAME}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "benchmark": NAME,
        "environment": environment(),
        "settings": {
            "runs": args.runs,
            "hogs": 0 if args.external_load else hogs,
            "external_load": args.external_load,
            "condition": args.condition,
            "merged": [str(m) for m in args.merge or []],
            "strict": args.strict,
            "only": args.only,
        },
        "programs": results,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"result written to {path}")
    if unexpected:
        print(f"note: not the verdict their tests expect: {', '.join(unexpected)}")
    counts = {
        c: sum(r.loaded == (c == "loaded") for kept in runs.values() for r in kept)
        // max(1, len(programs))
        for c in ("quiet", "loaded")
    }
    detail = (
        f"{len(programs) - len(differing)}/{len(programs)} programs gave identical verdicts "
        f"in {counts['quiet']} quiet and {counts['loaded']} loaded runs"
    )
    if differing:
        detail += f"; differing: {', '.join(differing)}"
    verdict(NAME, not differing, detail)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
