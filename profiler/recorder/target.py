"""The target's life as a process: its stdio, its launch, its signals, its end and its orphans.

A Recording (session.py) records; a Target is the program being recorded, as the operating
system sees it. It sets up fds 0/1/2 (inherited as they are, a pseudo-terminal, or pipes for
the app), starts the process tied to the recorder's life (lifetime.py), passes input and
signals on, and ends the whole tree: Stop (SIGTERM, then SIGKILL), a kill of every descendant
including orphaned workers, and, as a subreaper, the orphans left behind when the target
exits. It records nothing itself: what it learns (orphans' exits) goes to the `event` callback.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memsight.profiler import protocol
from memsight.profiler.launch.command import LaunchPlan
from memsight.profiler.recorder import lifetime, proctree
from memsight.profiler.recorder.output import FileTail, StreamChannel, regular_file_tails
from memsight.profiler.recorder.terminal import Terminal, terminal_fds

# How long the target's leftover processes get to exit on SIGTERM after it ended.
ORPHAN_GRACE_S = 1.0
STOP_GRACE_S = 2.0

STREAMS = (protocol.STDOUT, protocol.STDERR)

EventSink = Callable[..., None]  # Recording.event: (type, **data)


@dataclass
class Streams:
    """How the target's fds 0/1/2 are set up: None inherits memsight's own."""

    stdin: int | None
    child_fds: list[int | None]  # stdout, stderr
    pumped: list[tuple[StreamChannel, int, int | None]]  # channel, stream, where to copy it
    unrecorded: list[str]  # "stdout"/"stderr" the target writes directly

    def child_started(self) -> None:
        for channel, _, _ in self.pumped:
            channel.child_started()

    def close_all(self) -> None:
        for channel, _, _ in self.pumped:
            channel.child_started()
            with contextlib.suppress(OSError):
                os.close(channel.read_fd)


class Target:
    """One launch of the target. See Recording for what `stdio`, `new_session`, `new_group`
    and `subreaper` mean; `seen` gives every descendant the recorder's tree watcher has seen
    (pid -> identity), so that Stop also reaches workers that are orphans by then."""

    def __init__(
        self,
        stdio: str,
        new_session: bool,
        new_group: bool,
        subreaper: bool,
        event: EventSink,
        seen: Callable[[], Mapping[int, proctree.ProcessIdentity]],
    ) -> None:
        self.stdio = stdio
        self.new_session = new_session
        self.new_group = new_group
        self.want_subreaper = subreaper
        self.subreaper = False
        self._event = event
        self._seen = seen
        self.terminal: Terminal | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.on_interrupt_key: Callable[[], None] | None = None  # the user typed Ctrl+C
        self._file_tails: list[FileTail] = []
        self._input: _InputPipe | None = None  # the target's stdin, in capture mode

    # -- launch -------------------------------------------------------------------------------

    def open_streams(self) -> Streams:
        """Set up the fds the target will get (before launch)."""
        if self.stdio == "capture":
            channels = [StreamChannel(use_pty=False) for _ in (1, 2)]
            self._input = _InputPipe()
            return Streams(
                stdin=self._input.read_fd,
                child_fds=[c.child_fd for c in channels],
                pumped=[(c, s, None) for c, s in zip(channels, STREAMS, strict=True)],
                unrecorded=[],
            )
        ttys = terminal_fds()
        if 1 not in ttys and 2 not in ttys:
            # Files and pipes (a terminal on stdin alone too) are the target's, as they are;
            # what it appends to a regular file is read back at the end.
            self._file_tails = regular_file_tails({1: protocol.STDOUT, 2: protocol.STDERR})
            return Streams(stdin=None, child_fds=[None, None], pumped=[], unrecorded=_unrecorded())
        self.terminal = terminal = Terminal(ttys)
        stream = protocol.STDOUT if 1 in ttys else protocol.STDERR
        channel = StreamChannel.reading(terminal.master_fd, crlf=terminal.relays_input)
        return Streams(
            stdin=terminal.child_fd(0),
            child_fds=[terminal.child_fd(1), terminal.child_fd(2)],
            pumped=[(channel, stream, terminal.real_fd)],
            unrecorded=[name for fd, name in ((1, "stdout"), (2, "stderr")) if fd not in ttys],
        )

    def become_subreaper(self) -> None:
        """Adopt the target's orphans from here on, if this Target was asked to."""
        if self.want_subreaper:
            self.subreaper = lifetime.become_subreaper()

    def launch(self, plan: LaunchPlan, streams: Streams) -> int:
        """Start the target; its pid. On OSError everything opened for it is closed."""
        try:
            self.process = subprocess.Popen(
                plan.argv,
                cwd=plan.cwd,
                env=plan.env,
                stdin=streams.stdin,
                stdout=streams.child_fds[0],
                stderr=streams.child_fds[1],
                start_new_session=self.own_session,
                # The target dies with the recorder (docs/architecture.md#reliability).
                preexec_fn=lifetime.child_preexec(self._child_setup()),
                close_fds=True,
            )
        except OSError:
            streams.close_all()
            if self._input is not None:
                self._input.child_started()
                self._input.close()
            if self.terminal is not None:
                self.terminal.close()
            raise
        streams.child_started()
        if self._input is not None:
            self._input.child_started()
        if self.terminal is not None:
            self.terminal.on_interrupt_key = self._interrupt_key
            self.terminal.child_started(self.process.pid)
        return self.process.pid

    @property
    def own_session(self) -> bool:
        """Whether the target leads a session of its own (not in memsight's process group)."""
        return self.new_session or self.terminal is not None

    @property
    def shares_process_group(self) -> bool:
        """Whether the target is in memsight's process group, so that a signal sent to the
        group (a terminal's Ctrl+C) reaches it without memsight passing it on."""
        return not (self.own_session or self.new_group)

    def _child_setup(self) -> Callable[[], None] | None:
        """What the child runs before exec, after it was tied to this process' life."""
        if self.terminal is not None:
            return self.terminal.make_controlling
        if self.new_group and not self.own_session:
            return _lead_a_process_group
        return None

    def _interrupt_key(self) -> None:
        if self.on_interrupt_key is not None:
            self.on_interrupt_key()

    # -- while it runs ------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def poll(self) -> bool:
        """True while the target is running."""
        return self.process is not None and self.process.poll() is None

    def wait(self) -> int:
        """Wait for the target to exit; its return code (negative: killed by that signal)."""
        assert self.process is not None
        return self.process.wait()

    def sync_terminal_size(self) -> None:
        """The real terminal was resized (SIGWINCH): the target's follows."""
        if self.terminal is not None:
            self.terminal.sync_size()

    def restore_terminal(self) -> None:
        """Put the user's terminal back in its own mode (idempotent; also done at the end)."""
        if self.terminal is not None:
            self.terminal.restore()

    def send_input(self, data: bytes) -> None:
        """Write `data` to the target's stdin (capture mode), in order, without blocking."""
        if self._input is not None:
            self._input.send(data)

    def close_input(self) -> None:
        """End the target's stdin: its reads see end of file once it has read what was sent."""
        if self._input is not None:
            self._input.close()

    def send_signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)

    def reap_orphans(self) -> None:
        """Collect the orphans adopted so far (else they stay zombies until the end)."""
        if self.subreaper and self.process is not None:
            self._orphans_reaped(lifetime.reap_orphans({self.process.pid}))

    # -- the end ------------------------------------------------------------------------------

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """End the target's whole process tree: SIGTERM, then SIGKILL after `grace_s`."""
        if self.process is None:
            return
        # Workers outlive the main process as orphans, no longer its descendants: list them now.
        known = self._tree_snapshot()
        self.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.02)
        self.kill_tree(known)

    def _tree_snapshot(self) -> dict[int, int]:
        """pid -> start time of every descendant seen during the run or alive now."""
        assert self.process is not None
        seen = dict(self._seen())
        seen.update(proctree.descendants(self.process.pid))
        return {pid: ident.start for pid, ident in seen.items()}

    def kill_tree(self, known: dict[int, int] | None = None) -> None:
        """SIGKILL the target and every descendant it has, including orphaned workers."""
        if self.process is None:
            return
        running = self.process.poll() is None
        if running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGSTOP)  # no new children from here on
        # Listed while the main process still stands: once it dies, its children are orphans.
        victims = {**(known or {}), **self._tree_snapshot()}
        if running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
        for pid, start in victims.items():
            if _same_process(pid, start):  # else that pid now belongs to someone else
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if not self.shares_process_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def close_terminal(self) -> None:
        if self.terminal is not None:
            self.terminal.close()

    def collect_file_output(self, emit: Callable[[bytes], None]) -> None:
        """What the target appended to stdout/stderr files, as output frames."""
        for tail in self._file_tails:
            tail.collect(emit)

    def end_orphans(self) -> None:
        """The target exited: end what is left of its tree, its orphans now our children.

        SIGTERM first, so daemons can clean up, then SIGKILL after ORPHAN_GRACE_S."""
        if not self.subreaper:
            return
        me = os.getpid()
        for signum, grace_s in ((signal.SIGTERM, ORPHAN_GRACE_S), (signal.SIGKILL, 2.0)):
            left = proctree.descendants(me)
            if not left:
                return
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                self._orphans_reaped(lifetime.reap_orphans(set()))
                if not proctree.descendants(me):
                    break
                time.sleep(0.02)
        self._orphans_reaped(lifetime.reap_orphans(set()))

    def _orphans_reaped(self, statuses: dict[int, int]) -> None:
        """How the orphans this process collected ended (their parent is gone: no one else
        can tell)."""
        for pid, status in statuses.items():
            if os.WIFSIGNALED(status):
                self._event("child_exited", pid=pid, exit_code=None, signal=os.WTERMSIG(status))
            elif os.WIFEXITED(status):
                self._event("child_exited", pid=pid, exit_code=os.WEXITSTATUS(status), signal=None)


def _unrecorded() -> list[str]:
    """The streams that are pipes (or gone): written by the target, never seen by us."""
    names = []
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            regular = False
        if not regular:
            names.append(name)
    return names


def _same_process(pid: int, start: int) -> bool:
    ident = proctree.identity(pid)
    return ident is not None and ident.start == start


def _lead_a_process_group() -> None:
    os.setpgid(0, 0)


class _InputPipe:
    """The target's stdin in capture mode: a pipe written by a thread of its own, so that a
    script that does not read never blocks the recorder (nor Stop)."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, name="memsight-stdin", daemon=True)
        self._thread.start()

    def child_started(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.read_fd)  # the target has it; ours would keep end of file away

    def send(self, data: bytes) -> None:
        self._queue.put(data)

    def close(self) -> None:
        self._queue.put(None)

    def _write(self) -> None:
        try:
            while (data := self._queue.get()) is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._write_fd, view) :]
        except OSError:
            pass  # the target is gone (or closed its stdin): nothing more to send
        finally:
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
