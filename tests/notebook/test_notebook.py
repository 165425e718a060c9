"""`%load_ext memsight` and `%%memsight` in a real Jupyter kernel running a real notebook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memsight.profiler.profile.storage import load_profile
from tests.load import deadline
from tests.support import child_env, run_plain

nbformat = pytest.importorskip("nbformat", reason="the test extra's notebook packages")
nbclient = pytest.importorskip("nbclient", reason="the test extra's notebook packages")

pytestmark = pytest.mark.slow  # a kernel, torch

SETUP = """\
%load_ext memsight
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
history = []
"""
# A planted leak: every step keeps an output with its graph (the activations with it).
LEAK = """\
%%memsight --out leak.memsight --census every-10
for step in range(300):
    out = model(torch.randn(256, 256))
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(model(torch.randn(256, 256)))
"""
AFTER = """\
from torch.optim import optimizer
import sys
print("left", len(optimizer._global_optimizer_pre_hooks) + len(optimizer._global_optimizer_post_hooks),
      torch.nn.Module.train.__module__)
"""
FAILS = """\
%%memsight --out fails.memsight
x = [torch.zeros(1000, 1000) for _ in range(5)]
raise ValueError("the cell fails")
"""
REPORT = "%memsight_report leak.memsight"


def run_notebook(folder: Path, *cells: str) -> Any:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
    client = nbclient.NotebookClient(
        notebook,
        timeout=int(deadline(300)),
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
        allow_errors=True,
    )
    env = child_env()
    client.execute(env=env)
    return notebook


def html_of(cell: Any) -> str:
    return "".join(
        out.get("data", {}).get("text/html", "") for out in cell.outputs if "data" in out
    )


def test_a_cell_with_a_leak_shows_the_chart_and_the_finding_and_leaves_no_hook(
    tmp_path: Path,
) -> None:
    notebook = run_notebook(tmp_path, SETUP, LEAK, AFTER, FAILS, REPORT)
    setup, leak, after, fails, report = notebook.cells
    assert not [o for o in setup.outputs if o.get("output_type") == "error"], setup.outputs
    shown = html_of(leak)
    assert "<svg" in shown and "Process tree" in shown  # the chart, drawn without a script
    assert "growth-per-iteration" in shown  # the planted leak, named
    assert "history" in shown  # its holder, with the line that grows it
    assert "history.append(model(torch.randn(256, 256)))" in shown
    assert "leak.memsight" in shown
    profile = load_profile(tmp_path / "leak.memsight")
    assert profile.info.attached and profile.sample_count > 10
    # The kernel is left as it was: no optimizer hook, Module.train torch's own again.
    printed = "".join(o.get("text", "") for o in after.outputs)
    assert "left 0 torch.nn.modules.module" in printed, after.outputs
    # A cell that raises: the error as IPython shows it, and the profile all the same.
    assert any(o.get("ename") == "ValueError" for o in fails.outputs), fails.outputs
    assert "<svg" in html_of(fails)
    assert load_profile(tmp_path / "fails.memsight").sample_count > 0
    # A saved profile shown again.
    assert "growth-per-iteration" in html_of(report)
    # A terminal IPython gets the text of `memsight report`.
    plain = "".join(o.get("data", {}).get("text/plain", "") for o in leak.outputs if "data" in o)
    assert "memsight profile" in plain and "growth-per-iteration" in plain


def test_in_a_terminal_ipython_the_cell_prints_the_report_text(tmp_path: Path) -> None:
    cell = "%%memsight --out terminal.memsight\nkept = [bytearray(1 << 20) for _ in range(50)]\n"
    ipython = ["-m", "IPython", "--no-banner", "--colors=nocolor", "--ext", "memsight"]
    done = run_plain([*ipython, "-c", cell], tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "memsight profile" in done.stdout and "Peaks" in done.stdout, done.stdout
    assert "<svg" not in done.stdout  # text, not the notebook's HTML
    assert load_profile(tmp_path / "terminal.memsight").sample_count > 0


def test_a_cell_stopped_with_the_stop_button_still_leaves_its_profile(tmp_path: Path) -> None:
    # The stop button interrupts the kernel (SIGINT: KeyboardInterrupt in the cell); nbclient
    # does the same to a cell that runs past its timeout.
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("%load_ext memsight\nimport time"),
        nbformat.v4.new_code_cell(
            "%%memsight --out stopped.memsight\nkept = []\nwhile True:\n"
            "    kept.append(bytearray(1 << 16))\n    time.sleep(0.01)\n"
        ),
    ]
    client = nbclient.NotebookClient(
        notebook,
        timeout=int(deadline(20)),
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
        allow_errors=True,
        interrupt_on_timeout=True,
    )
    client.execute(env=child_env())
    stopped = notebook.cells[1]
    assert any(o.get("ename") == "KeyboardInterrupt" for o in stopped.outputs), stopped.outputs
    assert "<svg" in html_of(stopped)
    profile = load_profile(tmp_path / "stopped.memsight")
    assert profile.sample_count > 10 and profile.damaged is None
