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
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memsight import profiler
from memsight.profiler import protocol
from memsight.profiler.launch.command import build_launch
from memsight.profiler.launch.spec import ExitStatus, RunSpec
from memsight.profiler.profile.processes import PROC_COLUMN, shared_table_name
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import CHILD_TABLE, NVML_TABLE, RAM_TABLE, TableSchema
from memsight.profiler.recorder import nvml as nvml_mod
from memsight.profiler.recorder import proctree
from memsight.profiler.recorder.attached import AttachedTarget
from memsight.profiler.recorder.blocks import TableBuffer, warm_imports
from memsight.profiler.recorder.output import OutputPump
from memsight.profiler.recorder.sampler import HostSampler, TreeWatcher
from memsight.profiler.recorder.server import AgentServer
from memsight.profiler.recorder.snapshots import SnapshotStore
from memsight.profiler.recorder.target import STOP_GRACE_S, Target
from memsight.profiler.recorder.terminal import Terminal
from memsight.profiler.terminal_text import terminal_safe

FLUSH_S = 0.2
# How often orphans adopted during the run are reaped (else they stay zombies until the end).
REAP_S = 1.0
LIVE_FLUSH_S = 0.05
AGENT_LINGER_S = 1.0  # after the target exits, how long to wait for the agent's last frames
OUTPUT_LINGER_S = 0.5  # ... and for output still in flight from grandchildren


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
    The process itself, its stdio, signals and end are a Target's (target.py).
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
        self.out_path = Path(out_path)
        self.target: Target | AttachedTarget = Target(
            stdio, new_session, new_group, subreaper, self.event, self._seen_descendants
        )
        self.live = live
        # Called after each flush of the file (`memsight run --serve` wakes its viewers).
        self.after_flush: Callable[[], None] | None = None
        self.writer: ProfileWriter | None = None
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
        if self.after_flush is not None:
            self.after_flush()

    # -- AgentHandler ---------------------------------------------------------------------------

    def on_hello(self, hello: dict[str, Any]) -> int | str:
        """Process 0 for the target's agent; the next number for any other process of its
        tree (a torchrun rank, a spawned worker); a refusal for a process outside it."""
        pid = hello["pid"]
        # What the agent says of itself; /proc says it better while the process is there.
        told = {key: hello.pop(key) for key in _HELLO_CLAIMS if key in hello}
        target = self.target.pid or pid
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
        target = self.target
        assert isinstance(target, Target)
        streams = target.open_streams()
        target.become_subreaper()
        t0 = time.monotonic_ns()
        start_time = datetime.now(timezone.utc).astimezone().isoformat(timespec="milliseconds")
        try:
            pid = target.launch(plan, streams)
        except OSError:
            self.writer.close()
            with contextlib.suppress(OSError):
                self.out_path.unlink()
            self.server.listener.close()
            if self.snapshots is not None:
                self.snapshots.finish()
            raise
        warm_imports()
        self._begin(pid, t0, start_time, streams.unrecorded, streams.pumped)

    def attach(self, pid: int) -> None:
        """Record `pid`, a process that runs already (`memsight attach`), from outside at once:
        its memory and its tree's. Its agent joins when the caller has made it start one
        (recorder/inject.py) with `agent_config()`. The recording ends when the process exits
        or detach() is called."""
        self.target = AttachedTarget(pid)
        self.writer = ProfileWriter(self.out_path, warn=_warn_on_stderr)
        self.server = AgentServer(secrets.token_urlsafe(32), self)
        t0 = time.monotonic_ns()
        start_time = datetime.now(timezone.utc).astimezone().isoformat(timespec="milliseconds")
        self._begin(pid, t0, start_time, [], [], attached_at=start_time)

    def agent_config(self) -> dict[str, Any]:
        """What an agent started in an attached process needs to reach this recording."""
        assert self.server is not None
        return {
            "host": self.server.host,
            "port": self.server.port,
            "token": self.server.token,
            "interval_ms": self.spec.interval_ms,
            "hooks": self.spec.hooks,
            "census": self.spec.census if self.spec.hooks else "never",
            "anatomy": self.spec.anatomy,
        }

    def watch_gpus_from_outside(self) -> None:
        """No agent to say CUDA is in use (attached without one): sample through NVML the
        devices on which the process tree has a CUDA context now, numbered as NVML numbers
        them. Nothing without NVML, or when the tree uses no GPU."""
        if self._nvml is not None:
            return
        driver = nvml_mod.load_nvml()
        if driver is None:
            return
        try:
            devices = nvml_mod.devices_in_use(driver, self.tree_pids())
        except Exception:
            return
        if devices:
            self._start_nvml(devices)

    def detach(self) -> None:
        """End an attached recording; the process goes on (its agent takes its hooks out)."""
        if isinstance(self.target, AttachedTarget):
            self.target.detach()

    def _begin(
        self,
        pid: int,
        t0: int,
        start_time: str,
        unrecorded: list[str],
        pumped: list[tuple[Any, int, int | None]],
        attached_at: str | None = None,
    ) -> None:
        """The RUN frame, the samplers and the flushing: a launched run and an attached one."""
        spec = self.spec
        assert self.server is not None
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
                    "platform": platform_name(),
                    "memsight_version": profiler.__version__,
                    "pid": pid,
                    "ram_total_bytes": total,
                    "memory_limit_bytes": proctree.memory_limit(),
                    "hooks": spec.hooks,
                    "ram_budget_bytes": spec.ram_budget_bytes,
                    "census": spec.census if spec.hooks else "never",
                    "cuda_history": spec.cuda_history,
                    **({"attached": True, "attached_at": attached_at} if attached_at else {}),
                },
            )
        )
        ram = self._table(RAM_TABLE)
        children = self._table(CHILD_TABLE)
        self.tree = TreeWatcher(pid, children, self.event)
        self.sampler = HostSampler(pid, spec.interval_ms / 1000.0, ram, self.tree)
        self.sampler.sample()  # the first sample is on its way before the target runs a line
        self.server.start()
        self.tree.start()
        self.sampler.start()
        # Sampling runs before the first flush: encoding a block waits for numpy and the codec
        # (warm_imports), which a busy machine takes a second or more over, and a short
        # script would otherwise end with only the sample above.
        self.flush()
        if unrecorded:
            self.event(
                "output_not_recorded",
                streams=unrecorded,
                reason="written by the target directly to a file or pipe",
            )
        for channel, stream, passthrough_fd in pumped:
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

    # -- the target, as a process (target.py) -----------------------------------------------

    @property
    def terminal(self) -> Terminal | None:
        return self.target.terminal

    @property
    def on_interrupt_key(self) -> Callable[[], None] | None:
        return self.target.on_interrupt_key

    @on_interrupt_key.setter
    def on_interrupt_key(self, callback: Callable[[], None] | None) -> None:
        self.target.on_interrupt_key = callback  # the user typed Ctrl+C

    @property
    def shares_process_group(self) -> bool:
        return self.target.shares_process_group

    def sync_terminal_size(self) -> None:
        self.target.sync_terminal_size()

    def restore_terminal(self) -> None:
        self.target.restore_terminal()

    def _seen_descendants(self) -> dict[int, proctree.ProcessIdentity]:
        return dict(self.tree.ever_seen) if self.tree is not None else {}

    def _flush_loop(self) -> None:
        period = LIVE_FLUSH_S if self.live is not None else FLUSH_S
        next_reap = 0.0
        while not self._stop_flush.wait(period):
            # A /proc scan (about 1 ms per 100 processes): once a second, not every flush.
            if time.monotonic() >= next_reap:
                next_reap = time.monotonic() + REAP_S
                self.target.reap_orphans()
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
        if self.target.pid is not None:
            pids.add(self.target.pid)
        return pids

    @property
    def pid(self) -> int | None:
        return self.target.pid

    def poll(self) -> bool:
        """True while the target is running."""
        return self.target.poll()

    def wait(self) -> ExitStatus:
        """Wait for the target to exit (or, attached, for a detach), then finish the file."""
        self.finish(self.target.wait())
        assert self.status is not None
        return self.status

    def send_input(self, data: bytes) -> None:
        self.target.send_input(data)

    def close_input(self) -> None:
        self.target.close_input()

    def send_signal(self, signum: int) -> None:
        self.target.send_signal(signum)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """End the target's whole process tree: SIGTERM, then SIGKILL after `grace_s`."""
        self.target.stop(grace_s)

    def kill_tree(self, known: dict[int, int] | None = None) -> None:
        """SIGKILL the target and every descendant it has, including orphaned workers."""
        self.target.kill_tree(known)

    def finish(self, returncode: int | None) -> None:
        """`returncode` None: an attached process, whose status is not known here."""
        if self._finished.is_set():
            return
        self._finished.set()
        if returncode is None:
            self.status = ExitStatus(None, None)
        else:
            self.status = (
                ExitStatus(None, -returncode) if returncode < 0 else ExitStatus(returncode, None)
            )
        exited = time.monotonic_ns()
        assert self.server is not None and self.sampler is not None and self.tree is not None
        detached = isinstance(self.target, AttachedTarget) and not self.target.exited
        self.sampler.stop()
        self.tree.stop()
        if detached:
            self.server.ask_agents_to_detach()  # each takes its hooks out, then disconnects
        self.server.settle(AGENT_LINGER_S)
        for pump in self._pumps:
            pump.finish(OUTPUT_LINGER_S)
        for pump in self._pumps:
            pump.join()
        self.target.close_terminal()
        self.target.collect_file_output(self.emit)
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
        if detached:
            self.event("detached", t=exited)
        else:
            self.event("exit", t=exited, exit_code=self.status.exit_code, signal=self.status.signal)
        self.target.end_orphans()
        for ident in self.tree.final_check():
            if detached:  # the process goes on, and its children with it: as they should
                break
            self.event(
                "warning", message=f"child process {ident.pid} ({ident.name}) outlived the target"
            )
        if not self.sampler.samples:
            # A run never records nothing without saying why: the first read of the target's
            # memory failed, and that ended the sampling.
            why = self.sampler.main.failure or "the sampling never ran"
            self.event("warning", message=f"no memory sample of the target was taken: {why}")
        self.flush()
        self.event(
            "recording_end", samples=self.sampler.samples, missed_ticks=self.sampler.missed_ticks
        )
        self.flush()
        assert self.writer is not None
        self.writer.close()
        # On failure the file as recorded stays: complete and valid, only larger and slower.
        from memsight.profiler.profile.storage import ProfileError, compact_profile

        with contextlib.suppress(ProfileError, OSError, MemoryError, ValueError):
            compact_profile(self.out_path)


def platform_name() -> str:
    """platform.platform()'s text ("Linux-6.8.0-x86_64-with-glibc2.39"). On Linux it is built
    here from os.uname() and the C library's version: platform.platform() runs `uname -p`, a
    program, on every run's start, for a processor name it leaves out when it is the machine's
    or unknown, as it is on Linux."""
    if not sys.platform.startswith("linux"):
        return platform.platform()
    uname = os.uname()
    libc = "".join(platform.libc_ver())
    parts = [uname.sysname, uname.release, uname.machine, *(("with", libc) if libc else ())]
    text = "-".join(p.strip() for p in parts if p.strip())
    for bad in ' /\\:;"()':
        text = text.replace(bad, "_" if bad == " " else "-")
    while "--" in text:
        text = text.replace("--", "-")
    return text.strip("-")


def _warn_on_stderr(line: str) -> None:
    # Said even with -q: a profile that is not being written is news the user must get.
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"memsight: warning: {terminal_safe(line)}\n")
        sys.stderr.flush()


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
