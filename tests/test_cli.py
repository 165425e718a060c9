from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from memsight import profiler
from memsight.profiler.cli import main
from memsight.profiler.command_line import UsageError
from memsight.profiler.commands.run import split_run_args
from tests.support import MEMSIGHT, child_env, run_memsight, write_script


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train.py", "--epochs", "2"], ([], "train.py", False, ["--epochs", "2"])),
        (
            ["--out", "x.memsight", "train.py", "-q"],
            (["--out", "x.memsight"], "train.py", False, ["-q"]),
        ),
        (["--interval-ms=5", "-q", "t.py"], (["--interval-ms=5", "-q"], "t.py", False, [])),
        (["-m", "pkg.mod", "--out", "y"], ([], "pkg.mod", True, ["--out", "y"])),
        (["--python", "py", "-mpkg", "a"], (["--python", "py"], "pkg", True, ["a"])),
        (["--", "-weird.py", "a"], ([], "-weird.py", False, ["a"])),
        (["--no-hooks"], (["--no-hooks"], None, False, [])),
    ],
)
def test_memsight_options_end_where_the_target_begins(
    argv: list[str], expected: tuple[list[str], str | None, bool, list[str]]
) -> None:
    assert split_run_args(argv) == expected


def test_dash_m_without_a_module_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        split_run_args(["-m"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run"], "a SCRIPT (or -m MODULE) to run is required"),
        (["run", "missing.py"], "The script missing.py does not exist."),
        (
            ["run", "--interval-ms", "0", "t.py"],
            "--interval-ms: The sampling interval must be a number of milliseconds between 0.5 "
            "and 60000, not '0'.",
        ),
        (
            ["run", "--interval-ms", "nan", "t.py"],
            "--interval-ms: The sampling interval must be a number of milliseconds between 0.5 "
            "and 60000, not 'nan'.",
        ),
        (
            ["run", "--python", "/no/such/python", "t.py"],
            "--python: The interpreter /no/such/python does not exist.",
        ),
        (
            ["run", "--python", "no-such-python-here", "t.py"],
            "--python: The interpreter no-such-python-here does not exist.",
        ),
        (["run", "--python", "/", "t.py"], "--python: / is not an executable program."),
        (["run", "--out", "/no/such/dir/x.memsight", "t.py"], "--out: no such directory"),
        (["run", "-", "x"], "standard input is not supported"),
        (
            ["run", "--ram-budget", "lots", "t.py"],
            "--ram-budget: The RAM budget must be a size such as 6GiB or 512MiB, not 'lots'.",
        ),
        (
            ["run", "--ram-budget", "0", "t.py"],
            "--ram-budget: The RAM budget must be a size between 1 B and 1024 TiB, not '0'.",
        ),
        (
            ["run", "--census", "sometimes", "t.py"],
            "--census: Censuses are taken auto, never or every-N (N iterations, from 1 to "
            "1,000,000), not 'sometimes'.",
        ),
        (["--bogus"], "unknown option --bogus"),
    ],
)
def test_bad_input_gets_one_clear_line_and_exit_status_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("pass\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("memsight: error: ") and message in err
    assert err.count("\n") == 1
    assert not list(tmp_path.glob("*.memsight"))


@pytest.mark.parametrize(
    ("text", "size"),
    [("512MiB", 512 * 2**20), ("1.5 GiB", 3 * 2**29), ("2g", 2 * 2**30), ("1048576", 2**20)],
)
def test_ram_budget_sizes_read_as_binary_units(text: str, size: int) -> None:
    from memsight.profiler.units import parse_bytes

    assert parse_bytes(text) == size


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"memsight {profiler.__version__}\n"
    assert main(["--help"]) == 0
    assert "memsight run [options] SCRIPT" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    assert "--interval-ms" in capsys.readouterr().out


@pytest.mark.slow  # records a run in a subprocess
def test_the_default_profile_name_is_the_script_and_a_timestamp_in_the_working_directory(
    tmp_path: Path,
) -> None:
    write_script(tmp_path, "train.py", "print('hi')\n")
    first = subprocess.run(
        [*MEMSIGHT, "run", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=child_env(),
    )
    second = subprocess.run(
        [*MEMSIGHT, "run", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=child_env(),
    )
    assert first.returncode == second.returncode == 0
    files = sorted(p.name for p in tmp_path.glob("*.memsight"))
    assert len(files) == 2 and all(f.startswith("train-20") for f in files)
    assert (
        f"memsight: saved {files[0]}" in first.stderr
        or f"memsight: saved {files[1]}" in first.stderr
    )


@pytest.mark.slow  # records a run in a subprocess
def test_report_prints_the_run_its_peaks_and_its_end(tmp_path: Path) -> None:
    write_script(tmp_path, "r.py", "b = bytearray(50 * 2**20)\nimport sys; sys.exit(4)\n")
    run = run_memsight(["r.py", "x"], tmp_path)
    assert run.returncode == 4
    out = subprocess.run(
        [*MEMSIGHT, "report", str(run.profile_path)],
        capture_output=True,
        text=True,
        env=child_env(),
    )
    assert out.returncode == 0
    assert "run        r.py x" in out.stdout
    assert "ended      exit code 4" in out.stdout
    assert "RAM, main process" in out.stdout and "MiB" in out.stdout
    assert "the run did not use CUDA" in out.stdout


@pytest.mark.slow  # records a run in a subprocess
def test_report_json_follows_the_design_schema(tmp_path: Path) -> None:
    write_script(tmp_path, "j.py", "import time; b = bytearray(30 * 2**20); time.sleep(0.2)\n")
    run = run_memsight(["j.py", "--flag"], tmp_path)
    out = subprocess.run(
        [*MEMSIGHT, "report", str(run.profile_path), "--json"],
        capture_output=True,
        text=True,
        env=child_env(),
    )
    report = json.loads(out.stdout)
    assert set(report) >= {"run", "peaks", "findings"}
    r = report["run"]
    assert (r["script"], r["argv"], r["exit_code"], r["signal"]) == ("j.py", ["--flag"], 0, None)
    assert r["samples"] > 5 and r["duration_s"] > 0.2 and r["iterations"] == 0
    p = report["peaks"]
    assert p["ram_bytes"] > 30 * 2**20 and p["ram_tree_bytes"] >= p["ram_bytes"]
    assert p["gpu_allocated_bytes"] is None and p["gpu_reserved_bytes"] is None
    assert report["findings"] == []


@pytest.mark.slow  # records a run in a subprocess
def test_under_a_terminal_the_target_sees_a_terminal_and_its_output_arrives_line_by_line(
    tmp_path: Path,
) -> None:
    write_script(
        tmp_path,
        "tty.py",
        """
        import os, sys, time
        print("isatty", sys.stdout.isatty(), os.get_terminal_size().columns)
        time.sleep(0.3)
        print("second line")
        """,
    )
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 123, 0, 0))
    proc = subprocess.Popen(
        [*MEMSIGHT, "run", "-q", "--out", str(tmp_path / "t.memsight"), "tty.py"],
        cwd=tmp_path,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=child_env(),
    )
    os.close(slave)
    seen = b""
    first_line_at = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
            if first_line_at is None and b"isatty" in seen:
                first_line_at = time.monotonic()
                # The first line is on screen before the target printed its second one.
                assert b"second line" not in seen
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    assert b"isatty True 123" in seen
    assert b"second line" in seen
    assert proc.returncode == 0


@pytest.mark.slow  # records a real PyTorch example
def test_report_contents_shows_the_holder_that_grew(tmp_path: Path) -> None:
    import shutil
    import subprocess

    from tests.support import MEMSIGHT, ROOT, child_env

    script = tmp_path / "holder_local.py"
    shutil.copy(ROOT / "examples" / "holder_local.py", script)
    out = tmp_path / "run.memsight"

    def memsight(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*MEMSIGHT, *args], cwd=tmp_path, env=child_env(), capture_output=True, text=True,
            timeout=180,
        )  # fmt: skip

    assert memsight("run", "-q", "--out", str(out), str(script)).returncode == 0
    shown = memsight("report", str(out), "--contents", "last", "--since", "first")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    # The first census is at optimizer step 5 on a quiet machine; on a busy one the script can
    # be slower to reach its loop than the first census on the clock (census_schedule.py).
    assert re.match(
        r"What changed from (optimizer step 5 \([\d.]+ s\)|[\d.]+ s) to optimizer step \d+ ",
        lines[0],
    )
    assert "`kept` (list, local of `train()` in holder_local.py)" in lines[2]  # first: grew most
    data = json.loads(memsight("report", str(out), "--json", "--contents").stdout)
    assert data["contents"]["holders"][0]["holder"].startswith("`kept` (list")
    # An iteration the run never reached. Where the censuses fall depends on the run's pace
    # (they wait for budget: 5, 10, ... on a quiet machine, 5, 24, 60 with two other processes
    # busy, and one on the clock can fall at any iteration), so the error lists them.
    bad = memsight("report", str(out), "--contents", "step:1000000")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert re.search(
        r"no census at iteration 1000000; censuses were taken at \d+(, \d+)+\n", bad.stderr
    )


