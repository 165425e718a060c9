"""The contents panel: what was alive at each census, sortable, compared, marked on the timeline."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from memsight.app.contents import (
    HOLDER_MIN_WIDTH,
    NO_CENSUS,
    NO_CENSUS_YET,
    NO_RUN,
    SHAPES_MIN_WIDTH,
    ContentsPanel,
)
from memsight.app.mainwindow import MainWindow
from memsight.profiler.profile.model import Profile
from tests.factories import MiB, census, holder, profile
from tests.gui.support import RUN_TIMEOUT_MS, wait_until_settled
from tests.support import write_script

KiB = 1024


def run_with_censuses() -> Profile:
    """Three censuses: `kept` grows, `model`, `x` and `loss` stay, `cache` goes."""
    steady = [
        holder("model", "global", 9 * MiB + 20 * KiB, count=4),
        holder("x", "local", 256 * KiB),
        holder("loss", "local", 4, with_graph=1, grad_bytes=3 * MiB),
    ]
    cache = holder("cache", "global", 2 * MiB, count=2)
    return profile(
        events=[
            census(1.0, 5, holder("kept", "local", 5 * MiB, count=5), *steady, cache),
            census(2.0, 10, holder("kept", "local", 10 * MiB, count=10), *steady, cache),
            census(4.0, 40, holder("kept", "local", 158 * MiB, count=40, with_graph=40), *steady),
        ],
        end_t=5.0,
    )


def titles(panel: ContentsPanel) -> list[str]:
    model = panel.table.model()
    return [model.headerData(i, Qt.Orientation.Horizontal) for i in range(model.columnCount())]


def column(panel: ContentsPanel, title: str) -> list[str]:
    """The texts of a column as the table shows them, in its current (sorted) order."""
    model = panel.table.model()
    number = titles(panel).index(title)
    return [model.index(row, number).data() for row in range(model.rowCount())]


@pytest.fixture
def panel(qtbot: QtBot) -> ContentsPanel:
    widget = ContentsPanel()
    qtbot.addWidget(widget)
    widget.resize(1100, 300)
    widget.show()
    return widget


def test_the_last_census_is_shown_largest_holder_first(panel: ContentsPanel) -> None:
    panel.set_profile(run_with_censuses())
    combo = panel.census
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "optimizer step 5 (1.00 s)",
        "optimizer step 10 (2.00 s)",
        "optimizer step 40 (4.00 s)",
    ]
    assert combo.currentIndex() == 2 and panel.compare.currentText() == "none"
    assert column(panel, "Holder") == [
        "`kept` (list, local of `train()` in train.py)",
        "`model` (Tensor, global of train)",
        "`loss` (list, local of `train()` in train.py)",
        "`x` (list, local of `train()` in train.py)",
    ]
    assert column(panel, "Bytes") == ["158.0 MiB", "9.02 MiB", "4 B", "256.0 KiB"]
    assert column(panel, "Graph-kept") == ["-", "-", "3.00 MiB", "-"]
    assert column(panel, "Tensors") == ["40", "4", "1", "1"]
    assert column(panel, "With graph") == ["40", "-", "1", "-"]
    assert column(panel, "Shapes")[0] == "256x2048"
    assert panel.header.text() == "4 holders, 170.3 MiB"
    assert (
        panel.table.model()
        .index(0, 0)
        .data(Qt.ItemDataRole.ToolTipRole)
        .endswith("train.py:9 (double-click to open)")
    )  # where the holder lives

    panel.choose(0)
    assert column(panel, "Bytes") == ["9.02 MiB", "5.00 MiB", "4 B", "2.00 MiB", "256.0 KiB"]


def test_a_later_census_with_wider_figures_widens_their_columns(panel: ContentsPanel) -> None:
    # A live run: the first census holds one tensor of 9 MiB, the next 123,456 tensors of
    # 384 MiB. No figure ends in "…" while another column has room to spare.
    run = profile(events=[census(1.0, 5, holder("kept", "local", 9 * MiB, count=1))], end_t=3.0)
    panel.set_profile(run, running=True)
    wide = holder("kept", "local", 384 * MiB, count=123_456, shapes=[[3, 224, 224]])
    run.events.append(census(2.0, 10, wide))
    panel.refresh()
    assert column(panel, "Tensors") == ["123,456"]
    table, header = panel.table, panel.table.horizontalHeader()
    for number in range(1, panel.model.columnCount()):
        needed = max(table.sizeHintForColumn(number), header.sectionSizeHint(number))
        assert table.columnWidth(number) >= needed, titles(panel)[number]


def test_sizes_sort_by_their_bytes_not_by_their_text(panel: ContentsPanel) -> None:
    panel.set_profile(run_with_censuses())
    bytes_column = titles(panel).index("Bytes")
    panel.table.sortByColumn(bytes_column, Qt.SortOrder.AscendingOrder)
    assert column(panel, "Bytes") == ["4 B", "256.0 KiB", "9.02 MiB", "158.0 MiB"]
    panel.table.sortByColumn(bytes_column, Qt.SortOrder.DescendingOrder)
    assert column(panel, "Bytes") == ["158.0 MiB", "9.02 MiB", "256.0 KiB", "4 B"]

    # The chosen order holds when another census is shown.
    panel.choose(1)
    assert column(panel, "Bytes") == ["10.00 MiB", "9.02 MiB", "2.00 MiB", "256.0 KiB", "4 B"]


def test_compared_with_an_earlier_census_the_table_shows_the_changes(
    panel: ContentsPanel,
) -> None:
    panel.set_profile(run_with_censuses())
    compare = panel.compare
    assert [compare.itemText(i) for i in range(compare.count())] == [
        "none",
        "optimizer step 5 (1.00 s)",
        "optimizer step 10 (2.00 s)",
    ]  # only censuses before the one shown
    panel.choose(2, compare=0)
    assert column(panel, "Holder") == [
        "`kept` (list, local of `train()` in train.py)",
        "`cache` (Tensor, global of train) (gone)",
    ]  # largest growth first; what did not change is left out
    assert column(panel, "Δ Bytes") == ["+153.0 MiB", "-2.00 MiB"]
    assert column(panel, "Δ Tensors") == ["+35", "-2"]
    assert column(panel, "Bytes") == ["158.0 MiB", "-"]  # at the census shown: gone is empty
    assert panel.header.text() == "2 holders changed, +151.0 MiB in all"

    panel.choose(0)  # nothing is earlier than the first: back to its contents
    assert panel.compare.currentText() == "none"
    assert "Δ Bytes" not in titles(panel)


def test_without_censuses_the_panel_says_why(panel: ContentsPanel) -> None:
    assert panel.stack.currentWidget() is panel.empty and panel.empty.text() == NO_RUN
    panel.set_profile(profile(end_t=5.0))
    assert panel.stack.currentWidget() is panel.empty and panel.empty.text() == NO_CENSUS
    assert "--census never or --no-hooks" in NO_CENSUS

    live = profile(end_t=1.0)
    panel.set_profile(live, running=True)
    assert panel.empty.text() == NO_CENSUS_YET
    live.events.append(census(1.5, 5, holder("kept", "local", MiB)))
    panel.refresh()  # as the window's timer does while the run grows
    assert panel.stack.currentIndex() == 1 and column(panel, "Bytes") == ["1.00 MiB"]
    live.events.append(census(2.5, 10, holder("kept", "local", 2 * MiB, count=2)))
    panel.refresh()
    assert panel.census.currentText() == "optimizer step 10 (2.50 s)"  # follows the latest

    panel.choose(0)  # once the user picks an earlier one, new censuses leave it be
    live.events.append(census(3.5, 20, holder("kept", "local", 4 * MiB, count=4)))
    panel.refresh()
    assert panel.census.count() == 3 and panel.census.currentIndex() == 0


def test_a_census_cut_short_says_so(panel: ContentsPanel) -> None:
    cut = census(1.0, 5, holder("kept", "local", MiB))
    cut.data["census"]["cost"] = {"partial": True}
    panel.set_profile(profile(events=[cut], end_t=2.0))
    assert panel.header.text() == (
        "1 holder, 1.00 MiB (partial: the census stopped at its time limit)"
    )


def test_choosing_a_census_moves_its_mark_on_the_timeline(
    window: MainWindow, tmp_path: Path
) -> None:
    window._show_profile(run_with_censuses(), tmp_path / "run.memsight")
    marks = window.timeline.event_lane.time_marks
    assert marks == []  # the panel is behind the console: no mark nobody asked for

    window.contents_dock.raise_()
    marks = window.timeline.event_lane.time_marks
    assert [line.value() for _, line in marks] == [4.0, 4.0, 4.0]  # RAM, GPU, event lane
    labels = window.timeline.event_lane.labels.entries
    assert [label.text for label in labels if label.census] == ["census at optimizer step 40"]

    window.timeline.lane.setXRange(3.0, 4.5, padding=0)
    window.contents.census.setCurrentIndex(0)
    window.contents.census.activated.emit(0)  # as a click in the picker does
    assert {line.value() for _, line in window.timeline.event_lane.time_marks} == {1.0}
    low, high = window.timeline.lane.getViewBox().viewRange()[0]
    assert low <= 1.0 <= high and high - low == pytest.approx(1.5, rel=0.05)  # panned, not zoomed

    window.contents.choose(2, compare=1)
    assert sorted({line.value() for _, line in window.timeline.event_lane.time_marks}) == [2.0, 4.0]

    window.console_dock.raise_()
    assert window.timeline.event_lane.time_marks == []


# A loop that keeps every loss with its graph: censuses at iterations 5, 10, 20, ...
KEEPS_LOSSES = """
import time
import torch
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
kept = []
for step in range(STEPS):
    optimizer.zero_grad()
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    optimizer.step()
    kept.append(loss)
    time.sleep(0.01)
