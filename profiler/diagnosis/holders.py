"""What keeps growing memory alive: the holders in the agent's censuses, and their lines.

The agent takes censuses of live tensors between iterations (agent/census_schedule.py), each
naming the holders that reach them (a list local to a function, a module global, an attribute,
a closure cell, a tensor whose autograd graph keeps saved activations). Between the first
census inside a growth finding's span and the last one, a holder that gained bytes is what
keeps the growth alive; its share per iteration, its place in the code and the line that adds
to it (diagnosis/adders.py) make the finding's `where`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memsight.profiler.diagnosis.adders import (
    adding_line,
    binding_line,
    enclosing_function,
    source_line,
)
from memsight.profiler.diagnosis.contents import (
    Census,
    census_label,
    censuses,
    changes,
    describe,
    holders_by_id,
    is_partial,
    partial_text,
)
from memsight.profiler.diagnosis.finding import Location
from memsight.profiler.profile.model import Profile
from memsight.profiler.protocol import OPTIMIZER_STEPS
from memsight.profiler.units import format_bytes

MAX_HOLDERS = 3
MIN_SHARE = 0.05  # of the growth per iteration: smaller gains are noise, not the leak


@dataclass(frozen=True)
class Growing:
    holder: dict[str, Any]  # as in the later census
    per_iteration: float  # bytes
    first: Census
    last: Census


def census_pair(
    profile: Profile, iterations_are: str | None, span: tuple[float, float]
) -> tuple[Census, Census] | None:
    """The censuses a growth over `span` (times, s) is judged between: from the last one at or
    before the span's start (the warm-up the fit leaves out has ended by then, or nearly) to
    the last one in it; None without two such."""
    taken = [
        c
        for c in censuses(profile)
        if c.t <= span[1] + 1e-6 and (iterations_are is None or c.iterations_are == iterations_are)
    ]
    before_start = [c for c in taken if c.t <= span[0]]
    inside = [c for c in taken if c.t > span[0]]
    if not inside or len(taken) < 2:
        return None
    first = before_start[-1] if before_start else inside[0]
    last = inside[-1]
    return None if first is last else (first, last)


def growing_holders(
    profile: Profile,
    iterations_are: str | None,
    span: tuple[float, float],
    per_iteration: float,
    pace: float | None = None,
) -> list[Growing]:
    """Holders that gained memory over `span` (times, s) between two censuses, most first;
    gains per iteration (or per second for growth over time). `pace`: the finding's
    iterations per second, for iterations that are not optimizer steps. per_iteration: the
    growth's rate, of which a holder must gain MIN_SHARE."""
    pair = census_pair(profile, iterations_are, span)
    if pair is None:
        return []
    first, last = pair
    if iterations_are == OPTIMIZER_STEPS:
        steps = float(last.iteration - first.iteration)
    else:
        # The agent counts every outermost forward; the rule counts batches of them (or
        # seconds): go by time, at the finding's own pace.
        steps = (last.t - first.t) * (pace if pace is not None else 1.0)
    if steps <= 0:
        return []
    held = holders_by_id(last)
    found = []
    for change in changes(first, last):  # largest growth first
        rate = change.bytes_delta / steps
        if change.gone or change.bytes_delta <= 0 or rate < MIN_SHARE * per_iteration:
            continue
        found.append(Growing(held[change.row.id], rate, first, last))
    return found[:MAX_HOLDERS]


def _contents(holder: dict[str, Any]) -> str:
    count = int(holder.get("count") or 0)
    graphs = int(holder.get("with_graph") or 0)
    text = f"{count} tensor{'s' if count != 1 else ''}"
    if graphs == count == 1:
        text += " with an autograd graph"
    elif graphs:
        text += " with autograd graphs" if graphs == count else f" ({graphs} with autograd graphs)"
    graph_bytes = int(holder.get("grad_bytes") or 0)
    if graph_bytes:
        whose = "whose graph keeps" if graphs == 1 else "whose graphs keep"
        text += f", {whose} {format_bytes(graph_bytes)} of saved tensors"
    return text


def _place(holder: dict[str, Any], bound: bool = False) -> tuple[str, int, str | None] | None:
    """Where a holder is in the code: the line that adds to it, else (with `bound`) the line
    that assigns it, else where it lives (file, line, source); None when the census names no
    file or line."""
    file = str(holder.get("file") or "")
    name = str(holder.get("root") or holder.get("name") or "")
    attribute = holder.get("kind") in ("attribute", "class attribute")
    if attribute:
        name = name.rsplit(".", 1)[-1]
    first_line = holder.get("first_line") if holder.get("kind") == "local" else None
    added = (
        adding_line(
            file,
            name.split("[", 1)[0],
            attribute=attribute,
            first_line=int(first_line) if isinstance(first_line, int) else None,
        )
        if file and name
        else None
    )
    if added is None and bound and file and name and "[" not in name:
        added = binding_line(
            file,
            name,
            attribute=attribute,
            first_line=int(first_line) if isinstance(first_line, int) else None,
        )
    line = added.line if added is not None else int(holder.get("line") or 0)
    if not file or line <= 0:
        return None
    return file, line, added.code if added is not None else source_line(file, line)


