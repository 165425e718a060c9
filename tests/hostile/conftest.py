from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import run_memsight, write_script

# Two small real recordings: a loop that prints and allocates, and a script that dies of an
# exception. Made once per test session; their bytes seed the mutants.
LOOP = """
import time
blocks = []
for i in range(30):
    blocks.append(bytearray(200_000))
    print("step", i, "loss", 1 / (i + 1))
    time.sleep(0.01)
"""
FAILS = """
import time
time.sleep(0.3)
raise ValueError("the end")
"""


@pytest.fixture(scope="session")
def recorded_seeds(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    folder = tmp_path_factory.mktemp("recorded")
    seeds: list[bytes] = []
    for name, source in (("loop", LOOP), ("fails", FAILS)):
        script = write_script(folder, f"{name}.py", source)
        result = run_memsight([str(script)], cwd=folder, out=folder / f"{name}.memsight")
        assert result.profile_path is not None and result.profile_path.exists(), result.stderr
        seeds.append(Path(result.profile_path).read_bytes())
    return seeds
