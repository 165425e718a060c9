"""Build the standalone Linux app: python packaging/build.py

Produces dist/memsight/ (the app folder: `memsight` inside starts the GUI, and is the whole
command line too), the desktop entry, icons and an install script inside it, and a tarball
dist/memsight-VERSION-linux-ARCH.tar.gz. Needs the build tools of packaging/requirements.txt
in the environment memsight is installed in (pip install -e . -r packaging/requirements.txt).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def add_desktop_files(app: Path) -> None:
    """Desktop entry, icons and MIME type in the XDG layout, plus the script that installs them."""
    share = app / "share"
    (share / "applications").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "resources" / "memsight.desktop", share / "applications")
    (share / "mime" / "packages").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "resources" / "mime" / "memsight.xml", share / "mime" / "packages")
    for size in ICON_SIZES:
        folder = share / "icons" / "hicolor" / f"{size}x{size}" / "apps"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "resources" / "icons" / f"memsight-{size}.png", folder / "memsight.png")
    scalable = share / "icons" / "hicolor" / "scalable" / "apps"
    scalable.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "resources" / "icons" / "memsight.svg", scalable / "memsight.svg")
    shutil.copy(PACKAGING / "install.sh", app / "install.sh")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dist", type=Path, default=ROOT / "dist", help="output folder (default dist/)"
    )
    parser.add_argument("--no-tarball", action="store_true", help="leave out the .tar.gz")
    args = parser.parse_args()
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        print(
            "PyInstaller is not installed here: pip install -r packaging/requirements.txt",
            file=sys.stderr,
        )
        return 2
    from memsight import profiler

    started = time.monotonic()
    work = ROOT / "build" / "pyinstaller"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--clean",
            "--log-level",
            "WARN",
            "--distpath",
            str(args.dist),
            "--workpath",
            str(work),
            str(PACKAGING / "memsight.spec"),
        ],
        check=True,
        cwd=ROOT,
    )
    app = args.dist / "memsight"
    add_desktop_files(app)
    built = time.monotonic() - started
    print(f"built {app} in {built:.0f} s: {folder_size(app) / 1e6:.0f} MB")
    if not args.no_tarball:
        name = f"memsight-{profiler.__version__}-linux-{platform.machine()}"
        tarball = args.dist / f"{name}.tar.gz"
        with tarfile.open(tarball, "w:gz") as tar:
            tar.add(app, arcname=name)
        print(f"packed {tarball}: {tarball.stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
