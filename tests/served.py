"""A real `memsight run --serve 0` of a loop that runs until the test says stop: for the
command line's viewers (tests/remote) and the app's (tests/gui/test_connect.py)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.load import deadline
from tests.support import child_env, memsight_command, write_script

# A training-like loop that goes on until the test says stop (a file appears), then exits 3.
STOPPABLE_LOOP = """\
import os, sys, time
kept = []
step = 0
while not os.path.exists("stop"):
    kept.append(bytearray(64 << 10))
    step += 1
    time.sleep(0.01)
print("steps", step, flush=True)
sys.exit(3)
"""
SERVING = re.compile(r"memsight: serving on (\S+) \(token (\S+)\)")


@dataclass
class Served:
    process: subprocess.Popen[str]
    address: str  # HOST:PORT
    token: str
    profile: Path  # the server's own profile
    folder: Path

    @property
    def host_and_port(self) -> tuple[str, int]:
        host, port = self.address.rsplit(":", 1)
        return host, int(port)

    def stop(self) -> int:
        """End the served run; its exit status (3)."""
        (self.folder / "stop").write_text("")
        return self.process.wait(timeout=deadline(60))


@contextmanager
def served_run(folder: Path) -> Iterator[Served]:
    write_script(folder, "train.py", STOPPABLE_LOOP)
    profile = folder / "served.memsight"
    process = subprocess.Popen(
        memsight_command("run", "-q", "--serve", "0", "-o", profile, "train.py"),
        cwd=folder,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    first = process.stderr.readline()  # printed with -q too: viewers need it
    match = SERVING.match(first)
    assert match, first
    try:
        yield Served(process, match[1], match[2], profile, folder)
    finally:
        (folder / "stop").write_text("")
        process.wait(timeout=deadline(60))
        process.stderr.close()
