"""`memsight run --serve` and `memsight connect` over real loopback sockets: late joins, several
viewers, a dropped connection, a wrong token."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsight.profiler.profile.storage import load_profile
from tests.load import deadline
from tests.served import Served, served_run
from tests.support import child_env, memsight_command, one_line, wait_until, write_script

pytestmark = pytest.mark.slow  # real runs in subprocesses


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with served_run(tmp_path) as run:
        yield run


def connect(
    served: Served, *args: str, token: str | None = None, address: str | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        memsight_command(
            "connect", address or served.address, "--token", token or served.token, *args
        ),
        cwd=served.folder,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def samples_in(path: Path) -> int:
    try:
        return load_profile(path).sample_count
    except Exception:
        return 0


def test_a_late_viewer_gets_the_run_from_its_first_sample_and_its_exit_status(
    served: Served,
) -> None:
    # Join once the run has been going a while: its start is in the copy all the same.
    wait_until(lambda: samples_in(served.profile) >= 50, 60, "50 samples served")
    viewer = connect(served, "-o", "copy.memsight")
    wait_until(lambda: (served.folder / "copy.memsight").exists(), 60, "the copy")
    assert served.stop() == 3
    _, err = viewer.communicate(timeout=deadline(60))
    assert viewer.returncode == 3, err  # the run's own exit status, as `memsight run`
    assert "receiving" in err and "saved" in err
    original, copy = load_profile(served.profile), load_profile(served.folder / "copy.memsight")
    assert copy.sample_count == original.sample_count
    assert copy.info.t0_ns == original.info.t0_ns and copy.info.exit_code == 3
    assert [e.type for e in copy.events] == [e.type for e in original.events]
    assert copy.output_text() == original.output_text()


def test_a_wrong_token_is_refused_in_one_line_and_the_run_goes_on(served: Served) -> None:
    viewer = connect(served, "-o", "never.memsight", token="not-the-token")
    _, err = viewer.communicate(timeout=deadline(60))
    assert viewer.returncode == 2
    assert one_line(err) and "wrong token" in err, err
    assert not (served.folder / "never.memsight").exists()
    # The server kept recording and serving: a right viewer still gets the run.
    right = connect(served, "-o", "copy.memsight")
    wait_until(lambda: (served.folder / "copy.memsight").exists(), 60, "the copy")
    assert served.stop() == 3
    right.communicate(timeout=deadline(60))
    assert right.returncode == 3
    assert samples_in(served.folder / "copy.memsight") == samples_in(served.profile)


class DroppingRelay:
    """A TCP relay to the server that cuts its first connection after `cut_after` bytes of
    the stream, as a flaky network would; the connections after it pass everything."""

    def __init__(self, target: tuple[str, int], cut_after: int) -> None:
        self.target, self.cut_after = target, cut_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                viewer, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            server = socket.create_connection(self.target)
            limit = self.cut_after if self.connections == 1 else None
            threading.Thread(target=self._pipe, args=(viewer, server, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, viewer, limit), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        passed = 0
        try:
            while data := source.recv(4096):
                if limit is not None and passed + len(data) >= limit:
                    sink.sendall(data[: limit - passed])
                    break
                sink.sendall(data)
                passed += len(data)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


def test_several_viewers_and_one_that_drops_all_get_the_same_profile(served: Served) -> None:
    wait_until(lambda: samples_in(served.profile) >= 20, 60, "20 samples served")
    relay = DroppingRelay(served.host_and_port, cut_after=3000)  # mid-frame, past the handshake
    steady = connect(served, "-o", "steady.memsight")
    flaky = connect(served, "-o", "flaky.memsight", address=f"127.0.0.1:{relay.port}")
    wait_until(lambda: relay.connections >= 2, 60, "the flaky viewer to reconnect")
    assert served.stop() == 3
    _, steady_err = steady.communicate(timeout=deadline(60))
    _, flaky_err = flaky.communicate(timeout=deadline(60))
    assert steady.returncode == flaky.returncode == 3, (steady_err, flaky_err)
    assert "reconnected" in flaky_err, flaky_err
    # Nothing lost, nothing twice: the two copies are the same bytes, and the run's profile.
    steady_bytes = (served.folder / "steady.memsight").read_bytes()
    assert (served.folder / "flaky.memsight").read_bytes() == steady_bytes
    assert samples_in(served.folder / "steady.memsight") == samples_in(served.profile)


def test_serve_refuses_what_it_cannot_do_before_running_anything(tmp_path: Path) -> None:
    write_script(tmp_path, "ran.py", "open('ran', 'w').close()\n")
    for args, reason in (
        (["--serve", "70000"], "PORT from 0 to 65535"),
        (["--serve", "localhost:x"], "PORT from 0 to 65535"),
        (["--serve", "0", "-o", "/dev/stdout"], "must be written to a file"),
    ):
        result = subprocess.run(
            memsight_command("run", *args, "ran.py"),
            cwd=tmp_path,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=deadline(60),
        )
        assert result.returncode == 2 and one_line(result.stderr), result.stderr
        assert reason in result.stderr
    assert not (tmp_path / "ran").exists()


def test_connect_to_nothing_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    result = subprocess.run(
        memsight_command("connect", f"127.0.0.1:{port}", "--token", "t"),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=deadline(60),
    )
    assert result.returncode == 2 and one_line(result.stderr), result.stderr
    assert "cannot connect" in result.stderr


def test_a_copy_that_cannot_be_written_ends_the_viewer_in_one_line(served: Served) -> None:
    # /dev/full takes the open and refuses every write: as a disk that filled up.
    viewer = connect(served, "-o", "/dev/full")
    _, err = viewer.communicate(timeout=deadline(60))
    assert viewer.returncode == 1, err
    errors = [line for line in err.splitlines() if line.startswith("memsight: error:")]
    assert errors == ["memsight: error: connect: cannot write the copy: No space left on device"]
    assert served.process.poll() is None  # the run is not the viewer's to end
