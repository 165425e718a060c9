"""The app says which system libraries it lacks, instead of Qt's plugin error and abort."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsight.app.main import X11_LIBRARIES, missing_x11_packages
from tests.support import child_env, run_cli


def without(*missing: str):  # type: ignore[no-untyped-def]
    return lambda name: None if name in missing else f"lib{name}.so.0"


def test_every_library_present_is_nothing_missing() -> None:
    assert missing_x11_packages({"DISPLAY": ":0"}, without()) == []


def test_a_missing_library_is_named_by_its_package() -> None:
    found = missing_x11_packages({"DISPLAY": ":0"}, without("xcb-cursor", "xkbcommon-x11"))
    assert found == ["libxcb-cursor0", "libxkbcommon-x11-0"]


@pytest.mark.parametrize(
    "environ",
    [{"QT_QPA_PLATFORM": "offscreen"}, {"QT_QPA_PLATFORM": "wayland"}, {"WAYLAND_DISPLAY": "w-0"}],
)
def test_no_x11_plugin_needs_none_of_them(environ: dict[str, str]) -> None:
    assert missing_x11_packages(environ, without(*X11_LIBRARIES)) == []


@pytest.mark.slow
def test_the_app_says_it_in_one_line_and_exits(tmp_path: Path) -> None:
    # A library folder that shadows none: what is missing is forced through the variable
    # the check reads, in a real `memsight` process.
    sitecustomize = tmp_path / "site" / "sitecustomize.py"
    sitecustomize.parent.mkdir()
    sitecustomize.write_text(
        "import ctypes.util\n"
        "real = ctypes.util.find_library\n"
        "ctypes.util.find_library = lambda n: None if n == 'xcb-cursor' else real(n)\n"
    )
    env = child_env({"DISPLAY": ":0"})
    env.pop("QT_QPA_PLATFORM", None)
    env["PYTHONPATH"] = f"{sitecustomize.parent}:{env['PYTHONPATH']}"
    done = run_cli(cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "libxcb-cursor0" in done.stderr and "apt-get install" in done.stderr
