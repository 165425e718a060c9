"""One recording: launch the target, gather every source of frames, write the profile file.

Frames from all threads pass through Recording.emit(), which appends them to the file and
hands them to an optional live consumer (the GUI), so the live view and a later load of the
file decode exactly the same bytes. The file is flushed every FLUSH_S seconds while the run
goes on.
"""

from __future__ import annotations

import contextlib
import os
import platform
import queue
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import profiler
from profiler import protocol
from profiler.launch.command import build_launch
from profiler.launch.spec import ExitStatus, RunSpec
from profiler.profile.processes import PROC_COLUMN, shared_table_name
from profiler.profile.storage import ProfileError, compact_profile
from profiler.profile.writer import ProfileWriter
from profiler.protocol import CHILD_TABLE, NVML_TABLE, RAM_TABLE, TableSchema
from profiler.recorder import lifetime, proctree
from profiler.recorder import nvml as nvml_mod
from profiler.recorder.blocks import TableBuffer
from profiler.recorder.output import FileTail, OutputPump, StreamChannel, regular_file_tails
from profiler.recorder.sampler import HostSampler, TreeWatcher
from profiler.recorder.server import AgentServer
from profiler.recorder.snapshots import SnapshotStore
from profiler.recorder.terminal import Terminal, terminal_fds
from profiler.terminal_text import terminal_safe

FLUSH_S = 0.2
# How long the target's leftover processes get to exit on SIGTERM after it ended.
ORPHAN_GRACE_S = 1.0
# How often orphans adopted during the run are reaped (else they stay zombies until the end).
REAP_S = 1.0
LIVE_FLUSH_S = 0.05
AGENT_LINGER_S = 1.0  # after the target exits, how long to wait for the agent's last frames
OUTPUT_LINGER_S = 0.5  # ... and for output still in flight from grandchildren
STOP_GRACE_S = 2.0


