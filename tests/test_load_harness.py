"""The suite under load (tests/load.py): --cpu-hogs starts busy loops that run while the
session runs, and none outlives the session, whether it ends, is interrupted or is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests import load
from tests.load import (
    ENV_VAR,
    MARK,
    MARKER,
    UNDER_LOAD,
    CpuHogs,
    cores,
    parse_hogs,
    selects,
    under_load,
)
from tests.processes import is_running, wait_gone
from tests.support import PYTHON, ROOT, child_env, wait_until

# A test the inner session runs: it leaves the hogs' pids in a file, then waits to be let go.
PROBE = """
import json, os, time
from pathlib import Path

def test_probe(cpu_hogs):
    folder = Path(os.environ["PROBE_DIR"])
    (folder / "pids.tmp").write_text(json.dumps(cpu_hogs.pids))
    (folder / "pids.tmp").rename(folder / "pids.json")
    deadline = time.monotonic() + 60
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
"""


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name: state, ppid, ..."""
    text = Path(f"/proc/{pid}/stat").read_bytes()
    return text[text.rfind(b")") + 2 :].decode().split()


def _cpu_ticks(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[11]) + int(fields[12])  # utime + stime


def _assert_hogs_running(pids: list[int], parent: int) -> None:
    for pid in pids:
        assert is_running(pid), pid
        assert int(_stat(pid)[1]) == parent
        assert MARKER in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        assert os.getsid(pid) == pid  # a session of its own: no group signal reaches it
    start = {pid: _cpu_ticks(pid) for pid in pids}
    wait_until(lambda: all(_cpu_ticks(p) > start[p] for p in pids), 10, "every hog to use the CPU")


def test_hog_counts() -> None:
    assert parse_hogs("0") == 0
    assert parse_hogs(" 3 ") == 3
    assert parse_hogs("auto") == parse_hogs("AUTO") == 2 * cores()
    for bad in ("-1", "two", "", "1.5"):
        with pytest.raises(ValueError, match="'auto'"):
            parse_hogs(bad)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_hogs_spin_until_stopped() -> None:
    with CpuHogs(2) as hogs:
        pids = hogs.pids
        assert len(pids) == 2
        _assert_hogs_running(pids, os.getpid())
    assert hogs.pids == []
    wait_gone(pids)  # killed and reaped by stop(): gone at once
    with CpuHogs(0) as none:
        assert none.pids == []


