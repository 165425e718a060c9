from __future__ import annotations

import tomllib

from tests.support import ROOT


def test_every_package_in_the_tree_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("app", "profiler")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed
    assert config["package-dir"]["memsight_resources"] == "resources"
