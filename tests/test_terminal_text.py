"""Text from the target reaches a terminal escaped: `memsight report` and memsight's one-line
messages never pass on its control characters (docs/architecture.md, Reliability)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memsight.profiler import protocol
from memsight.profiler.cli import main
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.terminal_text import terminal_safe
from tests.support import run_cli, write_script

T0 = 5_000_000_000
# What a hostile target can print or name: clear screen, an OSC window title ended by BEL, a
# CSI colour, CR, backspace, a C1 CSI, DEL, a right-to-left override and an isolate.
PAYLOAD = "\x1b[2J\x1b]0;owned\x07\x1b[31m\r\x08\x9b2J\x7f\u202etxt.exe\u2066"
# Every character a terminal may act on; a report may keep only its own newlines.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("a\rb\tc\x08\x00", "a\\rb\\tc\\x08\\x00"),
        ("\x7f\x85\x9b", "\\x7f\\x85\\x9b"),
        ("\u202aa\u202bb\u202cc\u202dd\u202ee", "\\u202aa\\u202bb\\u202cc\\u202dd\\u202ee"),
        ("\u2066\u2067\u2068\u2069\u200e\u200f\u061c", "\\u2066\\u2067\\u2068\\u2069\\u200e\\u200f\\u061c"),
        ("line\nbreak", "line\\nbreak"),
        ("C:\\path é ✓ 日本 <b>", "C:\\path é ✓ 日本 <b>"),  # printable text is left alone
    ],
)  # fmt: skip
def test_every_control_character_is_shown_as_an_escape(text: str, shown: str) -> None:
    assert terminal_safe(text) == shown
    assert terminal_safe(shown) == shown  # escaping twice changes nothing


def test_a_report_keeps_its_own_line_breaks_and_escapes_the_rest() -> None:
    assert terminal_safe("a\x1b[2J\nb\r\n", lines=True) == "a\\x1b[2J\nb\\r\n"


def _hostile_profile(path: Path) -> None:
    """A finished run whose every target-made string carries PAYLOAD: script, argv, paths,
    host, a child process, an uncaught exception (its class names the finding), a module."""
    ram = TableBuffer(protocol.RAM_TABLE)
    for i in range(50):
        ram.add((T0 + i * 10_000_000, 100 << 20, 100 << 20, 0, 1 << 30))
    events = [
        {"t": T0 + 1, "type": "child_started", "pid": 77, "ppid": 1,
         "name": f"worker{PAYLOAD}", "cmdline": ["python", PAYLOAD]},
        {"t": T0 + 2, "type": "name", "id": 7, "name": f"Net{PAYLOAD}"},
        {"t": T0 + 400_000_000, "type": "exception", "exc_id": 1,
         "exc_type": f"builtins.Evil{PAYLOAD}Error", "message": f"boom{PAYLOAD}",
         "uncaught": True,
         "traceback": [{"file": f"/w/train{PAYLOAD}.py", "line": 3,
                        "function": f"main{PAYLOAD}", "source": f"x = 1{PAYLOAD}"}]},
        {"t": T0 + 490_000_000, "type": "warning", "message": f"careful{PAYLOAD}"},
        {"t": T0 + 500_000_000, "type": "exit", "exit_code": 1},
        {"t": T0 + 500_000_000, "type": "recording_end"},
    ]  # fmt: skip
    run = {
        "t0_ns": T0, "script": f"train{PAYLOAD}.py", "argv": [PAYLOAD, "--lr"],
        "cwd": f"/w/{PAYLOAD}", "python": f"/usr/bin/python{PAYLOAD}",
        "hostname": f"host{PAYLOAD}", "interval_ms": 10, "start_time": "2026-11-22T10:15:00",
    }  # fmt: skip
    writer = ProfileWriter(path)
    for frame in (
        protocol.encode_json_frame(protocol.RUN, run),
        protocol.RAM_TABLE.frame(),
        ram.drain(),
        protocol.output_frame(protocol.STDOUT, T0 + 3, f"out{PAYLOAD}\n".encode()),
        protocol.encode_json_frame(protocol.EVENTS, events),
    ):
        writer.write(frame)
    writer.close()


def test_the_text_report_shows_the_targets_control_characters_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.memsight"
    _hostile_profile(path)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert not CONTROL.search(out), CONTROL.findall(out)
    escaped = terminal_safe(PAYLOAD)
    assert f"train{escaped}.py {escaped} --lr" in out  # the run, argv included
    assert f"worker{escaped}" in out  # the child process
    # The finding that names the exception's class (its last dotted part).
    assert f"{escaped.rsplit('.', 1)[-1]}Error" in out
    assert f"careful{escaped}" in out  # a warning quoting the target
    # A string the report keeps on one line stays whole there, its CR and all.
    assert f"Where: /w/train{escaped}.py:3 in main{escaped}(): x = 1{escaped}" in out


def test_report_json_stays_exact_json_with_the_strings_as_they_were(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.memsight"
    _hostile_profile(path)
    assert main(["report", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert not CONTROL.search(out.replace("\n", ""))  # JSON escapes them itself
    data = json.loads(out)
    assert data["run"]["argv"] == [PAYLOAD, "--lr"]
    assert data["children"][0]["name"] == f"worker{PAYLOAD}"


def test_a_file_name_with_a_newline_and_escapes_gives_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = tmp_path / "bad\nname\x1b[2J.memsight"
    name.write_bytes(b"not a profile at all")
    assert main(["report", str(name)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memsight: error: ")
    assert "bad\\nname\\x1b[2J.memsight" in err and not CONTROL.search(err)


def test_a_usage_error_quoting_the_command_line_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.memsight"
    _hostile_profile(profile)
    assert main(["report", str(profile), "--html", str(tmp_path / "no\ndir" / "r.html")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no\\ndir" in err


@pytest.mark.slow  # records a run
def test_memsight_runs_own_lines_quote_the_profile_path_escaped(tmp_path: Path) -> None:
    # The script's own output passes through as python shows it; memsight's lines that name
    # the profile (a path the user or a wrapper chose) do not pass its control characters on.
    write_script(tmp_path, "hello.py", "print('hi')\n")
    out = tmp_path / "run\x1b[2J\u202e.memsight"
    done = run_cli("run", "--out", out, "hello.py", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "hi\n"
    saved = [line for line in done.stderr.splitlines() if line.startswith("memsight: saved ")]
    assert saved and "run\\x1b[2J\\u202e.memsight" in saved[0]
    assert not CONTROL.search(done.stderr)
