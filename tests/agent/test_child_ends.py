"""How the agent tells the ends of the processes a program starts (profiler/agent/ends.py and
the fork child's own connection in agent/client.py), in real interpreters: what a program
reaps is reported with its status, the exception that ends a multiprocessing.Process is
reported once with its line, and a fork child says hello as itself before its code runs,
without ever writing to its parent's connection. The program sees the same results."""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from memsight.profiler.protocol import TableSchema
from memsight.profiler.recorder.server import AgentServer
from tests.support import PYTHON, child_env, find_python, wait_until

REAPING = """\
import json, multiprocessing as mp, os, signal, subprocess, sys
from memsight.profiler.agent import ends

seen = []
ends.watch_reaped_children(lambda pid, code, sig: seen.append([pid, code, sig]))
results = {}

pid = os.fork()
if pid == 0:
    os._exit(7)
results["waitpid"] = [pid, os.waitpid(pid, 0)]

pid = os.fork()
if pid == 0:
    os.kill(os.getpid(), signal.SIGKILL)
results["wait"] = [pid, os.wait()]

p = mp.get_context("fork").Process(target=sys.exit, args=(4,))
p.start(); p.join()
results["process"] = [p.pid, p.exitcode]

done = subprocess.run([sys.executable, "-c", "raise SystemExit(2)"])
results["subprocess"] = [None, done.returncode]
results["seen"] = seen
results["names"] = [os.waitpid.__name__, os.wait.__name__]
print(json.dumps(results))
"""


def run_python(source: str, folder: Path) -> subprocess.CompletedProcess[str]:
    script = folder / "program.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [PYTHON, str(script)],
        cwd=folder,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )


def test_every_child_the_program_reaps_is_reported_with_its_status_and_the_program_sees_the_same(
    tmp_path: Path,
) -> None:
    done = run_python(REAPING, tmp_path)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    seen = {pid: (code, sig) for pid, code, sig in results["seen"]}
    pid, (reaped, status) = results["waitpid"]
    assert reaped == pid and status == 7 << 8  # what os.waitpid returns, untouched
    assert seen[pid] == (7, None)
    pid, (reaped, status) = results["wait"]
    assert reaped == pid and status == 9  # killed by SIGKILL
    assert seen[pid] == (None, 9)
    pid, exitcode = results["process"]
    assert exitcode == 4 and seen[pid] == (4, None)  # multiprocessing's join()
    assert results["subprocess"][1] == 2 and (2, None) in seen.values()  # subprocess.run
    assert results["names"] == ["waitpid", "wait"]


