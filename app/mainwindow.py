"""The main window: the views and docks, the documents shown (open, save, export) and the
wiring between them, the run setup and the run session."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QEvent, QSettings, QSize, Qt
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QKeySequence,
    QResizeEvent,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QMainWindow,
    QMessageBox,
    QToolBar,
    QWidget,
)

from memsight import profiler
from memsight.app import filedialogs
from memsight.app.afterpaint import AfterPaint
from memsight.app.anatomy import AnatomyPanel
from memsight.app.attachdialog import AttachDialog
from memsight.app.compare import CompareController, ComparePanel, same_target
from memsight.app.connectdialog import ConnectDialog
from memsight.app.console import ConsoleView
from memsight.app.contents import ContentsPanel
from memsight.app.diagnosisworker import BackgroundDiagnosis
from memsight.app.findings import FindingsPanel
from memsight.app.maincurves import PreparedCurves
from memsight.app.opening import ProfileReader
from memsight.app.plaintext import shorten, window_title
from memsight.app.recordings import recordings_dir
from memsight.app.runsetup import RunSetupPanel
from memsight.app.session import RunSession
from memsight.app.settings import AppSettings, ScriptSetup
from memsight.app.shortcuts import WindowShortcuts
from memsight.app.statusbar import RunStatusBar
from memsight.app.timeline import TimelineView
from memsight.profiler.diagnosis import Finding
from memsight.profiler.diagnosis.contents import Census, census_label
from memsight.profiler.launch.running import NotAttachable, attached_spec, python_process
from memsight.profiler.launch.spec import DEFAULT_INTERVAL_MS, ExitStatus, default_profile_name
from memsight.profiler.output_path import OutputError
from memsight.profiler.profile.header import SUFFIX
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.overview import read_overview
from memsight.profiler.profile.storage import ProfileError, load_profile
from memsight.profiler.report import write_html
from memsight.profiler.units import format_bytes

# A dock takes at most this share of a new window's width (Findings) or height (Console and
# the tabs beside it), and no more than these pixels on a large screen: the timeline has the rest.
DOCK_SHARE = 0.25
DOCK_WIDTH_MAX = 380
DOCK_HEIGHT_MAX = 240
# Layouts saved by earlier versions had the Run dock beside the timeline and dock sizes chosen
# around it; theirs is not restored (restoreState refuses another version).
WINDOW_STATE_VERSION = 1
PROFILE_FILTER = f"memsight profiles (*{SUFFIX});;All files (*)"
OPEN_FILTER = (
    f"memsight profiles and scripts (*{SUFFIX} *.py);;memsight profiles (*{SUFFIX});;"
    "Python scripts (*.py);;All files (*)"
)


class MainWindow(QMainWindow):
    def __init__(self, store: QSettings | None = None) -> None:
        super().__init__()
        self.store = store or QSettings("memsight", "memsight")
        self.settings = AppSettings.load(self.store)
        self.profile: Profile | None = None
        self.profile_path: Path | None = None
        self.error_box: QMessageBox | None = None
        self._attached_pid: int | None = None  # the running process being recorded (Attach)

        self.setWindowTitle("memsight")
        self.setAcceptDrops(True)
        self.setDockNestingEnabled(True)
        self.timeline = TimelineView()
        self.setCentralWidget(self.timeline)
        self.setup_panel = RunSetupPanel()
        self.run_toolbar = self._run_toolbar(self.setup_panel)
        self.console = ConsoleView()
        self.console_dock = self._dock(
            "Console", self.console, Qt.DockWidgetArea.BottomDockWidgetArea
        )
        self.findings = FindingsPanel(self.store)
        self.findings_dock = self._dock(
            "Findings", self.findings, Qt.DockWidgetArea.RightDockWidgetArea
        )
        self.findings.findingSelected.connect(self._on_finding)
        # Beside the console: a table wants the width of the window more than its height.
        self.contents = ContentsPanel()
        self.contents_dock = self._dock(
            "Contents", self.contents, Qt.DockWidgetArea.BottomDockWidgetArea
        )
        self.anatomy = AnatomyPanel()
        self.anatomy_dock = self._dock(
            "Anatomy", self.anatomy, Qt.DockWidgetArea.BottomDockWidgetArea
        )
        self.compare = ComparePanel()
        self.compare_dock = self._dock(
            "Compare", self.compare, Qt.DockWidgetArea.BottomDockWidgetArea
        )
        self.tabifyDockWidget(self.console_dock, self.contents_dock)
        self.tabifyDockWidget(self.console_dock, self.anatomy_dock)
        self.tabifyDockWidget(self.console_dock, self.compare_dock)
        self.compare_dock.hide()
        self.comparing = CompareController(
            self.timeline, self.compare, self.compare_dock, self.findings, self
        )
        self.comparing.failed.connect(self.show_error)
        self.reader = ProfileReader(self)
        self._overview_range = (0.0, 0.0)  # the view an overview was shown in
        self.reader.loaded.connect(self._on_profile_read)
        self.reader.failed.connect(self._on_read_failed)
        self.compare.closeRequested.connect(self.stop_comparing)
        self._previous: tuple[Profile, Path] | None = None  # the run before this one
        self._terminating = False  # ending on SIGTERM: close without asking (terminate)
        self.console_dock.raise_()
        self.contents.censusSelected.connect(self._on_census)
        self.contents.locationActivated.connect(self._open_in_editor)
        self._contents_shown = False  # the dock's tab is in front (Qt says so only by signal)
        self.contents_dock.visibilityChanged.connect(self._on_contents_shown)
        self.diagnosis = BackgroundDiagnosis(self)
        # A tick's rules start once the timeline it changed is painted: beside that paint
        # they took its GIL and its core (app/afterpaint.py).
        self.diagnosis.stay_out_of_paints(self.timeline.graphics.viewport())
        # What may wait until the timeline's next frame is on screen.
        self.after_timeline_paint = AfterPaint(self.timeline.graphics.viewport(), self)
        self.diagnosis.ready.connect(self.findings.set_diagnosis)
        self.session = RunSession(self.diagnosis, self)
        self.session.started.connect(self._on_run_started)
        self.session.refreshed.connect(self._on_samples)
        self.session.ticked.connect(self._update_status)
        self.session.finished.connect(self._on_run_finished)
        self.session.failed.connect(self.show_error)
        self.console.inputEntered.connect(self.session.send_input)
        self.console.inputClosed.connect(self.session.close_input)
        self.session.waitingForInput.connect(self._on_waiting_for_input)
        for python in self.settings.pythons:
            self.setup_panel.add_python(python)

        self.status = RunStatusBar()
        self.setStatusBar(self.status)
        self.status.compare_previous_button.clicked.connect(self.compare_with_previous)

        # A line for the status bar from a panel: why a place could not be opened, and the like.
        for panel in (self.findings, self.contents):
            panel.message.connect(lambda text: self.status.showMessage(text, 10_000))
        self._make_actions()
        # Ctrl+E and the rest from every widget, the text fields included (app/shortcuts.py).
        self.shortcuts = WindowShortcuts(self, self.findChildren(QAction))
        self.setup_panel.runRequested.connect(self.start_run)
        self.setup_panel.stopRequested.connect(self.stop_run)
        self.setup_panel.scriptChosen.connect(self.open_script)
        self.timeline.followChanged.connect(self.follow_action.setChecked)
        # A job's process chosen on the timeline: the contents panel reads its censuses, the
        # anatomy panel its measured iteration.
        self.timeline.processChosen.connect(
            lambda shown: self.contents.set_profile(shown, running=self.timeline.running)
        )
        self.timeline.processChosen.connect(
            lambda shown: self.anatomy.set_profile(shown, running=self.timeline.running)
        )

        geometry = self.store.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            # No larger than the screen, title bar and borders included (the window manager
            # adds them outside this size): a window cut off at its edges hides its own docks.
            room = self.screen().availableGeometry()
            self.resize(min(1280, room.width() - 16), min(820, room.height() - 48))
        state = self.store.value("window_state")
        # Without a saved layout the docks are sized when the window is first shown, at the
        # size it is shown at (which whoever shows it may still change).
        self._dock_shares: dict[Qt.DockWidgetArea, float] = {}  # of the window's width or height
        self._docks_unsized = state is None or not self.restoreState(state, WINDOW_STATE_VERSION)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._docks_unsized:
            self._docks_unsized = False
            self._default_dock_sizes()

    def _default_dock_sizes(self) -> None:
        """Findings beside the timeline and the console under it, each a quarter of the
        window at most: the timeline has the rest."""
        width = min(DOCK_WIDTH_MAX, int(self.width() * DOCK_SHARE))
        height = min(DOCK_HEIGHT_MAX, int(self.height() * DOCK_SHARE))
        self.resizeDocks([self.findings_dock], [width], Qt.Orientation.Horizontal)
        self.resizeDocks([self.console_dock], [height], Qt.Orientation.Vertical)
        self._dock_shares = {
            self.dockWidgetArea(self.findings_dock): width / self.width(),
            self.dockWidgetArea(self.console_dock): height / self.height(),
        }

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        old, new = event.oldSize(), event.size()
        if self.isVisible() and old.isValid() and not old.isEmpty() and old != new:
            self._keep_dock_shares(old, new)

    def _keep_dock_shares(self, old: QSize, new: QSize) -> None:
        """Each dock area keeps its share of the window as the window is resized. Qt gives the
        whole change to the timeline: docks sized for a large window would leave it a sliver
        of one tiled to half the screen.

        A share is taken from the sizes the docks have when the user last set them (or when
        the window is first resized): a dock a narrow window holds at its minimum width would
        otherwise claim that larger share once the window widens again."""
        sized: set[Qt.DockWidgetArea] = set()
        for dock in self.findChildren(QDockWidget):
            area = self.dockWidgetArea(dock)
            if dock.isFloating() or not dock.isVisible() or area in sized:
                continue
            sized.add(area)  # one dock sizes its area (the others are its tabs or neighbours)
            across = area in (
                Qt.DockWidgetArea.LeftDockWidgetArea,
                Qt.DockWidgetArea.RightDockWidgetArea,
            )
            if area not in self._dock_shares:
                self._dock_shares[area] = (
                    dock.width() / old.width() if across else dock.height() / old.height()
                )
            share = self._dock_shares[area]
            if across:
                self.resizeDocks([dock], [round(share * new.width())], Qt.Orientation.Horizontal)
            else:
                self.resizeDocks([dock], [round(share * new.height())], Qt.Orientation.Vertical)

    def event(self, event: QEvent) -> bool:
        # Over a separator between docks, QMainWindow shows a split cursor: a button released
        # with it ends a drag of the separator, and the docks' sizes are the user's choice.
        split = self.cursor().shape() in (Qt.CursorShape.SplitHCursor, Qt.CursorShape.SplitVCursor)
        handled = super().event(event)
        if event.type() == QEvent.Type.MouseButtonRelease and split:
            self._dock_shares.clear()
        return handled

    def _run_toolbar(self, panel: RunSetupPanel) -> QToolBar:
        """The run bar across the top of the window, above the docks, where it stays: the one
        thing every session starts with is never out of sight or in the timeline's way."""
        toolbar = QToolBar("Run")
        toolbar.setObjectName("run_toolbar")
        toolbar.setMovable(False)
        toolbar.setFloatable(False)
        toolbar.toggleViewAction().setVisible(False)  # nothing would bring it back
        toolbar.addWidget(panel)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)
        return toolbar

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock_{title.lower()}")
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _action(
        self, text: str, shortcut: str | QKeySequence.StandardKey | None, slot: object
    ) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        return action

    def _make_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.open_script_action = self._action("Open &Script…", "Ctrl+Shift+O", self._choose_script)
        self.open_action = self._action(
            "&Open Profile…", QKeySequence.StandardKey.Open, self._choose_profile
        )
        self.save_action = self._action(
            "Save Profile &As…", QKeySequence.StandardKey.SaveAs, self.save_as
        )
        self.save_action.setEnabled(False)
        self.export_action = self._action("&Export HTML Report…", "Ctrl+E", self.export_html)
        self.export_action.setEnabled(False)
        file_menu.addAction(self.open_script_action)
        file_menu.addAction(self.open_action)
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        file_menu.addAction(self.save_action)
        file_menu.addAction(self.export_action)
        file_menu.addSeparator()
        self.connect_action = self._action(
            "Co&nnect to a Served Run…", "Ctrl+Shift+N", self._choose_served_run
        )
        file_menu.addAction(self.connect_action)
        self.attach_action = self._action(
            "&Attach to Process…", "Ctrl+Shift+A", self._choose_process
        )
        file_menu.addAction(self.attach_action)
        file_menu.addSeparator()
        self.compare_action = self._action(
            "&Compare With…", "Ctrl+Shift+C", self._choose_comparison
        )
        self.compare_previous_action = self._action(
            "Compare With &Previous Run", "Ctrl+Shift+P", self.compare_with_previous
        )
        self.compare_previous_action.setEnabled(False)
        file_menu.addAction(self.compare_action)
        file_menu.addAction(self.compare_previous_action)
        file_menu.addSeparator()
        file_menu.addAction(self._action("&Quit", QKeySequence.StandardKey.Quit, self.close))

        run_menu = menu.addMenu("&Run")
        self.run_action = self._action("&Run", "Ctrl+R", self.start_run)
        self.stop_action = self._action("&Stop", "Ctrl+.", self.stop_run)
        self.stop_action.setEnabled(False)
        run_menu.addAction(self.run_action)
        run_menu.addAction(self.stop_action)
        run_menu.addSeparator()
        self.more_action = self._action(
            "More Run &Settings", "Ctrl+Shift+R", self.setup_panel.set_more_shown
        )
        self.more_action.setCheckable(True)
        self.setup_panel.moreShown.connect(self.more_action.setChecked)
        run_menu.addAction(self.more_action)

        view_menu = menu.addMenu("&View")
        self.follow_action = self._action("&Follow Latest Samples", "F", self.timeline.set_follow)
        self.follow_action.setCheckable(True)
        self.follow_action.setChecked(True)
        view_menu.addAction(self.follow_action)
        view_menu.addAction(self._action("&Zoom to Fit", "Ctrl+0", self.timeline.zoom_to_fit))
        view_menu.addSeparator()
        view_menu.addAction(self.more_action)
        view_menu.addAction(self.console_dock.toggleViewAction())
        view_menu.addAction(self.findings_dock.toggleViewAction())
        view_menu.addAction(self.contents_dock.toggleViewAction())
        view_menu.addAction(self.anatomy_dock.toggleViewAction())
        view_menu.addAction(self.compare_dock.toggleViewAction())
        self.console_find = self._action(
            "&Find in Output", QKeySequence.StandardKey.Find, self._focus_find
        )
        view_menu.addAction(self.console_find)

        help_menu = menu.addMenu("&Help")
        help_menu.addAction(self._action("&About memsight", None, self._about))

    # -- opening things -------------------------------------------------------------------

    def open_path(self, path: str) -> None:
        """A script (.py) goes to the run setup; anything else is opened as a profile."""
        if path.endswith(".py") or Path(path).is_dir():
            self.open_script(path)
        else:
            self.open_profile(path)

    def open_script(self, path: str) -> None:
        if not path:
            return
        module = path.startswith("-m ")
        if not module:
            # The run starts in the script's folder, where a path relative to the folder memsight
            # was started in (`memsight examples/train.py`) would name nothing.
            path = os.path.abspath(path)
        key = str(Path(path).resolve()) if not module else path
        self.setup_panel.set_script(path, self.settings.setups.get(key))
        AppSettings.remember(self.settings.recent_scripts, key)
        self.settings.save(self.store)
        self.setWindowTitle(window_title(f"memsight — {Path(path).name}"))

    def open_profile(self, path: str) -> bool:
        if self.session.running:
            self.show_error("A run is in progress", "Stop it before opening a profile.")
            return False
        # A day-long run's profile takes seconds to read and draw: say so before it starts,
        # and let the window repaint what the closed file dialog covered (sync: the window
        # system's expose events, which come after the dialog is gone, are handled now, not
        # after the load, which would leave the dialog's image on screen meanwhile).
        self.reader.cancel()  # a large file still being read gives way to this one
        self.status.showMessage(f"Opening {Path(path).name}…")
        QApplication.sync()
        overview = read_overview(path)
        if overview is not None:
            return self._show_overview(overview, path)
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            try:
                profile = load_profile(path)
            except ProfileError as exc:
                self.show_error("Cannot open profile", str(exc))
                return False
            except MemoryError:
                self.show_error("Cannot open profile", f"{path}: not enough memory to load it")
                return False
            return self._show_opened(profile, path)
        finally:
            QApplication.restoreOverrideCursor()
            self.status.clearMessage()

    def _show_opened(
        self, profile: Profile, path: str, prepared: PreparedCurves | None = None
    ) -> bool:
        """Show a profile read from `path` (with its timeline curves made ready in a worker
        thread, when it was read there), and remember the file among the recent ones."""
        self.session.forget()
        try:
            self._show_profile(profile, Path(path), prepared=prepared)
            self._prepare_rerun(profile)
        except Exception as exc:  # whatever a file holds, the app stays up
            self._show_nothing()
            self.show_error("Cannot show profile", f"{path}: {type(exc).__name__}: {exc}")
            return False
        AppSettings.remember(self.settings.recent_profiles, str(Path(path).resolve()))
        self.settings.save(self.store)
        return True

    def _show_overview(self, overview: Profile, path: str) -> bool:
        """A large profile: its stored overview on the timeline at once, the whole file read
        behind it (app/opening.py), which then takes its place (_on_profile_read)."""
        self.session.forget()
        self._show_nothing()
        try:
            self.timeline.set_profile(overview)
        except Exception as exc:  # an overview that cannot be drawn: the whole file still can
            self.timeline.set_profile(None)
            self.status.showMessage(f"Opening {Path(path).name}… ({type(exc).__name__})")
        self._overview_range = self.timeline.x_range()
        self.findings.header.setText("Reading the whole run…")
        self.status.showMessage(
            f"Reading {Path(path).name}: its overview is shown until the whole run is read…"
        )
        self.setWindowTitle(window_title(f"memsight — {overview.info.target or Path(path).name}"))
        self.reader.read(path)
        return True

    def _on_profile_read(
        self, profile: Profile, path: str, prepared: PreparedCurves | None
    ) -> None:
        """The whole of a large profile is read: it takes the overview's place, in the view the
        user moved to meanwhile."""
        moved = self.timeline.x_range() != self._overview_range
        low, high = self.timeline.x_range()
        self.status.clearMessage()
        if self._show_opened(profile, path, prepared) and moved:
            self.timeline.set_x_range(low, high)

    def _on_read_failed(self, title: str, message: str) -> None:
        self.status.clearMessage()
        self._show_nothing()
        self.show_error(title, message)

    def _prepare_rerun(self, profile: Profile) -> None:
        """Fill the run bar with what the profile ran, so Ctrl+R runs it again after a fix.

        Only when that script is still here; the environment, which profiles do not keep,
        comes from the script's remembered setup."""
        info = profile.info
        if info.module or not info.script:
            return
        script = Path(info.cwd or ".", info.script)
        try:
            if not script.is_file():
                return
        except (OSError, ValueError):  # a name too long for the system, or with a NUL
            return
        remembered = self.settings.setups.get(str(script.resolve()), ScriptSetup())
        try:
            python = info.python if info.python and Path(info.python).is_file() else ""
        except (OSError, ValueError):
            python = ""
        self.setup_panel.set_script(
            str(script),
            ScriptSetup(
                args=shlex.join(info.argv),
                cwd=info.cwd,
                python=python or remembered.python,
                env=remembered.env,
                interval_ms=info.interval_ms or remembered.interval_ms,
                hooks=info.hooks,
                ram_budget=remembered.ram_budget,
            ),
        )

    def _open_in_editor(self, file: str, line: int) -> None:
        """A place in the shown run's code, opened in the user's editor (a contents row)."""
        self.findings.open_file(file, line, self.profile.info.cwd if self.profile else "")

    def _show_profile(
        self,
        profile: Profile,
        path: Path,
        running: bool = False,
        prepared: PreparedCurves | None = None,
    ) -> None:
        self.reader.cancel()  # a large file still being read: what is shown now wins
        self.stop_comparing()  # a comparison was of the run shown before
        self.profile = profile
        self.profile_path = path
        self.timeline.set_profile(profile, running=running, prepared=prepared)
        self.console.set_profile(profile)
        self.contents.set_profile(profile, running=running)
        self.anatomy.set_profile(profile, running=running)
        self.findings.clear(judging=True)
        self.diagnosis.forget()
        self._diagnose(final=not running)
        self.save_action.setEnabled(not running)
        self.export_action.setEnabled(True)
        self._update_status()
        self.setWindowTitle(window_title(f"memsight — {profile.info.target or path.name}"))

    def _show_nothing(self) -> None:
        """Back to the empty window, as before any profile was shown."""
        self.profile = None
        self.profile_path = None
        self.diagnosis.forget()
        self.findings.clear()
        self.timeline.set_profile(None)
        self.console.set_profile(None)
        self.contents.set_profile(None)
        self.anatomy.set_profile(None)
        self.save_action.setEnabled(False)
        self.export_action.setEnabled(False)
        self.setWindowTitle("memsight")

    def _choose_script(self) -> None:
        path = filedialogs.open_file_name(
            self, "Open script", self._last_script_folder(), "Python scripts (*.py)"
        )
        if path:
            self.open_script(path)

    def _last_script_folder(self) -> str:
        """Where the Open Script dialog starts: the folder of the script opened last."""
        for recent in self.settings.recent_scripts:
            if not recent.startswith("-m ") and Path(recent).parent.is_dir():
                return str(Path(recent).parent)
        return ""

    def _choose_profile(self) -> None:
        """Ctrl+O: a profile, or a script (which goes to the run bar)."""
        path = filedialogs.open_file_name(
            self, "Open profile or script", str(recordings_dir()), OPEN_FILTER
        )
        if path:
            self.open_path(path)

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for title, items in (
            ("Scripts", self.settings.recent_scripts),
            ("Profiles", self.settings.recent_profiles),
        ):
            section = self.recent_menu.addAction(title)
            section.setEnabled(False)
            for item in items:
                action = self.recent_menu.addAction(item.replace("&", "&&"))  # no mnemonic
                action.triggered.connect(functools.partial(self.open_path, item))
        if not (self.settings.recent_scripts or self.settings.recent_profiles):
            self.recent_menu.addAction("(nothing yet)").setEnabled(False)

    def save_as(self) -> None:
        if self.profile_path is None:
            return
        suggestion = str(Path.cwd() / self.profile_path.name)
        path = filedialogs.save_file_name(self, "Save profile as", suggestion, PROFILE_FILTER)
        if path:
            self.save_to(path)

    def save_to(self, path: str) -> bool:
        assert self.profile_path is not None
        try:
            shutil.copyfile(self.profile_path, path)
        except OSError as exc:
            self.show_error("Cannot save profile", f"{path}: {exc.strerror or exc}")
            return False
        AppSettings.remember(self.settings.recent_profiles, str(Path(path).resolve()))
        self.settings.save(self.store)
        self.status.showMessage(f"Saved {path}", 5000)
        return True

    def export_html(self) -> None:
        if self.profile is None:
            return
        base = self.profile_path.stem if self.profile_path else "memsight-report"
        suggestion = str(Path.cwd() / f"{base}.html")
        path = filedialogs.save_file_name(
            self, "Export HTML report", suggestion, "HTML reports (*.html)"
        )
        if path:
            self.export_html_to(path)

    def export_html_to(self, path: str) -> bool:
        """Write the report of the profile shown (as it stands, if a run is still going)."""
        assert self.profile is not None
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            size = write_html(self.profile.snapshot(), path)
        except OutputError as exc:  # a folder, or one that does not exist: nothing written
            self.show_error("Cannot export the report", exc.problem)
            return False
        except OSError as exc:
            self.show_error("Cannot export the report", f"{path}: {exc.strerror or exc}")
            return False
        finally:
            QApplication.restoreOverrideCursor()
        self.status.showMessage(f"Exported {path} ({format_bytes(size)})", 5000)
        return True

    # -- comparing ------------------------------------------------------------------------------

    def _choose_comparison(self) -> None:
        if self.profile is None:
            self.show_error("Nothing to compare", "Open or record a run first.")
            return
        path = filedialogs.open_file_name(
            self, "Compare With", str(recordings_dir()), "memsight profiles (*.memsight)"
        )
        if path:
            self.compare_with_file(path)

    def compare_with_file(self, path: str) -> bool:
        """Show the run of `path` beside the shown one: overlaid, with the numbers."""
        try:
            other = load_profile(path)
        except ProfileError as exc:
            self.show_error("Cannot compare", str(exc))
            return False
        return self.compare_with(other, Path(path))

    def compare_with_previous(self) -> None:
        if self._previous is not None and self.compare_with(*self._previous):
            self.status.compare_previous_button.hide()

    def compare_with(self, other: Profile, path: Path) -> bool:
        """Start comparing the shown run with `other` (in the background); False when no run
        is shown or one is being recorded."""
        if self.profile is None or self.session.running:
            return False
        self.comparing.compare(self.profile, other, path)
        return True

    def stop_comparing(self) -> None:
        self.comparing.stop()

    def show_error(self, title: str, message: str) -> None:
        box = QMessageBox(
            QMessageBox.Icon.Critical, title, shorten(message), QMessageBox.StandardButton.Ok, self
        )
        box.setTextFormat(Qt.TextFormat.PlainText)  # text from files and scripts is never markup
        box.open()
        self.error_box = box

    # -- running ----------------------------------------------------------------------------

    def start_run(self) -> None:
        if self.session.running:
            return
        spec = self.setup_panel.validate()
        if spec is None:
            return
        # The run shown before this one, if it ran the same script: offered for comparison.
        shown = self.profile
        same = shown is not None and self.profile_path is not None and same_target(shown, spec)
        self._previous = (shown, self.profile_path) if same else None  # type: ignore[assignment]
        self.compare_previous_action.setEnabled(False)
        key = str(Path(spec.cwd, spec.target).resolve()) if not spec.module else f"-m {spec.target}"
        self.settings.setups[key] = self.setup_panel.setup()
        if (
            spec.python not in self.settings.pythons
            and spec.python != self.setup_panel.python.itemText(0)
        ):
            AppSettings.remember(self.settings.pythons, spec.python)
        self.settings.save(self.store)
        out = recordings_dir() / default_profile_name(spec, datetime.now())
        self._attached_pid = None
        if self.session.start(spec, out):
            # The run's metadata has not arrived yet: the title names the script from the start.
            name = f"-m {spec.target}" if spec.module else Path(spec.target).name
            self.setWindowTitle(window_title(f"memsight — {name}"))

    def stop_run(self) -> None:
        if not self.session.local and self.session.running:
            self.status.showMessage("Stopped watching; the run goes on where it is served", 10_000)
        elif self._attached_pid is not None and self.session.running:
            self.status.showMessage(
                f"Detaching: the agent takes its hooks out, and pid {self._attached_pid} goes on",
                10_000,
            )
        self.session.stop()

    def _choose_process(self) -> None:
        if self.session.running:
            return
        dialog = AttachDialog(self)
        if dialog.exec() == AttachDialog.DialogCode.Accepted:
            self.attach_to(dialog.pid)

    def attach_to(self, pid: int) -> bool:
        """Record the running Python process `pid` (and its workers) live; Stop detaches."""
        try:
            exe, argv, cwd = python_process(pid)
        except NotAttachable as exc:
            self.show_error("Cannot attach", str(exc))
            return False
        spec = attached_spec(exe, argv, cwd, DEFAULT_INTERVAL_MS, True, "auto")
        out = recordings_dir() / default_profile_name(spec, datetime.now())
        self._previous = None
        if not self.session.attach(spec, pid, out):
            return False
        self._attached_pid = pid
        self.setWindowTitle(window_title(f"memsight — {spec.display_name} (pid {pid}, attached)"))
        return True

    def _choose_served_run(self) -> None:
        if self.session.running:
            return
        dialog = ConnectDialog(self.store, self)
        if dialog.exec() == ConnectDialog.DialogCode.Accepted:
            self.watch_served_run(dialog.host, dialog.port, dialog.token_text)

    def watch_served_run(self, host: str, port: int, token: str) -> bool:
        """Show the run served at host:port live, with a copy in the recordings folder."""
        self._previous = None
        self._attached_pid = None
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out = recordings_dir() / f"remote-{host.replace(':', '_')}-{port}-{stamp}.memsight"
        if not self.session.watch(host, port, token, out):
            return False
        self.setWindowTitle(window_title(f"memsight — {host}:{port} (served run)"))
        return True

    def _on_run_started(self, profile: Profile, out: Path) -> None:
        self.setup_panel.set_more_shown(False)  # set up: the room is the timeline's now
        self._show_profile(profile, out, running=True)
        self._set_running(True)

    def _set_running(self, running: bool) -> None:
        self.setup_panel.set_running(running)
        self.console.set_input_open(running and self.session.takes_input)
        self.run_action.setEnabled(not running)
        self.stop_action.setEnabled(running)
        self.open_action.setEnabled(not running)
        self.connect_action.setEnabled(not running)
        self.attach_action.setEnabled(not running)
        self.timeline.set_running(running, whole_run=True)  # ended: all of it in view

    def _on_samples(self) -> None:
        # The tick that finds the run ended draws its last samples with the whole run
        # (_on_run_finished), not first for the view that followed the run as well.
        if not self.session.ended:
            self.timeline.refresh()
        self.console.refresh()
        self.contents.refresh()
        self.anatomy.refresh()

    def _on_run_finished(self, _status: ExitStatus) -> None:
        self._set_running(False)
        self.save_action.setEnabled(True)
        if self.profile_path is not None and self.profile_path.exists():
            AppSettings.remember(self.settings.recent_profiles, str(self.profile_path))
            # Written once the whole run is on screen: the settings file's sync took 20-35 ms
            # (waiting on the disk) in the frame that shows the run's end. Quit saves them too.
            self.after_timeline_paint.call(lambda: self.settings.save(self.store))
        self.console.refresh()
        self.contents.set_running(False)
        self.anatomy.set_running(False)
        if self._previous is not None:
            self.compare_previous_action.setEnabled(True)
            self.status.compare_previous_button.show()

    def _diagnose(self, final: bool) -> None:
        """Run the rules over the profile shown, as it stands."""
        if self.profile is not None:
            self.diagnosis.request(self.profile, final)

    def _on_finding(self, finding: Finding | None) -> None:
        if finding is None:
            self.timeline.clear_highlight()
            return
        if finding.process is not None:  # a rank's finding is shown on that rank's curves
            self.timeline.select_process(finding.process.proc)
        evidence = finding.evidence
        self.timeline.highlight(evidence.start_s, evidence.end_s, evidence.plot)

    def _on_census(self, census: Census | None, chosen: bool = False) -> None:
        """Mark the census the contents panel shows (and the one it compares with) on the
        timeline, while the panel is in sight: lines for a hidden panel would be marks nobody
        asked for."""
        if census is None or not self._contents_shown:
            self.timeline.mark_times([])
            return
        marks = [(census.t, f"census at {census_label(census, time=False)}")]
        earlier = self.contents.compared
        if earlier is not None:
            marks.append((earlier.t, f"since {census_label(earlier, time=False)}"))
        self.timeline.mark_times(marks, reveal=chosen)

    def _on_contents_shown(self, shown: bool) -> None:
        self._contents_shown = shown
        self._on_census(self.contents.selected)

    def _update_status(self) -> None:
        if self.profile is not None:
            self.status.show_status(
                self.profile,
                self.session.running,
                self.session.stopping,
                self.session.elapsed,
                self.session.waiting_for_input,
            )

    # -- window ---------------------------------------------------------------------------

    def _on_waiting_for_input(self, waiting: bool) -> None:
        """The script is blocked on its stdin: the console comes to the front (it may be
        behind Contents) with its input line ready, as a terminal would be."""
        if waiting:
            self.console_dock.show()
            self.console_dock.raise_()
        self.console.set_waiting(waiting)
        self._update_status()

    def _focus_find(self) -> None:
        self.console_dock.show()
        self.console.search.setFocus()
        self.console.search.selectAll()

    def _about(self) -> None:
        QMessageBox.about(
            self,
            "About memsight",
            f"memsight {profiler.__version__}\nA memory profiler for PyTorch scripts.",
        )

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        # With Shift held, a profile dropped on a shown run is compared with it.
        shift = bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier)
        for url in event.mimeData().urls():
            if url.isLocalFile():
                path = url.toLocalFile()
                if shift and self.profile is not None and not path.endswith(".py"):
                    self.compare_with_file(path)
                else:
                    self.open_path(path)
                break

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:
            self.timeline.apply_palette(self.palette())
        super().changeEvent(event)

    def terminate(self) -> None:
        """End as Quit does, without asking (SIGTERM: `kill`, a logout): a run in progress is
        stopped, its profile kept, and the window's state saved."""
        self._terminating = True
        self.close()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.session.running and not self._terminating:
            answer = QMessageBox.question(
                self,
                "A run is in progress",
                "Stop the run and quit? The profile recorded so far is kept.",
            )
            if answer != QMessageBox.StandardButton.Yes:
                event.ignore()
                return
        if self.session.running:
            self.session.kill()
        self.diagnosis.shutdown()
        self.comparing.shutdown()
        self.reader.shutdown()
        self.store.setValue("geometry", self.saveGeometry())
        self.store.setValue("window_state", self.saveState(WINDOW_STATE_VERSION))
        self.settings.save(self.store)
        super().closeEvent(event)
