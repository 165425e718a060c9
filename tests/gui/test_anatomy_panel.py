"""The anatomy panel: what fills the peak, a stacked bar per module group, read at a glance."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor, Qt, QTextDocument
from PySide6.QtWidgets import QMenu
from pytestqt.qtbot import QtBot

from memsight.app import anatomy as anatomy_panel
from memsight.app.anatomy import (
    NO_ANATOMY,
    NO_ANATOMY_YET,
    NO_RUN,
    AnatomyBars,
    AnatomyPanel,
)
from memsight.app.mainwindow import MainWindow
from memsight.profiler.diagnosis.anatomy import main_anatomy
from memsight.profiler.diagnosis.anatomy_report import (
    OTHER_COLOR,
    PARTS,
    composition_text,
    other_text,
    title,
)
from memsight.profiler.diagnosis.fit import module_groups
from memsight.profiler.profile.model import Event, Profile
from memsight.profiler.units import format_bytes
from tests.factories import GiB, MiB, profile, ram
from tests.gui.support import run_to_end
from tests.support import write_script

LONG_NAME = "retrieval_augmented_memory_bank_of_the_cross_attention_decoder_projection"
SKIPPED = "torch.export ran while it was measured"


def module(
    path: str,
    type_: str,
    activations: int = 0,
    parameters: int = 0,
    gradients: int = 0,
    optimizer_state: int = 0,
) -> dict[str, object]:
    """One module's row of an "anatomy" event, as the agent sends it (agent/anatomy.py)."""
    return {
        "path": path,
        "type": type_,
        "device": "cpu",
        "activations": activations,
        "activations_fp32": activations,
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": optimizer_state,
        "input_bytes": 0,
    }


def anatomy_event(*modules: dict[str, object], t: float = 5.0) -> Event:
    return Event(
        t,
        "anatomy",
        {
            "iteration": 1,
            "counted": "optimizer steps",
            "batch_size": 32,
            "batch_bytes": MiB,
            "largest_saved": {"cpu": 8 * MiB},
            "modules": list(modules),
            "modules_left_out": 0,
            "partial": False,
            "skipped": "",
        },
    )


def measured_run() -> Profile:
    """A model of three blocks, an embedding, a head and a module with a long name; RSS at
    1 GiB throughout, so "other" is 1 GiB less the modules' 196 MiB."""
    return profile(
        ram(10.0, GiB),
        events=[
            anatomy_event(
                module("embed", "Embedding", parameters=4 * MiB, gradients=4 * MiB),
                module("blocks.0", "Block", activations=8 * MiB),
                module("blocks.0.attn", "Attention", activations=16 * MiB, parameters=8 * MiB),
                module("blocks.0.attn.proj", "Linear", gradients=8 * MiB, optimizer_state=16 * MiB),
                module("blocks.1", "Block", activations=24 * MiB),
                module("blocks.1.attn", "Attention", parameters=8 * MiB, gradients=8 * MiB),
                module("blocks.2", "Block", activations=16 * MiB),
                module("head", "Linear", activations=2 * MiB, parameters=MiB, optimizer_state=MiB),
                module(LONG_NAME, "Linear", activations=72 * MiB),
            )
        ],
        end_t=10.0,
    )


@pytest.fixture
def panel(qtbot: QtBot) -> AnatomyPanel:
    widget = AnatomyPanel()
    qtbot.addWidget(widget)
    widget.resize(1100, 400)
    widget.show()
    return widget


def labels(bars: AnatomyBars) -> list[str]:
    return [row.label for row in bars.rows]


def totals(bars: AnatomyBars) -> list[str]:
    return [row.total_text for row in bars.rows]


def shown_tooltip(bars: AnatomyBars, row: int) -> str:
    """The tooltip's text as Qt shows it when the mouse rests on row `row`'s bar: rendered
    from rich text when Qt would take it for markup."""
    _, column, _ = bars.columns()
    text = bars.tooltip_at(QPoint(column.left() + 4, bars.row_rect(row).center().y()))
    if Qt.mightBeRichText(text):
        document = QTextDocument()
        document.setHtml(text)
        return document.toPlainText().replace("\u2028", "\n")
    return text


