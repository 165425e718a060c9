"""Every CPU example, recorded through `memsight run`, gives exactly the findings it declares.

Triggers fire, clean controls stay quiet: the rules are checked on real PyTorch programs, not
only on synthetic profiles. GPU examples run in tests/gpu/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from examples.catalog import Example, examples
from profiler.diagnosis import diagnose
from tests.support import run_cli, run_memsight

CPU_EXAMPLES = examples()


def test_every_rule_has_an_example() -> None:
    from profiler.diagnosis import RULE_IDS

    covered = {rule for e in CPU_EXAMPLES + examples(gpu=True) for rule in e.expect}
    assert covered == set(RULE_IDS)
    assert any(not e.expect for e in CPU_EXAMPLES), "at least one clean control"


@pytest.mark.parametrize("example", CPU_EXAMPLES, ids=lambda e: e.name)
def test_example_gives_exactly_its_findings(example: Example, tmp_path: Path) -> None:
    check_example(example, tmp_path)


def check_example(example: Example, tmp_path: Path) -> None:
    """Record the example with `memsight run`; its findings must be exactly the declared ones,
    in the diagnosis and in `memsight report --json`."""
    script = tmp_path / example.path.name
    shutil.copy(example.path, script)
    result = run_memsight([*example.options, str(script)], tmp_path, timeout=180)
    assert result.returncode in (0, 1), result.stderr
    diagnosis = diagnose(result.profile())
    assert not diagnosis.failed
    found = {f.rule for f in diagnosis.findings}
    details = "\n".join(f"{f.rule}: {f.evidence.text}" for f in diagnosis.findings)
    assert found == example.expect, details
    if not example.expect:
        return
    report = run_cli("report", "--json", str(result.profile_path), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    reported = json.loads(report.stdout)["findings"]
    assert {f["rule"] for f in reported} == example.expect
    for finding in reported:
        assert finding["evidence"]["text"] and finding["fixes"], finding


def test_the_examples_readme_lists_every_example() -> None:
    readme = (CPU_EXAMPLES[0].path.parent / "README.md").read_text()
    for example in CPU_EXAMPLES + examples(gpu=True):
        assert f"`{example.name}`" in readme or f"`{example.name}` (" in readme, example.name