def _session(
    tmp_path: Path, *options: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A pytest session of the probe, with the suite's conftest as a plugin."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    environment = child_env({"PROBE_DIR": str(tmp_path), **(env or {})})
    if env is None or ENV_VAR not in env:
        environment.pop(ENV_VAR, None)  # the outer session's own setting stays out
    plugins = ["-p", "tests.conftest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    return subprocess.Popen(
        [PYTHON, "-m", "pytest", *plugins, *options, str(probe)],
        cwd=ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl+C as a terminal gives it: a suite started in the background (nohup, `&` in a
        # script) passes SIGINT on ignored, and Python then leaves it ignored.
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _hog_pids(tmp_path: Path, session: subprocess.Popen[str]) -> list[int]:
    def written() -> list[int]:
        assert session.poll() is None, session.communicate()[0]
        path = tmp_path / "pids.json"
        pids: list[int] = json.loads(path.read_text()) if path.exists() else []
        return pids

    return wait_until(written, 60, "the probe to write the hogs' pids")


@pytest.mark.slow  # runs pytest sessions in subprocesses
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("end", ["finished", "ctrl-c", "sigkill"])
def test_hogs_run_while_the_session_runs_and_never_outlive_it(end: str, tmp_path: Path) -> None:
    session = _session(tmp_path, "--cpu-hogs=3")
    try:
        pids = _hog_pids(tmp_path, session)
        assert len(pids) == 3
        _assert_hogs_running(pids, session.pid)
        if end == "finished":
            (tmp_path / "release").touch()
        elif end == "ctrl-c":
            session.send_signal(signal.SIGINT)
        else:
            session.kill()  # no teardown, no atexit: the kernel ends the hogs
        output, _ = session.communicate(timeout=60)
        expected = {"finished": 0, "ctrl-c": pytest.ExitCode.INTERRUPTED, "sigkill": -9}
        assert session.returncode == expected[end], output
        if end != "sigkill":
            assert "cpu hogs: 3 busy loops beside the tests" in output, output
        wait_gone(pids, timeout=5)
    finally:
        if session.poll() is None:
            session.kill()
            session.communicate()


@pytest.mark.slow  # runs a pytest session in a subprocess
def test_the_environment_variable_runs_an_unchanged_command_under_load(tmp_path: Path) -> None:
    session = _session(tmp_path, "-q", env={ENV_VAR: "auto"})
    try:
        pids = _hog_pids(tmp_path, session)
        assert len(pids) == 2 * cores()
        (tmp_path / "release").touch()
        output, _ = session.communicate(timeout=60)
        assert session.returncode == 0, output
        # Under -q the header is left out; the summary names the hogs instead.
        assert f"cpu hogs: {2 * cores()} busy loops beside the tests" in output, output
        wait_gone(pids, timeout=5)
    finally:
        if session.poll() is None:
            session.kill()
            session.communicate()


@pytest.mark.slow  # runs pytest sessions in subprocesses
def test_a_bad_count_is_a_usage_error(tmp_path: Path) -> None:
    for options, env in (
        (["--cpu-hogs=lots"], None),
        ([], {ENV_VAR: "-2"}),
    ):
        session = _session(tmp_path, *options, env=env)
        output, _ = session.communicate(timeout=60)
        assert session.returncode == pytest.ExitCode.USAGE_ERROR, output
        assert "'auto'" in output, output
        assert not (tmp_path / "pids.json").exists()
    # With xdist's workers each would start its own loops: one session only, said at once.
    session = _session(tmp_path, "--cpu-hogs=2", "-n", "2")
    output, _ = session.communicate(timeout=60)
    assert session.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert "--cpu-hogs: runs in one test session; leave out -n" in output
    assert not (tmp_path / "pids.json").exists()


def test_under_load_programs_get_one_intra_op_thread_unless_the_user_chose() -> None:
    from tests.load import one_thread_per_program

    environ = {"MKL_NUM_THREADS": "4"}
    one_thread_per_program(environ)
    assert environ == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "4"}


def test_the_tier_under_load_is_chosen_by_folder_file_or_test() -> None:
    example = "tests/test_examples.py::test_example_gives_exactly_its_findings"
    assert under_load("tests/diagnosis/test_rules.py::test_anything")
    assert not under_load("tests/diagnosis_more/test_rules.py::test_anything")
    assert under_load("tests/agent/test_heap.py::test_anything[1-2]")
    assert not under_load("tests/agent/test_census.py::test_anything")
    assert under_load(f"{example}[clean_training.py]")
    assert not under_load(f"{example}[clean_training.py.bak]")
    assert not under_load(f"{example}[activations_dominate.py]")


@pytest.mark.slow  # collects the whole suite in a subprocess
def test_every_entry_of_the_tier_under_load_selects_tests() -> None:
    collected = subprocess.run(
        [PYTHON, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", MARK],
        cwd=ROOT,
        env={k: v for k, v in child_env().items() if k != ENV_VAR},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert ids and all(under_load(i) for i in ids)
    for entry in UNDER_LOAD:
        assert any(selects(entry, i) for i in ids), f"{entry} selects no test: renamed or gone?"


def test_deadlines_stretch_with_the_declared_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # A deadline guards against a hang; beside 2 hogs per core a test keeps a third of a core.
    monkeypatch.setattr(load, "_deadline_scale", 1.0)
    assert load.deadline(10.0) == 10.0
    monkeypatch.setattr(load, "cores", lambda: 2)
    load.set_load(4)
    assert load.deadline(10.0) == pytest.approx(30.0)
    load.set_load(0)
    assert load.deadline(10.0) == 10.0


# A test that leaves the time limit pytest-timeout will give it (its closest timeout marker).
LIMIT_PROBE = """
import json, os
from pathlib import Path
import pytest

@pytest.mark.timeout(20)
def test_limit(request):
    limit = request.node.get_closest_marker("timeout").args[0]
    Path(os.environ["PROBE_DIR"], "limit.json").write_text(json.dumps(limit))
"""


@pytest.mark.slow  # runs pytest sessions in subprocesses
@pytest.mark.parametrize("hogs", [0, 2])
def test_a_tests_time_limit_is_stretched_like_every_deadline(hogs: int, tmp_path: Path) -> None:
    # A module fixture that runs four programs beside 4 hogs on 2 cores needs three times
    # its quiet time: pytest-timeout's limit is a hang guard, stretched as the helpers' are.
    probe = tmp_path / "test_limit_probe.py"
    probe.write_text(LIMIT_PROBE)
    environment = child_env({"PROBE_DIR": str(tmp_path)})
    environment.pop(ENV_VAR, None)
    plugins = ["-p", "tests.conftest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    done = subprocess.run(
        [PYTHON, "-m", "pytest", *plugins, f"--cpu-hogs={hogs}", str(probe)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    limit = json.loads((tmp_path / "limit.json").read_text())
    assert limit == pytest.approx(20 * (1 + hogs / cores()))
