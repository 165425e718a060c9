"""Every GPU example, recorded through `memsight run` on a real device, gives exactly its
declared findings (the CPU examples run in tests/test_examples.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.catalog import Example, examples
from tests.support import check_example

# Every GPU example, recorded under `memsight run`.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("example", examples(gpu=True), ids=lambda e: e.name)
def test_gpu_example_gives_exactly_its_findings(example: Example, tmp_path: Path) -> None:
    check_example(example, tmp_path)