# -- export ------------------------------------------------------------------------------------


def _profile_with_snapshot(path: Path, blob: bytes) -> None:
    import hashlib

    from memsight.profiler import protocol
    from memsight.profiler.profile.writer import ProfileWriter

    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": 1, "script": "t.py"}))
    writer.mark_attachments()
    writer.write(protocol.attachment_frame(1, 0, blob))
    event = {
        "t": 2_000_000_001, "type": "attachment", "id": 1, "kind": "cuda_snapshot",
        "snapshot": 1, "reason": "exit", "bytes": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(),
    }  # fmt: skip
    writer.write(protocol.encode_json_frame(protocol.EVENTS, [event]))
    writer.close()


def test_export_writes_the_snapshots_bytes_and_says_where_to_open_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = b"\x80\x04\x95not really a pickle: bytes are only passed on"
    _profile_with_snapshot(tmp_path / "p.memsight", blob)
    out = tmp_path / "out.pickle"
    out.write_bytes(b"old")  # replaced, as --html replaces its file
    assert main(["export", str(tmp_path / "p.memsight"), "--memory-viz", str(out)]) == 0
    assert out.read_bytes() == blob
    err = capsys.readouterr().err
    assert "snapshot 1, taken at exit at 2.00 s" in err and "pytorch.org/memory_viz" in err
    assert not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["none.memsight", "--memory-viz", "o.pickle"], 1, "none.memsight: no such file"),
        (["p.memsight", "--memory-viz", "o.pickle", "--at", "oom"], 1, "--at: no snapshot was taken at an out-of-memory error"),
        (["p.memsight", "--memory-viz", "nodir/o.pickle"], 1, "--memory-viz: no such directory: nodir"),
        (["p.memsight", "--memory-viz", "."], 1, "--memory-viz: . is a directory"),
        (["p.memsight"], 2, "export: say what to write, e.g. --memory-viz OUT.pickle"),
    ],
)  # fmt: skip
def test_export_errors_are_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    status: int,
    message: str,
) -> None:
    _profile_with_snapshot(tmp_path / "p.memsight", b"x")
    monkeypatch.chdir(tmp_path)
    assert main(["export", *args]) == status
    err = capsys.readouterr().err
    assert err.startswith("memsight: error: ") and message in err and err.count("\n") == 1


