"""PyTorch instrumentation end to end: real training scripts under `memsight run`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.diagnosis import diagnose
from memsight.profiler.diagnosis.contents import census_label, censuses, contents, pick
from memsight.profiler.profile.model import Profile
from tests.support import (
    MEMSIGHT,
    Completed,
    child_env,
    find_python,
    run_memsight,
    run_plain,
    write_script,
)

# Real PyTorch training scripts under `memsight run`.
pytestmark = pytest.mark.slow

TRAIN = """
import sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
mode = sys.argv[1]
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), 1e-2)
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
batches = 0
for epoch in range(2):
    model.train()
    for x, y in DataLoader(data, batch_size=16):
        batches += 1
        if mode == "zero_grad" or (mode == "accumulate" and batches % 2 == 1):
            opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if mode != "accumulate" or batches % 2 == 0:
            opt.step()
        print(f"{loss.item():.6f}")
    model.eval()
    with torch.no_grad():
        model(data.tensors[0])
    model(data.tensors[0])  # an evaluation pass that forgot no_grad
"""


def run_train(tmp_path: Path, mode: str, *options: str) -> tuple[Completed, Profile]:
    write_script(tmp_path, "train.py", TRAIN)
    traced = run_memsight([*options, "train.py", mode], tmp_path, out=tmp_path / f"{mode}.memsight")
    assert traced.returncode == 0, traced.stderr
    return traced, traced.profile()


def test_losses_are_identical_with_and_without_memsight(tmp_path: Path) -> None:
    traced, _ = run_train(tmp_path, "zero_grad")
    plain = run_plain(["train.py", "zero_grad"], tmp_path)
    assert traced.stdout == plain.stdout
    assert len(traced.stdout.splitlines()) == 8


def cleared(profile: Any) -> list[str | None]:
    return [protocol.CLEARED_NAMES[int(c)] for c in profile.steps["cleared"]]


def test_iterations_epochs_phases_and_modes_are_recorded(tmp_path: Path) -> None:
    traced, profile = run_train(tmp_path, "zero_grad")
    steps = profile.steps
    assert steps is not None
    assert list(steps["index"]) == list(range(1, 9))
    assert cleared(profile) == ["zero_grad"] * 8
    # The RSS is read at the first step, then on steps at least 5 ms after the last reading.
    rss = steps["rss"]
    assert rss[0] > 0 and ((rss > 0) | (rss == -1)).all() and (steps["device"] == -1).all()
    assert [profile.name(i) for i in set(steps["optimizer"])] == ["Adam"]
    assert [(e.get("loader"), e.get("index")) for e in profile.events_of("epoch")] == [
        (1, 1),
        (1, 2),
    ]
    spans = profile.spans
    assert spans is not None
    forward = spans["kind"] == protocol.SPAN_FORWARD
    assert int(forward.sum()) == 8 + 2 * 2
    flags = spans["flags"][forward]
    training = (flags & protocol.FLAG_TRAINING) > 0
    evals_grad = ((flags & protocol.FLAG_GRAD) > 0)[~training]
    assert evals_grad.tolist() == [False, True, False, True]
    backward = spans["kind"] == protocol.SPAN_BACKWARD
    assert int(backward.sum()) == 8
    linked = set(spans["id"][spans["kind"] == protocol.SPAN_LINK].tolist())
    eval_ids = spans["id"][forward][~training]
    assert not linked & set(eval_ids.tolist())
    train_ends = spans["end"][forward][training]
    assert (train_ends <= spans["t"][backward]).all()
    assert (spans["t"] <= spans["end"]).all()
    assert [m.get("training") for m in profile.events_of("mode")] == [False, True, False]
    report = subprocess.run(
        [*MEMSIGHT, "report", str(traced.profile_path), "--json"],
        capture_output=True,
        text=True,
        env=child_env(),
    )
    assert json.loads(report.stdout)["run"]["iterations"] == 8


def test_gradient_accumulation_clears_before_every_step(tmp_path: Path) -> None:
    _, profile = run_train(tmp_path, "accumulate")
    assert cleared(profile) == ["zero_grad"] * 4
    spans, steps = profile.spans, profile.steps
    assert spans is not None and steps is not None
    backward_starts = spans["t"][spans["kind"] == protocol.SPAN_BACKWARD]
    step_starts = steps["t"]
    counts = np.histogram(backward_starts, bins=[0.0, *step_starts.tolist()])[0]
    assert counts.tolist() == [2, 2, 2, 2]


def test_a_loop_without_zero_grad_shows_no_clearing_after_the_first_step(tmp_path: Path) -> None:
    _, profile = run_train(tmp_path, "none")
    assert cleared(profile) == ["first_step"] + [None] * 7


CLOSURE = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for step in range(6):
    def closure():
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    print(f"{optimizer.step(closure).item():.6f}")
"""