def test_the_groups_are_listed_largest_first_with_their_totals(panel: AnatomyPanel) -> None:
    run = measured_run()
    panel.set_profile(run)
    anatomy = main_anatomy(run)
    assert anatomy is not None
    assert panel.stack.currentIndex() == 1
    assert panel.heading.text() == title(anatomy)
    assert panel.heading.text() == (
        "What fills the peak: iteration 1, RAM, peak 1.00 GiB, batch of 32"
    )
    assert labels(panel.bars) == [
        LONG_NAME,
        "blocks.0 (Block)",
        "blocks.1 (Block)",
        "blocks.2 (Block)",
        "embed",
        "head",
        "other",
    ]
    assert totals(panel.bars) == [
        "72.00 MiB",
        "56.00 MiB",
        "40.00 MiB",
        "16.00 MiB",
        "8.00 MiB",
        "4.00 MiB",
        "828.0 MiB",
    ]
    groups = module_groups(anatomy)
    assert labels(panel.bars)[:-1] == [g.label for g in groups]
    assert totals(panel.bars)[:-1] == [format_bytes(g.total) for g in groups]


def test_each_bar_is_split_into_its_parts_on_one_scale(qtbot: QtBot, panel: AnatomyPanel) -> None:
    panel.set_profile(measured_run())
    bars = panel.bars
    _, column, _ = bars.columns()
    # blocks.0: 24 MiB of activations, 8 of parameters, 8 of gradients, 16 of optimizer state.
    assert bars.bar_extent(0) == column.width()  # the largest group fills the width
    assert bars.bar_extent(1) == round(column.width() * 56 / 72)
    assert bars.bar_extent(4) == round(column.width() * 8 / 72)
    image = bars.grab().toImage()
    y = bars.row_rect(1).center().y()
    extent = bars.bar_extent(1)
    ends = [24, 32, 40, 56]  # MiB: where each part ends
    starts = [0, *ends[:-1]]
    for (_, label, colour, _), start, end in zip(PARTS, starts, ends, strict=True):
        middle = column.left() + round(extent * (start + end) / 2 / 56)
        assert image.pixelColor(middle, y) == QColor(colour), label
    past_the_bar = column.left() + extent + 3
    assert image.pixelColor(past_the_bar, y) not in [QColor(c) for _, _, c, _ in PARTS]


def test_other_is_a_grey_row_that_says_what_it_holds(panel: AnatomyPanel) -> None:
    run = measured_run()
    panel.set_profile(run)
    anatomy = main_anatomy(run)
    assert anatomy is not None
    bars = panel.bars
    last = len(bars.rows) - 1
    assert bars.rows[last].label == "other" and bars.rows[last].other
    assert bars.rows[last].parts == ((828 * MiB, OTHER_COLOR),)
    tip = shown_tooltip(bars, last)
    assert tip.startswith("other: 828.0 MiB")
    assert other_text(anatomy) in tip
    # 11.5 times the largest group: drawn full width, cut short, and the tooltip says so.
    _, column, _ = bars.columns()
    assert bars.is_cut(last) and bars.bar_extent(last) == column.width()
    assert "cut short: 12 times the largest group" in tip
    y = bars.row_rect(last).center().y()
    assert bars.grab().toImage().pixelColor(column.left() + 4, y) == QColor(OTHER_COLOR)


def test_hovering_a_bar_shows_each_parts_bytes(panel: AnatomyPanel) -> None:
    panel.set_profile(measured_run())
    tip = shown_tooltip(panel.bars, 1)
    assert tip.splitlines() == [
        "blocks.0 (Block): 56.00 MiB",
        "  activations saved for backward: 24.00 MiB",
        "  parameters: 8.00 MiB",
        "  gradients: 8.00 MiB",
        "  optimizer state: 16.00 MiB",
    ]
    assert shown_tooltip(panel.bars, 4).splitlines()[0] == "embed: 8.00 MiB"


