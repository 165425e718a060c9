"""The part of a run the rules judge: the user's program, from its imports to its end.

Both ends are events the agent sends, not guesses from the curves:

- The end is `script_end`: the script's main module returned, called sys.exit or raised, and
  its non-daemon threads ended. After it the interpreter runs atexit handlers and tears down
  its modules, which frees what the script's globals held, in a drop that takes seconds on a
  busy machine. Every rule judges the samples up to that mark (diagnose() cuts each process'
  tables there), so teardown is never part of a trend, however long it takes. A run without
  the mark (killed, `os._exit` without the agent's wrapper, a profile from an older memsight)
  is judged on everything recorded.
- The beginning of a trend over time is `torch_imported`, the end of `import torch`: the
  climb while torch and its libraries load is not the program's. Loops are judged between
  iterations, which start after the imports. A finished run that never imported torch is
  judged from its start; a live run that has not imported torch yet may still be importing
  it, so nothing is judged over time before it has.

Events are never cut: the uncaught exception, the exit and the recorder's own events come
after the mark and every rule still reads them.
"""

from __future__ import annotations

from memsight.profiler.profile.model import Profile

SCRIPT_END = "script_end"
TORCH_IMPORTED = "torch_imported"


def script_end(profile: Profile) -> float | None:
    """When the script ended (the agent's script_end event), or None where it was not seen."""
    mark = next(profile.events_of(SCRIPT_END), None)
    return mark.t if mark is not None else None


def up_to_script_end(profile: Profile) -> Profile:
    """The profile as the rules judge it: its sample tables cut at the script's end (shared
    rows, no copy, where the rows are in time order); the profile itself without the mark."""
    end = script_end(profile)
    if end is None:
        return profile
    cut = profile.shallow_copy()
    cut.tables = {name: table.until(end) for name, table in profile.tables.items()}
    return cut


def trend_start(profile: Profile) -> float | None:
    """Where a trend over time may begin: the end of torch's import; the run's start for a
    finished run that never imported torch; None while a live run has not imported it."""
    imported = next(profile.events_of(TORCH_IMPORTED), None)
    if imported is not None:
        return imported.t
    return 0.0 if finished(profile) else None


def finished(profile: Profile) -> bool:
    """Whether the run is over: the recording was closed, or the script's end or its exit
    was recorded (a live profile, or a file cut off before the recorder closed it, may not be)."""
    if profile.complete or profile.info.exit_code is not None or profile.info.signal is not None:
        return True
    return script_end(profile) is not None
