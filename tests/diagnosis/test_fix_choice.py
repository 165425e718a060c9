"""Honest verdicts and fixes that fit the run.

- The fixes knowledge base: requirements and CPU variants are well formed, and what a CPU run
  can be offered has no CUDA code in it.
- choose_fixes (the one choice the text report, report --json, the app and the HTML report
  share): CUDA-only fixes left out of CPU runs, CPU snippets chosen there, DataLoader fixes
  only for scripts with a DataLoader, the rule's order kept.
- out-of-memory orders its fixes by its evidence: one huge request puts the input's size first.
- run-failed and too-short-to-judge on synthetic profiles: they fire on their patterns, with
  the numbers that explain them, and stay quiet on their look-alikes.
- End to end (slow): scripts that fail before doing anything, and CPU runs whose rendered fixes
  (text, JSON, HTML) contain no CUDA code.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from examples.catalog import EXAMPLES
from memsight.profiler.diagnosis import (
    DEFAULT_CONFIG,
    Diagnosis,
    RunContext,
    choose_fixes,
    diagnose,
    finding_to_json,
    get_fix,
    run_context,
)
from memsight.profiler.diagnosis.fixes import (
    CPU,
    REQUIREMENTS,
    VARIANT_FIELDS,
    Fix,
    FixError,
    all_fixes,
    parse_fix,
)
from memsight.profiler.diagnosis.rules import ALL_RULES
from memsight.profiler.diagnosis.text import format_findings
from memsight.profiler.profile.model import Event, OutputChunk, Profile
from memsight.profiler.protocol import STDERR
from memsight.profiler.report.html import render_html
from tests.factories import GiB, MiB, oom_event, profile, ram, steps, table
from tests.support import find_python, run_cli, run_memsight, write_script

RULES = {rule.RULE_ID: rule for rule in ALL_RULES}
BASE = 800 * MiB
# What CUDA code or CUDA-only advice looks like in a fix's text.
CUDA_MARKERS = (".cuda(", "torch.cuda", '"cuda"', "'cuda'", "nvidia-smi", "cudaMalloc")


def cuda_markers(text: str) -> list[str]:
    return [marker for marker in CUDA_MARKERS if marker in text]


def fix_text(fix: Fix) -> str:
    return "\n".join(getattr(fix, name) for name in VARIANT_FIELDS)


def cpu_form(fix: Fix) -> Fix:
    return fix.as_variant(CPU) if CPU in fix.variants else fix


CPU_RUN = RunContext(cuda=False, dataloader=False)
CPU_RUN_WITH_LOADER = RunContext(cuda=False, dataloader=True)
CUDA_RUN = RunContext(cuda=True, dataloader=True)


# -- the knowledge base ---------------------------------------------------------------------


def test_every_variant_is_complete_and_its_snippets_parse() -> None:
    for fix in all_fixes().values():
        assert fix.requires <= set(REQUIREMENTS), fix.id
        for name in fix.variants:
            variant = fix.as_variant(name)
            assert variant.id == fix.id and variant.variant == name
            ast.parse(variant.before)
            ast.parse(variant.after)
            assert variant.before != variant.after
            assert len(variant.title) <= 70, fix.id
            assert variant.ref == f"{fix.id}@{name}" and get_fix(variant.ref) == variant


def test_what_a_cpu_run_can_be_offered_has_no_cuda_code() -> None:
    offered = [fix for fix in all_fixes().values() if "cuda" not in fix.requires]
    assert len(offered) >= 10
    for fix in offered:
        cpu = cpu_form(fix)
        assert not cuda_markers(fix_text(cpu)), (fix.id, cuda_markers(fix_text(cpu)))
        links = " ".join(f"{d.title} {d.url}" for d in cpu.docs)
        assert "cuda" not in links.lower(), (fix.id, links)  # no CUDA pages either


def test_a_fix_with_cuda_code_has_a_cpu_variant_or_requires_cuda() -> None:
    for fix in all_fixes().values():
        if cuda_markers(fix_text(fix)):
            assert CPU in fix.variants or "cuda" in fix.requires, fix.id
    for fix_id in (
        "allocator-config",
        "empty-cache",
        "dataset-on-cpu-pinned",
        "other-gpu-processes",
    ):
        assert all_fixes()[fix_id].requires == {"cuda"}
    assert all_fixes()["dataloader-worker-memory"].requires == {"dataloader"}


def test_the_cpu_smaller_batch_catches_no_cuda_error_and_reads_peak_rss() -> None:
    cuda, cpu = get_fix("smaller-batch"), get_fix("smaller-batch@cpu")
    assert "torch.cuda.OutOfMemoryError" in cuda.after and cuda.variant == "cuda"
    assert "ru_maxrss" in cpu.after and cpu.variant == "cpu"
    assert cpu.docs != cuda.docs  # its own links: no torch.cuda.max_memory_allocated
    assert get_fix("del-and-scope@cpu").docs[0] == get_fix("del-and-scope").docs[0]
    assert cpu.to_json()["variant"] == "cpu" and cpu.to_json()["id"] == "smaller-batch"
    assert get_fix("activation-checkpointing").to_json()["variant"] is None  # one text for all


@pytest.mark.parametrize(
    "top, table, problem",
    [
        ('requires = ["tpu"]', "", "requires must list"),
        ('requires = "cuda"', "", "requires must list"),
        ("", '[cpu]\nsnippet = "x"', r"\[cpu\] may set only"),
        ("", '[cpu]\nbefore = ""', "non-empty text"),
        ('requires = ["cuda"]', '[cpu]\nbefore = "y = 1"', r"has no \[cpu\] variant"),
    ],
)
def test_a_bad_requirement_or_variant_is_named(
    tmp_path: Path, top: str, table: str, problem: str
) -> None:
    fields = [("id", "broken"), ("title", "t"), ("summary", "s"), ("why", "w")]
    fields += [("before", "x = 1"), ("after", "x = 2"), ("tradeoff", "o")]
    text = "".join(f'{k} = "{v}"\n' for k, v in fields) + top + "\n"
    text += '[[docs]]\ntitle = "d"\nurl = "https://pytorch.org/"\n\n' + table + "\n"
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(FixError, match=problem):
        parse_fix(path)


def test_an_unknown_variant_is_an_error() -> None:
    with pytest.raises(FixError, match="no 'gpu' variant"):
        get_fix("smaller-batch@gpu")
    with pytest.raises(FixError, match="no fix"):
        get_fix("no-such-fix@cpu")


# -- what the run is --------------------------------------------------------------------------


def test_run_context_reads_cuda_and_dataloader_from_the_profile() -> None:
    assert run_context(profile(ram(1, BASE))) == RunContext(cuda=False, dataloader=False)
    gpu = table("gpu", [0.0, 1.0], device=0, allocated=GiB, reserved=GiB)
    assert run_context(profile(gpu)).cuda
    assert run_context(profile(events=[Event(0.5, "cuda_init", {"devices": []})])).cuda
    assert run_context(profile(devices=[(0, 16 * GiB)])).cuda
    loader = Event(1.0, "epoch", {"loader": 1, "index": 1, "num_workers": 2})
    assert run_context(profile(events=[loader])).dataloader is True
    assert run_context(profile(hooks=False)).dataloader is None  # without hooks: unknown


# -- choose_fixes -------------------------------------------------------------------------------


def test_a_cpu_run_gets_cpu_snippets_and_no_cuda_only_fixes() -> None:
    named = ("allocator-config", "smaller-batch", "empty-cache", "activation-checkpointing")
    chosen = choose_fixes(named, CPU_RUN)
    assert chosen == ("smaller-batch@cpu", "activation-checkpointing")
    assert choose_fixes(named, CUDA_RUN) == named  # a CUDA run: all of them, as the rule said


def test_dataloader_fixes_need_a_dataloader_unless_that_cannot_be_told() -> None:
    named = ("smaller-batch", "del-and-scope", "dataloader-worker-memory")
    assert choose_fixes(named, CPU_RUN) == ("smaller-batch@cpu", "del-and-scope@cpu")
    assert choose_fixes(named, CPU_RUN_WITH_LOADER)[-1] == "dataloader-worker-memory"
    unknown = RunContext(cuda=False, dataloader=None)
    assert choose_fixes(named, unknown)[-1] == "dataloader-worker-memory"


def test_a_finding_never_loses_all_its_fixes() -> None:
    # worker growth in a script without a DataLoader (a multiprocessing pool, say): the one fix
    # the rule names is kept rather than none
    assert choose_fixes(("dataloader-worker-memory",), CPU_RUN) == ("dataloader-worker-memory",)
    assert choose_fixes(("smaller-batch@cpu",), CUDA_RUN) == ("smaller-batch",)  # re-fitted


def test_diagnose_fits_every_findings_fixes_to_the_run() -> None:
    levels = BASE + 3 * MiB * np.arange(240)
    cpu_run = diagnose(profile(steps(levels)))
    [growth] = cpu_run.findings
    assert growth.fixes == ("detach-for-logging@cpu", "del-and-scope@cpu")
    [raw] = RULES["growth-per-iteration"].check(profile(steps(levels)), DEFAULT_CONFIG)
    assert raw.fixes == ("detach-for-logging", "del-and-scope")  # the rule names plain ids
    cuda_run = diagnose(profile(steps(levels), events=[Event(0.1, "cuda_init", {})]))
    assert cuda_run.findings[0].fixes == ("detach-for-logging", "del-and-scope")


# -- out-of-memory: the order follows the evidence ---------------------------------------------


def _oom(kind: str, phase: str = "forward", iteration: int = 0, **numbers: int) -> Profile:
    event = oom_event(kind, **numbers)
    event.data.update(phase=phase, iteration=iteration)
    return profile(events=[event], exit_code=1, ram_total=16 * GiB)


def test_one_huge_request_on_the_first_iteration_puts_the_input_size_first() -> None:
    [finding] = diagnose(_oom("cpu", requested=2**40)).findings  # 1 TiB on a 16 GiB machine
    assert finding.fixes[:3] == (
        "shorter-inputs@cpu",
        "activation-checkpointing",
        "smaller-batch@cpu",
    )
    assert "dataloader-worker-memory" not in finding.fixes  # no DataLoader in this run
    assert "that one request is 6400% of the machine's RAM" in finding.evidence.text
    assert "on the first iteration" in finding.evidence.text
    assert finding.evidence.numbers["request_share"] == 64.0


def test_a_huge_cuda_request_puts_the_input_size_first_too() -> None:
    p = _oom("gpu", requested=30 * GiB, total=40 * GiB, reserved_unallocated=GiB)
    p.info.devices = []
    [finding] = diagnose(replace(p, events=[*p.events, Event(0.1, "cuda_init", {})])).findings
    assert finding.fixes[:2] == ("shorter-inputs", "activation-checkpointing")
    assert "75% of the device's 40.00 GiB" in finding.evidence.text


@pytest.mark.parametrize(
    "kind, phase, numbers, first",
    [
        ("cpu", "forward", {"requested": 512 * MiB}, "smaller-batch"),  # 3 % of the RAM
        ("cpu", "optimizer", {"requested": 8 * GiB}, "smaller-batch"),  # optimizer state
        ("gpu", "backward", {"requested": GiB, "total": 40 * GiB}, "smaller-batch"),
        (
            "gpu",
            "backward",
            {"requested": GiB, "total": 40 * GiB, "reserved_unallocated": 4 * GiB},
            "allocator-config",
        ),
    ],
)
def test_an_ordinary_oom_keeps_the_batch_or_the_allocator_first(
    kind: str, phase: str, numbers: dict[str, int], first: str
) -> None:
    [finding] = RULES["out-of-memory"].check(_oom(kind, phase, 12, **numbers), DEFAULT_CONFIG)
    assert finding.fixes[0] == first and "shorter-inputs" not in finding.fixes


# -- run-failed ---------------------------------------------------------------------------------


def _failed(
    exc_type: str,
    message: str,
    frames: list[list[object]] | None = None,
    script: str = "train.py",
    exit_code: int = 1,
) -> Profile:
    data = {
        "exc_id": 1,
        "exc_type": f"builtins.{exc_type}",
        "message": message,
        "traceback": frames or [],
        "uncaught": True,
        "where": "uncaught",
        "oom": None,
    }
    events = [Event(0.06, "exception", data)]
    p = profile(ram(0.1, 20 * MiB), events=events, exit_code=exit_code)
    p.info.script = script
    p.info.python = "/usr/bin/python3"
    return p


def test_a_syntax_error_is_a_run_that_could_not_start() -> None:
    p = _failed("SyntaxError", "'(' was never closed (bad.py, line 1)", script="bad.py")
    result = diagnose(p)
    [finding] = result.findings
    assert finding.rule == "run-failed" and finding.severity == "critical"
    assert finding.title == "The script could not start: SyntaxError at bad.py:1"
    assert finding.evidence.text == "SyntaxError: '(' was never closed at bad.py:1"
    assert finding.evidence.numbers["file"] == "bad.py" and finding.evidence.numbers["line"] == 1
    assert finding.fixes == ("fix-the-script-error",)
    report = format_findings(result)
    assert "No problems found" not in report and "bad.py:1" in report


def test_an_exception_on_the_first_line_names_type_message_and_place() -> None:
    frames: list[list[object]] = [["/work/train.py", 1, "<module>", 'raise ValueError("boom")']]
    [finding] = diagnose(_failed("ValueError", "boom", frames)).findings
    assert finding.title == "The script failed before doing any work: ValueError"
    assert finding.evidence.text == 'ValueError: boom at train.py:1: raise ValueError("boom")'
    numbers = finding.evidence.numbers
    assert (numbers["exception"], numbers["line"], numbers["exit_code"]) == (
        "builtins.ValueError",
        1,
        1,
    )
    assert "before it did any work" in finding.explanation
    # An exception the script raised while running is debugged at its line: no syntax check.
    assert finding.fixes == ("debug-the-exception",)


def test_an_exception_at_step_40_in_the_data_loading_is_debugged_not_compiled() -> None:
    frames: list[list[object]] = [
        ["/work/train.py", 30, "<module>", "for batch in loader:"],
        ["/work/data.py", 41, "__getitem__", 'label = int(row["label"])'],
    ]
    p = _failed("ValueError", "invalid literal for int() with base 10: 'n/a'", frames)
    [finding] = diagnose(p).findings
    assert finding.fixes == ("debug-the-exception",)
    fix = get_fix("debug-the-exception")
    assert "python -m pdb -c continue" in fix.after and "py_compile" not in fix.after


def test_torch_missing_from_the_interpreter_says_which_interpreter() -> None:
    frames: list[list[object]] = [["/work/train.py", 3, "<module>", "import torch"]]
    [finding] = diagnose(_failed("ModuleNotFoundError", "No module named 'torch'", frames)).findings
    assert finding.evidence.text.endswith("; /usr/bin/python3 has no torch installed")
    assert finding.evidence.numbers["missing_module"] == "torch"
    assert finding.fixes == ("use-the-right-interpreter", "fix-the-script-error")


def test_a_file_that_is_not_python_is_named() -> None:
    p = _failed("SyntaxError", "invalid syntax (run.sh, line 2)", script="run.sh")
    [finding] = diagnose(p).findings
    assert "run.sh is not a Python script" in finding.evidence.text
    assert finding.title == "The script could not start: SyntaxError at run.sh:2"


def test_an_error_inside_a_library_also_names_the_scripts_line() -> None:
    frames: list[list[object]] = [
        ["/work/train.py", 12, "<module>", "model = load(path)"],
        ["/lib/python3.11/site-packages/torch/serialization.py", 771, "load", "..."],
    ]
    p = _failed("FileNotFoundError", "[Errno 2] No such file or directory: 'ckpt.pt'", frames)
    [finding] = diagnose(p).findings
    assert "at train.py:12: model = load(path)" in finding.evidence.text
    assert finding.evidence.text.endswith("(raised in serialization.py:771 in load())")
    assert finding.evidence.numbers["line"] == 771  # where it was raised, as before


def test_a_failure_after_some_steps_says_how_far_the_run_got() -> None:
    p = _failed("KeyError", "'label'", [["/work/train.py", 30, "<module>", "y = batch['label']"]])
    p.tables["steps"] = steps(np.full(7, BASE), start=0.01, dt=0.005)
    [finding] = RULES["run-failed"].check(p, DEFAULT_CONFIG)
    assert finding.title == "The script failed after 7 optimizer steps: KeyError"
    assert finding.evidence.iterations == (7, 8) and finding.evidence.numbers["iterations"] == 7
    assert "up to the error only" in finding.explanation


def test_a_non_zero_exit_without_an_exception_shows_the_last_error_line() -> None:
    p = profile(ram(0.1, 20 * MiB), events=[Event(0.08, "exit", {"exit_code": 2})], exit_code=2)
    p.output = [OutputChunk(0.07, STDERR, "usage: train.py [-h] --data DATA\n")]
    p.output.append(
        OutputChunk(0.07, STDERR, "train.py: error: the following arguments are required: --data\n")
    )
    [finding] = RULES["run-failed"].check(p, DEFAULT_CONFIG)
    assert finding.title == "The script exited with status 2 before doing any work"
    assert finding.evidence.text.endswith("required: --data")
    assert finding.evidence.numbers["exit_code"] == 2


def test_a_crashed_interpreter_is_a_failure() -> None:
    p = profile(ram(0.1, 20 * MiB), signal=int(signal.SIGSEGV))
    [finding] = RULES["run-failed"].check(p, DEFAULT_CONFIG)
    assert "crashed with SIGSEGV" in finding.title


@pytest.mark.parametrize(
    "case",
    ["clean exit", "still running", "ctrl-c", "sigterm", "sigkill far from the limit", "oom"],
)
def test_run_failed_is_quiet_when_the_script_did_not_fail(case: str) -> None:
    p = {
        "clean exit": lambda: profile(ram(1, BASE), exit_code=0),
        "still running": lambda: profile(ram(1, BASE)),
        "ctrl-c": lambda: _failed("KeyboardInterrupt", "", exit_code=130),
        "sigterm": lambda: profile(ram(1, BASE), signal=int(signal.SIGTERM)),
        "sigkill far from the limit": lambda: profile(ram(1, BASE), signal=int(signal.SIGKILL)),
        "oom": lambda: profile(events=[oom_event("cpu")], exit_code=1),
    }[case]()
    assert RULES["run-failed"].check(p, DEFAULT_CONFIG) == []


# -- too-short-to-judge -------------------------------------------------------------------------


def test_too_short_names_the_rule_its_minimum_and_how_far_memory_moved() -> None:
    p = profile(steps(BASE + 23 * MiB * np.arange(19)), exit_code=0)
    result = diagnose(p)
    [finding] = result.findings
    assert finding.rule == "too-short-to-judge" and finding.severity == "info"
    text = finding.evidence.text
    assert text.startswith("growth-per-iteration needs at least 20 optimizer steps")
    assert "the run made 19" in text and "RAM at iteration boundaries rose 345.0 MiB" in text
    numbers = finding.evidence.numbers
    assert (numbers["iterations"], numbers["iterations_needed"]) == (19, 20)
    assert numbers["ram_rise_bytes"] == 15 * 23 * MiB  # step 4 to step 19: warm-up left out
    assert finding.evidence.iterations == (4, 19) and finding.evidence.plot == "ram"
    assert finding.fixes[0] == "record-longer"
    assert "No problems found" not in format_findings(result)


def test_too_short_reads_its_minimum_from_the_config() -> None:
    config = replace(DEFAULT_CONFIG, growth_min_iterations=40)
    p = profile(steps(BASE + 23 * MiB * np.arange(30)), exit_code=0)
    [finding] = RULES["too-short-to-judge"].check(p, config)
    assert "needs at least 40 optimizer steps and the run made 30" in finding.evidence.text


def test_too_short_on_a_gpu_names_the_device() -> None:
    p = profile(steps(np.full(12, BASE), device=0, allocated=GiB + 40 * MiB * np.arange(12)))
    [finding] = RULES["too-short-to-judge"].check(p, DEFAULT_CONFIG)
    assert "GPU memory (cuda:0)" in finding.evidence.text and finding.evidence.plot == "gpu"
    assert finding.evidence.numbers["cuda0_rise_bytes"] == 8 * 40 * MiB


def test_too_short_counts_the_iterations_the_growth_rule_counts() -> None:
    # weights updated by hand: no optimizer steps, 12 backward passes while RAM climbs
    from memsight.profiler import protocol
    from tests.factories import spans

    grad = protocol.FLAG_GRAD | protocol.FLAG_REQUIRES_GRAD
    loop = spans([(grad, 1)] * 12, linked=list(range(1, 13)))
    p = profile(ram(2.5, lambda t: BASE + 200 * MiB * t), loop, exit_code=0)
    [finding] = RULES["too-short-to-judge"].check(p, DEFAULT_CONFIG)
    assert "20 iterations and the run made 12 (backward passes)" in finding.evidence.text
    assert finding.evidence.numbers["iteration_kind"] == "backward passes"


def test_too_short_leaves_child_processes_to_their_own_rule() -> None:
    # a spawned rank importing torch climbs by hundreds of MiB in its first seconds
    t = np.array([0.0, 0.6, 1.2, 1.8])
    children = table(
        "children", t, pid=4242, rss=900 * MiB, uss=[10, 300, 600, 800] * np.array(MiB)
    )
    assert RULES["too-short-to-judge"].check(profile(children, exit_code=0), DEFAULT_CONFIG) == []


@pytest.mark.parametrize(
    "case",
    [
        "long enough, growing",  # growth-per-iteration judges it (and fires)
        "long enough, flat",  # judged: nothing to say
        "short and flat",
        "short, only the warm-up moved",  # optimizer state appears at the first steps
        "short, small rise",  # below the growth rule's own size threshold
        "still running",
        "no steps",
    ],
)
def test_too_short_is_quiet_where_it_has_nothing_to_add(case: str) -> None:
    rising = BASE + 23 * MiB * np.arange(40)
    warmup = np.full(15, BASE)
    warmup[1:] += 600 * MiB  # Adam's state appears at step 2
    p = {
        "long enough, growing": lambda: profile(steps(rising), exit_code=0),
        "long enough, flat": lambda: profile(steps(np.full(40, BASE)), exit_code=0),
        "short and flat": lambda: profile(steps(np.full(19, BASE)), exit_code=0),
        "short, only the warm-up moved": lambda: profile(steps(warmup), exit_code=0),
        "short, small rise": lambda: profile(steps(BASE + 2 * MiB * np.arange(19)), exit_code=0),
        "still running": lambda: _running(profile(steps(BASE + 23 * MiB * np.arange(19)))),
        "no steps": lambda: profile(ram(5, lambda t: BASE + 200 * MiB * t), exit_code=0),
    }[case]()
    assert RULES["too-short-to-judge"].check(p, DEFAULT_CONFIG) == []


def _running(p: Profile) -> Profile:
    p.complete = False
    return p


def test_a_short_run_where_nothing_moved_still_reads_no_problems() -> None:
    result = diagnose(profile(steps(np.full(10, BASE)), exit_code=0))
    assert result.findings == []
    assert "No problems found" in format_findings(result)


# -- every rendered form of a CPU run's fixes ---------------------------------------------------


def _rendered(p: Profile, diagnosis: Diagnosis) -> dict[str, str]:
    return {
        "text": format_findings(diagnosis),
        "json": json.dumps([finding_to_json(f) for f in diagnosis.findings]),
        "html": render_html(p, diagnosis),
    }


def test_a_synthetic_cpu_runs_fixes_are_cpu_code_in_text_json_and_html() -> None:
    levels = BASE + 3 * MiB * np.arange(240)
    events = [oom_event("cpu", t=30.0, requested=2 * GiB)]
    p = profile(ram(30, BASE), steps(levels), events=events, exit_code=1)
    diagnosis = diagnose(p)
    assert {f.rule for f in diagnosis.findings} == {"out-of-memory", "growth-per-iteration"}
    for form, text in _rendered(p, diagnosis).items():
        assert not cuda_markers(text), (form, cuda_markers(text))
    assert "ru_maxrss" in _rendered(p, diagnosis)["html"]  # the CPU smaller-batch snippet


def test_the_same_run_with_cuda_keeps_the_cuda_snippets() -> None:
    event = oom_event("gpu", requested=GiB, total=40 * GiB)
    p = profile(events=[Event(0.1, "cuda_init", {}), event], exit_code=1)
    diagnosis = diagnose(p)
    [finding] = diagnosis.findings
    assert finding.fixes[0] == "smaller-batch" and "allocator-config" in finding.fixes
    assert "torch.cuda.OutOfMemoryError" in _rendered(p, diagnosis)["html"]


# -- end to end ---------------------------------------------------------------------------------


def _recorded_cpu_run(script: Path, tmp_path: Path) -> tuple[Profile, Path]:
    result = run_memsight([str(script)], tmp_path, timeout=180)
    assert result.returncode in (0, 1), result.stderr
    return result.profile(), result.profile_path or Path()


@pytest.mark.slow  # records real PyTorch scripts
@pytest.mark.parametrize("name", ["out_of_memory.py", "too_short_to_judge.py"])
def test_a_recorded_cpu_runs_fixes_have_no_cuda_code_in_any_form(name: str, tmp_path: Path) -> None:
    script = tmp_path / name
    shutil.copy(EXAMPLES / name, script)
    p, path = _recorded_cpu_run(script, tmp_path)
    assert p.gpu is None and not run_context(p).cuda
    diagnosis = diagnose(p)
    assert diagnosis.findings and all(f.fixes for f in diagnosis.findings)
    forms = _rendered(p, diagnosis)
    report = run_cli("report", path, cwd=tmp_path)
    forms["memsight report"] = report.stdout
    forms["memsight report --json"] = run_cli("report", "--json", path, cwd=tmp_path).stdout
    html = tmp_path / "report.html"
    assert run_cli("report", "--html", html, path, cwd=tmp_path).returncode == 0
    forms["memsight report --html"] = html.read_text()
    for form, text in forms.items():
        assert not cuda_markers(text), (form, cuda_markers(text))
    reported = json.loads(forms["memsight report --json"])["findings"]
    assert all(fix["variant"] != "cuda" for f in reported for fix in f["fixes"])
    if name == "out_of_memory.py":  # one 1 TiB request: the input's size comes first
        oom = next(f for f in reported if f["rule"] == "out-of-memory")
        assert [fix["id"] for fix in oom["fixes"]][:2] == [
            "shorter-inputs",
            "activation-checkpointing",
        ]
        assert "dataloader-worker-memory" not in {fix["id"] for fix in oom["fixes"]}
        # The line of the script that asked for the 1 TiB, in the model's forward
        source = script.read_text().splitlines()
        line = 1 + next(i for i, s in enumerate(source) if s.startswith("        return (q @"))
        assert (oom["where"][0]["file"], oom["where"][0]["line"]) == (str(script), line)
        assert oom["where"][0]["function"] == "forward"
        assert oom["where"][0]["code"].startswith("return (q @ k.transpose(-2, -1))")
        # Then what held the most at the error (its census): the forward's q, and the input x
        held = [(w["code"], w["bytes"]) for w in oom["where"][1:]]
        assert held == [
            ("q, k, v = self.qkv(x).chunk(3, dim=-1)", 384 * 2**20),
            ("x = torch.randn(1, length, 64)", 128 * 2**20),
        ]
        assert oom["where"][1]["holder"].startswith("held by `q` (Tensor, local of")
        assert f"Where: {script}:{line} in forward(): return (q @" in report.stdout


@pytest.mark.slow  # runs scripts under memsight
@pytest.mark.parametrize(
    "name, source, expected, line",
    [
        ("bad.py", "x = (\n", r"SyntaxError: '\(' was never closed at bad\.py:1$", 1),
        ("first.py", 'raise ValueError("boom")\n', r"ValueError: boom at first\.py:1: raise", 1),
        ("run.sh", "#!/bin/sh\necho hello world\n", r"run\.sh is not a Python script", 2),
        ("data.csv", "a,b\n1,2\n", r"NameError: name 'a' is not defined at data\.csv:1", 1),
    ],
)
def test_a_script_that_fails_before_doing_anything_is_reported_as_failed(
    tmp_path: Path, name: str, source: str, expected: str, line: int
) -> None:
    script = write_script(tmp_path, name, source)
    result = run_memsight([str(script)], tmp_path)
    assert result.returncode == 1, result.stderr
    [finding] = diagnose(result.profile()).findings
    assert finding.rule == "run-failed" and finding.severity == "critical"
    assert re.search(expected, finding.evidence.text), finding.evidence.text
    # The script's own line is the first place to look, a syntax error's included
    assert (finding.where[0].file, finding.where[0].line) == (str(script), line)
    report = run_cli("report", result.profile_path or "", cwd=tmp_path)
    assert "No problems found" not in report.stdout and "run-failed" in report.stdout
    assert f"Where: {script}:{line}" in report.stdout


@pytest.mark.slow  # runs an example under memsight
def test_the_first_line_example_names_its_own_line_in_report_json(tmp_path: Path) -> None:
    script = tmp_path / "fails_on_first_line.py"
    shutil.copy(EXAMPLES / script.name, script)
    result = run_memsight([str(script)], tmp_path)
    assert result.returncode == 1, result.stderr
    path = result.profile_path or ""
    reported = json.loads(run_cli("report", "--json", path, cwd=tmp_path).stdout)
    [failed] = reported["findings"]
    assert failed["rule"] == "run-failed"
    [where] = failed["where"]
    assert (where["file"], where["line"], where["function"]) == (str(script), 9, "<module>")
    assert where["code"].startswith('with open("data/train.csv") as rows:')


def _python_without_torch() -> str | None:
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if not candidate or not Path(candidate).exists():
            continue
        probe = subprocess.run(
            [
                candidate,
                "-c",
                "import sys, importlib.util as u; "
                "print(sys.version_info >= (3, 9) and u.find_spec('torch') is None)",
            ],
            capture_output=True,
            text=True,
        )
        if probe.stdout.strip() == "True":
            return candidate
    return find_python("3.9")  # may have torch; the test checks


@pytest.mark.slow  # runs a script under memsight with another interpreter
def test_torch_missing_from_the_chosen_interpreter_is_reported_with_that_interpreter(
    tmp_path: Path,
) -> None:
    python = _python_without_torch()
    if python is None:
        pytest.skip("no Python 3.9+ without torch on this machine")
    script = write_script(tmp_path, "train.py", "import torch\nprint(torch.ones(2))\n")
    result = run_memsight(["--python", python, str(script)], tmp_path)
    if result.returncode == 0:
        pytest.skip(f"{python} has torch")
    [finding] = diagnose(result.profile()).findings
    assert finding.rule == "run-failed"
    assert finding.evidence.text.startswith("ModuleNotFoundError: No module named 'torch'")
    assert f"{python} has no torch installed" in finding.evidence.text
    assert finding.fixes[0] == "use-the-right-interpreter"