class Recording:
    """Record one run of `spec` into `out_path`.

    stdio: "terminal" (the command line) gives the target memsight's own stdin, stdout and
    stderr: a file or pipe is inherited as it is, so the target writes to it directly with
    exactly python's semantics (what it appends to a regular file is read back at the end,
    without times; pipe output is not recorded, and an `output_not_recorded` event says so), and the fds that are a terminal are replaced by one pseudo-terminal whose
    output is copied to the real terminal and recorded (recorder/terminal.py).
    "capture" (the app) records stdout and stderr through pipes; stdin is a pipe that
    send_input() writes to (the app's input line) and close_input() ends.
    new_session puts the target in its own session and process group (the GUI), so Stop
    reaches the whole tree. new_group puts it in a process group of its own, in memsight's
    session (the command line outside a terminal's foreground, where a signal sent to
    memsight's group must reach the target once: through memsight, which passes it on).
    The command line keeps the target in the caller's process group otherwise, unless it
    needs a session for its pseudo-terminal (`shares_process_group` tells which).
    """

    def __init__(
        self,
        spec: RunSpec,
        out_path: str | os.PathLike[str],
        stdio: str = "terminal",
        new_session: bool = False,
        new_group: bool = False,
        live: Callable[[bytes], None] | None = None,
        subreaper: bool = False,
    ) -> None:
        """`subreaper`: this process adopts the target's orphans and ends them with the run
        (for a process that records one run: `memsight run`, the app's recording process)."""
        self.spec = spec
        self.want_subreaper = subreaper
        self.subreaper = False
        self.out_path = Path(out_path)
        self.stdio = stdio
        self.new_session = new_session
        self.new_group = new_group
        self.terminal: Terminal | None = None
        self._file_tails: list[FileTail] = []
        self.on_interrupt_key: Callable[[], None] | None = None  # the user typed Ctrl+C
        self.live = live
        self.writer: ProfileWriter | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.status: ExitStatus | None = None
        self.agent_hello: dict[str, Any] | None = None
        self._tables: dict[int, TableBuffer] = {}
        self._threads: list[threading.Thread] = []
        self._pumps: list[OutputPump] = []
        self._stop_flush = threading.Event()
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._nvml: nvml_mod.NvmlSampler | None = None
        self.server: AgentServer | None = None
        self.sampler: HostSampler | None = None
        self.tree: TreeWatcher | None = None
        self.snapshots: SnapshotStore | None = None  # under --cuda-history
        self._procs = 0  # the last number given to a process of the job other than the target
        self._input: _InputPipe | None = None  # the target's stdin, in capture mode
        self._shared_schemas: dict[str, TableSchema] = {}  # their tables, by the agent's name
        self._job_pids: set[int] = set()  # every pid whose agent said hello

    # -- frame sink ---------------------------------------------------------------------------

    def emit(self, frame: bytes) -> None:
        if self.writer is not None:
            self.writer.write(frame)
        if self.live is not None:
            self.live(frame)

    def _write_only(self, frame: bytes) -> None:
        """A frame for the file alone (an attachment's bytes), written out at once."""
        if self.writer is not None:
            self.writer.write(frame)
            self.writer.flush()

    def _mark_attachments(self) -> None:
        if self.writer is not None:
            self.writer.mark_attachments()

    def event(self, type_: str, t: int | None = None, **data: Any) -> None:
        data["t"] = t if t is not None else time.monotonic_ns()
        data["type"] = type_
        self.emit(protocol.encode_json_frame(protocol.EVENTS, [data]))

    def _table(self, schema: TableSchema) -> TableBuffer:
        with self._lock:
            table = self._tables.get(schema.id)
            if table is None:
                table = self._tables[schema.id] = TableBuffer(schema)
                self.emit(schema.frame())
            return table

    def flush(self) -> None:
        with self._lock:
            tables = list(self._tables.values())
        for table in tables:
            frame = table.drain()
            if frame:
                self.emit(frame)
        if self.writer is not None:
            self.writer.flush()

    # -- AgentHandler ---------------------------------------------------------------------------

    def on_hello(self, hello: dict[str, Any]) -> int | str:
        """Process 0 for the target's agent; the next number for any other process of its
        tree (a torchrun rank, a spawned worker); a refusal for a process outside it."""
        pid = hello["pid"]
        # What the agent says of itself; /proc says it better while the process is there.
        told = {key: hello.pop(key) for key in _HELLO_CLAIMS if key in hello}
        target = self.process.pid if self.process is not None else pid
        if pid == target:
            proc = 0
            self.agent_hello = hello
        elif not self._in_tree(pid, told.get("parent"), target):
            return f"pid {pid} is not in the target's process tree"
        else:
            with self._lock:
                self._procs += 1
                proc = self._procs
        self._job_pids.add(pid)
        ident = proctree.identity(pid)
        self.event(
            "process",
            proc=proc,
            pid=pid,
            parent=ident.ppid if ident is not None else told.get("parent"),
            cmdline=proctree.cmdline(pid)[:64] or told.get("cmdline", []),
            **{k: v for k, v in told.items() if k in ("started_ns", "forked")},
            **{k: v for k, v in hello.items() if k in _RANK_FIELDS},
        )
        self.event("agent_connected", **hello, **({"proc": proc} if proc else {}))
        if proc and self.writer is not None:
            self.writer.mark_processes()
        if proc and self.sampler is not None:
            self.sampler.add_process(proc, pid, self._table(PROCS_RAM_TABLE))
        return proc

    def _in_tree(self, pid: int, parent: Any, target: int) -> bool:
        """Whether `pid` descends from the target. A process that has already ended (a short
        fork child whose hello is read after its exit) is judged by the parent its hello
        names: a process of the job, or one of the target's tree."""
        tree = {target, os.getpid()}
        if proctree.ancestors_include(pid, tree):
            return True
        if proctree.identity(pid) is not None or not isinstance(parent, int):
            return False
        return parent in self._job_pids or proctree.ancestors_include(parent, tree)

    def on_schema(self, proc: int, schema: TableSchema) -> None:
        table = self._shared_schema(schema) if proc else schema
        if table is not None:
            self._table(table)

    def on_rows(self, proc: int, schema: TableSchema, rows: list[tuple[int, ...]]) -> None:
        if not proc:
            self._table(schema).extend(rows)
            return
        shared = self._shared_schema(schema)
        if shared is not None:
            self._table(shared).extend([(row[0], proc, *row[1:]) for row in rows])

    def _shared_schema(self, schema: TableSchema) -> TableSchema | None:
        """The procs_ table that holds the rows of `schema` for every process k >= 1
        (profile/processes.py); None for a layout other than the first of that name."""
        columns = [schema.columns[0], (PROC_COLUMN, "I"), *schema.columns[1:]]
        with self._lock:
            shared = self._shared_schemas.get(schema.name)
            if shared is None:
                shared = TableSchema(
                    _SHARED_TABLE_BASE + len(self._shared_schemas),
                    shared_table_name(schema.name),
                    columns,
                )
                self._shared_schemas[schema.name] = shared
        return shared if shared.columns == columns else None

    def on_events(self, proc: int, payload: bytes, events: list[dict[str, Any]]) -> None:
        if proc:
            for event in events:
                event["proc"] = proc
            self.emit(protocol.encode_json_frame(protocol.EVENTS, events))
        else:
            self.emit(protocol.encode_frame(protocol.EVENTS, payload, compress=len(payload) > 1024))
        for event in events:
            if event["type"] == "cuda_init" and self._nvml is None:
                self._start_nvml(event.get("devices"))
            elif event["type"] == "cuda_snapshot" and self.snapshots is not None:
                self.snapshots.request(event)

    def on_log(self, kind: str, **data: Any) -> None:
        self.event(kind, **data)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        spec = self.spec
        self.writer = ProfileWriter(self.out_path, warn=_warn_on_stderr)
        token = secrets.token_urlsafe(32)
        self.server = AgentServer(token, self)
        if spec.cuda_history > 0:
            self.snapshots = SnapshotStore(self._write_only, self.event, self._mark_attachments)
        plan = build_launch(
            spec,
            self.server.port,
            token,
            os.environ,
            snapshot_dir=self.snapshots.folder if self.snapshots is not None else None,
        )
        streams = self._open_streams()
        if self.want_subreaper:
            self.subreaper = lifetime.become_subreaper()
        t0 = time.monotonic_ns()
        start_time = datetime.now(timezone.utc).astimezone().isoformat(timespec="milliseconds")
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
            self.writer.close()
            with contextlib.suppress(OSError):
                self.out_path.unlink()
            self.server.listener.close()
            if self.snapshots is not None:
                self.snapshots.finish()
            raise
        streams.child_started()
        if self._input is not None:
            self._input.child_started()
        if self.terminal is not None:
            self.terminal.on_interrupt_key = self._interrupt_key
            self.terminal.child_started(self.process.pid)
        pid = self.process.pid
        total, _ = proctree.SystemMemoryReader().read()
        self.emit(
            protocol.encode_json_frame(
                protocol.RUN,
                {
                    "script": None if spec.module else spec.target,
                    "module": spec.target if spec.module else None,
                    "argv": list(spec.args),
                    "cwd": os.path.abspath(spec.cwd),
                    "python": spec.python,
                    "interval_ms": spec.interval_ms,
                    "start_time": start_time,
                    "t0_ns": t0,
                    "hostname": socket.gethostname(),
                    "platform": platform.platform(),
                    "memsight_version": profiler.__version__,
                    "pid": pid,
                    "ram_total_bytes": total,
                    "memory_limit_bytes": proctree.memory_limit(),
                    "hooks": spec.hooks,
                    "ram_budget_bytes": spec.ram_budget_bytes,
                    "census": spec.census if spec.hooks else "never",
                    "cuda_history": spec.cuda_history,
                },
            )
        )
        ram = self._table(RAM_TABLE)
        children = self._table(CHILD_TABLE)
        self.tree = TreeWatcher(pid, children, self.event)
        self.sampler = HostSampler(pid, spec.interval_ms / 1000.0, ram, self.tree)
        self.sampler.sample()  # the first sample is on its way before the target runs a line
        self.flush()
        self.server.start()
        self.tree.start()
        self.sampler.start()
        if streams.unrecorded:
            self.event(
                "output_not_recorded",
                streams=streams.unrecorded,
                reason="written by the target directly to a file or pipe",
            )
        for channel, stream, passthrough_fd in streams.pumped:
            pump = OutputPump(
                channel,
                stream,
                self.emit,
                passthrough_fd=passthrough_fd,
                on_truncated=lambda s: self.event("output_truncated", stream=s),
            )
            pump.start()
            self._pumps.append(pump)
        flusher = threading.Thread(target=self._flush_loop, name="memsight-flush", daemon=True)
        flusher.start()
        self._threads.append(flusher)

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

    def _open_streams(self) -> _Streams:
        if self.stdio == "capture":
            channels = [StreamChannel(use_pty=False) for _ in (1, 2)]
            self._input = _InputPipe()
            return _Streams(
                stdin=self._input.read_fd,
                child_fds=[c.child_fd for c in channels],
                pumped=[(c, s, None) for c, s in zip(channels, _STREAMS, strict=True)],
                unrecorded=[],
            )
        ttys = terminal_fds()
        if 1 not in ttys and 2 not in ttys:
            # Files and pipes (a terminal on stdin alone too) are the target's, as they are;
            # what it appends to a regular file is read back at the end.
            self._file_tails = regular_file_tails({1: protocol.STDOUT, 2: protocol.STDERR})
            return _Streams(
                stdin=None, child_fds=[None, None], pumped=[], unrecorded=self._unrecorded()
            )
        self.terminal = terminal = Terminal(ttys)
        stream = protocol.STDOUT if 1 in ttys else protocol.STDERR
        channel = StreamChannel.reading(terminal.master_fd, crlf=terminal.relays_input)
        return _Streams(
            stdin=terminal.child_fd(0),
            child_fds=[terminal.child_fd(1), terminal.child_fd(2)],
            pumped=[(channel, stream, terminal.real_fd)],
            unrecorded=[name for fd, name in ((1, "stdout"), (2, "stderr")) if fd not in ttys],
        )

    def _unrecorded(self) -> list[str]:
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

    def _interrupt_key(self) -> None:
        if self.on_interrupt_key is not None:
            self.on_interrupt_key()

    def sync_terminal_size(self) -> None:
        """The real terminal was resized (SIGWINCH): the target's follows."""
        if self.terminal is not None:
            self.terminal.sync_size()

    def restore_terminal(self) -> None:
        """Put the user's terminal back in its own mode (idempotent; also done at the end)."""
        if self.terminal is not None:
            self.terminal.restore()

    def _flush_loop(self) -> None:
        period = LIVE_FLUSH_S if self.live is not None else FLUSH_S
        next_reap = 0.0
        while not self._stop_flush.wait(period):
            # A /proc scan (about 1 ms per 100 processes): once a second, not every flush.
            if self.subreaper and self.process is not None and time.monotonic() >= next_reap:
                next_reap = time.monotonic() + REAP_S
                self._orphans_reaped(lifetime.reap_orphans({self.process.pid}))
            try:
                self.flush()
            except Exception as exc:  # keep flushing: losing one block beats losing the rest
                self.event("warning", message=f"a block of samples was lost: {exc}")

    def _start_nvml(self, devices: Any) -> None:
        cuda_devices = (
            [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []
        )
        self._nvml = nvml_mod.NvmlSampler(
            cuda_devices, lambda: self._table(NVML_TABLE), self.tree_pids
        )
        self._nvml.start()

    def tree_pids(self) -> set[int]:
        pids = set(self.tree.known) if self.tree is not None else set()
        if self.process is not None:
            pids.add(self.process.pid)
        return pids

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def poll(self) -> bool:
        """True while the target is running."""
        return self.process is not None and self.process.poll() is None

    def wait(self) -> ExitStatus:
        """Wait for the target to exit, then finish the file."""
        assert self.process is not None
        code = self.process.wait()
        self.finish(code)
        assert self.status is not None
        return self.status

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
        seen = dict(self.tree.ever_seen) if self.tree is not None else {}
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

    def _end_orphans(self) -> None:
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
                self.event("child_exited", pid=pid, exit_code=None, signal=os.WTERMSIG(status))
            elif os.WIFEXITED(status):
                self.event("child_exited", pid=pid, exit_code=os.WEXITSTATUS(status), signal=None)

    def finish(self, returncode: int) -> None:
        if self._finished.is_set():
            return
        self._finished.set()
        self.status = (
            ExitStatus(None, -returncode) if returncode < 0 else ExitStatus(returncode, None)
        )
        exited = time.monotonic_ns()
        assert self.server is not None and self.sampler is not None and self.tree is not None
        self.sampler.stop()
        self.tree.stop()
        if self.server.connected.is_set():
            self.server.agent_gone.wait(AGENT_LINGER_S)
        for pump in self._pumps:
            pump.finish(OUTPUT_LINGER_S)
        for pump in self._pumps:
            pump.join()
        if self.terminal is not None:
            self.terminal.close()
        for tail in self._file_tails:
            tail.collect(self.emit)
        self.sampler.join(timeout=2.0)
        self.tree.join(timeout=2.0)
        if self._nvml is not None:
            self._nvml.stop()
            self._nvml.join(timeout=2.0)
        self.server.close()
        if self.snapshots is not None:
            self.snapshots.finish()
        self._stop_flush.set()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self.event("exit", t=exited, exit_code=self.status.exit_code, signal=self.status.signal)
        self._end_orphans()
        for ident in self.tree.final_check():
            self.event(
                "warning", message=f"child process {ident.pid} ({ident.name}) outlived the target"
            )
        self.flush()
        self.event(
            "recording_end", samples=self.sampler.samples, missed_ticks=self.sampler.missed_ticks
        )
        self.flush()
        assert self.writer is not None
        self.writer.close()
        # On failure the file as recorded stays: complete and valid, only larger and slower.
        with contextlib.suppress(ProfileError, OSError, MemoryError, ValueError):
            compact_profile(self.out_path)


def _warn_on_stderr(line: str) -> None:
    # Said even with -q: a profile that is not being written is news the user must get.
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"memsight: warning: {terminal_safe(line)}\n")
        sys.stderr.flush()


def _same_process(pid: int, start: int) -> bool:
    ident = proctree.identity(pid)
    return ident is not None and ident.start == start


_STREAMS = (protocol.STDOUT, protocol.STDERR)
_RANK_FIELDS = ("rank", "local_rank", "world_size", "group_rank")
# What a hello says of its own process (server._hello_fields): recorded in `process`, not in
# `agent_connected`.
_HELLO_CLAIMS = ("parent", "cmdline", "started_ns", "forked")
# The procs_ tables get ids from here on: the recorder's are 1-3, the agent's 64 and up.
_SHARED_TABLE_BASE = 160
PROCS_RAM_TABLE = TableSchema(
    _SHARED_TABLE_BASE - 1,
    shared_table_name(RAM_TABLE.name),
    [RAM_TABLE.columns[0], (PROC_COLUMN, "I"), *RAM_TABLE.columns[1:]],
)


@dataclass
class _Streams:
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
