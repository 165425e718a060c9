from __future__ import annotations

import sys
from pathlib import Path

from tests.support import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI (a dependency below 3.11)
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]


def test_every_package_in_the_tree_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(("memsight", *init.parent.relative_to(ROOT).parts))
        for top in ("app", "profiler")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed
    # One import name: every package installs under memsight (memsight/__init__.py).
    assert {"memsight", "memsight.app", "memsight.profiler", "memsight.resources"} <= listed
    assert all(name.split(".")[0] == "memsight" for name in listed)
    assert config["package-dir"] == {
        "memsight": "memsight",
        "memsight.app": "app",
        "memsight.profiler": "profiler",
        "memsight.resources": "resources",
    }


def test_a_checkout_imports_as_installed() -> None:
    # In the repository memsight/app, memsight/profiler and memsight/resources are links to the
    # top-level folders, so tools that read the tree (mypy, import-linter, a plain `python`
    # started in the checkout) see the package as it installs.
    for name in ("app", "profiler", "resources"):
        link = ROOT / "memsight" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), name


def test_the_desktop_entry_names_the_app_and_an_icon_that_exists() -> None:
    import configparser

    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # type: ignore[assignment,method-assign]
    entry.read(ROOT / "resources" / "memsight.desktop")
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application" and desktop["Name"] == "memsight"
    assert desktop["Exec"] == "memsight %f" and desktop["Icon"] == "memsight"
    assert "application/x-memsight-profile" in desktop["MimeType"]
    icons = ROOT / "resources" / "icons"
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        png = (icons / f"memsight-{size}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        assert (width, height) == (size, size)
    import xml.etree.ElementTree as ET

    assert ET.parse(icons / "memsight.svg").getroot().tag.endswith("svg")
    mime = ET.parse(ROOT / "resources" / "mime" / "memsight.xml").getroot()
    assert "*.memsight" in ET.tostring(mime).decode()


def test_install_sh_puts_the_entry_where_desktops_look(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = dict(
        os.environ, PREFIX=str(tmp_path), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    )
    done = subprocess.run(
        [str(ROOT / "packaging" / "install.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    entry = (tmp_path / "share" / "applications" / "memsight.desktop").read_text()
    memsight = Path(sys.executable).parent / "memsight"
    assert f'Exec="{memsight}" %f' in entry
    assert (tmp_path / "share" / "icons" / "hicolor" / "48x48" / "apps" / "memsight.png").is_file()
    assert (tmp_path / "share" / "mime" / "packages" / "memsight.xml").is_file()