def test_the_exception_that_ends_a_process_is_reported_in_that_process_only(
    tmp_path: Path,
) -> None:
    source = """\
    import json, multiprocessing as mp, os, sys, traceback
    from memsight.profiler.agent import ends

    def report(exc):
        with open(os.environ["SEEN"] + str(os.getpid()), "w") as f:
            json.dump([type(exc).__name__, str(exc)], f)

    ends.watch_process_exceptions(report)

    def boom():
        raise ValueError("bad shard")

    if __name__ == "__main__":
        try:
            raise KeyError("printed by the program itself")
        except KeyError:
            traceback.print_exc()  # not a process' end: not reported
        p = mp.get_context("fork").Process(target=boom)
        p.start(); p.join()
        print(json.dumps({"pid": p.pid, "exitcode": p.exitcode, "me": os.getpid()}))
    """
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(source))
    done = subprocess.run(
        [PYTHON, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=child_env({"SEEN": str(tmp_path / "seen-")}),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["exitcode"] == 1  # as without the observer
    assert "ValueError: bad shard" in done.stderr and "KeyError" in done.stderr  # still printed
    reports = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("seen-*")}
    assert reports == {f"seen-{out['pid']}": ["ValueError", "bad shard"]}


class Collector:
    """A recorder's side of the connections, keeping what each process said."""

    def __init__(self) -> None:
        self.hellos: dict[int, dict[str, Any]] = {}
        self.events: dict[int, list[dict[str, Any]]] = {}
        self.logs: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def on_hello(self, hello: dict[str, Any]) -> int | str:
        with self.lock:
            proc = len(self.hellos)
            self.hellos[proc] = hello
            self.events[proc] = []
        return proc

    def on_schema(self, proc: int, schema: TableSchema) -> None:
        pass

    def on_rows(self, proc: int, schema: TableSchema, rows: list[tuple[int, ...]]) -> None:
        pass

    def on_events(self, proc: int, payload: bytes, events: list[dict[str, Any]]) -> None:
        with self.lock:
            self.events[proc] += events

    def on_log(self, kind: str, **data: Any) -> None:
        with self.lock:
            self.logs.append((kind, data))


FORKING = """\
import os, sys, time
from memsight.profiler.agent.client import Agent

agent = Agent("127.0.0.1", int(sys.argv[1]), sys.argv[2], interval_s=0.01, hooks=False)
agent.start()
agent.event("before_fork")
pid = os.fork()
if pid == 0:
    agent.event("in_child")
    os._exit(5)
os.waitpid(pid, 0)
agent.event("after_fork")
print(pid, flush=True)
"""


@pytest.mark.parametrize("version", ["current", "3.9"])
def test_a_fork_child_says_hello_as_itself_and_reports_its_own_end(
    tmp_path: Path, version: str
) -> None:
    python = PYTHON if version == "current" else find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} here")
    collector = Collector()
    server = AgentServer("secret", collector)
    server.start()
    try:
        script = tmp_path / "forking.py"
        script.write_text(FORKING)
        done = subprocess.run(
            [python, str(script), str(server.port), "secret"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        child_pid = int(done.stdout.split()[0])
        wait_until(lambda: len([k for k, _ in collector.logs if k == "agent_disconnected"]) == 2)
    finally:
        server.close()
    parent, child = collector.hellos[0], collector.hellos[1]
    assert child["pid"] == child_pid and child["parent"] == parent["pid"]
    assert child["forked"] is True and parent["forked"] is False
    assert child["cmdline"] == parent["cmdline"] and str(script) in child["cmdline"]
    assert child["started_ns"] >= parent["started_ns"]
    parent_events = [e["type"] for e in collector.events[0]]
    child_events = [e["type"] for e in collector.events[1]]
    # Each process' events on its own connection: the child never wrote to the parent's.
    assert "in_child" in child_events and "in_child" not in parent_events
    assert "before_fork" in parent_events and "after_fork" in parent_events
    assert "before_fork" not in child_events  # what the parent had queued stays the parent's
    (os_exit,) = [e for e in collector.events[1] if e["type"] == "os_exit"]
    assert os_exit["exit_code"] == 5
    (reaped,) = [e for e in collector.events[0] if e["type"] == "child_reaped"]
    assert (reaped["pid"], reaped["exit_code"], reaped["signal"]) == (child_pid, 5, None)


def test_subprocess_children_are_not_taken_for_fork_children(tmp_path: Path) -> None:
    """Popen with a preexec_fn runs the fork handlers between its fork and its exec."""
    collector = Collector()
    server = AgentServer("secret", collector)
    server.start()
    source = FORKING.split("pid = os.fork()")[0] + (
        "import subprocess\n"
        "subprocess.run(['true'], preexec_fn=lambda: None)\n"
        "subprocess.run(['true'])\n"
    )
    try:
        script = tmp_path / "popen.py"
        script.write_text(source)
        done = subprocess.run(
            [PYTHON, str(script), str(server.port), "secret"],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        wait_until(lambda: any(k == "agent_disconnected" for k, _ in collector.logs))
    finally:
        server.close()
    assert list(collector.hellos) == [0]  # the program alone said hello
    reaped = [e for e in collector.events[0] if e["type"] == "child_reaped"]
    assert [e["exit_code"] for e in reaped] == [0, 0]
