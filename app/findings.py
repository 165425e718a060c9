"""The guided panel: findings by severity; the selected one explained, with its fixes.

The view half of the diagnosis.Finding pair: it shows what profiler.diagnosis returns and
never decides anything itself. Every string that can come from the target (module names,
exception messages) is escaped before it reaches rich text.
"""

from __future__ import annotations

import html
import os

from PySide6.QtCore import QEvent, QObject, QSettings, Qt, QUrl, Signal
from PySide6.QtGui import QColor, QDesktopServices, QFontMetricsF, QGuiApplication, QTextDocument
from PySide6.QtWidgets import (
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from memsight.app.codewrap import code_html
from memsight.app.editor import EDITOR_KEY, OpenWatcher, Started, open_location
from memsight.app.plaintext import shorten, tooltip
from memsight.profiler.codefiles import is_pseudo_file
from memsight.profiler.diagnosis import (
    Diagnosis,
    Finding,
    Location,
    get_fix,
)
from memsight.profiler.diagnosis.finding import SEVERITY_COLORS, SEVERITY_LABELS, severity_counts
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.summary import damage_read_text, judged_nothing, summarize
from memsight.profiler.units import format_bytes, format_duration


def _e(text: object) -> str:
    return html.escape(shorten(str(text)))


def resolve_path(file: str, cwd: str) -> str:
    """A location's file as a path to open: relative ones are the run's working directory's."""
    return os.path.join(cwd, file) if cwd and not os.path.isabs(file) else file


def _shown_path(file: str, cwd: str) -> str:
    """The path relative to the run's working directory when it is inside it, else whole."""
    if cwd and os.path.isabs(file):
        relative = os.path.relpath(file, cwd)
        if not relative.startswith(os.pardir):
            return relative
    return file


def location_html(index: int, location: Location, cwd: str = "") -> str:
    """`file:line — code`, the place a link that opens it in the editor (`open:INDEX`)."""
    place = f"{_e(_shown_path(location.file, cwd))}:{location.line}"
    if not is_pseudo_file(location.file):
        place = f"<a href='open:{index}' title='{_e(location.file)}'>{place}</a>"
    text = place
    if location.code:
        text += f" — <code>{_e(location.code)}</code>"
    if location.detail:
        text += f"<br><span style='color:gray'>{_e(location.detail)}</span>"
    return text


def finding_html(finding: Finding, cwd: str = "", columns: int | None = None) -> str:
    """The whole of a finding; its fixes' code wrapped at `columns` characters (None: as
    written)."""
    color = SEVERITY_COLORS[finding.severity]
    parts = [
        f"<h3 style='margin:0'>{_e(finding.heading)}</h3>",
        f"<p style='margin-top:2px'><b style='color:{color}'>"
        f"{SEVERITY_LABELS[finding.severity]}</b> &middot; <code>{_e(finding.rule)}</code></p>",
        f"<p><b>Evidence:</b> {_e(finding.evidence.text)}<br>"
        f"<span style='color:gray'>{_e(finding.evidence.where())}</span></p>",
    ]
    if finding.where:
        places = "".join(
            f"<li>{location_html(i, location, cwd)}</li>"
            for i, location in enumerate(finding.where)
        )
        parts += [
            "<p style='margin-bottom:0'><b>Where to look</b> "
            "<span style='color:gray'>(a link opens the line in your editor: "
            "<a href='editor:choose'>choose the editor</a>)</span></p>",
            f"<ul style='margin-top:2px'>{places}</ul>",
        ]
    elif finding.where_note:
        parts.append(f"<p><b>Where:</b> not named: {_e(finding.where_note)}</p>")
    parts += [
        f"<p>{_e(finding.explanation)}</p>",
        "<h4>Fixes, most likely to help first</h4>",
    ]
    for rank, fix_id in enumerate(finding.fixes):
        fix = get_fix(fix_id)
        links = " &middot; ".join(f"<a href='{_e(d.url)}'>{_e(d.title)}</a>" for d in fix.docs)
        parts += [
            f"<p><b>{rank + 1}. {_e(fix.title)}</b><br>{_e(fix.why)}</p>",
            # Wrapped as an editor wraps code (app/codewrap.py), never as prose: the panel
            # shows every line whole without scrolling sideways.
            "<pre style='white-space:pre'>"
            f"{_e(fix.after) if columns is None else code_html(fix.after, columns)}</pre>",
            f"<p><a href='copy:{rank}'>Copy this snippet</a> &middot; {links}<br>"
            f"<i>Trade-off:</i> {_e(fix.tradeoff)}</p>",
        ]
    return "".join(parts)


def overview_html(findings: list[Finding]) -> str:
    items = "".join(
        f"<li><b style='color:{SEVERITY_COLORS[f.severity]}'>{SEVERITY_LABELS[f.severity]}</b> "
        f"{_e(f.heading)}<br><span style='color:gray'>{_e(f.evidence.text)}</span></li>"
        for f in findings
    )
    return (
        f"<ul>{items}</ul><p>Select a finding to shade its evidence on the timeline and see "
        "how to fix it.</p>"
    )


def no_problems_html(profile: Profile, final: bool) -> str:
    s = summarize(profile)
    head = "No problems found" if final else "No problems so far"
    rows = [
        # While the run goes on these are the figures of the last look the rules took, not
        # the status bar's of this moment: said so, so the two never seem to disagree.
        ("Duration" if final else "Judged up to", format_duration(s.duration_s)),
        ("Optimizer steps", f"{s.iterations:,}"),
        ("Peak RAM, main process", format_bytes(s.ram.bytes if s.ram else None)),
        ("Peak RAM, process tree", format_bytes(s.ram_tree.bytes if s.ram_tree else None)),
    ]
    if s.gpu_allocated is not None:
        rows.append(("Peak GPU allocated", format_bytes(s.gpu_allocated.bytes)))
    if s.gpu_reserved is not None:
        rows.append(("Peak GPU reserved", format_bytes(s.gpu_reserved.bytes)))
    table = "".join(
        f"<tr><td>{_e(k)}</td><td align='right'><b>{_e(v)}</b></td></tr>" for k, v in rows
    )
    note = (
        "None of memsight's rules matched this run."
        if final
        else "Findings update while the run goes on."
    )
    if profile.damaged is not None:  # a verdict on a fragment says it is one
        head = (
            "Nothing judged: no memory sample could be read"
            if judged_nothing(profile)
            else "No problems found in the part that could be read"
        )
        note = (
            f"This file is damaged: {_e(profile.damaged.reason)}. memsight "
            f"{_e(damage_read_text(profile) or '')}; the rest of the run is not judged."
        )
    return f"<h3>{head}</h3><p>{note}</p><table cellspacing='6'>{table}</table>"


# The header while the rules look at a run just shown and have not answered yet.
JUDGING = "Looking for problems…"


class FindingsPanel(QWidget):
    """Lists findings; emits findingSelected(finding or None) as the selection changes."""

    findingSelected = Signal(object)
    message = Signal(str)  # a line for the status bar: why a location could not be opened

    def __init__(self, store: QSettings | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store if store is not None else QSettings("memsight", "memsight")
        # How an opening of a place went, said in the status bar once the opener has exited.
        self.opening = OpenWatcher(self)
        self.opening.said.connect(self.message)
        self.profile: Profile | None = None
        self.diagnosis = Diagnosis()
        self.final = False
        self.header = QLabel("No run yet")
        self.header.setTextFormat(Qt.TextFormat.PlainText)
        self.list = QListWidget()
        self.list.setObjectName("findings")
        self.list.setWordWrap(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setUniformItemSizes(False)
        self.details = QTextBrowser()
        self.details.setOpenLinks(False)
        self.details.anchorClicked.connect(self._on_link)
        # The fixes' code is wrapped to the panel's width: shown again when that changes.
        self._code_columns = 0
        self.details.viewport().installEventFilter(self)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.list)
        split.addWidget(self.details)
        split.setSizes([140, 400])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.header)
        layout.addWidget(split, 1)
        self.list.currentRowChanged.connect(self._on_row)

    @property
    def selected(self) -> Finding | None:
        row = self.list.currentRow()
        return self.diagnosis.findings[row] if 0 <= row < len(self.diagnosis.findings) else None

    def clear(self, judging: bool = False) -> None:
        """Empty the panel: no run shown, or (`judging`) one whose findings are on their way.

        The rules take seconds over a day-long run: until they answer, the panel says they are
        running rather than that there is no run."""
        self.profile = None
        self.diagnosis = Diagnosis()
        self.list.clear()
        self.header.setText(JUDGING if judging else "No run yet")
        self.details.clear()

    def set_diagnosis(self, profile: Profile, diagnosis: Diagnosis, final: bool) -> None:
        """Show new findings, keeping the selected rule selected when it is still there."""
        previous = self.selected
        keep = (previous.rule, previous.evidence.plot) if previous is not None else None
        same = [(f.rule, f.heading) for f in diagnosis.findings] == [
            (f.rule, f.heading) for f in self.diagnosis.findings
        ]
        self.profile, self.diagnosis, self.final = profile, diagnosis, final
        self._update_header()
        if same and self.list.count() == len(diagnosis.findings):
            self._show_details()  # same list: refresh the evidence numbers in place
            return
        self.list.blockSignals(True)
        self.list.clear()
        for finding in diagnosis.findings:
            title = shorten(finding.heading)
            item = QListWidgetItem(f"{SEVERITY_LABELS[finding.severity]}  ·  {title}")
            item.setForeground(QColor(SEVERITY_COLORS[finding.severity]))
            item.setToolTip(tooltip(finding.evidence.text))
            self.list.addItem(item)
        row = next(
            (
                i
                for i, f in enumerate(diagnosis.findings)
                if keep is not None and (f.rule, f.evidence.plot) == keep
            ),
            -1,
        )
        self.list.setCurrentRow(row)
        self.list.blockSignals(False)
        self._show_details()
        if previous is not None and row < 0:
            self.findingSelected.emit(None)

    def _update_header(self) -> None:
        findings = self.diagnosis.findings
        state = "" if self.final else " (run in progress)"
        if self.profile is not None and self.profile.damaged is not None:
            state = " in the part of the damaged file that could be read"
        if not findings and self.profile is not None and judged_nothing(self.profile):
            self.header.setText("Damaged file: nothing judged, no memory sample could be read")
            return
        if not findings:
            # A rule that failed may have had something to say: the header does not claim it.
            ran = " by the rules that ran" if self.diagnosis.failed else ""
            self.header.setText(f"No problems found{ran}{state}")
            return
        counts = severity_counts(findings)
        self.header.setText(f"{len(findings)} finding{'s' * (len(findings) != 1)}: {counts}{state}")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            watched is self.details.viewport()
            and event.type() == QEvent.Type.Resize
            and self.selected is not None
            and self._fitting_columns() != self._code_columns
        ):
            scrollbar = self.details.verticalScrollBar()
            at = scrollbar.value()
            self._show_details()
            scrollbar.setValue(at)
        return super().eventFilter(watched, event)

    def _fitting_columns(self) -> int:
        """How many characters of code fit across the details, as <pre> draws them."""
        # The font Qt's rich text gives <pre>, read from a probe laid out as the details are.
        probe = QTextDocument()
        probe.setDefaultFont(self.details.document().defaultFont())
        probe.setHtml("<pre>m</pre>")
        font = probe.begin().begin().fragment().charFormat().font()
        advance = QFontMetricsF(font).horizontalAdvance("m")
        width = self.details.viewport().width() - 2 * self.details.document().documentMargin()
        return max(int(width / advance) - 1, 1)

    def _show_details(self) -> None:
        finding = self.selected
        if finding is not None:
            cwd = self.profile.info.cwd if self.profile is not None else ""
            self._code_columns = self._fitting_columns()
            self.details.setHtml(finding_html(finding, cwd, self._code_columns))
        elif self.diagnosis.findings:
            self.details.setHtml(overview_html(self.diagnosis.findings))
        elif self.profile is not None:
            self.details.setHtml(no_problems_html(self.profile, self.final))
        failed = self.diagnosis.failed
        if failed:
            notes = "".join(f"<li>{_e(rule)}: {_e(error)}</li>" for rule, error in failed.items())
            self.details.append(
                f"<p style='color:gray'>Rules that could not run:</p><ul>{notes}</ul>"
            )

    def _on_row(self, _row: int) -> None:
        self._show_details()
        self.findingSelected.emit(self.selected)

    def _on_link(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            finding = self.selected
            if finding is None:
                return
            rank = int(url.path() or url.toString().split(":", 1)[1])
            fix = get_fix(finding.fixes[rank])
            QGuiApplication.clipboard().setText(fix.after + "\n")
            self.message.emit(f"Copied the snippet of “{fix.title}” to the clipboard")
        elif url.scheme() == "open":
            self._open_location(int(url.path() or url.toString().split(":", 1)[1]))
        elif url.scheme() == "editor":
            self.choose_editor()
        elif url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)

    def _open_location(self, index: int) -> None:
        finding = self.selected
        if finding is None or not 0 <= index < len(finding.where):
            return
        location = finding.where[index]
        cwd = self.profile.info.cwd if self.profile is not None else ""
        self.open_file(location.file, location.line, cwd)

    def open_file(self, file: str, line: int, cwd: str) -> None:
        """Open a file of a run (relative: to the run's working directory `cwd`) at a line in
        the user's editor; a problem is reported in the status bar (the message signal)."""
        opened = open_location(resolve_path(file, cwd), line, self.store)
        if isinstance(opened, str):
            self.message.emit(f"Could not open {file}:{line}: {opened}")
        elif isinstance(opened, Started):
            self.message.emit(f"Opening {file}:{line} with {opened.program}…")
            self.opening.watch(opened, file, line)
        else:
            self.message.emit(f"Asked the desktop to open {file}")

    def choose_editor(self) -> None:
        current = str(self.store.value(EDITOR_KEY, "") or "")
        command, ok = QInputDialog.getText(
            self,
            "Editor",
            "Command that opens a file at a line, with {file} and {line} where they go\n"
            "(e.g. code --goto {file}:{line}), or just the editor (vim, subl, kate...).\n"
            "Empty: $VISUAL or $EDITOR when set, else the desktop's application for the file.",
            text=current,
        )
        if ok:
            self.store.setValue(EDITOR_KEY, command.strip())
            self.store.sync()
