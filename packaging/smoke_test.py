"""Smoke-test a standalone build: python packaging/smoke_test.py [dist/memsight]

Checks, with the frozen executable only (no memsight in the Python that runs the targets):
--version and --help; a headless recording of a small PyTorch training script run by a
Python of the user's (--python, default: the one running this test), read back with the
frozen `memsight report --json --html`; a recording with the default interpreter (python3 on
PATH); the recording process the app starts for each run (--recorder-host); and the GUI
opening a profile offscreen. Prints each step; exits 1 at the first failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = """
import torch
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(6):
    optimizer.zero_grad()
    model(torch.randn(8, 16)).pow(2).mean().backward()
    optimizer.step()
print("trained")
"""


class Failed(Exception):
    pass


def check(condition: bool, what: str, detail: str = "") -> None:
    if not condition:
        raise Failed(f"{what}\n{detail}".strip())
    print(f"ok   {what}")


def run(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None, **kw: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, **kw)  # type: ignore[call-overload]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def smoke(app: Path, python: str, work: Path) -> None:
    exe = str(app / "memsight")
    version = run([exe, "--version"], work, clean_env())
    check(
        version.returncode == 0 and "memsight" in version.stdout,
        "memsight --version",
        version.stderr,
    )
    helped = run([exe, "--help"], work, clean_env())
    check(
        helped.returncode == 0 and "memsight run" in helped.stdout, "memsight --help", helped.stderr
    )

    (work / "train.py").write_text(TRAIN)
    started = time.monotonic()
    recorded = run(
        [exe, "run", "-q", "--python", python, "-o", "train.memsight", "train.py"],
        work,
        clean_env(),
    )
    check(
        recorded.returncode == 0 and "trained" in recorded.stdout,
        f"memsight run --python {python} train.py ({time.monotonic() - started:.1f} s)",
        recorded.stderr,
    )
    report = run(
        [exe, "report", "train.memsight", "--json", "--html", "train.html"], work, clean_env()
    )
    data = json.loads(report.stdout) if report.returncode == 0 else {}
    check(
        data.get("run", {}).get("iterations") == 6,
        "report --json: 6 optimizer steps seen by the agent",
        report.stderr,
    )
    check(
        "memsight report" in (work / "train.html").read_text(),
        "report --html written from the build's resources",
    )

    (work / "hello.py").write_text("import sys\nprint('hello from', sys.executable)\n")
    default = run([exe, "run", "-q", "-o", "hello.memsight", "hello.py"], work, clean_env())
    check(
        default.returncode == 0 and "hello from" in default.stdout,
        "memsight run with python3 from PATH",
        default.stderr,
    )

    request = {
        "target": str(work / "hello.py"), "args": [], "module": False, "cwd": str(work),
        "python": python, "env": None, "interval_ms": 10.0, "hooks": True,
        "ram_budget_bytes": None, "out": str(work / "host.memsight"),
    }  # fmt: skip
    host = subprocess.run(
        [exe, "--recorder-host"],
        cwd=work,
        env=clean_env(),
        input=(json.dumps(request) + "\n").encode(),
        capture_output=True,
        timeout=120,
    )
    check(
        host.returncode == 0
        and len(host.stdout) > 100
        and (work / "host.memsight").stat().st_size > 100,
        "the recording process the app starts (--recorder-host): frames out, profile written",
        host.stderr.decode(errors="replace"),
    )

    prefix = work / "prefix"
    installed = run([str(app / "install.sh")], work, clean_env(PREFIX=str(prefix)))
    entry = prefix / "share" / "applications" / "memsight.desktop"
    check(
        installed.returncode == 0 and f'Exec="{exe}" %f' in entry.read_text(),
        "install.sh installs the desktop entry, icons and file type",
        installed.stderr,
    )

    home = work / "home"
    gui = subprocess.Popen(
        [exe, str(work / "train.memsight")],
        cwd=work,
        env=clean_env(
            HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), QT_QPA_PLATFORM="offscreen"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    settings = home / "config" / "memsight" / "memsight.conf"
    deadline = time.monotonic() + 60
    opened = False
    try:
        while time.monotonic() < deadline and gui.poll() is None:
            if settings.exists() and "train.memsight" in settings.read_text():
                opened = True
                break
            time.sleep(0.1)
    finally:
        gui.terminate()
        output = gui.communicate(timeout=10)[0].decode(errors="replace")
    check(opened, "the GUI opens a profile (offscreen)", output[-2000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("app", nargs="?", type=Path, default=ROOT / "dist" / "memsight")
    parser.add_argument("--python", default=sys.executable, help="a Python with torch, the user's")
    args = parser.parse_args()
    if not (args.app / "memsight").is_file():
        print(f"no build at {args.app}: run python packaging/build.py first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="memsight-smoke-") as tmp:
        try:
            smoke(args.app.resolve(), args.python, Path(tmp))
        except Failed as exc:
            print(f"FAIL {exc}", file=sys.stderr)
            return 1
    print("PASS standalone build smoke test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
