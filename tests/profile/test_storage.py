"""Truncated, corrupted, wrong-version and hostile profile files.

A bad file gives a ProfileError whose message is one line naming the file and the problem;
nothing else is raised, nothing crashes, and nothing in a file is ever executed.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import struct
import zlib
from pathlib import Path

import pytest

from memsight.profiler import protocol
from memsight.profiler.profile.header import FILE_HEADER, FORMAT_VERSION, file_header
from memsight.profiler.profile.model import DeviceInfo, Profile
from memsight.profiler.profile.storage import ProfileError, load_profile
from tests.processes import record_in_terminal
from tests.support import run_cli, write_script

TINY_SCRIPT = """\
import time

held = []
for step in range(12):
    held.append(bytearray(512 * 1024))
    print(f"step {step}", flush=True)
    time.sleep(0.03)
"""

RUN_FRAME = protocol.encode_json_frame(protocol.RUN, {"script": "hostile.py", "t0_ns": 1000})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a real profile, recorded once for this module."""
    folder = tmp_path_factory.mktemp("recorded")
    script = write_script(folder, "tiny.py", TINY_SCRIPT)
    out = folder / "tiny.memsight"
    code, shown = record_in_terminal(["run", "-o", out, script], folder)
    assert code == 0, shown
    return out.read_bytes()


@pytest.fixture(scope="module")
def full(recorded: bytes, tmp_path_factory: pytest.TempPathFactory) -> Profile:
    path = tmp_path_factory.mktemp("full") / "full.memsight"
    path.write_bytes(recorded)
    return load_profile(path)


def frame_starts(data: bytes) -> list[int]:
    """Offsets of every frame in a well-formed profile."""
    starts, pos = [], FILE_HEADER.size
    while pos < len(data):
        starts.append(pos)
        length = protocol.HEADER.unpack_from(data, pos)[0]
        pos += protocol.HEADER_SIZE + length
    assert pos == len(data)
    return starts


def assert_one_line_error(exc: ProfileError, path: Path, *words: str) -> None:
    message = str(exc)
    assert "\n" not in message and "\r" not in message
    assert message.startswith(str(path) + ": ")
    for word in words:
        assert word in message, message


def write(tmp_path: Path, data: bytes, name: str = "bad.memsight") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_the_recorded_profile_is_complete_and_has_many_frames(
    full: Profile, recorded: bytes
) -> None:
    # The fixture the tests below cut up: a real, complete run with samples, events and output
    assert full.complete and not full.warnings
    assert full.sample_count > 10
    assert "step 11" in full.output_text()
    assert len(frame_starts(recorded)) >= 15


# -- truncation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", range(FILE_HEADER.size + 1))
def test_a_file_cut_inside_the_header_is_a_one_line_error_naming_the_file(
    tmp_path: Path, recorded: bytes, size: int
) -> None:
    # Given a profile cut off within its 16-byte header (or right after it)
    path = write(tmp_path, recorded[:size])
    # When it is loaded
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    # Then the error is one line, naming the file and what is wrong
    expected = {0: "empty file", FILE_HEADER.size: "holds no run"}.get(size, "truncated header")
    assert_one_line_error(caught.value, path, expected)


def _assert_prefix_of(profile: Profile, full: Profile) -> None:
    """Everything a truncated file shows is exactly what the full file holds up to there."""
    assert profile.events == full.events[: len(profile.events)]
    assert full.output_text().startswith(profile.output_text())
    for name, table in profile.tables.items():
        whole = full.tables[name]
        for column in table.column_names:
            assert list(table[column]) == list(whole[column][: len(table)]), (name, column)


