"""What fills the peak, and will it fit: `memsight report` on a real recorded training run
(text, --json's "anatomy" and "fit", --fit's refusals, the HTML section)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsight.profiler.diagnosis.anatomy import main_anatomy
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.units import format_bytes
from tests.support import Completed, one_line, run_cli, run_memsight, write_script

BATCH = 6

TRAINING = f"""
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 256)
        self.out = nn.Linear(256, 64)

    def forward(self, x):
        return x + self.out(torch.relu(self.fc(x)))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)

torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters())
for step in range(4):
    x, y = torch.randn({BATCH}, 32, 64), torch.randint(0, 10, ({BATCH}, 32))
    loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("anatomy")
    write_script(folder, "train.py", TRAINING)
    result = run_memsight(["train.py"], folder)
    assert result.returncode == 0, result.stderr
    assert result.profile_path is not None
    return result.profile_path


def report(*args: str, cwd: Path) -> Completed:
    return run_cli("report", *args, cwd=cwd)


def test_the_json_report_has_the_anatomy_by_module(recorded: Path) -> None:
    result = report(str(recorded), "--json", cwd=recorded.parent)
    assert result.returncode == 0, result.stderr
    anatomy = json.loads(result.stdout)["anatomy"]
    assert (anatomy["iteration"], anatomy["device"], anatomy["batch_size"]) == (1, "cpu", BATCH)
    modules = {m["path"]: m for m in anatomy["modules"]}
    # relu is a function, not a module: what it saves (its output, which out saves too) is
    # charged to the block whose forward called it.
    for block in range(3):
        fc = modules[f"blocks.{block}.fc"]
        assert fc["parameters_bytes"] == fc["gradients_bytes"] == (64 * 256 + 256) * 4
        assert fc["optimizer_state_bytes"] == 2 * fc["parameters_bytes"]  # Adam's two moments
        assert modules[f"blocks.{block}"]["activations_bytes"] == BATCH * 32 * 256 * 4
        assert modules[f"blocks.{block}.out"]["activations_bytes"] == 0
    groups = [g["path"] for g in anatomy["groups"]]
    assert set(groups[:3]) == {"blocks.0", "blocks.1", "blocks.2"}  # the largest
    parts = ("activations_bytes", "parameters_bytes", "gradients_bytes", "optimizer_state_bytes")
    accounted = sum(m[k] for m in anatomy["modules"] for k in parts)
    assert anatomy["other_bytes"] == anatomy["peak_bytes"] - accounted
    assert anatomy["other_devices"] == []


def test_fit_gives_the_largest_batch_within_the_budget(recorded: Path) -> None:
    result = report(str(recorded), "--json", "--fit", "2GiB", cwd=recorded.parent)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    fit = data["fit"]
    assert (fit["batch_size"], fit["budget_bytes"], fit["device"]) == (BATCH, 2 << 30, "cpu")
    projected = {int(k): v for k, v in fit["projected_peak_bytes"].items()}
    assert projected[BATCH] == data["anatomy"]["peak_bytes"]
    largest = fit["largest_batch_size"]
    assert largest > BATCH and projected[largest] <= 2 << 30
    bigger = [size for size in projected if size > largest]
    assert all(projected[size] > 2 << 30 for size in bigger)
    assert {c["change"] for c in fit["with_changes"]} <= {"checkpoint", "bf16_autocast"}
    assert all(c["largest_batch_size"] > largest for c in fit["with_changes"])
    # The freed memory malloc kept around the measured peak: one of the heap's readings there
    # (glibc's mallinfo2; none where the C library has no such call).
    heap = load_profile(recorded).tables.get("heap")
    if heap is None or not len(heap):
        assert fit["malloc_kept_bytes"] is None
    else:
        assert fit["malloc_kept_bytes"] in heap["free"].tolist()
        # Its slack (what it kept beyond the room of the iteration's own per-sample storages)
        # carried into the projection as it scales with what the heaps turn over: as measured
        # at the measured batch size, and the difference in each projected peak.
        slack = fit["malloc_slack_bytes"]
        room = fit["per_sample_bytes"] * BATCH  # (per_sample_bytes rounded)
        assert abs(slack - max(0, fit["malloc_kept_bytes"] - room)) <= BATCH
        kept = {int(k): v for k, v in (fit["malloc_slack_projected_bytes"] or {}).items()}
        if not slack:
            assert not kept
            return
        assert kept.keys() == projected.keys()
        assert kept[BATCH] == slack
        for size in projected:
            linear = fit["fixed_bytes"] + fit["per_sample_bytes"] * size
            assert abs(projected[size] - (linear + kept[size] - kept[BATCH])) <= size  # rounding


def test_the_text_report_draws_the_peak_and_says_the_fit_is_a_projection(recorded: Path) -> None:
    result = report(str(recorded), "--fit", "1GiB", cwd=recorded.parent)
    assert result.returncode == 0, result.stderr
    anatomy = main_anatomy(load_profile(recorded))
    assert anatomy is not None and anatomy.peak_bytes is not None
    text = result.stdout
    assert f"What fills the peak: iteration 1, RAM, peak {format_bytes(anatomy.peak_bytes)}" in text
    assert "blocks.0 (Block)" in text and "█" in text
    assert "Will it fit in 1.00 GiB of RAM? A projection from one measured iteration" in text
    assert "Largest batch that fits:" in text and "Left out:" in text
    kept = json.loads(report(str(recorded), "--json", "--fit", "1GiB", cwd=recorded.parent).stdout)
    kept_bytes = kept["fit"]["malloc_kept_bytes"]
    if kept_bytes:
        assert f"malloc kept {format_bytes(kept_bytes)} of freed memory" in text
        largest = kept["fit"]["largest_batch_size"]
        slack = kept["fit"]["malloc_slack_projected_bytes"]
        if slack:
            assert "is projected to change with what the heaps turn over each iteration" in text
            assert f"; {format_bytes(slack[str(largest)])} at a batch of {largest:,}." in text


@pytest.mark.parametrize("size", ["banana", "0", "-3GiB", "12 parsecs"])
def test_a_fit_size_that_is_not_a_size_is_refused_in_one_line(recorded: Path, size: str) -> None:
    result = report(str(recorded), "--fit", size, cwd=recorded.parent)
    assert result.returncode == 2
    assert one_line(result.stderr) and "--fit" in result.stderr
    assert result.stdout == ""


def test_a_run_without_the_anatomy_says_why_there_is_no_projection(tmp_path: Path) -> None:
    write_script(tmp_path, "train.py", TRAINING)
    result = run_memsight(["--anatomy", "off", "train.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    text = report(str(result.profile_path), "--fit", "1GiB", cwd=tmp_path)
    assert "Will it fit: no projection (no anatomy in this profile" in text.stdout
    data = json.loads(
        report(str(result.profile_path), "--json", "--fit", "1GiB", cwd=tmp_path).stdout
    )
    assert data["anatomy"] is None
    assert data["fit"]["unavailable"].startswith("no anatomy in this profile")


def test_the_html_report_draws_the_peak_by_module(recorded: Path) -> None:
    out = recorded.parent / "report.html"
    result = report(str(recorded), "--html", str(out), cwd=recorded.parent)
    assert result.returncode == 0, result.stderr
    page = out.read_text()
    assert '<section id="anatomy">' in page and 'href="#anatomy"' in page
    assert "<th>blocks.0 (Block)</th>" in page
    assert "activations saved for backward" in page
