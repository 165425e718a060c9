"""Real framework programs under `memsight run`: they behave exactly as under plain python, the
clean ones get no warning, and each planted leak gets exactly its finding.

The scripts in scripts/ use transformers' Trainer and generate(), Lightning's Trainer with
DataLoader workers, LBFGS with a closure, hand-written SGD, an inference loop, torch.compile,
gradient checkpointing with bf16 autocast, DDP with gloo under torchrun on 2 ranks, and spawn
DataLoader workers; an evaluation loop summing loss tensors. They need the `clients` extra:
`pip install -c constraints.txt -e ".[test,clients]"`; without it they are skipped.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

from memsight.profiler.diagnosis import diagnose
from memsight.profiler.diagnosis.anatomy import main_anatomy, not_measured
from tests.support import PYTHON, run_memsight, run_plain

SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.clients,
    pytest.mark.skipif(
        not all(importlib.util.find_spec(m) for m in ("transformers", "lightning", "accelerate")),
        reason='needs the clients extra: pip install -c constraints.txt -e ".[test,clients]"',
    ),
]


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]  # what follows `python` / `memsight run`
    warnings: frozenset[str]  # the rule ids of every finding of severity warning or worse
    # "measured", "skipped" (with its reason), "" (no training iteration) or "any"
    anatomy: str

    @property
    def id(self) -> str:
        return "-".join(a.removesuffix(".py") for a in self.args if not a.startswith("/"))


def case(*args: str, warnings: tuple[str, ...] = (), anatomy: str = "measured") -> Case:
    return Case(args, frozenset(warnings), anatomy)


GROWTH = ("growth-per-iteration",)
CASES = [
    case("hf_trainer.py"),
    case("hf_trainer.py", "--leak", warnings=GROWTH),
    case("hf_generate.py", anatomy=""),
    # RSS climbs here under plain python too, by memory glibc's malloc keeps after it is freed
    # (~1 MiB a step): allocator-retention (info), not a leak.
    case("lightning_fit.py"),
    case("lightning_fit.py", "--leak", warnings=GROWTH),
    case("lbfgs.py"),
    case("lbfgs.py", "--leak", warnings=GROWTH),
    case("hand_sgd.py"),
    case("hand_sgd.py", "--leak", warnings=GROWTH),
    case("inference_loop.py", anatomy=""),
    case("inference_loop.py", "--leak", warnings=GROWTH, anatomy=""),
    # Evaluation summing loss tensors without no_grad: the graph of every batch stays alive,
    # which the growth names (the total's graph) and inference-without-no-grad counts (the
    # graphs its census found kept: never "too little to matter" beside that growth).
    # Forwards with autograd on and no backward: what they save is measured, partial.
    case("eval_loss_sum.py", warnings=(*GROWTH, "inference-without-no-grad")),
    case("compiled.py", anatomy="skipped"),
    case("checkpointing_bf16.py"),
    # Each rank measures its own (DDP's module as the root): not checked here.
    case("-m", "torch.distributed.run", "--nproc_per_node", "2", "ddp_gloo.py", anatomy="any"),
    case("spawn_workers.py"),
]


def _argv(c: Case, work: Path) -> list[str]:
    """The command line, with scripts by path and a scratch folder for the frameworks' files."""
    argv = [str(SCRIPTS / a) if a.endswith(".py") else a for a in c.args]
    script_at = next(i for i, a in enumerate(argv) if a.endswith(".py"))
    return [*argv[: script_at + 1], str(work / "scratch"), *argv[script_at + 1 :]]


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id if isinstance(c, Case) else None)
def test_a_framework_program_runs_as_under_python_and_gets_exactly_its_findings(
    c: Case, tmp_path: Path
) -> None:
    argv = _argv(c, tmp_path)
    # The same interpreter for both, named, so even sys.executable is the same path.
    traced = run_memsight(["--python", PYTHON, *argv], tmp_path, stdin="", timeout=300)
    plain = run_plain(argv, tmp_path, stdin="", timeout=300)
    assert traced.returncode == plain.returncode == 0, traced.stderr[-3000:]
    assert traced.stdout == plain.stdout

    profile = traced.profile()
    findings = diagnose(profile).findings
    serious = {f.rule for f in findings if f.severity in ("warning", "critical")}
    described = [f"{f.rule} ({f.severity}): {f.evidence.text}" for f in findings]
    assert serious == c.warnings, described
    # The anatomy of the first training iteration, on each framework's own loop.
    assert not [e.data for e in profile.events_of("agent_error") if "anatomy" in e.get("where")]
    if c.anatomy == "measured":
        anatomy = main_anatomy(profile)
        assert anatomy is not None and anatomy.activations_bytes > 0, not_measured(profile)
        assert anatomy.parameters_bytes > 0
    elif c.anatomy == "skipped":
        assert not_measured(profile) is not None
    elif c.anatomy == "":
        assert main_anatomy(profile) is None
