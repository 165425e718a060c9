"""The built wheel, installed in a fresh virtual environment, is a working memsight.

The wheel is built from this tree and installed without dependencies; the environment sees
the test environment's third-party packages (numpy, PySide6, ...) through a .pth file, but not
this source tree, so everything memsight needs of its own (agent, resources, the fixes and the
report template) must come from the wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.processes import wait_for_setting
from tests.support import ROOT, write_script

# Builds the wheel and installs it in a fresh virtual environment.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )
    [built] = out.glob("memsight-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("env") / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    site = Path(
        subprocess.run(
            [
                str(env / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install",
         "--no-deps", "--quiet", str(wheel)],
        check=True,
        timeout=300,
    )  # fmt: skip
    return env


# Where the installed environment finds memsight's core, and whether it has a top-level
# `app` or `profiler` at all (the working directory is a fresh folder with neither).
FIND_MEMSIGHT = """
import importlib.util, memsight.profiler
print(memsight.profiler.__file__)
print(importlib.util.find_spec("app"))
print(importlib.util.find_spec("profiler"))
"""


def clean_environment() -> dict[str, str]:
    """Ours without PYTHONPATH, which the test session may point at this source tree."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def run(
    env: Path, *args: str, cwd: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = clean_environment()
    environ.update(extra or {})
    return subprocess.run(
        [str(env / "bin" / "memsight"), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_wheel_holds_the_agent_and_every_resource(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in [
        "memsight/__init__.py",
        "memsight/py.typed",
        "memsight/profiler/agent/startup/sitecustomize.py",
        "memsight/profiler/agent/entry.py",
        "memsight/profiler/py.typed",
        "memsight/resources/fixes/mixed-precision.toml",
        "memsight/resources/report/report.html.j2",
        "memsight/resources/report/report.js",
        "memsight/resources/icons/memsight.svg",
        "memsight/resources/memsight.desktop",
        "memsight/app/main.py",
    ]:
        assert needed in names, needed
    # One import name: nothing but memsight/ and its metadata at the top of site-packages.
    top_level = {name.split("/")[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"memsight"}


def test_version_and_help_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    from memsight import profiler

    version = run(installed, "--version", cwd=tmp_path)
    assert version.returncode == 0 and profiler.__version__ in version.stdout
    helped = run(installed, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "memsight run" in helped.stdout


def test_run_report_and_html_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "train.py",
        """
        import torch
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        for step in range(5):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
        """,
    )
    # The target runs in the test environment's python (it has torch); memsight in the wheel's.
    done = run(
        installed,
        "run",
        "--python",
        sys.executable,
        "-o",
        "run.memsight",
        str(script),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    where = subprocess.run(
        [str(installed / "bin" / "python"), "-c", FIND_MEMSIGHT],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=clean_environment(),
    ).stdout.splitlines()  # fmt: skip
    assert str(installed) in where[0] and str(ROOT) not in where[0]
    # The one import name: the install added no generic `app` or `profiler` a user's own
    # packages could collide with.
    assert where[1:] == ["None", "None"]
    report = run(installed, "report", "run.memsight", "--html", "run.html", "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert '"iterations": 5' in report.stdout and '"missing-zero-grad"' in report.stdout
    assert "memsight report" in (tmp_path / "run.html").read_text()


def test_the_gui_starts_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    profile = tmp_path / "run.memsight"
    script = write_script(tmp_path, "hello.py", "print('hello')\n")
    assert (
        run(installed, "run", "-q", "-o", str(profile), str(script), cwd=tmp_path).returncode == 0
    )
    home = tmp_path / "home"
    environ = clean_environment()
    environ.update(
        {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"), "QT_QPA_PLATFORM": "offscreen"}
    )
    gui = subprocess.Popen(
        [str(installed / "bin" / "memsight"), str(profile)], env=environ, cwd=tmp_path
    )
    try:
        wait_for_setting(gui, home, str(profile.resolve()))
    finally:
        gui.terminate()
        gui.wait(10)