def _location(holder: dict[str, Any], text: str, size: int, bound: bool = False) -> Location | None:
    place = _place(holder, bound)
    if place is None:
        return None
    file, line, code = place
    # The function that holds the line (the loop that appends to `self.cache`), not the
    # holder's owner (its class); a local's own function where the file cannot be read.
    function = enclosing_function(file, line)
    if function is None and holder.get("kind") == "local":
        function = holder.get("function")
    return Location(file, line, str(function) if function else None, code, text, size)


# A holder's gain within this share of the growth's rate is the growth's, said once.
SAME_RATE = 0.1


def locations(
    found: list[Growing], unit: str = "iteration", growth: float | None = None
) -> tuple[Location, ...]:
    """One location per growing holder: the line that adds to it, else where it lives.
    `growth`: the rate the finding's evidence gives, which a holder's gain is said against
    when it is not the same (a holder keeps part of the growth, measured between censuses)."""
    out = []
    for growing in found:
        holder = growing.holder
        gain = f"+{format_bytes(growing.per_iteration)} per {unit}"
        if growth and abs(growing.per_iteration - growth) > SAME_RATE * growth:
            gain += f" of the +{format_bytes(growth)} the memory grew by"
        # The gain first, then the holder as that census saw it (the Contents view shows the
        # same census' row when it is picked): the two numbers are of different things.
        text = (
            f"kept alive by {describe(holder)}: {gain}; {_contents(holder)}, "
            f"{format_bytes(_held(holder))} at {census_label(growing.last, time=False)}"
        )
        location = _location(holder, text, round(growing.per_iteration))
        if location is not None:
            out.append(location)
    return tuple(out)


def largest_holders(census: Census, min_bytes: int) -> list[dict[str, Any]]:
    """The holders of one census that keep at least `min_bytes` (their tensors' storages and
    what their graphs keep), largest first, at most MAX_HOLDERS."""
    sized = [
        (int(h.get("bytes") or 0) + int(h.get("grad_bytes") or 0), h)
        for h in holders_by_id(census).values()
    ]
    sized = [(size, h) for size, h in sized if size >= min_bytes]
    sized.sort(key=lambda pair: -pair[0])
    return [h for _size, h in sized[:MAX_HOLDERS]]


def _held(holder: dict[str, Any]) -> int:
    """What a holder keeps: its tensors' storages and what their graphs keep."""
    return int(holder.get("bytes") or 0) + int(holder.get("grad_bytes") or 0)


def holding_locations(found: list[dict[str, Any]], moment: str) -> tuple[Location, ...]:
    """One location per holder of a census (largest_holders): where it is in the code."""
    out = []
    for holder in found:
        size = int(holder.get("bytes") or 0) + int(holder.get("grad_bytes") or 0)
        text = f"held by {describe(holder)}: {_contents(holder)}, {format_bytes(size)} {moment}"
        location = _location(holder, text, size, bound=True)
        if location is not None:
            out.append(location)
    return tuple(out)


ADVICE = "run with `--census every-10` (a census every 10 iterations) to see what holds it"


def unnamed_because(profile: Profile, iterations_are: str | None, span: tuple[float, float]) -> str:
    """Why a growth's finding names no holder, and what to do: in words for its "where"."""
    if not censuses(profile):
        return f"no census of live tensors was taken in this run; {ADVICE}"
    pair = census_pair(profile, iterations_are, span)
    if pair is None:
        return f"fewer than two censuses fell in the climb's span, so none could show a holder growing; {ADVICE}"
    first, last = pair
    cut = [c for c in pair if is_partial(c)]
    if cut:
        return (
            f"the census at {census_label(cut[0], time=False)} was cut short "
            f"({partial_text(cut[0]).split(': ', 1)[-1]}); {ADVICE}"
        )
    return (
        f"no variable, attribute or cell the censuses reach gained memory between "
        f"{census_label(first, time=False)} and {census_label(last, time=False)}: what grows is "
        "held outside Python's reach (a C extension, a library's native state) or is memory "
        "the allocator keeps; `memsight report --contents` shows what the censuses saw"
    )
