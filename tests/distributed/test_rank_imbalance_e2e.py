"""rank-imbalance end to end: real torchrun jobs of 2 gloo ranks recorded by `memsight run`,
one where rank 0 keeps what it gathers, one clean, and the report that names the rank."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memsight.profiler.diagnosis import diagnose
from tests.support import MEMSIGHT, ROOT, run_memsight

pytestmark = pytest.mark.slow

SCRIPTS = ROOT / "tests" / "clients" / "scripts"
MiB = 1024 * 1024


def torchrun(script: str) -> list[str]:
    return ["-m", "torch.distributed.run", "--nproc_per_node", "2", str(SCRIPTS / script)]


def test_rank_0_keeping_what_it_gathers_is_named_with_the_iteration_it_pulls_away(
    tmp_path: Path,
) -> None:
    traced = run_memsight(torchrun("ddp_gather_rank0.py"), tmp_path, timeout=300)
    assert traced.returncode == 0, traced.stderr[-3000:]
    (found,) = [f for f in diagnose(traced.profile()).findings if f.rule == "rank-imbalance"]
    assert found.severity == "warning"
    assert found.process is not None and found.process.rank == 0
    numbers = found.evidence.numbers
    # 60 tensors of 5 MiB: about 300 MiB above rank 1
    gap = numbers["peak_bytes"] - numbers["others_median_bytes"]  # type: ignore[operator]
    assert 256 * MiB <= gap <= 400 * MiB, numbers
    # It gathers from the end of iteration 11 on: a tenth of 300 MiB three or four steps later
    iteration = int(str(found.evidence.text).rsplit("iteration ", 1)[1])
    assert 11 <= iteration <= 18, found.evidence.text
    # `memsight report --json` says the same, with the rank
    assert traced.profile_path is not None
    out = report_json(traced.profile_path)
    (entry,) = [f for f in out["findings"] if f["rule"] == "rank-imbalance"]
    assert entry["process"]["rank"] == 0
    assert [p["rank"] for p in out["processes"]] == [None, 0, 1]


def test_a_clean_torchrun_job_has_no_finding_at_all(tmp_path: Path) -> None:
    traced = run_memsight(torchrun("ddp_gloo.py"), tmp_path, timeout=300)
    assert traced.returncode == 0, traced.stderr[-3000:]
    findings = diagnose(traced.profile()).findings
    assert findings == [], [f"{f.rule}: {f.heading}" for f in findings]


def report_json(path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [*MEMSIGHT, "report", "--json", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result
