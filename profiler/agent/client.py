"""The agent's connection to the recorder and its background thread.

One daemon thread samples torch.cuda's allocator statistics (once the script has initialised
CUDA) and the C heap's (once torch is imported; agent/heap.py), and sends queued events and
sample rows every FLUSH_S seconds. The script's own threads
only append to the queue under a lock; they never touch the socket.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import socket
import sys
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Dict, List, NoReturn, Optional, Tuple

from .. import protocol
from ..protocol import AGENT_TABLES, GPU_TABLE, HEAP_TABLE, encode_json_frame
from . import oom
from .outbox import Outbox
from .snapshots import CudaSnapshots
from .tracebacks import format_traceback

if TYPE_CHECKING:  # imported once torch is: installing the hooks needs it
    from .instrument import Instrumentation

FLUSH_S = 0.1
EVENTS_PER_FRAME = 500  # keeps every frame far below the recorder's size limit
RECENT_EXCEPTIONS = 256  # exceptions remembered by id, so one error is reported once
MONITORING_TOOL_IDS = (2, 3, 4)  # sys.monitoring.PROFILER_ID, then ids no tool claims
IDLE_POLL_S = 0.05  # how often to look for torch / CUDA before CUDA is in use
DIST_POLL_S = 0.5  # how often to look for torch.distributed's default process group
CONNECT_TIMEOUT_S = 10.0
# A fork child connects before its own code runs: a recorder that does not answer at once
# must not hold it up for long (it then runs unobserved).
FORK_CONNECT_TIMEOUT_S = 2.0
MAX_CMDLINE_ARGS = 64

# The agent recording this process, if one does: a second one (an attach to a process that
# memsight launched, memsight.record inside `memsight run`) would instrument it twice.
active: Optional["Agent"] = None


def recording_agent() -> Optional["Agent"]:
    """The agent that records this process now, under any of the agent's names."""
    for name in ("_memsight_profiler.agent.client", "memsight.profiler.agent.client"):
        module = sys.modules.get(name)
        agent = getattr(module, "active", None) if module is not None else None
        if agent is not None and not agent.detached and not agent._closed:
            return agent  # type: ignore[no-any-return]
    return None


def start_agent(config: Dict[str, Any]) -> "Agent":
    """The agent of a process memsight launched, started before the script's first line."""
    agent = make_agent(config)
    agent.start()
    return agent


def make_agent(config: Dict[str, Any]) -> "Agent":
    """An agent connected to the recorder that `config` (the launch's, or an attach's)
    names; not started."""
    return Agent(
        host=str(config.get("host", "127.0.0.1")),
        port=int(config["port"]),
        token=str(config["token"]),
        interval_s=max(float(config.get("interval_ms", 10)) / 1000.0, 0.0005),
        hooks=bool(config.get("hooks", True)),
        census=str(config.get("census", "auto")),
        anatomy=str(config.get("anatomy", "auto")),
        cuda_history=int(config.get("cuda_history") or 0),
        snapshot_dir=config.get("snapshot_dir")
        if isinstance(config.get("snapshot_dir"), str)
        else None,
    )