def test_a_file_cut_anywhere_in_its_frames_loads_what_it_holds_or_says_why_not(
    tmp_path: Path, recorded: bytes, full: Profile
) -> None:
    # Given cuts at every frame boundary, just after each one, and 30 places in between
    starts = frame_starts(recorded)
    spread = [FILE_HEADER.size + 1 + i * (len(recorded) - 18) // 29 for i in range(30)]
    cuts = sorted({s + d for s in starts for d in (0, 1, protocol.HEADER_SIZE)} | set(spread))
    cuts = [c for c in cuts if FILE_HEADER.size < c < len(recorded)]
    assert len(cuts) > 60
    loaded = 0
    for cut in cuts:
        path = write(tmp_path, recorded[:cut], f"cut-{cut}.memsight")
        # When each one is loaded
        try:
            profile = load_profile(path)
        except ProfileError as exc:
            # Then it is either a one-line ProfileError (before any run metadata is whole) ...
            assert_one_line_error(exc, path, "holds no run")
            assert cut < starts[1], "only a file without its whole run metadata fails"
            continue
        # ... or the part before the cut, marked incomplete with a warning
        loaded += 1
        assert not profile.complete, cut
        assert profile.warnings, cut
        _assert_prefix_of(profile, full)
    assert loaded > 50


def test_a_file_cut_inside_a_frame_says_where_it_was_cut(tmp_path: Path, recorded: bytes) -> None:
    # Given a profile cut in the middle of its last frame
    last = frame_starts(recorded)[-1]
    path = write(tmp_path, recorded[: last + protocol.HEADER_SIZE + 1])
    # When it is loaded
    profile = load_profile(path)
    # Then the warning says the recording was cut off, and where
    assert not profile.complete
    assert any("cut off" in w and f"byte {last}" in w for w in profile.warnings)


# -- corruption ------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["payload", "crc", "kind"])
def test_a_flipped_byte_in_any_frame_is_reported_as_corruption_at_that_frame(
    tmp_path: Path, recorded: bytes, where: str
) -> None:
    for index, start in enumerate(frame_starts(recorded)):
        length = protocol.HEADER.unpack_from(recorded, start)[0]
        offset = {
            "payload": start + protocol.HEADER_SIZE + length // 2,
            "crc": start + 6,
            "kind": start + 4,
        }[where]
        if where == "payload" and length == 0:
            continue
        # Given a profile with one byte of one frame flipped
        damaged = bytearray(recorded)
        damaged[offset] ^= 0xFF
        path = write(tmp_path, bytes(damaged), f"flip-{where}-{index}.memsight")
        # When it is loaded
        with pytest.raises(ProfileError) as caught:
            load_profile(path)
        # Then the one-line error names the file, the problem and the frame
        assert_one_line_error(caught.value, path, "corrupted", f"at byte {start} (frame {index})")


def test_a_damaged_length_field_never_crashes(tmp_path: Path, recorded: bytes) -> None:
    # Given profiles whose frame lengths are damaged in every byte (the stream goes out of step)
    for index, start in enumerate(frame_starts(recorded)):
        for byte in range(4):
            damaged = bytearray(recorded)
            damaged[start + byte] ^= 0x5A
            path = write(tmp_path, bytes(damaged), f"length-{index}-{byte}.memsight")
            # When each is loaded: a ProfileError, or a profile marked as cut off
            try:
                profile = load_profile(path)
            except ProfileError as exc:
                assert_one_line_error(exc, path)
            else:
                assert not profile.complete and profile.warnings


# -- not a profile, or not one we can read -----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty file"),
        (random.Random(7).randbytes(4096), "not a memsight profile"),
        (b"epoch,loss\n1,0.5\n2,0.25\n" * 50, "not a memsight profile"),
        (b"MEMSIG", "truncated header"),
        (b"\x89PNG\r\n\x1a\n" + bytes(64), "not a memsight profile"),
        (pickle.dumps({"a": 1}), "not a memsight profile"),
        (FILE_HEADER.pack(b"MEMSIGHT", FORMAT_VERSION + 1, 0, 0) + RUN_FRAME, "newer"),
        (FILE_HEADER.pack(b"MEMSIGHT", 0xFFFF, 0, 0), "upgrade memsight"),
        (FILE_HEADER.pack(b"MEMSIGHT", 0, 0, 0) + RUN_FRAME, "invalid profile format version 0"),
        (file_header(), "holds no run"),
    ],
    ids=[
        "empty",
        "random-bytes",
        "text",
        "magic-only",
        "png",
        "pickle",
        "future-version",
        "far-future-version",
        "version-zero",
        "header-only",
    ],
)
def test_a_file_that_is_not_a_readable_profile_is_a_one_line_error(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = write(tmp_path, content)
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert_one_line_error(caught.value, path, problem)


def test_a_profile_from_a_future_memsight_names_both_versions(
    tmp_path: Path, recorded: bytes
) -> None:
    # Given a real profile whose header claims the next format version
    patched = bytearray(recorded)
    struct.pack_into("<H", patched, 8, FORMAT_VERSION + 1)
    path = write(tmp_path, bytes(patched))
    # Then loading it says which version it is and which this memsight reads
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert_one_line_error(
        caught.value, path, f"version {FORMAT_VERSION + 1}", f"up to {FORMAT_VERSION}"
    )


def test_a_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "never-written.memsight"
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert_one_line_error(caught.value, path, "no such file")


def test_a_directory_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "folder.memsight"
    path.mkdir()
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert_one_line_error(caught.value, path, "directory")


def test_an_unreadable_file_is_a_one_line_error(tmp_path: Path, recorded: bytes) -> None:
    path = write(tmp_path, recorded)
    path.chmod(0)
    try:
        if _readable(path):
            pytest.skip("running as a user who can read any file (root)")
        with pytest.raises(ProfileError) as caught:
            load_profile(path)
        assert_one_line_error(caught.value, path, "ermission")
    finally:
        path.chmod(0o644)


def _readable(path: Path) -> bool:
    try:
        path.read_bytes()
    except PermissionError:
        return False
    return True


# -- hostile files -----------------------------------------------------------------------------------


def _zlib_bomb(size: int) -> bytes:
    """A zlib stream of `size` zero bytes, compressed without holding them in memory."""
    packer = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    parts = [packer.compress(chunk) for _ in range(size // len(chunk))]
    parts.append(packer.compress(bytes(size % len(chunk))))
    parts.append(packer.flush())
    return b"".join(parts)


def _raw_frame(kind: int, payload: bytes) -> bytes:
    return protocol.encode_frame(kind, payload)


BOMB = _zlib_bomb(protocol.MAX_FILE_PAYLOAD + (1 << 20))
NESTED_LISTS = b"[" * 200_000 + b"]" * 200_000
NESTED_OBJECTS = b'{"a":' * 200_000 + b"1" + b"}" * 200_000

HOSTILE = {
    "frame-declaring-4-GB": RUN_FRAME
    + protocol.HEADER.pack(0xFFFFFFFF, protocol.EVENTS, 0)
    + b"[]",
    "frame-just-over-the-limit": RUN_FRAME
    + protocol.HEADER.pack(protocol.MAX_FILE_PAYLOAD + 1, protocol.SAMPLES, 0),
    "zlib-bomb-samples": RUN_FRAME
    + protocol.RAM_TABLE.frame()
    + _raw_frame(protocol.SAMPLES | protocol.COMPRESSED, BOMB),
    "zlib-bomb-events": RUN_FRAME + _raw_frame(protocol.EVENTS | protocol.COMPRESSED, BOMB),
    "deeply-nested-json-events": RUN_FRAME + _raw_frame(protocol.EVENTS, NESTED_LISTS),
    "deeply-nested-json-objects": RUN_FRAME + _raw_frame(protocol.EVENTS, NESTED_OBJECTS),
    "deeply-nested-json-run": _raw_frame(protocol.RUN, NESTED_LISTS),
    "4-billion-rows": RUN_FRAME
    + protocol.RAM_TABLE.frame()
    + _raw_frame(
        protocol.SAMPLES,
        bytes([protocol.RAM_TABLE.id, protocol.ROWS_DELTA]) + (0xFFFFFFFF).to_bytes(4, "little"),
    ),
    "samples-before-schema": RUN_FRAME + protocol.RAM_TABLE.rows_frame(bytes(40)),
    "schema-with-1000-columns": RUN_FRAME
    + protocol.encode_json_frame(
        protocol.SCHEMA,
        {"id": 9, "table": "wide", "columns": [["t", "q"]] + [[f"c{i}", "Q"] for i in range(999)]},
    ),
    "schema-with-a-format-string": RUN_FRAME
    + protocol.encode_json_frame(
        protocol.SCHEMA, {"id": 9, "table": "evil", "columns": [["t", "q"], ["x", "1000000s"]]}
    ),
    "hello-in-a-file": RUN_FRAME + protocol.hello_frame("token", 1),
    "unknown-frame-kind": RUN_FRAME + _raw_frame(0x7E, b"{}"),
    "event-time-beyond-int64": RUN_FRAME
    + protocol.encode_json_frame(protocol.EVENTS, [{"t": 10**400, "type": "x"}]),
    "huge-run-number": protocol.encode_json_frame(
        protocol.RUN, {"t0_ns": 0, "interval_ms": 10**400}
    ),
    "output-unknown-stream": RUN_FRAME + _raw_frame(protocol.OUTPUT, bytes(9) + b"text"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_file_is_a_one_line_error(tmp_path: Path, name: str) -> None:
    # Given a file crafted to exhaust memory, the stack or the decoder
    path = write(tmp_path, file_header() + HOSTILE[name])
    # When it is loaded
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    # Then it is refused with a one-line error naming the file
    assert_one_line_error(caught.value, path, "corrupted")


class _Exploit:
    """Unpickling this creates `marker`: proof that a pickle was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


def test_the_pickle_exploit_used_below_does_run_when_unpickled(tmp_path: Path) -> None:
    # Control: the payload is live, so the next test's "marker absent" means something
    marker = tmp_path / "control"
    pickle.loads(pickle.dumps(_Exploit(marker))).close()
    assert marker.exists()


@pytest.mark.parametrize(
    "kind",
    [protocol.RUN, protocol.EVENTS, protocol.SCHEMA, protocol.SAMPLES, protocol.OUTPUT, None],
    ids=["run", "events", "schema", "samples", "output", "whole-file"],
)
def test_a_pickle_in_a_profile_is_never_unpickled(tmp_path: Path, kind: int | None) -> None:
    # Given a file carrying a pickle that would create a marker file if unpickled
    marker = tmp_path / "pwned"
    exploit = pickle.dumps(_Exploit(marker))
    if kind is None:
        content = exploit
    else:
        content = file_header() + RUN_FRAME + protocol.RAM_TABLE.frame()
        content += protocol.encode_frame(kind, exploit)
        content += protocol.encode_frame(kind, exploit, compress=True)
    path = write(tmp_path, content)
    # When it is loaded
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    # Then it is refused, and nothing ran
    assert_one_line_error(caught.value, path)
    assert not marker.exists()


def test_odd_values_in_valid_frames_load_without_error(tmp_path: Path) -> None:
    # Given well-formed frames whose fields have unexpected types
    events = [
        {"t": 1, "type": "cuda_init", "devices": 5},
        {"t": 2, "type": "cuda_init", "devices": [[1], "x", {"index": "0", "name": 3}]},
        {"t": 3, "type": "torch_imported", "version": ["2"], "cuda": {}},
        {"t": 4, "type": "exit", "exit_code": "0", "signal": [9]},
        {"t": 5, "type": "child_started", "pid": "12", "cmdline": "python"},
        {"t": 6, "type": "warning", "message": None},
        {"t": 7, "type": "agent_connected", "python_version": 3.11},
    ]
    run = {"t0_ns": 0, "argv": "not a list", "pid": "1", "interval_ms": True, "script": 5}
    content = file_header() + protocol.encode_json_frame(protocol.RUN, run)
    content += protocol.encode_json_frame(protocol.EVENTS, events)
    path = write(tmp_path, content)
    # When it is loaded
    profile = load_profile(path)
    # Then the odd values are dropped, not trusted
    assert profile.info.devices == [DeviceInfo(0, "", 0)]
    assert profile.info.exit_code is None and profile.info.signal is None
    assert profile.info.argv == [] and profile.info.pid is None and profile.info.script is None
    assert len(profile.events) == len(events)


# -- the command line ----------------------------------------------------------------------------------


def _bad_files(tmp_path: Path, recorded: bytes) -> dict[str, Path]:
    corrupted = bytearray(recorded)
    corrupted[frame_starts(recorded)[3] + protocol.HEADER_SIZE] ^= 0xFF
    future = bytearray(recorded)
    struct.pack_into("<H", future, 8, FORMAT_VERSION + 1)
    folder = tmp_path / "a folder"
    folder.mkdir()
    files = {
        "empty": b"",
        "truncated-header": recorded[:7],
        "text": b"hello\n",
        "corrupted": bytes(corrupted),
        "future-version": bytes(future),
        "zlib-bomb": file_header() + HOSTILE["zlib-bomb-samples"],
        "deeply-nested": file_header() + HOSTILE["deeply-nested-json-events"],
    }
    paths = {name: write(folder, data, f"bad {name}.memsight") for name, data in files.items()}
    paths["missing"] = folder / "missing.memsight"
    paths["directory"] = folder
    return paths


CLI_CASES = [
    "empty",
    "truncated-header",
    "text",
    "corrupted",
    "future-version",
    "zlib-bomb",
    "deeply-nested",
    "missing",
    "directory",
]


@pytest.mark.parametrize("case", CLI_CASES)
def test_memsight_report_on_a_bad_file_prints_one_error_line_and_exits_1(
    tmp_path: Path, recorded: bytes, case: str
) -> None:
    # Given a bad profile file (its name has a space in it)
    path = _bad_files(tmp_path, recorded)[case]
    # When `memsight report` is asked to read it
    result = run_cli("report", path, cwd=tmp_path)
    # Then it prints exactly one line, naming the file, and exits 1 without a traceback
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memsight: error: ")
    assert str(path) in lines[0]
    assert "Traceback" not in result.stderr


def test_memsight_report_json_on_a_bad_file_prints_no_json(tmp_path: Path) -> None:
    path = write(tmp_path, b"not a profile at all")
    result = run_cli("report", "--json", path, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("memsight: error: ") and str(path) in result.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stderr)


@pytest.mark.timeout(20)
def test_a_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    # Given a named pipe that nobody writes to (opening it would block forever)
    path = tmp_path / "pipe.memsight"
    os.mkfifo(path)
    # When it is loaded, Then it is refused at once
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert_one_line_error(caught.value, path, "pipe or a device")


@pytest.mark.timeout(20)
def test_an_endless_device_is_refused_without_reading_it() -> None:
    # Given a path to a device that never ends (reading it all would exhaust memory)
    path = Path("/dev/zero")
    # When it is loaded, Then it is refused at once
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert_one_line_error(caught.value, path, "pipe or a device")
