"""`memsight.record` in real programs: a script, a decorator, a test under pytest, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memsight
from memsight.profiler.profile.storage import load_profile
from tests.support import run_cli, run_plain, write_script

pytestmark = pytest.mark.slow  # real programs with torch

LEAKY_SCRIPT = """\
import sys
import torch
import memsight

model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []


def train(steps):
    for step in range(steps):
        loss = model(torch.randn(256, 256)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(model(torch.randn(256, 256)))  # the leak


with memsight.record("block.memsight", census="every-10") as recording:
    train(250)
print("saved", recording.path.name)

from torch.optim import optimizer
hooks = len(optimizer._global_optimizer_pre_hooks) + len(optimizer._global_optimizer_post_hooks)
print("hooks after", hooks, torch.nn.Module.train.__module__)

try:
    with memsight.record("raised.memsight"):
        x = torch.zeros(1000, 1000)
        raise ValueError("inside the block")
except ValueError as exc:
    print("raised", exc)

try:
    with memsight.record("outer.memsight"):
        with memsight.record("inner.memsight"):
            pass
except memsight.RecordError as exc:
    print("nested:", exc)


@memsight.record("decorated.memsight", hooks=False)
def step():
    return sum(torch.ones(100).tolist())


print("decorated", step(), step())
"""


def test_a_block_of_a_script_is_an_ordinary_profile_with_the_leak_named(tmp_path: Path) -> None:
    write_script(tmp_path, "train.py", LEAKY_SCRIPT)
    done = run_plain(["train.py"], tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "saved block.memsight" in out
    assert "hooks after 0 torch.nn.modules.module" in out  # nothing of memsight left behind
    assert "raised inside the block" in out  # the block's error is the program's, unchanged
    assert "nested: a memsight recording of this process is already running" in out
    assert "decorated 100.0 100.0" in out
    # What `memsight report` says of the block: its steps, the leak, the holder and its line.
    report = json.loads(run_cli("report", "block.memsight", "--json", cwd=tmp_path).stdout)
    assert report["run"]["iterations"] == 250 and report["run"]["attached"] is True
    growth = [f for f in report["findings"] if f["rule"] == "growth-per-iteration"]
    assert growth, report["findings"]
    assert any(
        "kept" in str(place.get("holder")) and "kept.append" in str(place.get("code"))
        for place in growth[0]["where"]
    ), growth[0]["where"]
    # The recorder was not taken for one of the program's children.
    assert report["children"] == []
    # A block that raised, and a decorated function (each call a recording), are profiles too.
    for name in ("raised.memsight", "decorated.memsight", "outer.memsight"):
        assert load_profile(tmp_path / name).sample_count > 0, name
    assert not (tmp_path / "inner.memsight").exists()


def test_under_pytest_a_test_records_its_block(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "test_model.py",
        """\
        import memsight
        import torch


        def test_forward(tmp_path):
            out = tmp_path / "forward.memsight"
            with memsight.record(out):
                y = torch.nn.Linear(64, 64)(torch.randn(32, 64))
            assert y.shape == (32, 64)
            assert out.stat().st_size > 0
            print("PROFILE", out)
        """,
    )
    pytest_run = ["-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_model.py"]
    done = run_plain(pytest_run, tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    path = next(line.split(" ", 1)[1] for line in done.stdout.splitlines() if "PROFILE" in line)
    assert load_profile(Path(path)).sample_count > 0


def test_bad_settings_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="Censuses are taken"):
        memsight.record(census="sometimes")
    with pytest.raises(ValueError, match="interval_ms"):
        memsight.record(interval_ms=0.01)


def test_the_public_api_is_what_all_names() -> None:
    assert set(memsight.__all__) == {
        "RecordError",
        "__version__",
        "load_ipython_extension",
        "record",
    }
    assert memsight.record.__doc__ and "with memsight.record" in memsight.record.__doc__


def test_inside_memsight_run_a_block_is_not_recorded_twice(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "inner.py",
        """\
        import memsight
        try:
            with memsight.record("inner.memsight"):
                pass
        except memsight.RecordError as exc:
            print("refused:", exc)
        """,
    )
    done = run_cli("run", "-q", "-o", "outer.memsight", "inner.py", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "refused: memsight records this process already" in done.stdout
    assert not (tmp_path / "inner.memsight").exists()