def test_a_closure_that_clears_clears_every_step_it_runs_in(tmp_path: Path) -> None:
    # LBFGS as PyTorch documents it: zero_grad inside the closure, after the step's pre-hook
    write_script(tmp_path, "lbfgs.py", CLOSURE)
    traced = run_memsight(["lbfgs.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == run_plain(["lbfgs.py"], tmp_path).stdout
    profile = traced.profile()
    assert cleared(profile) == ["zero_grad"] * 6
    spans, steps = profile.spans, profile.steps
    assert spans is not None and steps is not None
    backward_starts = spans["t"][spans["kind"] == protocol.SPAN_BACKWARD]
    inside = (backward_starts[:, None] >= steps["t"]) & (backward_starts[:, None] <= steps["end"])
    assert inside.any(axis=1).all() and len(backward_starts) > 6  # several closures per step


def test_no_hooks_records_memory_only(tmp_path: Path) -> None:
    traced, profile = run_train(tmp_path, "zero_grad", "--no-hooks")
    assert profile.steps is None and profile.spans is None
    assert not list(profile.events_of("epoch", "mode"))
    assert next(profile.events_of("torch_imported")).get("hooks") is False
    assert traced.stdout == run_plain(["train.py", "zero_grad"], tmp_path).stdout


OOM = """
import sys
import torch
from torch import nn

class Greedy(nn.Module):
    def forward(self, x):
        return torch.empty(2**50, dtype=torch.uint8)   # more than any machine has

model = nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), 0.1)
for _ in range(2):
    opt.zero_grad(); model(torch.ones(1, 4)).sum().backward(); opt.step()
try:
    Greedy()(torch.ones(1))
except RuntimeError:
    print("recovered")
if sys.argv[1] == "uncaught":
    Greedy()(torch.ones(1))
"""


def test_a_cpu_oom_is_recorded_with_its_numbers_phase_and_iteration_whether_caught_or_not(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "oom.py", OOM)
    traced = run_memsight(["oom.py", "uncaught"], tmp_path)
    plain = run_plain(["oom.py", "uncaught"], tmp_path)
    assert (
        (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout) == (1, "recovered\n")
    )
    # The script's own frames and the error match; with hooks on, torch's hook-aware call
    # path adds internal frames between them (--no-hooks gives identical tracebacks).
    assert user_frames(traced.stderr) == user_frames(plain.stderr)
    assert traced.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]
    no_hooks = run_memsight(
        ["--no-hooks", "oom.py", "uncaught"], tmp_path, out=tmp_path / "nh.memsight"
    )
    assert no_hooks.stderr == plain.stderr
    caught, uncaught_first, uncaught_final = list(traced.profile().events_of("exception"))
    for event in (caught, uncaught_first):
        assert (
            event.get("oom"),
            event.get("where"),
            event.get("phase"),
            event.get("iteration"),
        ) == ("cpu", "forward", "forward", 2)
        assert event.get("numbers") == {"requested": 2**50}
        assert event.get("memory")["rss"] > 0
        assert event.get("uncaught") is False
    assert uncaught_final.get("uncaught") is True
    assert uncaught_final.get("exc_id") == uncaught_first.get("exc_id") != caught.get("exc_id")
    assert (
        uncaught_final.get("traceback")[-1][3]
        == "return torch.empty(2**50, dtype=torch.uint8)   # more than any machine has"
    )


def user_frames(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    return [
        line + lines[i + 1] for i, line in enumerate(lines) if 'File "' in line and "oom.py" in line
    ]


def test_a_caught_memory_error_is_recorded_on_python_3_12(tmp_path: Path) -> None:
    python = find_python("3.12") or find_python("3.13")
    if python is None:
        pytest.skip("no Python 3.12+ interpreter on this machine")
    write_script(
        tmp_path, "me.py", "try:\n    bytearray(2**50)\nexcept MemoryError:\n    print('caught')\n"
    )
    traced = run_memsight(["--python", python, "me.py"], tmp_path)
    assert traced.stdout == "caught\n"
    (event,) = traced.profile().events_of("exception")
    assert (event.get("exc_type"), event.get("oom"), event.get("uncaught")) == (
        "builtins.MemoryError",
        "python",
        False,
    )


def test_torch_compile_is_left_intact(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "comp.py",
        """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        compiled = torch.compile(model, backend="eager")
        opt = torch.optim.SGD(model.parameters(), 0.1)
        for _ in range(3):
            opt.zero_grad(); loss = compiled(torch.randn(2, 8)).sum(); loss.backward(); opt.step()
            print(round(loss.item(), 6))
        """,
    )
    traced, plain = run_memsight(["comp.py"], tmp_path), run_plain(["comp.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout
    profile = traced.profile()
    assert profile.iterations == 3
    assert not list(profile.events_of("agent_error"))


def test_torch_imported_before_the_script_is_still_instrumented(tmp_path: Path) -> None:
    # A sitecustomize that imports torch runs before the agent starts the script.
    write_script(tmp_path, "site/sitecustomize.py", "import torch\n")
    write_script(tmp_path, "train.py", TRAIN)
    env = child_env({"PYTHONPATH": f"{tmp_path / 'site'}:{child_env()['PYTHONPATH']}"})
    traced = run_memsight(["train.py", "zero_grad"], tmp_path, env=env)
    assert traced.returncode == 0, traced.stderr
    assert traced.profile().iterations == 8


EVALKIT = """
def evaluate(model, batches):
    correct = 0
    for x, y in batches:
        correct += int((model(x).argmax(dim=1) == y).sum())
    return correct
"""

EVALUATE_THROUGH_A_PACKAGE = """
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "site-packages"))
import torch
from torch import nn

import evalkit

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 1024), nn.GELU(), nn.Tanh(), nn.Linear(1024, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(10):
    loss = nn.functional.cross_entropy(model(torch.randn(64, 16)), torch.randint(0, 10, (64,)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
model.eval()
batches = [(torch.randn(8192, 16), torch.randint(0, 10, (8192,))) for _ in range(6)]
correct = evalkit.evaluate(model, batches)  # the user's line
print(correct)
"""


def test_a_forward_called_by_an_installed_package_names_the_users_line_that_called_it(
    tmp_path: Path,
) -> None:
    # Under Lightning or transformers the model is called by the framework; the line to show is
    # the user's call into it. Files under site-packages are a library's (profiler/codefiles.py),
    # for the agent's call site as for the diagnosis' traceback frames.
    write_script(tmp_path / "site-packages" / "evalkit", "__init__.py", EVALKIT)
    write_script(tmp_path, "evaluate.py", EVALUATE_THROUGH_A_PACKAGE)
    traced = run_memsight(["evaluate.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    findings = {f.rule: f for f in diagnose(traced.profile()).findings}
    where = findings["inference-without-no-grad"].where
    assert where, findings["inference-without-no-grad"].evidence.text
    assert Path(where[0].file).name == "evaluate.py"
    assert where[0].code == "correct = evalkit.evaluate(model, batches)  # the user's line"


OOM_WITH_HOLDERS = """
import torch
from torch import nn

model = nn.Linear(256, 256)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _step in range(3):
    loss = model(torch.randn(64, 256)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def collect(n):
    kept = [torch.ones(1024, 1024) for _ in range(n)]  # 4 MiB each
    return kept, torch.empty(2**50, dtype=torch.uint8)  # more than any machine has


collect(6)
"""


def test_an_out_of_memory_error_gets_a_census_of_what_was_alive_then(tmp_path: Path) -> None:
    write_script(tmp_path, "oom_holders.py", OOM_WITH_HOLDERS)
    traced = run_memsight(["oom_holders.py"], tmp_path)
    assert traced.returncode == 1, traced.stderr
    profile = traced.profile()
    at_error = pick(profile, "oom")
    assert census_label(at_error, time=False) == "the out-of-memory error"
    assert (at_error.iterations_are, at_error.iteration) == ("optimizer steps", 3)
    rows = {row.holder: row for row in contents(at_error)}
    kept = rows["`kept` (list, local of `collect()` in oom_holders.py)"]
    assert (kept.count, kept.bytes) == (6, 6 * 4 * 2**20)
    assert kept.line == 16  # the line that raised, in the frame the error left
    # One census per error, however often the error is seen (raised, then uncaught).
    assert sum(c.at_error for c in censuses(profile)) == 1


FREED = """
import gc
import weakref
import torch
from torch import nn

gc.disable()  # between two collections, as most of a real loop runs
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)).eval()
inputs = []
with torch.no_grad():
    for batch in range(40):
        x = torch.randn(128, 64)
        out = model(x)
        inputs.append(weakref.ref(x))
del x, out
print(sum(ref() is not None for ref in inputs))
"""


def test_censuses_leave_every_tensor_of_the_loop_free_to_go(tmp_path: Path) -> None:
    # A census runs in the loop's thread, between iterations; the frames it walks (and their
    # locals) must be released when it returns, not left to the cyclic collector.
    write_script(tmp_path, "freed.py", FREED)
    traced = run_memsight(["--census", "every-3", "freed.py"], tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout.split() == ["0"]
    assert censuses(traced.profile())  # (the budget lets a short run have one or two)