"""


@pytest.mark.slow  # a PyTorch run
def test_censuses_appear_while_the_run_goes_on(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "keeps.py", KEEPS_LOSSES.replace("STEPS", "100_000"))
    window.open_script(str(script))
    window.contents_dock.raise_()
    window.start_run()

    # The latest census is shown as it arrives. Which census first names `kept` depends on the
    # machine: on a busy one `import torch` outlasts the first censuses on the clock, taken
    # before the loop (census_schedule.py); the loop's own come at iterations 5, 10, ...
    def kept_shown() -> bool:
        if "Holder" not in titles(window.contents):
            return False  # no census yet
        return any("`kept` (list" in text for text in column(window.contents, "Holder"))

    qtbot.waitUntil(kept_shown, timeout=RUN_TIMEOUT_MS)
    assert window.contents.census.count() >= 1
    assert window.session.controller is not None and window.session.controller.running
    assert window.timeline.event_lane.time_marks  # the latest census, marked as it arrives
    window.stop_run()
    wait_until_settled(qtbot, window)
    assert window.contents.census.currentIndex() == window.contents.census.count() - 1


def test_a_long_holder_keeps_its_name_whole_and_the_shapes_give_way(
    qtbot: QtBot, panel: ContentsPanel
) -> None:
    # The changes between two censuses: nine columns, a holder named at length and many
    # shapes. The holder is the answer, the shapes an example: they give way first.
    name = 'trainer.callback_state["validation_outputs_history"]'
    shapes = [[256, 512], [256], [2048, 256], [2048], [64, 2048], [64], [3, 224, 224]]
    earlier = holder(name, "attribute", 2 * MiB, count=5, shapes=shapes)
    later = holder(name, "attribute", 40 * MiB, count=40, shapes=shapes)
    run = profile(events=[census(1.0, 5, earlier), census(2.0, 40, later)], end_t=3.0)
    panel.set_profile(run)
    panel.choose(1, compare=0)
    table = panel.table
    shapes_column = titles(panel).index("Shapes")

    def widths() -> list[int]:
        return [table.columnWidth(i) for i in range(panel.model.columnCount())]

    # Too narrow for both: the holder is whole, the shapes end in "…" and are all in the
    # cell's tooltip; nothing scrolls sideways.
    header = table.horizontalHeader()
    everything = sum(
        max(table.sizeHintForColumn(i), header.sectionSizeHint(i)) for i in range(len(widths()))
    )
    panel.resize(everything - 100, 300)
    qtbot.waitUntil(lambda: sum(widths()) <= table.viewport().width())
    assert table.columnWidth(0) >= table.sizeHintForColumn(0)
    assert table.columnWidth(shapes_column) < table.sizeHintForColumn(shapes_column)
    cell = panel.table.model().index(0, shapes_column)
    assert "3x224x224" in cell.data(Qt.ItemDataRole.ToolTipRole)
    # Narrower still: the shapes give all they can before the holder gives any.
    panel.resize(1000, 300)
    qtbot.waitUntil(lambda: table.columnWidth(0) < table.sizeHintForColumn(0))
    assert table.columnWidth(shapes_column) == SHAPES_MIN_WIDTH
    assert table.columnWidth(0) >= HOLDER_MIN_WIDTH
