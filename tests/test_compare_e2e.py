"""`memsight compare` and the CI gates of `memsight run`, end to end on real runs: a leaking
example against its fix, a run against itself, and every gate's pass and fail exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsight.profiler.gates import GATE_FAILED
from tests.support import ROOT, run_cli, run_memsight, write_script

pytestmark = pytest.mark.slow

LEAK = (ROOT / "examples" / "growth_per_iteration.py").read_text()
FIXED = LEAK.replace(
    "kept_outputs.append(logits)  # the bug: 4 MiB per step, kept with its graph",
    "kept_outputs.append(loss.item())  # fixed: a number, no graph",
)
CLEAN = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(60):
    loss = nn.functional.cross_entropy(model(torch.randn(64, 128)), torch.randint(0, 10, (64,)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


# A run that "uses" one CUDA device of 16 GiB: torch.cuda's surface the agent reads
# (is_initialized, device_count, get_device_properties and the nested allocator statistics,
# laid out as torch._C._cuda_memoryStats returns them) replaced by the script, which
# "allocates" 3 GiB, so the GPU gates run end to end on a machine without a GPU.
FAKE_GPU = """
import time
from types import SimpleNamespace
import torch

GiB = 1024 ** 3
counters = {"current": 3 * GiB, "peak": 3 * GiB}
stats = {key: {"all": dict(counters)} for key in
         ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes")}
stats.update(num_alloc_retries=0, num_ooms=0)
torch.cuda.is_initialized = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_properties = lambda i: SimpleNamespace(name="Fake GPU", total_memory=16 * GiB)
torch._C._cuda_memoryStats = lambda device: stats
time.sleep(0.5)  # the agent samples the device
"""


@pytest.mark.parametrize("limit, status", [("4GiB", 0), ("2GiB", GATE_FAILED)])
def test_the_gpu_gate_passes_and_fails(tmp_path: Path, limit: str, status: int) -> None:
    write_script(tmp_path, "gpu.py", FAKE_GPU)
    done = run_cli("run", "-o", "gpu.memsight", "--max-peak-gpu", limit, "gpu.py", cwd=tmp_path)
    assert done.returncode == status, done.stderr
    if status:
        assert "memsight: check failed: peak GPU allocated 3.00 GiB is above" in done.stderr
    assert "GPU allocated" in done.stdout and "3.00 GiB" in done.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """leak.memsight and fixed.memsight (the example and its fix), clean1/clean2.memsight."""
    folder = tmp_path_factory.mktemp("runs")
    assert LEAK != FIXED
    for name, source in (("leak", LEAK), ("fixed", FIXED), ("clean", CLEAN)):
        write_script(folder, f"{name}.py", source)
    for name, script in (
        ("leak", "leak"),
        ("fixed", "fixed"),
        ("clean1", "clean"),
        ("clean2", "clean"),
    ):
        done = run_memsight([f"{script}.py"], folder, out=folder / f"{name}.memsight")
        assert done.returncode == 0, done.stderr
    return folder


def compare_json(folder: Path, before: str, after: str) -> dict:  # type: ignore[type-arg]
    done = run_cli("compare", f"{before}.memsight", f"{after}.memsight", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_fix_resolves_the_growth_and_lowers_the_peak(runs: Path) -> None:
    data = compare_json(runs, "leak", "fixed")
    assert [f["rule"] for f in data["findings"]["resolved"]] == ["growth-per-iteration"]
    assert data["findings"]["new"] == []
    tree = next(p for p in data["peaks"] if p["label"] == "peak RAM, process tree")
    assert tree["significant"] and tree["relative"] < -0.4  # ~920 MiB -> ~380 MiB
    (growth,) = data["growth_per_iteration"]
    assert growth["before"] > 4 * 2**20 and abs(growth["after"]) < 2**20 and growth["significant"]
    assert data["aligned_by"] == "iteration" and not data["same_script"]
    text = run_cli("compare", "leak.memsight", "fixed.memsight", cwd=runs).stdout
    assert "resolved [warning] growth-per-iteration" in text


def test_the_html_page_holds_both_runs_and_the_same_numbers(runs: Path) -> None:
    done = run_cli("compare", "leak.memsight", "fixed.memsight", "--html", "cmp.html", cwd=runs)
    assert done.returncode == 0, done.stderr
    page = (runs / "cmp.html").read_text()
    chart = json.loads(page.split('id="chart-data">', 1)[1].split("</script>", 1)[0])
    names = [s["name"] for s in chart["charts"][0]["series"]]
    assert names == ["before: process tree", "after: process tree"]
    assert "Resolved" in page and "growth-per-iteration" in page
    assert "aligned: by iteration" in page.lower()
    assert "http" not in page.split("<footer>")[0].replace("https://pytorch.org", "")


def test_two_runs_of_one_script_show_no_significant_change(runs: Path) -> None:
    data = compare_json(runs, "clean1", "clean2")
    assert data["same_script"]
    assert not [p for p in data["peaks"] if p["significant"]], data["peaks"]
    assert not [g for g in data["growth_per_iteration"] if g["significant"]]
    assert data["findings"]["resolved"] == data["findings"]["new"] == []
    text = run_cli("compare", "clean1.memsight", "clean2.memsight", cwd=runs).stdout
    assert "No significant change in memory." in text


def test_compare_max_growth_passes_and_fails(runs: Path) -> None:
    passed = run_cli("compare", "leak.memsight", "fixed.memsight", "--max-growth", "10%", cwd=runs)
    assert passed.returncode == 0, passed.stderr
    failed = run_cli("compare", "fixed.memsight", "leak.memsight", "--max-growth", "10%", cwd=runs)
    assert failed.returncode == GATE_FAILED
    assert "memsight: check failed: peak RAM, process tree grew" in failed.stderr


@pytest.mark.parametrize(
    "script, gate, status",
    [
        ("leak.py", ["--check"], GATE_FAILED),  # a warning finding fails by default
        ("leak.py", ["--fail-on", "critical"], 0),
        ("fixed.py", ["--check"], 0),
        ("fixed.py", ["--max-peak-ram", "4GiB"], 0),
        ("fixed.py", ["--max-peak-ram", "100MiB"], GATE_FAILED),
        ("fixed.py", ["--max-peak-gpu", "1MiB"], 0),  # no CUDA: nothing above it
        ("fixed.py", ["--baseline", "leak.memsight", "--max-growth", "10%"], 0),
        ("leak.py", ["--fail-on", "critical", "--baseline", "fixed.memsight"], GATE_FAILED),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_run_check_gates(runs: Path, script: str, gate: list[str], status: int) -> None:
    done = run_cli("run", "-o", "check.memsight", *gate, script, cwd=runs, timeout=120)
    assert done.returncode == status, done.stderr
    if status == GATE_FAILED:
        failures = [line for line in done.stderr.splitlines() if "check failed" in line]
        assert failures and all(line.startswith("memsight: check failed: ") for line in failures)
    else:
        assert "memsight: check passed" in done.stderr
    assert "Peaks" in done.stdout and "Findings" in done.stdout  # the report is printed


def test_a_script_that_fails_keeps_its_own_status_under_check(tmp_path: Path) -> None:
    write_script(tmp_path, "fails.py", "raise SystemExit(5)\n")
    done = run_cli("run", "--check", "fails.py", cwd=tmp_path)
    assert done.returncode == 5  # the script failed: not a memory gate's status
    assert "check failed" in done.stderr  # and the run-failed finding is still reported


@pytest.mark.parametrize(
    "gate, message",
    [
        (["--max-peak-ram", "lots"], "--max-peak-ram: not a size"),
        (["--max-growth", "10%"], "--max-growth needs --baseline"),
        (["--baseline", "missing.memsight"], "--baseline: missing.memsight: no such profile"),
        (["--fail-on", "info"], "invalid choice"),
    ],
)
def test_bad_gate_options_are_one_line_usage_errors(
    tmp_path: Path, gate: list[str], message: str
) -> None:
    write_script(tmp_path, "t.py", "print('never runs')\n")
    done = run_cli("run", *gate, "t.py", cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr
    assert "never runs" not in done.stdout


def test_a_run_with_cuda_compares_with_one_without(tmp_path: Path) -> None:
    write_script(tmp_path, "gpu.py", FAKE_GPU)
    write_script(tmp_path, "cpu.py", "import torch\nx = torch.ones(1024, 1024)\n")
    for name in ("gpu", "cpu"):
        assert (
            run_memsight([f"{name}.py"], tmp_path, out=tmp_path / f"{name}.memsight").returncode
            == 0
        )
    done = run_cli("compare", "cpu.memsight", "gpu.memsight", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    peaks = {p["label"]: p for p in json.loads(done.stdout)["peaks"]}
    allocated = peaks["peak GPU allocated, cuda:0"]
    assert allocated["before"] is None and allocated["after"] == 3 * 1024**3
    assert allocated["significant"]
    text = run_cli("compare", "cpu.memsight", "gpu.memsight", cwd=tmp_path).stdout
    assert "peak GPU allocated, cuda:0" in text and "only in one run" in text
