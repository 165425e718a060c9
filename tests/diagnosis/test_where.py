"""Where in the user's code an exception points, and the findings that name it.

- Recorded tracebacks read the same as the agent's lists and as older profiles' objects.
- The user's frame: the innermost one that is not PyTorch, an installed package, the standard
  library (of this interpreter or any other) or memsight, nor a pseudo file while a real one
  is there.
- out-of-memory and run-failed put that line first in `where` and quote it in the evidence;
  a SyntaxError's file and line come from its message.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Mapping
from pathlib import Path

import pytest

from memsight import profiler
from memsight.profiler.codefiles import is_library_file
from memsight.profiler.diagnosis import diagnose, finding_to_json
from memsight.profiler.diagnosis.finding import Location
from memsight.profiler.diagnosis.text import format_findings
from memsight.profiler.diagnosis.where import (
    Frame,
    describe,
    exception_locations,
    parse_traceback,
    syntax_error_location,
    user_frame,
)
from memsight.profiler.profile.model import Event, Profile
from tests.factories import GiB, oom_event, profile

SITE = "/home/me/venv/lib/python3.11/site-packages"
TORCH_MODULE = f"{SITE}/torch/nn/modules/module.py"
TRAIN = "/work/project/train.py"
MODEL = "/work/project/model.py"
STDLIB = sysconfig.get_paths()["stdlib"]
MEMSIGHT = str(Path(profiler.__file__).parent / "agent" / "client.py")
# The same file on disk: in a checkout memsight/profiler is a link to profiler/, and the
# agent's frames carry this path.
MEMSIGHT_ON_DISK = str(Path(profiler.__file__).resolve().parent / "agent" / "client.py")


def frame(file: str, line: int, function: str = "f", source: str = "") -> list[object]:
    return [file, line, function, source]


def frames(*rows: list[object]) -> list[Frame]:
    return parse_traceback(list(rows))


# -- reading a recorded traceback -------------------------------------------------------------


def test_the_agents_lists_and_older_profiles_objects_read_the_same() -> None:
    as_lists = [frame(TRAIN, 25, "<module>", "  loss = model(x)  "), frame(TORCH_MODULE, 1778)]
    as_objects = [
        {"file": TRAIN, "line": 25, "function": "<module>", "source": "loss = model(x)"},
        {"file": TORCH_MODULE, "line": 1778, "function": "f"},
    ]
    expected = [
        Frame(TRAIN, 25, "<module>", "loss = model(x)"),
        Frame(TORCH_MODULE, 1778, "f", ""),
    ]
    assert parse_traceback(as_lists) == parse_traceback(as_objects) == expected


@pytest.mark.parametrize(
    "recorded",
    [None, "not a list", 42, [None, "x", 3, {"file": TRAIN, "line": "7"}], [[TRAIN]]],
)
def test_what_is_not_a_frame_is_skipped_and_a_bad_line_is_unknown(recorded: object) -> None:
    parsed = parse_traceback(recorded)
    assert all(f.file == TRAIN and f.line is None for f in parsed)


# -- the user's frame -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "file",
    [
        TORCH_MODULE,
        "/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py",
        "/opt/conda/lib/python3.9/json/decoder.py",  # another interpreter's standard library
        "/usr/lib64/python3.13t/runpy.py",
        f"{STDLIB}/runpy.py",  # this interpreter's
        "/home/me/src/pytorch/torch/serialization.py",  # an editable PyTorch build
        MEMSIGHT,
        MEMSIGHT_ON_DISK,
        "/elsewhere/_memsight_profiler/agent/client.py",
    ],
)
def test_libraries_are_not_the_users_code(file: str) -> None:
    assert is_library_file(file)


@pytest.mark.parametrize("file", [TRAIN, "/home/me/lib/project/train.py", "train.py", "<string>"])
def test_the_users_files_are_not_libraries(file: str) -> None:
    assert not is_library_file(file)


def test_the_innermost_user_frame_is_chosen_past_torch_and_the_standard_library() -> None:
    tb = frames(
        frame(f"{STDLIB}/runpy.py", 198, "_run_module_as_main"),
        frame(TRAIN, 30, "<module>", "loss = model(x)"),
        frame(TORCH_MODULE, 1778, "_wrapped_call_impl"),
        frame(MODEL, 22, "forward", "return q @ k"),
        frame(f"{SITE}/torch/nn/functional.py", 5000, "softmax"),
    )
    mine = user_frame(tb)
    assert mine is not None and (mine.file, mine.line, mine.function) == (MODEL, 22, "forward")


def test_pseudo_files_count_only_when_no_real_file_of_the_users_is_there() -> None:
    frozen = frame("<frozen runpy>", 88, "_run_code")
    with_real = frames(frozen, frame(TRAIN, 3, "<module>"), frame("<string>", 1, "<module>"))
    assert user_frame(with_real) == Frame(TRAIN, 3, "<module>", "")
    only_pseudo = frames(frozen, frame("<string>", 1, "<module>"), frame(TORCH_MODULE, 9))
    assert user_frame(only_pseudo) == Frame("<string>", 1, "<module>", "")
    assert user_frame(frames(frozen, frame(TORCH_MODULE, 9))) is None


def test_the_script_is_the_users_wherever_it_lives() -> None:
    script = "/home/me/torch/train.py"  # a project folder that happens to be called torch
    tb = frames(frame(script, 4, "<module>"), frame(TORCH_MODULE, 9))
    assert user_frame(tb) is None
    assert user_frame(tb, script=script) == Frame(script, 4, "<module>", "")
    assert user_frame(tb, script="torch/train.py") == Frame(script, 4, "<module>", "")


# -- locations of an exception ----------------------------------------------------------------


def test_the_users_line_comes_first_then_the_line_that_raised() -> None:
    data = {
        "exc_type": "builtins.FileNotFoundError",
        "traceback": [
            frame(TRAIN, 12, "<module>", "state = torch.load(path)"),
            frame(f"{SITE}/torch/serialization.py", 771, "load", "with _open_file_like(f):"),
        ],
    }
    assert exception_locations(data) == (
        Location(TRAIN, 12, "<module>", "state = torch.load(path)"),
        Location(f"{SITE}/torch/serialization.py", 771, "load", "with _open_file_like(f):"),
    )


def test_an_error_raised_in_the_users_code_names_one_line() -> None:
    data = {"traceback": [frame(TRAIN, 1, "<module>", 'raise ValueError("boom")')]}
    assert exception_locations(data) == (
        Location(TRAIN, 1, "<module>", 'raise ValueError("boom")'),
    )


def test_with_no_frame_of_the_users_the_line_that_raised_is_named() -> None:
    data = {"traceback": [frame("<frozen runpy>", 88), frame(TORCH_MODULE, 1778, "inner")]}
    assert exception_locations(data) == (Location(TORCH_MODULE, 1778, "inner"),)
    assert exception_locations({"traceback": []}) == ()


def test_a_syntax_error_is_where_its_message_says_and_the_script_gets_its_path() -> None:
    message = "'(' was never closed (train.py, line 3)"
    assert syntax_error_location("builtins.SyntaxError", message, TRAIN) == Location(TRAIN, 3)
    assert syntax_error_location("IndentationError", message, None) == Location("train.py", 3)
    assert syntax_error_location("builtins.ValueError", message, TRAIN) is None
    # A module the script imports does not parse: that module's line, then the import
    data = {
        "exc_type": "builtins.SyntaxError",
        "message": "invalid syntax (model.py, line 7)",
        "traceback": [
            frame(TRAIN, 2, "<module>", "import model"),
            frame("<frozen importlib._bootstrap>", 1360, "_find_and_load"),
        ],
    }
    assert exception_locations(data, TRAIN) == (
        Location("model.py", 7),
        Location(TRAIN, 2, "<module>", "import model"),
    )


def test_a_location_in_words_names_the_file_line_function_and_source() -> None:
    assert describe(Location(TRAIN, 25, "<module>", "loss = model(x)")) == (
        "train.py:25: loss = model(x)"
    )
    assert describe(Location(MODEL, 22, "forward")) == "model.py:22 in forward()"
    long = describe(Location(TRAIN, 1, None, "x" * 500))
    assert len(long) < 200 and long.endswith("…")


# -- the findings -----------------------------------------------------------------------------


def failed_run(data: Mapping[str, object], script: str | None = TRAIN, cwd: str = "") -> Profile:
    event = Event(0.5, "exception", {"exc_id": 1, "uncaught": True, "oom": None, **data})
    p = profile(events=[event], exit_code=1)
    p.info.script = script
    p.info.cwd = cwd
    return p


def test_an_out_of_memory_finding_names_the_forward_line_in_the_users_model() -> None:
    oom = oom_event("gpu", requested=2 * GiB, free=GiB, total=80 * GiB)
    oom.data["traceback"] = [
        frame(TRAIN, 25, "<module>", "loss = model(x)"),
        frame(TORCH_MODULE, 1778, "_wrapped_call_impl", "return self._call_impl(*args)"),
        frame(MODEL, 40, "forward", "scores = q @ k.transpose(-2, -1)"),
    ]
    p = profile(events=[oom], exit_code=1)
    [finding] = [f for f in diagnose(p).findings if f.rule == "out-of-memory"]
    assert finding.where == (Location(MODEL, 40, "forward", "scores = q @ k.transpose(-2, -1)"),)
    assert "at model.py:40 in forward(): scores = q @ k.transpose(-2, -1)" in finding.evidence.text
    assert finding_to_json(finding)["where"] == [
        {
            "file": MODEL,
            "line": 40,
            "function": "forward",
            "code": "scores = q @ k.transpose(-2, -1)",
            "holder": None,
            "bytes": None,
        }
    ]


def test_an_out_of_memory_inside_a_library_call_names_the_users_call_then_the_library() -> None:
    oom = oom_event("cpu", requested=GiB)
    oom.data["traceback"] = [
        frame(TRAIN, 25, "<module>", "out = F.scaled_dot_product_attention(q, k, v)"),
        frame(f"{SITE}/torch/nn/functional.py", 5000, "scaled_dot_product_attention"),
    ]
    p = profile(events=[oom], exit_code=1)
    [finding] = [f for f in diagnose(p).findings if f.rule == "out-of-memory"]
    assert [(w.file, w.line) for w in finding.where] == [
        (TRAIN, 25),
        (f"{SITE}/torch/nn/functional.py", 5000),
    ]
    assert finding.evidence.text.endswith(
        "; at train.py:25: out = F.scaled_dot_product_attention(q, k, v)"
    )
    report = format_findings(diagnose(p))
    assert f"    Where: {TRAIN}:25: out = F.scaled_dot_product_attention(q, k, v)\n" in report
    assert f"    Where: {SITE}/torch/nn/functional.py:5000 in scaled_dot_product_attention()\n" in (
        report
    )


def test_an_out_of_memory_without_a_traceback_names_no_line() -> None:
    p = profile(events=[oom_event("gpu", requested=GiB)], exit_code=1)
    [finding] = [f for f in diagnose(p).findings if f.rule == "out-of-memory"]
    assert finding.where == () and " at " not in finding.evidence.text
    assert "Where:" not in format_findings(diagnose(p))


def test_run_failed_names_the_users_line_first_and_where_the_library_raised() -> None:
    data = {
        "exc_type": "builtins.FileNotFoundError",
        "message": "[Errno 2] No such file or directory: 'ckpt.pt'",
        "traceback": [
            frame(TRAIN, 12, "<module>", "model = torch.load(path)"),
            frame(f"{SITE}/torch/serialization.py", 771, "load", "with _open_file_like(f):"),
        ],
    }
    [finding] = diagnose(failed_run(data)).findings
    assert finding.rule == "run-failed"
    assert finding.evidence.text == (
        "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt.pt' at train.py:12: "
        "model = torch.load(path) (raised in serialization.py:771 in load())"
    )
    assert [(w.file, w.line, w.code) for w in finding.where] == [
        (TRAIN, 12, "model = torch.load(path)"),
        (f"{SITE}/torch/serialization.py", 771, "with _open_file_like(f):"),
    ]


def test_run_failed_on_a_syntax_error_points_at_the_script_resolved_from_its_directory() -> None:
    data = {
        "exc_type": "builtins.SyntaxError",
        "message": "'(' was never closed (train.py, line 3)",
        "traceback": [],
    }
    [finding] = diagnose(failed_run(data, script="train.py", cwd="/work/project")).findings
    assert finding.where == (Location(TRAIN, 3),)
    assert finding.evidence.text == "SyntaxError: '(' was never closed at train.py:3"


def test_a_failure_without_an_exception_names_no_line() -> None:
    p = profile(events=[Event(0.08, "exit", {"exit_code": 2})], exit_code=2)
    [finding] = diagnose(p).findings
    assert finding.rule == "run-failed" and finding.where == ()
