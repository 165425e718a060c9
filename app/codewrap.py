"""Code shown in a panel narrower than its lines: wrapped as an editor soft-wraps it.

A line of code cut at the panel's edge hides its end, and a panel that scrolls sideways hides
it too until one scrolls; a line wrapped as prose starts again at column 0 and reads as other
code. So a long line is broken where code breaks best near the edge (after a space, a comma,
an opening bracket or an `=`, before a `.`; else at the edge), and each continuation is
indented like its line and begins with a mark that says it continues.
"""

from __future__ import annotations

import html

CONTINUATION = "↪ "  # the mark at the start of a wrapped line's continuation
CONTINUATION_COLOR = "gray"
MIN_COLUMNS = 24  # narrower than this, wrapping makes code harder to read than cutting it
BREAK_AFTER = frozenset(" ,([{=")
BREAK_BEFORE = frozenset(".")


def _break_at(text: str, start: int, room: int) -> int:
    """Where to end the first piece of `text` (longer than `room`): the last good place in
    the second half of the room, not before `start`, else the room's end."""
    for cut in range(room, max(start, room // 2) - 1, -1):
        if text[cut - 1] in BREAK_AFTER or text[cut] in BREAK_BEFORE:
            if text[:cut].rstrip(" ").endswith("#"):
                continue  # a comment's mark stays with its words: break before it instead
            return cut
    return room


def wrap_line(line: str, columns: int) -> list[str]:
    """`line` as pieces that fit `columns` once each continuation gets the line's indent and
    the mark in front: the first piece with its indent, the others bare."""
    columns = max(columns, MIN_COLUMNS)
    indent = len(line) - len(line.lstrip(" "))
    pieces: list[str] = []
    rest, room, start = line, columns, indent + 1
    while len(rest) > room:
        cut = _break_at(rest, start, room)
        pieces.append(rest[:cut].rstrip(" "))
        rest = rest[cut:].lstrip(" ")
        room = max(columns - indent - len(CONTINUATION), MIN_COLUMNS // 2)
        start = 1
    if rest or not pieces:
        pieces.append(rest)
    return pieces


def code_html(code: str, columns: int) -> str:
    """`code` as the inside of a <pre>, escaped, its long lines wrapped at `columns`."""
    lines = []
    for line in code.split("\n"):
        first, *continuations = wrap_line(line, columns)
        lines.append(html.escape(first))
        indent = " " * (len(line) - len(line.lstrip(" ")))
        mark = f"<span style='color:{CONTINUATION_COLOR}'>{html.escape(CONTINUATION)}</span>"
        lines += [f"{indent}{mark}{html.escape(piece)}" for piece in continuations]
    return "\n".join(lines)
