"""docs/architecture.md stays the map of the code: every module is named in its layout row,
every option of every command is in the command-line contract, and every package of the core
has its place in the import contracts that `lint-imports` checks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from memsight.profiler.commands import compare, export, merge, report, run
from tests.support import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI (a dependency below 3.11)
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def layout_rows() -> dict[str, str]:
    """The layout tables' rows: `path` -> what the row says of it."""
    rows = {}
    for line in ARCHITECTURE.splitlines():
        match = re.match(r"\| `([^`]+)` \| (.*)\|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def source_modules() -> list[Path]:
    """Every module of the core and the app (the agent's startup folder is not a package)."""
    found = []
    for folder in ("profiler", "app"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name != "__init__.py" and "startup" not in path.parts:
                found.append(path.relative_to(ROOT))
    return found


def is_named(module: Path, rows: dict[str, str]) -> bool:
    path = module.as_posix()
    if path in rows:
        return True
    folders = [key for key in rows if path.startswith(key.rstrip("/") + "/")]
    if not folders:
        return False
    folder = max(folders, key=len)
    row = rows[folder]
    inside = path[len(folder.rstrip("/")) + 1 :]
    # A module by its path within the folder or its name; a folder of one kind of module
    # (`rules/`: one module per rule) by the folder.
    parts = inside.split("/")
    names = [f"`{inside}`", f"`{module.name}`"]
    names += [f"`{'/'.join(parts[: i + 1])}/`" for i in range(len(parts) - 1)]
    return any(name in row for name in names)


def test_every_module_is_named_in_its_layout_row() -> None:
    rows = layout_rows()
    modules = source_modules()
    missing = [m.as_posix() for m in modules if not is_named(m, rows)]
    assert len(modules) > 100
    assert missing == [], "not named in docs/architecture.md's layout: " + ", ".join(missing)


def test_a_module_left_out_of_the_map_is_found() -> None:
    rows = layout_rows()
    assert is_named(Path("profiler/recorder/session.py"), rows)
    assert not is_named(Path("profiler/recorder/unnamed_new_module.py"), rows)
    assert not is_named(Path("profiler/unnamed_new_module.py"), rows)


def command_line_contract() -> str:
    start = ARCHITECTURE.index("### Command line")
    return ARCHITECTURE[start : ARCHITECTURE.index("### Exit statuses", start)]


@pytest.mark.parametrize(
    ("command", "module"),
    [("run", run), ("report", report), ("export", export), ("compare", compare), ("merge", merge)],
)
def test_every_option_of_every_command_is_in_the_command_line_contract(
    command: str, module: object
) -> None:
    contract = command_line_contract()
    assert f"memsight {command} " in contract
    parser = module.build_parser()  # type: ignore[attr-defined]
    options = [
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    ]
    assert options
    missing = [o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", contract)]
    assert missing == [], f"memsight {command}: not in the command-line contract: {missing}"


def test_every_package_of_the_core_has_its_place_in_the_import_contracts() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    layers = contracts["directions"]["layers"]
    placed = {name.strip() for layer in layers for name in layer.split("|")}
    top_level = {
        path.stem if path.is_file() else path.name
        for path in (ROOT / "profiler").iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    # The agent is held by its own contract (agent-is-a-guest): it imports nothing of these.
    assert placed == top_level - {"agent"}
    assert "memsight.profiler.agent" in contracts["agent-is-a-guest"]["source_modules"]
