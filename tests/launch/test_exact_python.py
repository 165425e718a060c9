"""Field by field, a script under `memsight run` observes what it observes under plain python.

The probe prints everything a script can easily look at about how it was started; the same
probe runs under both, with the same stdin, stdout and stderr, and the two reports must be
equal. What stays visible by necessity is listed in docs/instrumentation.md and checked at the
end of this file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memsight.profiler.profile.storage import load_profile
from tests.processes import PtyProcess
from tests.support import MEMSIGHT, PYTHON, child_env, run_memsight, run_plain, write_script

pytestmark = pytest.mark.slow

PROBE = r"""
import faulthandler, io, json, os, stat, sys, tempfile, traceback, warnings

def fd_kind(fd):
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return "closed"
    for name in ("S_ISCHR", "S_ISFIFO", "S_ISREG", "S_ISSOCK"):
        if getattr(stat, name)(mode):
            return name
    return "other"

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    warnings.warn("top level", stacklevel=2)

with tempfile.TemporaryFile("w+") as dump:
    faulthandler.dump_traceback(dump, all_threads=False)
    dump.seek(0)
    fault = dump.read()

try:
    raise RuntimeError("caught")
except RuntimeError as exc:
    caught_attrs = sorted(vars(exc))

size = None
try:
    size = list(os.get_terminal_size(1))
except OSError:
    pass

with open("/proc/self/cmdline", "rb") as f:
    cmdline = f.read().split(b"\0")[:-1]

