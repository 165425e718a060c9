"""What each example expects: read from its `# memsight-expect:` / `# memsight-options:` lines.

The test suite (tests/test_examples.py, tests/gpu/) and the examples README use this, so an
example is described in one place: its own header.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Example:
    path: Path
    expect: frozenset[str]  # rule ids, exactly; empty for clean controls
    options: tuple[str, ...]  # extra `memsight run` options
    gpu: bool
    # Rule ids written with a trailing "?": findings that may or may not come, because what
    # they read varies from run to run (how the C allocator places and returns memory).
    may: frozenset[str] = frozenset()
    # From `# memsight-where: HOLDER | CODE`: a finding's first location names HOLDER (may be
    # empty) and points at the source line CODE of the example (the line that adds to the
    # holder, the forward call that ran with autograd on, the line that raised).
    where: tuple[str, str] | None = None

    @property
    def name(self) -> str:
        return self.path.relative_to(EXAMPLES).as_posix()


def read_example(path: Path) -> Example:
    expect: frozenset[str] | None = None
    may: frozenset[str] = frozenset()
    where: tuple[str, str] | None = None
    options: tuple[str, ...] = ()
    for line in path.read_text().splitlines():
        if line.startswith("# memsight-expect:"):
            value = line.split(":", 1)[1].strip()
            ids = [] if value == "none" else [v.strip() for v in value.split(",")]
            expect = frozenset(i for i in ids if not i.endswith("?"))
            may = frozenset(i.removesuffix("?") for i in ids if i.endswith("?"))
        elif line.startswith("# memsight-where:"):
            holder, _, code = line.split(":", 1)[1].partition("|")
            where = (holder.strip(), code.strip())
        elif line.startswith("# memsight-options:"):
            options = tuple(shlex.split(line.split(":", 1)[1]))
    if expect is None:
        raise ValueError(f"{path}: no '# memsight-expect:' line")
    return Example(path, expect, options, path.parent.name == "gpu", may, where)


def examples(gpu: bool = False) -> list[Example]:
    folder = EXAMPLES / "gpu" if gpu else EXAMPLES
    return [read_example(p) for p in sorted(folder.glob("*.py")) if p.name != "catalog.py"]
