"""Long lines of code wrap as an editor wraps them: each piece fits, nothing is lost."""

from __future__ import annotations

import pytest

from memsight.app.codewrap import CONTINUATION, MIN_COLUMNS, code_html, wrap_line


@pytest.mark.parametrize("columns", [MIN_COLUMNS, 30, 41, 80])
@pytest.mark.parametrize(
    "line",
    [
        "    optimizer.zero_grad(set_to_none=True)",
        "        total_loss += loss.item()  # a number: the graph of this iteration is freed",
        "x" * 200,
        "    loss = loss_fn(model(inputs), targets)",
        "short",
        "",
    ],
)
def test_every_piece_fits_and_the_pieces_are_the_line(line: str, columns: int) -> None:
    first, *rest = wrap_line(line, columns)
    indent = len(line) - len(line.lstrip(" "))
    assert len(first) <= columns
    for piece in rest:
        assert indent + len(CONTINUATION) + len(piece) <= columns
        assert piece and not piece.startswith(" ")
    # Only the spaces at a break go: the characters are the line's, in order.
    assert "".join([first, *rest]).replace(" ", "") == line.replace(" ", "")


def test_a_line_breaks_where_code_breaks_well_not_in_a_name() -> None:
    assert wrap_line("    optimizer.zero_grad(set_to_none=True)", 38) == [
        "    optimizer.zero_grad(set_to_none=",
        "True)",
    ]
    assert wrap_line("    result = first_function(argument_one, argument_two)", 44) == [
        "    result = first_function(argument_one,",
        "argument_two)",
    ]


@pytest.mark.parametrize("columns", range(MIN_COLUMNS, 60))
def test_a_comment_mark_is_never_left_at_the_end_of_a_piece(columns: int) -> None:
    # An aligned comment: a break after "#" would leave the mark alone at a line's end.
    line = "    recent = deque(maxlen=8)          # changed: bounded, the oldest dropped"
    pieces = wrap_line(line, columns)
    assert not any(piece.rstrip().endswith("#") for piece in pieces), pieces


def test_a_line_that_fits_is_untouched_and_markup_is_escaped() -> None:
    assert wrap_line("a = b", 40) == ["a = b"]
    shown = code_html("if a < b and c > d:\n    print('<b>')", 40)
    assert "&lt;b&gt;" in shown and "<b>" not in shown
    wrapped = code_html("    " + "word " * 20, 30)
    assert wrapped.count(CONTINUATION) >= 2
    # Continuations keep the line's indent before their mark.
    assert all(line.startswith("    <span") for line in wrapped.split("\n")[1:])