class Agent(Outbox):
    """The outbox, sent to the recorder by a background thread that also samples CUDA."""

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        interval_s: float,
        hooks: bool = True,
        census: str = "auto",
        anatomy: str = "auto",
        cuda_history: int = 0,
        snapshot_dir: Optional[str] = None,
    ) -> None:
        super().__init__()
        self.started = time.monotonic()  # the run's wall time counts from here (censuses)
        self.interval_s = interval_s
        self.hooks = hooks
        self.census = census  # census_schedule's mode: "auto", "never" or "every-N"
        self.anatomy = anatomy  # anatomy.py's iteration: "auto", "off" or "N"
        self.instrumentation: Optional[Instrumentation] = None  # once torch is imported
        self._watcher: Any = None
        self._reader: Any = None
        self._exception_ids = 0
        # id(exception) -> (exc_id, its args tuple). Nothing is stored on the exception (the
        # script would see it) and the exception is not held (its frames' tensors would stay
        # alive). Its args tuple is held instead: a few strings, which keep their id unique, so
        # a later exception at the same address (CPython reuses it at once) is told apart.
        self._recent: OrderedDict[int, Tuple[int, Tuple[Any, ...]]] = OrderedDict()
        self._stop = threading.Event()
        self._torch: Any = None
        self._cuda: Any = None  # CudaSampler once the script initialised CUDA
        self._heap: Any = None  # heap.HeapReader once torch is imported, where there is one
        self._dist_known = False  # torch.distributed's rank was reported (dist_init)
        self._dist_next = 0.0
        self._ended = False  # script_end was sent
        # Attached to a running process (agent/attach.py): the recorder may ask it to leave,
        # and it leaves nothing behind (detach()).
        self.attached = False
        self.detached = False
        self._monitoring_tool: Optional[int] = None
        self._uncaught_reported = False
        self._process_failed = False  # a multiprocessing.Process' target raised (agent/ends.py)
        # The allocator's history, snapshots and block list (agent/snapshots.py).
        self.snapshots = CudaSnapshots(self, max(cuda_history, 0), snapshot_dir)
        self._address = (host, port)
        self._token = token
        self._send_lock = threading.Lock()  # one sender at a time: the thread, or close()
        self._sock_closed = False
        # Made once: a fork child sends them too, and its time before its own code counts.
        self._cmdline = _own_cmdline()
        self._schema_frames = b"".join(schema.frame() for schema in AGENT_TABLES)
        self._sock = self._connect(time.monotonic_ns(), CONNECT_TIMEOUT_S, forked=False)
        # None in a fork child, whose loop runs on a bare thread (_start_in_child).
        self._thread: Optional[threading.Thread] = threading.Thread(
            target=self._loop, name="memsight-agent", daemon=True
        )
        os.register_at_fork(after_in_child=self._forked)

    def _connect(self, started_ns: int, timeout: float, forked: bool) -> socket.socket:
        """A connection to the recorder that has said hello as this process."""
        sock = _connect_to(self._address, timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello: Dict[str, Any] = {
                "python_version": "%d.%d.%d" % sys.version_info[:3],
                "executable": sys.executable,
                # Who it is, as it knows itself: the recorder may find it gone already.
                "parent": os.getppid(),
                "cmdline": self._cmdline,  # a fork child's is its parent's
                "started_ns": started_ns,
                "forked": forked,
            }
            hello.update(_rank_environment(os.environ))
            sock.sendall(protocol.hello_frame(self._token, self.pid, hello) + self._schema_frames)
        except BaseException:
            sock.close()
            raise
        return sock

    def _start_hooks(self) -> None:
        """The PyTorch instrumentation (now, or as torch is imported) and the monitoring."""
        if not self.hooks:
            return
        if "torch" in sys.modules:
            # Imported already (before the script: a sitecustomize; before an attach: the
            # program's own import): instrument it now, in this thread.
            self._torch_imported(sys.modules["torch"])
        else:
            from .imports import TorchImportWatcher

            self._watcher = TorchImportWatcher(self._torch_imported)
            self._watcher.install()
        self._start_monitoring()

    def start(self) -> None:
        global active
        active = self
        self._start_hooks()
        assert self._thread is not None
        self._thread.start()
        import atexit

        # Registered before any of the script's handlers, so it runs after all of them.
        atexit.register(self._at_exit)
        self._watch_the_end()
        self._send_before_os_exit()
        self._watch_children_end()

    def _watch_children_end(self) -> None:
        """How this process' own children end, and the exception that ends a
        multiprocessing.Process run here (agent/ends.py)."""
        try:
            from . import ends

            ends.watch_reaped_children(self._child_reaped)
            ends.watch_process_exceptions(self._process_exception)
        except Exception as err:
            self.error("child_ends", err)

    def _child_reaped(self, pid: int, exit_code: Optional[int], signal: Optional[int]) -> None:
        self.event("child_reaped", pid=pid, exit_code=exit_code, signal=signal)

    def _process_exception(self, exc: BaseException) -> None:
        """The target of a multiprocessing.Process raised: the process ends with status 1."""
        if isinstance(exc, SystemExit):
            return
        self._process_failed = True
        self.report_exception(exc, where="process", uncaught=True)

    def _watch_the_end(self) -> None:
        """Mark the end of the script as an event (script_end), so that no rule mistakes the
        interpreter's teardown for part of the run.

        threading's exit callbacks are the first thing the interpreter runs once the main
        module returned, raised or called sys.exit, before it joins the script's non-daemon
        threads. Where such threads still run, the program is not done: the mark waits for
        them, in an atexit handler registered now, so that it runs before every other one.
        Then come the script's atexit handlers and the teardown of its modules, which frees
        what they held, for seconds on a busy machine.
        """
        register = getattr(threading, "_register_atexit", None)  # Python 3.9+
        if register is None:
            return
        with contextlib.suppress(Exception):
            register(self._main_finished)

    def _main_finished(self) -> None:
        if self._closed or os.getpid() != self.pid:
            return
        self._report_uncaught()
        others = [
            thread
            for thread in threading.enumerate()
            if not thread.daemon and thread is not threading.current_thread()
        ]
        if others:
            import atexit

            atexit.register(self._mark_end)
        else:
            self._mark_end()

    def _mark_end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self.instrumentation is not None:
            self.instrumentation.send_anatomy()
        exc = self._uncaught()
        self.event("script_end", uncaught=exc is not None or self._process_failed)

    @staticmethod
    def _uncaught() -> Optional[BaseException]:
        """The exception that ended the script, once Python printed it (sys.last_exc is set
        before the interpreter starts to finish), unless it is SystemExit."""
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if isinstance(exc, BaseException) and not isinstance(exc, SystemExit):
            return exc
        return None

    def _report_uncaught(self) -> None:
        if self._uncaught_reported:
            return
        exc = self._uncaught()
        if exc is not None:
            self._uncaught_reported = True
            self.report_exception(exc, where="uncaught", uncaught=True)

    def _send_before_os_exit(self) -> None:
        """os._exit() skips atexit: what the agent holds is sent first (DDP scripts end with
        it to skip a finalization that hangs). The exit itself is the program's, unchanged."""
        os_exit = os._exit

        def _exit(status: int) -> NoReturn:
            with contextlib.suppress(Exception):
                if os.getpid() == self.pid and not self._closed:
                    self._mark_end()
                    # Its own word on how it ends: a forked multiprocessing child ends here.
                    # With the name it ends under: a DataLoader worker names itself as its loop
                    # starts, and may end before the recorder has looked.
                    self.event("os_exit", exit_code=int(status), name=_own_name())
            with contextlib.suppress(Exception):
                self.close()
            os_exit(status)

        _exit.__doc__ = os_exit.__doc__
        os._exit = _exit

    def _at_exit(self) -> None:
        """The interpreter is ending: report an uncaught exception, then send everything.

        Python prints an uncaught exception (setting sys.last_exc / sys.last_value) before it
        runs the atexit handlers, so the error that ends the run is known here without a
        sys.excepthook of ours.
        """
        self._report_uncaught()
        self._mark_end()
        self.close()

    # -- API used from the target's threads -------------------------------------------------

    def report_exception(self, exc: BaseException, where: str, uncaught: bool = False) -> None:
        """Record an out-of-memory error (any error when `uncaught`), once per exception.

        The same exception may be seen several times (a forward hook, then the top level); it
        keeps one exc_id, and a later uncaught report says it was not handled after all.
        """
        try:
            exc_type = type(exc)
            type_name = "%s.%s" % (exc_type.__module__, exc_type.__qualname__)
            message = str(exc)
            kind = oom.classify(type_name, message)
            if kind is None and not uncaught:
                return
            known = self._known_id(exc)
            if known is not None and not uncaught:
                return
            fresh = known is None
            if known is None:
                self._exception_ids += 1
                known = self._exception_ids
                self._remember(exc, known)
            context = self.instrumentation
            if kind == "gpu" and fresh:
                self._cuda_blocks_at_exception(message, known)
            self.event(
                "exception",
                exc_id=known,
                exc_type=type_name,
                message=message[:20000],
                traceback=format_traceback(exc.__traceback__),
                uncaught=uncaught,
                where=where,
                oom=kind,
                numbers=oom.parse_numbers(message) if kind is not None else {},
                phase=context.phase if context is not None else None,
                iteration=context.steps if context is not None else None,
                memory=context.memory_state() if context is not None else {},
            )
            if kind is not None and fresh and context is not None:
                context.send_anatomy()
                context.censuses.at_error(exc.__traceback__, known)
        except Exception as err:
            self.error("report_exception", err)

    def _cuda_blocks_at_exception(self, message: str, exc_id: int) -> None:
        """The allocator's block list for a CUDA OOM error its observer did not report."""
        try:
            torch = self._torch or sys.modules.get("torch")
            if torch is None:
                return
            numbers = oom.parse_numbers(message)
            device = numbers.get("device")
            self.snapshots.at_oom(
                torch,
                device if isinstance(device, int) else None,
                "exception",
                requested=numbers.get("requested"),
                exc_id=exc_id,
            )
        except Exception as err:
            self.error("cuda_blocks", err)

    def cuda_oom(self, device: int, requested: int) -> None:
        """The allocator's OOM observer fired (memory.py): its block list, and snapshot."""
        if self._closed or os.getpid() != self.pid:
            return
        try:
            torch = self._torch or sys.modules.get("torch")
            self.snapshots.at_oom(torch, device, "oom", requested=requested)
        except Exception as err:
            self.error("cuda_blocks", err)

    def _known_id(self, exc: BaseException) -> Optional[int]:
        seen = self._recent.get(id(exc))
        # An exception without arguments shares the empty tuple with every other one: it is
        # never recognised (a second report beats a lost one).
        if seen is not None and exc.args and seen[1] is exc.args:
            return seen[0]
        return None

    def _remember(self, exc: BaseException, exc_id: int) -> None:
        if not exc.args:
            return
        self._recent[id(exc)] = (exc_id, exc.args)
        while len(self._recent) > RECENT_EXCEPTIONS:
            self._recent.popitem(last=False)

    def _start_monitoring(self) -> None:
        """On Python 3.12+, see every raised MemoryError/RuntimeError, caught or not.

        sys.monitoring (PEP 669) is not sys.settrace: with only RAISE enabled, code runs at full
        speed and the callback sees raises alone.
        """
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            return
        for tool in MONITORING_TOOL_IDS:
            try:
                monitoring.use_tool_id(tool, "memsight")
            except ValueError:
                continue  # taken by another tool (a debugger, coverage)
            monitoring.register_callback(tool, monitoring.events.RAISE, self._on_raise)
            monitoring.set_events(tool, monitoring.events.RAISE)
            self._monitoring_tool = tool
            return

    def _on_raise(self, code: Any, offset: int, exc: BaseException) -> None:
        if isinstance(exc, (MemoryError, RuntimeError)):
            self.report_exception(exc, where="raise")

    def cuda_reader(self) -> Any:
        """A CudaSampler for reads from the script's threads (CUDA must be initialised)."""
        if self._reader is None:
            from .cuda import CudaSampler

            self._reader = CudaSampler(self._torch or sys.modules["torch"])
        return self._reader

    def _torch_imported(self, torch: Any) -> None:
        """Runs in the importing thread as `import torch` completes (hooks enabled)."""
        self._announce_torch(torch)
        try:
            from .instrument import Instrumentation

            instrumentation = Instrumentation(self, torch)
            instrumentation.install()
            self.instrumentation = instrumentation
        except Exception as exc:
            self.error("instrumentation", exc)

    def close(self) -> None:
        if self._closed or os.getpid() != self.pid:
            return
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        try:
            if thread is not None:  # a fork child's loop is not waited for: it samples nothing
                self._sample_once()
                self._exit_snapshot()
            self._closed = True
            self._send_pending()
        finally:
            self._closed = True
            with self._send_lock:
                self._sock_closed = True
                with contextlib.suppress(OSError):
                    self._sock.close()

    def _exit_snapshot(self) -> None:
        try:
            self.snapshots.at_exit(self._torch if self._cuda is not None else None)
        except Exception as err:
            self.error("cuda_snapshot", err)

    # -- background thread ------------------------------------------------------------------

    def _loop(self) -> None:
        next_flush = time.monotonic() + FLUSH_S
        while not self._stop.is_set():
            if self.attached and self._asked_to_leave():
                self.detach()
                return
            self._sample_once()
            now = time.monotonic()
            if now >= next_flush:
                next_flush = now + FLUSH_S
                if not self._send_pending():
                    return
            wait = self.interval_s if self._cuda is not None else IDLE_POLL_S
            if self._heap is not None:
                wait = min(wait, max(0.0, self._heap.next_at - time.monotonic()))
            self._stop.wait(wait)

    def _asked_to_leave(self) -> bool:
        """Attached: the recorder wrote DETACH (or closed the connection: it is gone)."""
        import select

        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
            return bool(readable) and self._sock.recv(1) in (protocol.DETACH, b"")
        except (OSError, ValueError):
            return True

    def start_attached(self) -> None:
        """Start in a process that was running before (agent/attach.py): the hooks, the
        monitoring and the thread, each undone by detach(). Not the parts that cannot be taken
        back out cleanly (os._exit, the wait functions, threading's exit callbacks, the
        environment of children): the recorder sees the end of the process from outside."""
        global active
        active = self
        self.attached = True
        self._start_hooks()
        assert self._thread is not None
        self._thread.start()
        import atexit

        atexit.register(self._at_exit)

    def detach(self) -> None:
        """Take every hook out and leave: the program goes on as it was before the attach."""
        if self.detached:
            return
        self.detached = True
        global active
        if active is self:
            active = None
        import atexit

        atexit.unregister(self._at_exit)
        with contextlib.suppress(Exception):
            if self._watcher is not None:
                self._watcher.uninstall()
        with contextlib.suppress(Exception):
            if self.instrumentation is not None:
                self.instrumentation.uninstall()
        self.instrumentation = None
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None and self._monitoring_tool is not None:
            with contextlib.suppress(Exception):
                monitoring.set_events(self._monitoring_tool, 0)
                monitoring.register_callback(self._monitoring_tool, monitoring.events.RAISE, None)
                monitoring.free_tool_id(self._monitoring_tool)
            self._monitoring_tool = None
        self._stop.set()
        self.close()
        # The agent's modules, loaded under their private name for the attach: gone too.
        root = __name__.split(".")[0]
        if root.startswith("_memsight"):
            for name in [n for n in sys.modules if n == root or n.startswith(root + ".")]:
                del sys.modules[name]

    def _sample_once(self) -> None:
        try:
            if self._torch is None:
                self._find_torch()
            if self._torch is not None and self._cuda is None:
                self._find_cuda()
            if self._torch is not None and not self._dist_known:
                self._find_process_group()
            if self._cuda is not None:
                rows = self._cuda.sample(time.monotonic_ns())
                with self._lock:
                    self._rows[GPU_TABLE.id] += rows
            if self._heap is not None and self._heap.due(time.monotonic()):
                row = HEAP_TABLE.row.pack(*self._heap.row())
                with self._lock:
                    self._rows[HEAP_TABLE.id] += row
            instrumentation = self.instrumentation
            if instrumentation is not None:
                # A program without iterations gets its censuses on the clock, from here.
                instrumentation.censuses.on_clock()
        except Exception as exc:
            self.error("sampler", exc)

    def heap_between_iterations(self) -> None:
        """Read the C heap now, between two iterations (the optimizer step hook)."""
        heap = self._heap
        row = heap.boundary_row() if heap is not None else None
        if row is not None:
            packed = HEAP_TABLE.row.pack(*row)
            with self._lock:
                self._rows[HEAP_TABLE.id] += packed

    def _find_torch(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            return
        spec = getattr(torch, "__spec__", None)
        if spec is not None and getattr(spec, "_initializing", False):
            return  # still being imported by the script
        self._announce_torch(torch)

    def _announce_torch(self, torch: Any) -> None:
        with self._lock:
            if self._torch is not None:
                return
            self._torch = torch
        from .heap import HeapReader

        self._heap = HeapReader.open()
        version = getattr(torch, "version", None)
        self.event(
            "torch_imported",
            version=str(getattr(torch, "__version__", "")),
            cuda=getattr(version, "cuda", None),
            hooks=self.hooks,
        )

    def _find_process_group(self) -> None:
        """torch.distributed's default group, once the script made it (init_process_group):
        this process' rank and the world's size, for a job launched without torchrun's
        environment (mp.spawn). Looked for at most every DIST_POLL_S."""
        now = time.monotonic()
        if now < self._dist_next:
            return
        self._dist_next = now + DIST_POLL_S
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return
        self._dist_known = True
        self.event(
            "dist_init",
            rank=int(dist.get_rank()),
            world_size=int(dist.get_world_size()),
            backend=str(dist.get_backend()),
        )

    def _find_cuda(self) -> None:
        cuda = getattr(self._torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return
        from .cuda import CudaSampler

        sampler = CudaSampler(self._torch)
        self.event("cuda_init", devices=sampler.describe_devices())
        self._cuda = sampler
        try:
            self.snapshots.start_history(self._torch)
        except Exception as err:
            self.error("cuda_history", err)

    def _send_pending(self) -> bool:
        frames = []
        with self._lock:
            events, self._events = self._events, []
            for schema in AGENT_TABLES:
                rows = self._rows[schema.id]
                if rows:
                    frames.append(schema.rows_frame(bytes(rows)))
                    rows.clear()
        for start in range(0, len(events), EVENTS_PER_FRAME):
            batch = events[start : start + EVENTS_PER_FRAME]
            try:
                frames.append(encode_json_frame(protocol.EVENTS, batch))
            except (TypeError, ValueError):
                frames.append(encode_json_frame(protocol.EVENTS, _plain(batch)))
        if not frames:
            return True
        with self._send_lock:
            if self._sock_closed:
                return False
            try:
                self._sock.sendall(b"".join(frames))
                return True
            except OSError:
                self._closed = True  # the recorder is gone; the script carries on alone
                return False

    def _forked(self) -> None:
        """In a fork child (a DataLoader worker, a fork-context multiprocessing.Process).

        It inherits a copy of the parent's socket and maybe a lock held by another thread at
        the fork, but not the agent's thread: it must never write to the parent's stream.
        It becomes a process of the job of its own: a fresh lock, an empty queue, a fresh
        connection whose hello says who it is (its pid, parent and start), sent before any of
        the child's code runs, so the recorder knows it however short its life. Nothing of
        CUDA is touched (a fork child cannot use the parent's context). Without a recorder
        to reach, it carries on unobserved, as before.
        """
        if self.detached:
            return  # os.register_at_fork cannot be undone: a detached agent does nothing here
        started = time.monotonic_ns()
        self._closed = True
        self._lock = threading.Lock()
        with contextlib.suppress(OSError):
            self._sock.close()
        if _execs_next():
            return  # subprocess' child, between its fork and its exec: not a process of its own
        with contextlib.suppress(Exception):
            self._start_in_child(started)

    def _start_in_child(self, started_ns: int) -> None:
        self.pid = os.getpid()
        self._events = []
        self._rows = {schema.id: bytearray() for schema in AGENT_TABLES}
        self._send_lock = threading.Lock()
        self._sock_closed = False
        self._stop = threading.Event()
        self._cuda = None
        self._reader = None
        self._ended = False
        self._uncaught_reported = False
        self._process_failed = False
        self._sock = self._connect(started_ns, FORK_CONNECT_TIMEOUT_S, forked=True)
        self._closed = False
        censuses = getattr(self.instrumentation, "censuses", None)
        if censuses is not None:
            censuses.every = None  # no census in a fork child: DataLoader workers come by the dozen
        drop_anatomy = getattr(self.instrumentation, "drop_anatomy", None)
        if drop_anatomy is not None:
            drop_anatomy()  # nor an anatomy: the parent measures the training iteration
        # Rows of this process name things by the numbers its parent announced.
        for name, name_id in list(self._names.items()):
            self.event("name", id=name_id, name=name)
        # A bare thread: threading.Thread.start() would wait for it to be scheduled, a cost
        # every fork would pay before its own code runs. close() does not wait for it either.
        self._thread = None
        _thread.start_new_thread(self._loop, ())


# torch.distributed's launchers (torchrun, accelerate, Lightning) say who a process is here.
_RANK_VARIABLES = (
    ("rank", "RANK"),
    ("local_rank", "LOCAL_RANK"),
    ("world_size", "WORLD_SIZE"),
    ("group_rank", "GROUP_RANK"),
)


def _rank_environment(environ: Any) -> Dict[str, int]:
    found = {}
    for key, name in _RANK_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit() and len(value) < 10:
            found[key] = int(value)
    return found


def _connect_to(address: Tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection to `address`. A numeric host is connected to directly: a fork child's
    first getaddrinfo() costs tens of milliseconds (it loads the resolver's configuration)."""
    host, port = address
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
        return sock
    return socket.create_connection(address, timeout=timeout)


def _execs_next() -> bool:
    """Whether this fork child is subprocess' (Popen with a preexec_fn runs the fork handlers
    in the child), which runs no Python of the program's and execs at once: the Python code
    that forked is Popen._execute_child, possibly through agent/children.py's wrapper."""
    frame: Any = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "_execute_child" and code.co_filename.endswith("subprocess.py"):
            return True
        frame = frame.f_back
    return False


def _own_cmdline() -> List[str]:
    """This process' command line as /proc shows it (a fork child: its parent's)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read(65536)
        args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    except OSError:
        args = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    return [a[:1000] for a in args[:MAX_CMDLINE_ARGS]]


def _own_name() -> Optional[str]:
    """This process' name as /proc shows it (what `prctl(PR_SET_NAME)` set), else None."""
    try:
        with open("/proc/self/comm", "rb") as f:
            return f.read(64).decode("utf-8", "replace").strip() or None
    except OSError:
        return None


def _plain(value: Any) -> Any:
    """`value` made JSON-safe: NaN and infinities become None, unknown objects their repr."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return repr(value)[:1000]
