"""Every option that takes a number, a size, a percentage or a pattern, given absurd values.

Each must be one line, `memsight: error: OPTION: ...`, exit status 2, and leave nothing on disk:
no profile, no report, and the script never started.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsight.profiler import protocol
from memsight.profiler.cli import main
from memsight.profiler.launch.preflight import (
    InvalidSetting,
    census_from_text,
    interval_from_text,
    ram_budget_from_text,
)
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import RAM_TABLE
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.typed_values import (
    integer_between,
    number_between,
    share_of_percent,
    size_between,
)
from tests.support import one_line, run_cli

FOUR_HUNDRED_DIGITS = "9" * 400
# Values no option takes: huge, infinite, not a number, negative, digits that are not ASCII
# (str.isdigit accepts them all, int() only some), nothing at all, trailing junk.
ABSURD = {
    "400 digits": FOUR_HUNDRED_DIGITS,
    "inf": "inf",
    "-inf": "-inf",
    "nan": "nan",
    "1e999": "1e999",
    "negative": "-5",
    "superscript two": "\u00b2",
    "arabic-indic three": "\u0663",
    "full-width three": "\uff13",
    "empty": "",
    "whitespace": " \t",
    "trailing junk": "10x",
}
ZERO = {"zero": "0"}


def _profile(path: Path) -> Path:
    """A small readable profile (two RAM samples), for the commands that read one."""
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": 1, "script": "t.py"}))
    ram = TableBuffer(RAM_TABLE)
    for s in range(2):
        ram.add((1 + s * 10**9, 50 << 20, 50 << 20, 0, 1 << 30))
    writer.write(RAM_TABLE.frame())
    writer.write(ram.drain())
    writer.close()
    return path


def _absurd(without: set[str]) -> dict[str, str]:
    return {name: value for name, value in ABSURD.items() if name not in without}


# (option, the command line with {} for the value, the absurd values it refuses)
RUN = ["run", "-q", "-o", "out.memsight"]
OPTIONS: list[tuple[str, list[str], dict[str, str]]] = [
    ("--interval-ms", [*RUN, "--interval-ms={}", "t.py"], ABSURD | ZERO),
    ("--ram-budget", [*RUN, "--ram-budget={}", "t.py"], ABSURD | ZERO),
    ("--census", [*RUN, "--census=every-{}", "t.py"], ABSURD | ZERO),
    ("--census", [*RUN, "--census={}", "t.py"], ABSURD | ZERO),
    ("--cuda-history", [*RUN, "--cuda-history={}", "t.py"], ABSURD | ZERO),
    ("--max-peak-ram", [*RUN, "--max-peak-ram={}", "t.py"], ABSURD | ZERO),
    ("--max-peak-gpu", [*RUN, "--max-peak-gpu={}", "t.py"], ABSURD | ZERO),
    (
        "--max-growth",
        [*RUN, "--baseline", "base.memsight", "--max-growth={}", "t.py"],
        ABSURD,  # 0 %: any growth fails, which is a gate
    ),
    ("--max-growth", ["compare", "base.memsight", "base.memsight", "--max-growth={}"], ABSURD),
    # an index counts from the end when negative: -5 is a census
    ("--contents", ["report", "base.memsight", "--contents={}"], _absurd(without={"negative"})),
    (
        "--since",
        ["report", "base.memsight", "--contents", "last", "--since={}"],
        _absurd(without={"negative"}),
    ),
    ("--contents", ["report", "base.memsight", "--contents=step:{}"], ABSURD),
    ("--at", ["export", "base.memsight", "--memory-viz", "o.pickle", "--at={}"], ABSURD),
]
CASES = [
    pytest.param(option, args, value, id=f"{args[0]} {next(a for a in args if '{}' in a)} {name}")
    for option, args, values in OPTIONS
    for name, value in values.items()
]


@pytest.mark.parametrize(("option", "template", "value"), CASES)
def test_an_absurd_value_is_one_line_naming_the_option_and_leaves_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
    template: list[str],
    value: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("open('started', 'w').close()\n")
    _profile(tmp_path / "base.memsight")
    before = sorted(os.listdir(tmp_path))
    args = [arg.replace("{}", value) for arg in template]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_line(captured.err) and captured.err.endswith("\n"), captured.err
    assert captured.err.startswith(f"memsight: error: {option}: "), captured.err
    assert "Traceback" not in captured.err
    assert sorted(os.listdir(tmp_path)) == before  # no profile, no output, never started


@pytest.mark.parametrize(
    "args",
    [
        ["--max-peak-ram", FOUR_HUNDRED_DIGITS],
        ["--ram-budget", FOUR_HUNDRED_DIGITS],
        ["--interval-ms", "inf"],
        ["--interval-ms", "1e999"],
        ["--census", "every-\u00b2"],
        ["--interval-ms", "-inf"],  # argparse takes it for an option: still one line
    ],
    ids=lambda args: f"{args[0]} {args[1][:10]}",
)
def test_values_that_raised_a_traceback_are_one_line_from_the_installed_command(
    tmp_path: Path, args: list[str]
) -> None:
    (tmp_path / "t.py").write_text("open('started', 'w').close()\n")
    done = run_cli("run", *args, "t.py", cwd=tmp_path)
    assert done.returncode == 2
    assert one_line(done.stderr) and done.stderr.startswith(f"memsight: error: {args[0]}: ")
    assert "Traceback" not in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["t.py"]  # no profile that "holds no run"


def test_the_error_says_the_range_and_cuts_a_long_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("pass\n")
    assert main(["run", "--interval-ms", "inf", "t.py"]) == 2
    assert "between 0.5 and 60000, not 'inf'" in capsys.readouterr().err
    assert main(["run", "--max-peak-ram", FOUR_HUNDRED_DIGITS, "t.py"]) == 2
    err = capsys.readouterr().err
    assert "must be a size between 1 B and 1024 TiB" in err and "(400 characters)" in err
    assert len(err) < 200


def test_the_app_fields_read_by_the_same_rules() -> None:
    # The app's run bar reads its interval, RAM budget and census fields through preflight.
    for value in ABSURD.values():
        with pytest.raises(InvalidSetting) as interval:
            interval_from_text(value)
        assert interval.value.problem.setting == "interval"
        with pytest.raises(InvalidSetting):
            census_from_text(f"every-{value}")
    for value in set(ABSURD.values()) - {"", " \t"}:  # an empty field: no budget
        with pytest.raises(InvalidSetting) as budget:
            ram_budget_from_text(value)
        assert budget.value.problem.setting == "ram_budget"
    assert ram_budget_from_text("") is None
    with pytest.raises(InvalidSetting):
        ram_budget_from_text("", required=True)  # `--ram-budget ""` says nothing: refused


@pytest.mark.parametrize(
    ("read", "text", "value"),
    [
        (lambda t: number_between(t, 0.5, 60_000), "10", 10.0),
        (lambda t: number_between(t, 0.5, 60_000), " 2.5e3 ", 2500.0),
        (lambda t: number_between(t, 0.5, 60_000), ".5", 0.5),
        (lambda t: integer_between(t, 1, 10**7, grouped=True), "100,000", 100_000),
        (lambda t: integer_between(t, 1, 10**7, grouped=True), "2_000", 2000),
        (lambda t: size_between(t), "1.5 GiB", 3 << 29),
        (lambda t: size_between(t), "1024TiB", 1 << 50),
        (share_of_percent, "10%", 0.10),
        (share_of_percent, "0", 0.0),
    ],
)
def test_ordinary_values_still_read(read: object, text: str, value: float) -> None:
    assert callable(read)
    assert read(text) == pytest.approx(value)


def test_values_at_the_bounds_are_read_and_just_beyond_them_refused() -> None:
    assert interval_from_text("60000") == 60_000.0
    assert size_between("1024 TiB") == 1 << 50
    assert share_of_percent("10000%") == 100.0
    assert census_from_text("every-1000000") == "every-1000000"
    with pytest.raises(InvalidSetting, match=r"between 0\.5 and 60000"):
        interval_from_text("60000.001")
    with pytest.raises(ValueError, match="between 1 B and 1024 TiB"):
        size_between("1025 TiB")
    with pytest.raises(ValueError, match="between 0 % and 10000 %"):
        share_of_percent("10000.1%")
    with pytest.raises(InvalidSetting, match="from 1 to 1,000,000"):
        census_from_text("every-1000001")


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--fail-on", "info", "t.py"],
        ["run", "--interval-ms"],
        ["report"],
        ["report", "base.memsight", "--bogus"],
        ["export", "base.memsight", "--at"],
        ["compare", "base.memsight"],
        ["merge", "base.memsight"],
    ],
    ids=" ".join,
)
def test_a_bad_command_line_is_one_line_with_status_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    _profile(tmp_path / "base.memsight")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert one_line(err) and err.startswith("memsight: error: "), err
    assert f"(see `memsight {args[0]} --help`)" in err