report = {
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "cmdline": [c.decode() for c in cmdline],
    "executable": sys.executable,
    "file": __file__,
    "name": __name__,
    "path": sys.path,
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "fds": [fd_kind(fd) for fd in (0, 1, 2)],
    "isatty": [os.isatty(fd) for fd in (0, 1, 2)],
    "terminal_size": size,
    "stack": [list(frame[:3]) for frame in traceback.extract_stack()],
    "stack_text": "".join(traceback.format_stack()),
    "warning": [caught[0].filename, caught[0].lineno] if caught else None,
    "faulthandler": fault,
    "caught_exception_attrs": caught_attrs,
    "sitecustomize": repr(sys.modules.get("sitecustomize")),
    "flags": [getattr(sys.flags, n) for n in ("safe_path", "isolated", "no_site")],
    "stdin": sys.stdin.read() if not os.isatty(0) else None,
}
print(json.dumps(report, sort_keys=True))
"""


def _both(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    # The interpreter is named, so both runs start the same executable path.
    traced = run_memsight(["--python", PYTHON, *args], cwd, stdin="one\ntwo\n", env=env)
    plain = run_plain(args, cwd, stdin="one\ntwo\n", env=env)
    assert traced.returncode == plain.returncode == 0, traced.stderr
    assert traced.stderr == plain.stderr
    return json.loads(traced.stdout), json.loads(plain.stdout)


def test_every_field_a_script_can_see_matches_plain_python(tmp_path: Path) -> None:
    write_script(tmp_path, "scripts/probe.py", PROBE)
    traced, plain = _both(["scripts/probe.py", "--lr", "0.1", "-m", "x"], tmp_path)
    for key in plain:
        assert traced[key] == plain[key], key
    assert traced["argv"] == ["scripts/probe.py", "--lr", "0.1", "-m", "x"]
    assert traced["orig_argv"] == [PYTHON, "scripts/probe.py", "--lr", "0.1", "-m", "x"]
    assert traced["fds"] == ["S_ISFIFO", "S_ISFIFO", "S_ISFIFO"]
    assert traced["caught_exception_attrs"] == []
    assert traced["warning"] == ["sys", 1]


def test_python_dash_m_matches_field_by_field(tmp_path: Path) -> None:
    write_script(tmp_path, "pkg/__init__.py", "")
    write_script(tmp_path, "pkg/probe.py", PROBE)
    traced, plain = _both(["-m", "pkg.probe", "a"], tmp_path)
    assert traced == plain
    assert traced["orig_argv"] == [PYTHON, "-m", "pkg.probe", "a"]


def test_pythonsafepath_and_a_users_pythonpath_give_the_same_sys_path(tmp_path: Path) -> None:
    write_script(tmp_path, "probe.py", PROBE)
    (tmp_path / "lib").mkdir()
    env = child_env({"PYTHONSAFEPATH": "1"})
    env["PYTHONPATH"] = str(tmp_path / "lib") + os.pathsep + env["PYTHONPATH"]
    traced, plain = _both(["probe.py"], tmp_path, env=env)
    assert traced == plain
    assert traced["path"][0] == str(tmp_path / "lib")
    assert traced["env"]["PYTHONPATH"] == env["PYTHONPATH"]


def test_an_existing_sitecustomize_still_runs_and_is_the_one_the_script_sees(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    write_script(site, "sitecustomize.py", "import builtins\nbuiltins.SITE_RAN = 'yes'\n")
    write_script(
        tmp_path,
        "uses_site.py",
        "import sys\nprint(SITE_RAN, sys.modules['sitecustomize'].__file__)\n",
    )
    env = child_env()
    env["PYTHONPATH"] = str(site) + os.pathsep + env["PYTHONPATH"]
    traced = run_memsight(["uses_site.py"], tmp_path, env=env)
    plain = run_plain(["uses_site.py"], tmp_path, env=env)
    assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout)
    assert traced.stdout == f"yes {site / 'sitecustomize.py'}\n"
    assert traced.profile().info.python_version  # the agent ran too


def test_a_failing_sitecustomize_is_reported_as_python_reports_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    # It breaks in the script's interpreter only: memsight's own reads the same PYTHONPATH.
    write_script(
        site,
        "sitecustomize.py",
        "import sys\nif sys.orig_argv[1:] == ['ok.py']:\n    raise RuntimeError('broken site')\n",
    )
    write_script(tmp_path, "ok.py", "print('ran')\n")
    env = child_env()
    env["PYTHONPATH"] = str(site) + os.pathsep + env["PYTHONPATH"]
    traced = run_memsight(["ok.py"], tmp_path, env=env)
    plain = run_plain(["ok.py"], tmp_path, env=env)
    assert (traced.returncode, traced.stdout, traced.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )
    assert "Error in sitecustomize" in traced.stderr


@pytest.mark.parametrize(
    "source",
    [
        "import sys; sys.exit('fatal: no data')",
        "import os; os._exit(3)",
        "raise KeyboardInterrupt",
        "def f():\n    raise ValueError('bad')\nf()",
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
        "import sys; print('partial', end=''); sys.stdout.flush(); sys.exit(4)",
    ],
)
def test_every_way_of_ending_gives_the_same_status_and_output(tmp_path: Path, source: str) -> None:
    write_script(tmp_path, "ends.py", source)
    traced, plain = run_memsight(["ends.py"], tmp_path), run_plain(["ends.py"], tmp_path)
    assert (traced.returncode, traced.stdout, traced.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )
    profile = traced.profile()
    if plain.returncode < 0:
        assert profile.info.signal == -plain.returncode
    else:
        assert profile.info.exit_code == plain.returncode


def test_an_uncaught_exception_is_recorded_with_its_traceback(tmp_path: Path) -> None:
    write_script(tmp_path, "boom.py", "def inner():\n    raise ValueError('bad')\ninner()\n")
    profile = run_memsight(["boom.py"], tmp_path).profile()
    exception = next(profile.events_of("exception"))
    assert exception.get("uncaught") is True
    assert exception.get("exc_type") == "builtins.ValueError"
    assert [frame[2] for frame in exception.get("traceback")] == ["<module>", "inner"]


TALK = """
import sys
for i in range(200):
    print("out", i)
    print("err", i, file=sys.stderr)
