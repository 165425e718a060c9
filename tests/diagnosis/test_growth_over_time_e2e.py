"""growth-per-iteration over time, on real runs with no module and no optimizer.

Tensor code with no iterations to count: the rule fits the RAM timeline itself, or malloc's
live allocations where RSS climbs in steps. The leak is paced by the clock (40 spectra a
second for 7 s) so that a loaded machine does not bend the line. On one too loaded to keep that
pace the loop catches up and overruns its 7 s, so the script prints how many it made and in how
long, and the rate is checked against that.
Synthetic look-alikes are in test_loop_shapes.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memsight.profiler.diagnosis import diagnose
from tests.support import run_memsight, write_script

pytestmark = pytest.mark.slow

FEATURES = """
import atexit
import sys
import time

import torch

keep_tensors = sys.argv[1].startswith("leak")
kept = []
if sys.argv[1] == "leak-slow-exit":
    # What a busy machine's exit looks like: the kept memory is freed, then seconds pass
    # before the process is gone.
    atexit.register(lambda: (kept.clear(), time.sleep(2.5)))
start = time.monotonic()
while (elapsed := time.monotonic() - start) < 7.0:
    while len(kept) < elapsed * 40:
        block = torch.randn(256, 1024)  # 1 MiB of signal
        spectrum = torch.fft.rfft(block, dim=1).abs()
        kept.append(spectrum if keep_tensors else float(spectrum.mean()))
    time.sleep(0.005)
print(f"made {len(kept)} in {time.monotonic() - start:.3f} s")
"""
SPECTRUM_BYTES = 256 * 513 * 4  # float32 magnitudes of a 256 x 1024 block's rfft


@pytest.mark.parametrize("mode", ["leak", "leak-slow-exit", "clean"])
def test_tensor_code_without_a_module_is_judged_over_time(mode: str, tmp_path: Path) -> None:
    write_script(tmp_path, "features.py", FEATURES)
    result = run_memsight(["features.py", mode], tmp_path)
    assert result.returncode == 0, result.stderr
    findings = diagnose(result.profile()).findings
    growth = [f for f in findings if f.rule == "growth-per-iteration"]
    if mode == "clean":
        assert findings == []
        return
    # On failure, say what the run was judged instead.
    assert len(growth) == 1, [(f.rule, f.evidence.numbers) for f in findings]
    [finding] = growth
    numbers = finding.evidence.numbers
    assert numbers["iterations_are"] is None and finding.evidence.iterations is None
    # 40 kept spectra a second of 256 x 513 float32 (513 KiB): 20 MiB/s, or what the script
    # managed on a machine too busy for that pace. RSS climbs faster (the holes of freed
    # temporaries between them) but unevenly: malloc later carves kept tensors out of those
    # holes and RSS stands still a while, so the rule may judge on the live allocations instead
    # (judged_on), whose rate is the kept tensors' own.
    made, seconds = result.stdout.split("made ")[1].split()[0:3:2]
    kept_rate = int(made) * SPECTRUM_BYTES / float(seconds)
    rate, r2 = numbers["bytes_per_second"], numbers["r2"]
    assert isinstance(rate, (int, float)) and isinstance(r2, (int, float))
    assert rate > 0.75 * kept_rate and r2 > 0.9, (made, rate, r2)
    assert "over time" in finding.title
    # No iteration to take censuses at: they are taken on the clock, and name the list and
    # the line that appends to it.
    assert finding.where, finding.where_note
    assert finding.where[0].code is not None and finding.where[0].code.startswith("kept.append(")
    assert finding.where[0].holder is not None and "`kept`" in finding.where[0].holder
