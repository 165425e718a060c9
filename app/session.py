"""One recording at a time, from Run to its end, for the views to follow.

The window asks a RunSession to start a run; the session owns the RunController, polls it on a
timer and tells whoever listens what happened: a run started, new samples were decoded into
its profile, it ended, it failed. While the run goes on it asks for findings at a steady pace,
never per frame. The session draws nothing itself.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from memsight.app.controller import RunController
from memsight.app.diagnosisworker import BackgroundDiagnosis
from memsight.app.pace import FASTEST_MS, RefreshPace
from memsight.app.remote import RemoteController
from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.launch.stdin_wait import waits_for_stdin
from memsight.profiler.profile.model import Profile

DIAGNOSE_EVERY_S = 2.0  # findings follow a live run at this pace, not every frame
# How often a running script is looked at for a read of its stdin: a prompt is answered by a
# person, so a quarter of a second is soon enough, and the look costs a file read per thread.
STDIN_LOOK_EVERY_S = 0.25


class RunSession(QObject):
    """Starts runs, polls the one running and reports on it by signal.

    Signals, all in the GUI thread:
    started(profile, path): a run began recording into `profile`, saved at `path`.
    refreshed(): new samples were decoded into the profile since the last signal.
    ticked(): one timer tick is done (the elapsed time moved on), new samples or not.
    finished(status): the run ended with this ExitStatus; its profile is complete.
    failed(title, message): the run could not start, or its recording failed.
    waitingForInput(bool): the script began (True) or stopped (False) waiting for a line on
        its stdin; False too when the run ends.
    """

    started = Signal(object, object)
    refreshed = Signal()
    ticked = Signal()
    finished = Signal(object)
    failed = Signal(str, str)
    waitingForInput = Signal(bool)

    def __init__(self, diagnosis: BackgroundDiagnosis, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.diagnosis = diagnosis
        self.controller: RunController | RemoteController | None = None
        self.frame_ms: list[float] = []  # how long each tick took, its views' redraws included
        self._started_at = 0.0
        self._diagnosed_at = 0.0
        self.waiting_for_input = False
        self._stdin_looked_at = 0.0
        # The model is redrawn on this timer, never per sample, at the pace the CPU budget
        # allows (app/pace.py).
        self.pace = RefreshPace()
        self.timer = QTimer(self)
        self.timer.setInterval(FASTEST_MS)
        self.timer.timeout.connect(self._tick)

    @property
    def running(self) -> bool:
        return self.controller is not None and self.controller.running

    @property
    def ended(self) -> bool:
        """The run of this session has ended: reported, or to be by the tick under way."""
        return self.controller is not None and not self.controller.running

    @property
    def stopping(self) -> bool:
        return self.running and self.controller is not None and self.controller.stopping

    @property
    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self._started_at

    @property
    def profile(self) -> Profile | None:
        return self.controller.profile if self.controller is not None else None

    def start(self, spec: RunSpec, out: Path) -> bool:
        """Start recording `spec` into `out`; False (after `failed`) when it cannot start."""
        return self._launch(RunController(spec, out), out, "Cannot start the run")

    def attach(self, spec: RunSpec, pid: int, out: Path) -> bool:
        """Record the running process `pid` (described by `spec`) into `out`; Stop detaches."""
        return self._launch(RunController(spec, out, attach_pid=pid), out, "Cannot attach")

    def _launch(self, controller: RunController, out: Path, failure: str) -> bool:
        if self.running:
            return False
        try:
            controller.start()
        except OSError as exc:
            self.failed.emit(failure, f"{controller.spec.python}: {exc.strerror or exc}")
            return False
        self._begin(controller, out)
        return True

    @property
    def takes_input(self) -> bool:
        """The running script's stdin is the console's input line (a run the app launched)."""
        return self.controller is not None and self.controller.takes_input

    def watch(self, host: str, port: int, token: str, out: Path) -> bool:
        """Watch the run served at host:port, keeping a copy in `out`; a connection that fails
        ends it (`finished`, then `failed` with the reason)."""
        if self.running:
            return False
        controller = RemoteController(host, port, token, out)
        controller.start()
        self._begin(controller, out)
        return True

    @property
    def local(self) -> bool:
        """The run shown is a process of this machine (not one watched over the network)."""
        return self.controller is None or self.controller.local

    def _begin(self, controller: RunController | RemoteController, out: Path) -> None:
        self.controller = controller
        self._started_at = time.monotonic()
        self._diagnosed_at = self._started_at
        self.started.emit(controller.profile, out)
        self.pace.restart()
        self.timer.start(self.pace.interval_ms)
        self._tick()  # the recorder's first sample is on screen straight away

    def stop(self) -> None:
        """End the run's whole process tree (it is reported as finished once it has ended)."""
        if self.controller is not None and self.controller.running:
            self.controller.stop()
            self.ticked.emit()

    def kill(self) -> None:
        """End the run at once (the window is closing)."""
        if self.controller is not None and self.controller.running:
            self.controller.kill()

    def send_input(self, text: str) -> None:
        if self.controller is not None and self.controller.running:
            self.controller.send_input(text)

    def close_input(self) -> None:
        if self.controller is not None and self.controller.running:
            self.controller.close_input()

    def forget(self) -> None:
        """Let go of a run that has ended (another profile is shown now)."""
        if not self.running:
            self.controller = None

    def _tick(self) -> None:
        controller = self.controller
        if controller is None:
            self.timer.stop()
            return
        started = time.perf_counter()
        result = controller.poll()
        if result.frames:
            self.refreshed.emit()
        if result.finished is not None:
            self.timer.stop()
            self._set_waiting(False)
            self.finished.emit(result.finished)
            if controller.error:
                self.failed.emit(controller.error_title, controller.error)
            self._diagnose(controller.profile, final=True)
        else:
            if (
                time.monotonic() - self._diagnosed_at >= DIAGNOSE_EVERY_S
                and not self.diagnosis.busy
            ):
                self._diagnose(controller.profile, final=False)
            if (
                controller.takes_input
                and time.monotonic() - self._stdin_looked_at >= STDIN_LOOK_EVERY_S
            ):
                self._look_for_a_prompt(controller)
        self.ticked.emit()
        self.frame_ms.append((time.perf_counter() - started) * 1000)
        if self.timer.isActive():
            interval = self.pace.tick()
            if interval != self.timer.interval():
                self.timer.setInterval(interval)

    def _look_for_a_prompt(self, controller: RunController | RemoteController) -> None:
        self._stdin_looked_at = time.monotonic()
        pid = controller.profile.info.pid
        self._set_waiting(pid is not None and not controller.stopping and waits_for_stdin(pid))

    def _set_waiting(self, waiting: bool) -> None:
        if waiting != self.waiting_for_input:
            self.waiting_for_input = waiting
            self.waitingForInput.emit(waiting)

    def _diagnose(self, profile: Profile, final: bool) -> None:
        self._diagnosed_at = time.monotonic()
        self.diagnosis.request(profile, final)
