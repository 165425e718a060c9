"""Every file memsight writes where the user said follows one rule (profiler/output_path.py):
a regular file is replaced atomically (through a symlink: the file, never the link); a device,
a FIFO or `-` is written into as a shell redirection would; a directory or a missing folder is
one line, exit status 2, nothing left on disk. Run as the CLI runs, in subprocesses.

These tests run as root: a wrong rule would replace /dev/null itself. They write to /dev/null
only through a symlink made here, and check that it is still a character device afterwards.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memsight.profiler import protocol
from memsight.profiler.output_path import OutputError, output_target, write_output
from memsight.profiler.profile.header import file_header
from memsight.profiler.profile.storage import load_profile
from tests.hostile import frames
from tests.support import Completed, one_line, run_cli, run_plain, wait_until

DEVICES = ("/dev/null", "/dev/full")


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    """A small profile, with the wall-clock start `merge` aligns clocks by."""
    path = tmp_path / "p.memsight"
    schema = protocol.RAM_TABLE
    path.write_bytes(
        file_header()
        + frames.run_frame(start_time="2026-01-02T03:04:05.000+00:00", hostname="node")
        + schema.frame()
        + frames.samples_frame(schema, frames.ram_matrix(100))
    )
    return path


def assert_devices_untouched() -> None:
    for device in DEVICES:
        assert stat.S_ISCHR(os.lstat(device).st_mode), f"{device} is no longer a device"


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


def error_line(done: Completed) -> str:
    assert "Traceback" not in done.stderr
    assert one_line(done.stderr), done.stderr
    assert done.stderr.startswith("memsight: error: "), done.stderr
    return done.stderr.strip()


@contextmanager
def fifo_reader(path: Path) -> Iterator[Callable[[], bytes]]:
    """A FIFO at `path` read to its end by a thread; yields what it read, once it has."""
    os.mkfifo(path)
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lambda: wait_until(lambda: got, what="the FIFO's reader")[0]
    finally:
        if reader.is_alive():  # the writer never came: open the other end so the thread ends
            with open(path, "wb"):
                pass
        reader.join(10)


# -- the rule itself ---------------------------------------------------------------------------


def test_each_kind_of_path_is_replaced_written_into_or_refused(tmp_path: Path) -> None:
    regular = tmp_path / "r.html"
    regular.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(regular)
    null_link = tmp_path / "null"
    null_link.symlink_to("/dev/null")
    os.mkfifo(tmp_path / "fifo")
    new = output_target(tmp_path / "new.html")
    assert (new.replace, new.exists) == (True, False)
    assert (output_target(regular).replace, output_target(regular).exists) == (True, True)
    assert output_target(link).real == str(regular.resolve()) and output_target(link).replace
    assert not output_target(null_link).replace and not output_target(null_link).exists
    assert not output_target(tmp_path / "fifo").replace
    assert output_target("-").stdout
    with pytest.raises(OutputError, match="is a directory"):
        output_target(tmp_path)
    with pytest.raises(OutputError, match="no such directory"):
        output_target(tmp_path / "nope" / "x.html")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OutputError):
        output_target(loop)


def test_a_failing_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    target.write_text("old")
    target.chmod(0o640)

    def chunks() -> Iterator[bytes]:
        yield b"half"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_output(target, chunks())
    assert target.read_text() == "old" and leftovers(tmp_path) == []
    write_output(target, [b"new"])
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # a replaced file keeps its mode


# -- report --html -----------------------------------------------------------------------------


def test_html_through_a_symlink_to_dev_null_leaves_the_device(
    tmp_path: Path, profile: Path
) -> None:
    link = tmp_path / "null.html"
    link.symlink_to("/dev/null")
    done = run_cli("report", profile, "--html", link, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert_devices_untouched()
    assert leftovers(tmp_path) == [] and leftovers(Path("/dev")) == []


def test_html_into_a_fifo_is_written_into_it(tmp_path: Path, profile: Path) -> None:
    fifo = tmp_path / "report.fifo"
    with fifo_reader(fifo) as read:
        done = run_cli("report", profile, "--html", fifo, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert read().startswith(b"<!DOCTYPE html>")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a file in its place


def test_html_to_dev_full_is_one_line_saying_no_space(tmp_path: Path, profile: Path) -> None:
    done = run_cli("report", profile, "--html", "/dev/full", cwd=tmp_path)
    assert done.returncode == 1
    assert error_line(done) == (
        "memsight: error: --html: cannot write /dev/full: no space left on device"
    )
    assert_devices_untouched()


def test_html_to_stdout(tmp_path: Path, profile: Path) -> None:
    done = run_cli("report", profile, "--html", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>") and done.stdout.rstrip().endswith("</html>")
    both = run_cli("report", profile, "--html", "-", "--json", cwd=tmp_path)
    assert both.returncode == 2 and "standard output" in error_line(both)


def test_html_to_dev_stdout_that_is_a_pipe_is_written_into_the_pipe(
    tmp_path: Path, profile: Path
) -> None:
    # /dev/stdout of a process writing into a pipe links to "pipe:[…]", which realpath cannot
    # follow: the pipe is still written into, never taken for a missing file to replace.
    done = run_cli("report", profile, "--html", "/dev/stdout", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>")


def test_html_through_a_symlink_replaces_the_file_not_the_link(
    tmp_path: Path, profile: Path
) -> None:
    real = tmp_path / "kept" / "report.html"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "report.html"
    link.symlink_to(real)
    done = run_cli("report", profile, "--html", link, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert real.read_text().startswith("<!DOCTYPE html>")
    assert leftovers(tmp_path) == [] and leftovers(real.parent) == []


@pytest.mark.parametrize(
    ("where", "message"),
    [(".", "--html: . is a directory"), ("nope/r.html", "--html: no such directory: nope")],
)
def test_html_to_a_directory_or_a_missing_folder_is_one_line_and_writes_nothing(
    tmp_path: Path, profile: Path, where: str, message: str
) -> None:
    before = sorted(os.listdir(tmp_path))
    done = run_cli("report", profile, "--html", where, cwd=tmp_path)
    assert done.returncode == 1  # "the HTML cannot be written", as documented
    assert error_line(done) == f"memsight: error: {message}"
    assert sorted(os.listdir(tmp_path)) == before  # nothing left on disk


# -- merge -o, compare --html, run --out -------------------------------------------------------


def test_merge_to_dev_full_with_force_is_one_line_and_leaves_the_device(
    tmp_path: Path, profile: Path
) -> None:
    done = run_cli("merge", profile, "-o", "/dev/full", "--force", cwd=tmp_path)
    assert done.returncode == 1
    assert (
        error_line(done) == "memsight: error: -o: cannot write /dev/full: no space left on device"
    )
    assert_devices_untouched()


def test_merge_into_a_fifo_needs_no_force_and_gives_a_profile(
    tmp_path: Path, profile: Path
) -> None:
    fifo = tmp_path / "job.fifo"
    with fifo_reader(fifo) as read:
        done = run_cli("merge", profile, "-o", fifo, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        (tmp_path / "job.memsight").write_bytes(read())
    assert len(load_profile(tmp_path / "job.memsight").ram or []) == 100


def test_merge_over_an_existing_regular_file_still_needs_force(
    tmp_path: Path, profile: Path
) -> None:
    out = tmp_path / "job.memsight"
    out.write_bytes(b"mine")
    done = run_cli("merge", profile, "-o", out, cwd=tmp_path)
    assert done.returncode == 2 and "--force replaces it" in error_line(done)
    assert out.read_bytes() == b"mine"


def test_compare_html_to_dev_full_is_one_line(tmp_path: Path, profile: Path) -> None:
    done = run_cli("compare", profile, profile, "--html", "/dev/full", cwd=tmp_path)
    assert done.returncode == 1
    assert error_line(done).endswith("cannot write /dev/full: no space left on device")
    assert_devices_untouched()


def test_run_refuses_stdout_as_its_profile(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print('hi')\n")
    done = run_cli("run", "--out", "-", script, cwd=tmp_path)
    assert done.returncode == 2 and "standard output" in error_line(done)


@pytest.mark.slow
def test_run_streams_its_profile_into_a_fifo(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("import time\nfor i in range(20):\n    time.sleep(0.01)\n")
    fifo = tmp_path / "profile.fifo"
    with fifo_reader(fifo) as read:
        done = run_cli("run", "--out", fifo, script, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        (tmp_path / "got.memsight").write_bytes(read())
    got = load_profile(tmp_path / "got.memsight")
    assert got.complete and got.damaged is None and got.ram is not None and len(got.ram) > 0
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_running_out_of_memory_while_drawing_the_report_is_one_line(
    tmp_path: Path, profile: Path
) -> None:
    # What is left of the machine's memory is not the file's doing: the HTML page of a large
    # profile on a small machine ends in one line, exit 1, and leaves nothing behind.
    code = (
        "import sys, memsight.profiler.report as report\n"
        "def no_memory(*args, **kwargs):\n"
        "    raise MemoryError\n"
        "report.write_html = no_memory\n"
        "from memsight.profiler.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = run_plain(["-c", code, "report", str(profile), "--html", "out.html"], tmp_path)
    assert done.returncode == 1
    assert done.stderr == "memsight: error: report: out of memory\n"
    assert not (tmp_path / "out.html").exists()