def test_export_of_a_profile_without_snapshots_says_how_to_record_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memsight.profiler import protocol
    from memsight.profiler.profile.writer import ProfileWriter

    writer = ProfileWriter(tmp_path / "p.memsight")
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": 1}))
    writer.close()
    out = tmp_path / "o.pickle"
    assert main(["export", str(tmp_path / "p.memsight"), "--memory-viz", str(out)]) == 1
    err = capsys.readouterr().err
    assert "holds no CUDA memory snapshot; record one with `memsight run --cuda-history" in err
    assert not out.exists()


def test_export_cannot_write_an_unwritable_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    _profile_with_snapshot(tmp_path / "p.memsight", b"x")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert main(["export", str(tmp_path / "p.memsight"), "--memory-viz", str(locked / "o")]) == 1
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_cuda_history_needs_a_positive_number(value: str) -> None:
    with pytest.raises(
        UsageError, match="--cuda-history: must be a number of entries between 1 and"
    ):
        _build(value)


def _build(value: str) -> None:
    from memsight.profiler.commands.run import build_parser, build_spec

    options = build_parser().parse_args([f"--cuda-history={value}"])
    build_spec(options, "t.py", False, [])


def test_cuda_history_without_a_number_keeps_100000_entries(tmp_path: Path) -> None:
    from memsight.profiler.commands.run import build_parser, build_spec

    script = tmp_path / "t.py"
    script.write_text("")
    assert build_spec(build_parser().parse_args([]), str(script), False, []).cuda_history == 0
    options = build_parser().parse_args(["--cuda-history"])
    assert build_spec(options, str(script), False, []).cuda_history == 100_000
    options = build_parser().parse_args(["--cuda-history=2_000"])
    assert build_spec(options, str(script), False, []).cuda_history == 2000
