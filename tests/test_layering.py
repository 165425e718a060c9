"""Layering rules from docs/architecture.md, checked in fresh interpreters."""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from memsight import profiler
from tests.support import ROOT


def all_profiler_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(profiler.__path__, "memsight.profiler."))


def test_no_profiler_module_imports_qt() -> None:
    modules = all_profiler_modules()
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6'))\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"
    assert len(modules) > 10


# What runs inside the user's interpreter: the agent and the core modules it ships with.
AGENT_SOURCES = [
    *sorted((ROOT / "profiler" / "agent").rglob("*.py")),
    ROOT / "profiler" / "protocol.py",
    ROOT / "profiler" / "units.py",
    ROOT / "profiler" / "codefiles.py",
]


def test_the_agent_and_protocol_need_nothing_beyond_the_standard_library() -> None:
    # Import the agent as its sitecustomize does, with numpy and psutil made unimportable.
    code = f"""
import importlib, importlib.util, os, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numpy", "psutil", "torch", "PySide6", "pynvml"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
root = {str(ROOT / "profiler")!r}
spec = importlib.util.spec_from_file_location("_memsight_profiler", os.path.join(root, "__init__.py"), submodule_search_locations=[root])
pkg = importlib.util.module_from_spec(spec); sys.modules["_memsight_profiler"] = pkg; spec.loader.exec_module(pkg)
for name in ("protocol", "units", "codefiles", "agent", "agent.entry", "agent.client", "agent.cuda", "agent.oom"):
    importlib.import_module("_memsight_profiler." + name)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.stdout.strip() == "ok", out.stderr


def test_agent_and_protocol_sources_parse_as_python_3_9() -> None:
    for path in AGENT_SOURCES:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))


def test_the_agent_imports_only_relatively_within_memsight() -> None:
    # Under its private package name the agent cannot import `memsight.profiler.*` absolutely.
    for path in AGENT_SOURCES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith(("memsight", "profiler", "app")), (
                    f"{path.name}: {node.module}"
                )
            if isinstance(node, ast.Import):
                assert not any(
                    a.name.startswith(("memsight", "profiler", "app")) for a in node.names
                ), path.name


# An import statement inside a string: code a test or a benchmark runs in another process.
_CODE_IMPORT = re.compile(r"(?:^|[\n;]\s*)(?:from|import)\s+((?:\w+\s*,\s*)*\w+(?:\.\w+)*)")
# The one place where `profiler` and `app` are meant bare: a user's own modules of those names.
_USERS_MODULES = Path("tests/launch/test_transparency.py")


def _absolute_imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if path.relative_to(ROOT) == _USERS_MODULES:
                continue
            for names in _CODE_IMPORT.findall(node.value):
                yield from (name.strip() for name in names.split(","))


def test_memsight_imports_its_packages_only_under_its_one_name() -> None:
    # memsight installs as `memsight` alone (pyproject.toml): an `import profiler` or `from app
    # import ...` anywhere would work in a checkout and fail in an installed memsight.
    # (ruff's TID251 says the same, but app/ and tests/gui/ may use its banned Qt names.)
    trees = ("app", "profiler", "memsight", "tests", "benchmarks", "packaging")
    sources = [
        p
        for top in trees
        for p in (ROOT / top).rglob("*.py")
        # not a hidden folder's: a virtual environment kept beside a benchmark is not our code
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    ]
    assert len(sources) > 100
    wrong = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sources
        for module in _absolute_imports(path)
        if module.split(".")[0] in ("app", "profiler", "memsight_resources")
    ]
    assert wrong == []


def test_only_app_imports_qt() -> None:
    for path in (ROOT / "profiler").rglob("*.py"):
        source = path.read_text()
        assert "PySide6" not in source and "pyqtgraph" not in source, path


def test_ci_runs_the_readme_setup_and_test_commands_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = _setup_commands(readme)
    assert len(commands) == 2
    for command in commands:
        assert command in ci.splitlines()


def _setup_commands(readme: str) -> list[str]:
    """The two commands in the README's setup block (```sh fenced, after '## Setup')."""
    section = readme.split("## Setup", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    return [
        line.strip()
        for line in block.strip().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def test_no_test_module_imports_another() -> None:
    # Shared helpers live in support modules (tests/support.py, tests/processes.py,
    # tests/factories.py, tests/gui/support.py) or conftest.py fixtures, never in a test module.
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for module in modules:
                assert not module.rpartition(".")[2].startswith("test_"), f"{path}: {module}"


def test_the_standalone_build_ships_every_core_module_the_agent_imports() -> None:
    # The frozen app ships the agent as plain source (packaging/memsight.spec): a core module
    # it imports but the build leaves out breaks every profiled run of the standalone build.
    spec = (ROOT / "packaging" / "memsight.spec").read_text()
    for path in AGENT_SOURCES:
        if path.parent == ROOT / "profiler":
            assert f'ROOT / "profiler" / "{path.name}"' in spec, path.name
