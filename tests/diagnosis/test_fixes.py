"""The fixes knowledge base: complete, parseable, and every fix a rule names exists."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from memsight.profiler.diagnosis import RULE_IDS
from memsight.profiler.diagnosis.fixes import FixError, all_fixes, fixes_dir, parse_fix
from memsight.profiler.diagnosis.rules import ALL_RULES

REQUIRED = {
    "smaller-batch",
    "gradient-accumulation",
    "mixed-precision",
    "activation-checkpointing",
    "no-grad-inference",
    "detach-for-logging",
    "del-and-scope",
    "zero-grad-set-to-none",
    "dataset-on-cpu-pinned",
    "allocator-config",
    "empty-cache",
    "dataloader-worker-memory",
}


def test_every_fix_the_issue_asks_for_is_there_and_complete() -> None:
    fixes = all_fixes()
    assert set(fixes) >= REQUIRED
    for fix in fixes.values():
        ast.parse(fix.before)
        ast.parse(fix.after)
        assert fix.before != fix.after
        assert len(fix.title) <= 70 and fix.summary and fix.why and fix.tradeoff
        # PyTorch's documentation; Python's own for the fixes about a script that did not run;
        # glibc's manual and the Linux man-pages for the C allocator's settings
        official = (
            "https://pytorch.org/",
            "https://docs.python.org/3/",
            "https://www.gnu.org/software/libc/manual/",
            "https://man7.org/linux/man-pages/",
        )
        assert all(d.url.startswith(official) for d in fix.docs), fix.id


def test_every_fix_a_rule_names_exists() -> None:
    named = set()
    for rule in ALL_RULES:  # every rule diagnose() runs, from the registry
        for node in ast.walk(ast.parse(inspect.getsource(rule))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"[a-z]+(-[a-z]+)+", node.value)
            ):
                named.add(node.value)
    named -= set(RULE_IDS)
    assert named, "the rules name their fixes as string literals"
    assert named <= set(all_fixes()), named - set(all_fixes())


@pytest.mark.parametrize(
    "text, problem",
    [
        ('id = "broken"\ntitle = "x"\n', "missing"),
        ("id = [", "broken.toml"),
        (
            'id = "other"\n'
            + "".join(
                f'{k} = "x"\n' for k in ("title", "summary", "why", "before", "after", "tradeoff")
            )
            + "docs = [{title='t', url='u'}]\n",
            "does not match",
        ),
    ],
)
def test_a_bad_fix_file_is_named_with_its_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(FixError, match=problem):
        parse_fix(path)


def test_the_fixes_folder_is_the_shipped_one() -> None:
    assert (fixes_dir() / "mixed-precision.toml").is_file()