"""


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )


def test_output_redirected_to_one_file_interleaves_exactly_as_under_python(tmp_path: Path) -> None:
    write_script(tmp_path, "talk.py", TALK)
    memsight = " ".join(MEMSIGHT)
    (tmp_path / "traced.txt").write_text("before the run\n")
    _shell(f"{memsight} run -q --out run.memsight talk.py >> traced.txt 2>&1", tmp_path)
    _shell(f"{PYTHON} talk.py > plain.txt 2>&1", tmp_path)
    written = (tmp_path / "traced.txt").read_text()
    assert written == "before the run\n" + (tmp_path / "plain.txt").read_text()
    # A regular file can be read back once the run is over: the output is recorded after all
    # (what the file held before the run is not), without a note saying it is missing.
    profile = load_profile(tmp_path / "run.memsight")
    assert profile.output_text() == (tmp_path / "plain.txt").read_text()
    assert list(profile.events_of("output_not_recorded")) == []


def test_a_closed_pipe_stops_the_script_as_it_stops_under_python(tmp_path: Path) -> None:
    write_script(tmp_path, "flood.py", "while True:\n    print('x' * 100)\n")
    memsight = " ".join(MEMSIGHT)
    traced = _shell(f"{memsight} run -q --out run.memsight flood.py | head -1", tmp_path)
    plain = _shell(f"{PYTHON} flood.py | head -1", tmp_path)
    assert traced.stdout == plain.stdout == "x" * 100 + "\n"
    assert traced.returncode == plain.returncode
    assert "BrokenPipeError" in plain.stderr and "BrokenPipeError" in traced.stderr


def test_output_written_directly_is_marked_as_not_recorded(tmp_path: Path) -> None:
    write_script(tmp_path, "talk.py", TALK)
    traced = run_memsight(["talk.py"], tmp_path)
    profile = traced.profile()
    assert profile.output == []
    [event] = list(profile.events_of("output_not_recorded"))
    assert event.get("streams") == ["stdout", "stderr"]


TERMINAL_PROBE = r"""
import json, os, signal, sys
resized = []


def on_resize(*_args):
    resized.append(list(os.get_terminal_size(1)))
    print("resized to", resized[-1], flush=True)


signal.signal(signal.SIGWINCH, on_resize)
print(json.dumps({
    "isatty": [os.isatty(fd) for fd in (0, 1, 2)],
    "same_terminal": len({os.ttyname(fd) for fd in (0, 1, 2)}),
    "size": list(os.get_terminal_size(1)),
    "foreground": os.tcgetpgrp(0) == os.getpgrp(),
}), flush=True)
line = sys.stdin.readline()
print("read:", line.strip(), "resized:", resized, flush=True)
print("to stderr", file=sys.stderr, flush=True)
"""


def _set_size(fd: int, rows: int, cols: int) -> None:
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def test_in_a_terminal_the_script_gets_one_terminal_that_follows_the_window_and_is_recorded(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "term.py", TERMINAL_PROBE)
    out = tmp_path / "run.memsight"
    session = PtyProcess([*MEMSIGHT, "run", "-q", "--out", str(out), "term.py"], tmp_path)
    try:
        _set_size(session.master, 30, 100)
        session.wait_for_output(b'"foreground"')
        first = json.loads(session.output.split(b"\n")[0])
        assert first["isatty"] == [True, True, True]
        assert first["same_terminal"] == 1
        assert first["foreground"] is True
        # The window changes: the script's terminal follows, and the script hears of it.
        _set_size(session.master, 40, 120)
        os.kill(session.process.pid, signal.SIGWINCH)
        session.wait_for_output(b"resized to [120, 40]")
        session.send(b"hello\r")
        session.wait_for_output(b"to stderr")
        assert session.wait() == 0
    finally:
        session.close()
    assert b"read: hello resized: [[120, 40]]" in session.output
    profile_text = run_memsight_profile_text(out)
    assert "read: hello" in profile_text and "to stderr" in profile_text
    assert "\r\n" not in profile_text


def run_memsight_profile_text(path: Path) -> str:
    from memsight.profiler.profile.storage import load_profile

    return load_profile(path).output_text()


def test_ctrl_c_in_the_terminal_reaches_the_script_as_under_python(tmp_path: Path) -> None:
    write_script(
        tmp_path,
        "wait.py",
        "import time\nprint('ready', flush=True)\ntry:\n    time.sleep(60)\n"
        "except KeyboardInterrupt:\n    print('interrupted', flush=True)\n",
    )
    session = PtyProcess(
        [*MEMSIGHT, "run", "-q", "--out", str(tmp_path / "r.memsight"), "wait.py"], tmp_path
    )
    try:
        session.wait_for_output(b"ready")
        session.send(b"\x03")
        session.wait_for_output(b"interrupted")
        assert session.wait() == 0
    finally:
        session.close()