def test_a_long_label_is_elided_and_whole_in_its_tooltip(qtbot: QtBot, panel: AnatomyPanel) -> None:
    panel.set_profile(measured_run())
    bars = panel.bars
    panel.resize(1800, 400)
    qtbot.waitUntil(lambda: bars.width() > 1700)
    assert bars.shown_label(0) == LONG_NAME  # room enough
    panel.resize(620, 400)
    qtbot.waitUntil(lambda: bars.width() < 620)
    shown = bars.shown_label(0)
    assert shown.endswith("…") and LONG_NAME.startswith(shown[:-1]) and len(shown) < 40
    assert bars.shown_label(1) == "blocks.0 (Block)"  # the short ones stay whole
    assert shown_tooltip(bars, 0).splitlines()[0] == f"{LONG_NAME}: 72.00 MiB"
    _, column, totals_column = bars.columns()
    assert column.width() > 200 and totals_column.right() < bars.width()


def test_a_name_from_the_target_is_shown_as_text(panel: AnatomyPanel) -> None:
    name = "<b>layers</b>"
    panel.set_profile(
        profile(ram(10.0, GiB), events=[anatomy_event(module(name, "Linear", MiB))], end_t=10.0)
    )
    assert panel.bars.shown_label(0) == name
    assert shown_tooltip(panel.bars, 0).startswith(f"{name}: 1.00 MiB")


def test_an_iteration_cut_short_says_so(panel: AnatomyPanel) -> None:
    event = anatomy_event(module("head", "Linear", 2 * MiB))
    event.data["partial"] = True
    panel.set_profile(profile(ram(10.0, GiB), events=[event], end_t=10.0))
    assert panel.heading.text().endswith("batch of 32 (partial: the iteration did not finish)")


def test_a_skipped_iteration_shows_why(panel: AnatomyPanel) -> None:
    event = anatomy_event()
    event.data["skipped"] = SKIPPED
    panel.set_profile(profile(ram(10.0, GiB), events=[event], end_t=10.0))
    assert panel.stack.currentWidget() is panel.empty
    assert panel.empty.text() == (
        f"No anatomy in this run: the iteration was not measured: {SKIPPED}."
    )


def test_without_an_anatomy_the_panel_says_why_in_one_line(panel: AnatomyPanel) -> None:
    assert panel.stack.currentWidget() is panel.empty and panel.empty.text() == NO_RUN
    panel.set_profile(profile(ram(10.0, GiB), end_t=10.0))
    assert panel.stack.currentWidget() is panel.empty and panel.empty.text() == NO_ANATOMY
    assert NO_ANATOMY == (
        "No anatomy in this run: it is measured on the first training iteration "
        "(a forward with autograd, then backward)."
    )
    panel.set_profile(None)
    assert panel.empty.text() == NO_RUN


def test_while_the_run_records_the_anatomy_appears_when_it_arrives(panel: AnatomyPanel) -> None:
    live = profile(ram(3.0, GiB), end_t=3.0)
    panel.set_profile(live, running=True)
    assert panel.empty.text() == NO_ANATOMY_YET
    assert "after the first training iteration" in NO_ANATOMY_YET
    live.events.append(anatomy_event(module("head", "Linear", 2 * MiB), t=2.5))
    panel.refresh()  # as the window's timer does while the run grows
    assert panel.stack.currentIndex() == 1
    assert labels(panel.bars) == ["head", "other"]
    panel.set_running(False)
    assert labels(panel.bars) == ["head", "other"]


