"""Text for a terminal: every control character escaped, so that text from the target (process
names, argv, class names, file names) can neither drive the terminal nor reorder what it shows.

A terminal acts on what it is sent: ESC starts sequences that clear the screen, move the
cursor or set the window title, BEL rings, CR overwrites a line, and the Unicode
bidirectional overrides and isolates make a line read differently from what it says.
`terminal_safe` shows each such character as a Python escape (`\\x1b`, `\\u202e`) instead.
Backslashes are left as they are: the result is for reading, not for parsing back.
"""

from __future__ import annotations

import re

# DEL, the C1 controls, and the Unicode bidirectional controls: ALM, LRM, RLM, the embeddings
# and overrides U+202A-U+202E and the isolates U+2066-U+2069.
_OTHER_CONTROLS = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# ... and the C0 controls: all of them, or all but the newline.
_ANY_CONTROL = re.compile(f"[\x00-\x1f{_OTHER_CONTROLS}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHER_CONTROLS}]")


def _escape(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]  # "\x1b", "\n", "\t", "\u202e", as Python writes them


def terminal_safe(text: str, lines: bool = False) -> str:
    """`text` with every control character shown as an escape.

    With `lines`, newlines stay: for a report of many lines, whose line breaks are its own.
    Without it the result is always one line (a message quoting a file name, say)."""
    return (_CONTROL_BUT_NEWLINE if lines else _ANY_CONTROL).sub(_escape, text)