def test_while_the_run_records_the_peak_and_other_follow_the_samples(
    panel: AnatomyPanel, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = profile(ram(3.0, GiB), events=[anatomy_event(module("head", "Linear", 2 * MiB))])
    panel.set_profile(live, running=True)
    assert totals(panel.bars) == ["2.00 MiB", "1022.0 MiB"]
    # The iteration's peak comes a moment later, in samples that arrive after the anatomy.
    later = ram(3.0, 2 * GiB)
    live.tables["ram"].append(
        {name: later[name] + 3.0 * (name == "t") for name in later.column_names}
    )
    monkeypatch.setattr(anatomy_panel, "LIVE_REREAD_S", 0.0)  # due at once, not in a second
    monkeypatch.setattr(anatomy_panel, "LIVE_SHARE", 1e9)
    panel.refresh()
    assert panel.heading.text().endswith("peak 2.00 GiB, batch of 32")
    assert totals(panel.bars) == ["2.00 MiB", "2.00 GiB"]


def test_hundreds_of_groups_scroll(qtbot: QtBot, panel: AnatomyPanel) -> None:
    layers = [module(f"layers.{i}", "Block", (i + 1) * MiB) for i in range(400)]
    panel.set_profile(profile(ram(10.0, 64 * GiB), events=[anatomy_event(*layers)], end_t=10.0))
    bars = panel.bars
    assert labels(bars)[:2] == ["layers.399 (Block)", "layers.398 (Block)"]
    assert len(bars.rows) == 401
    assert bars.height() >= 401 * bars.row_height
    qtbot.waitUntil(lambda: panel.scroller.verticalScrollBar().maximum() > 0)
    scrolled = panel.scroller.verticalScrollBar()
    scrolled.setValue(scrolled.maximum())
    assert bars.visibleRegion().boundingRect().bottom() == bars.height() - 1


def test_the_window_has_an_anatomy_tab_beside_contents(window: MainWindow, tmp_path: Path) -> None:
    view = next(m for m in window.menuBar().findChildren(QMenu) if m.title() == "&View")
    assert window.anatomy_dock.toggleViewAction() in view.actions()
    assert window.anatomy_dock.toggleViewAction().text() == "Anatomy"
    assert window.anatomy_dock in window.tabifiedDockWidgets(window.contents_dock)
    window._show_profile(measured_run(), tmp_path / "run.memsight")
    window.anatomy_dock.raise_()
    assert labels(window.anatomy.bars)[:2] == [LONG_NAME, "blocks.0 (Block)"]
    window._show_nothing()
    assert window.anatomy.empty.text() == NO_RUN


# Three blocks of a list, an embedding and a head, trained with Adam for a few steps.
BLOCKS = """
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Linear(64, 64)

    def forward(self, x):
        return torch.relu(self.mlp(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(16, 64)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))
        self.head = torch.nn.Linear(64, 4)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


model = Net()
optimizer = torch.optim.Adam(model.parameters())
for step in range(4):
    optimizer.zero_grad()
    model(torch.randn(32, 16)).pow(2).mean().backward()
    optimizer.step()
"""


@pytest.mark.slow  # a PyTorch run
def test_a_recorded_run_shows_its_anatomy(qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    window.anatomy_dock.raise_()
    run_to_end(qtbot, window, write_script(tmp_path, "blocks.py", BLOCKS))
    assert window.profile is not None
    anatomy = main_anatomy(window.profile)
    assert anatomy is not None, window.anatomy.empty.text()
    bars = window.anatomy.bars
    assert window.anatomy.heading.text() == title(anatomy)
    assert labels(bars) == [g.label for g in module_groups(anatomy)] + ["other"]
    assert labels(bars)[:3] == ["blocks.0 (Block)", "blocks.1 (Block)", "blocks.2 (Block)"]
    assert {"embed", "head"} <= set(labels(bars))
    assert totals(bars)[:-1] == [format_bytes(g.total) for g in module_groups(anatomy)]


def test_the_whole_peak_by_part_comes_before_the_modules(panel: AnatomyPanel) -> None:
    run = measured_run()
    panel.set_profile(run)
    anatomy = main_anatomy(run)
    assert anatomy is not None
    assert panel.parts.text() == "Peak: " + composition_text(anatomy)
    assert panel.parts.text().endswith(f"other {format_bytes(anatomy.other_bytes)}")
