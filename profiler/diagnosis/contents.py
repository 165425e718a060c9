"""Memory contents: what was alive at a census, grouped by holder, and what changed between two.

The one definition behind `memsight report --contents`, the HTML report's contents section and
the app's contents view. A census (agent/census.py) is taken between iterations; each row is
one holder with what it reaches: tensors, bytes of their storages, bytes of saved tensors only
their autograd graphs keep, devices, dtypes, a few shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes, format_signed_bytes

OOM = "oom"  # a census taken as an out-of-memory error was raised (event key `at`)


@dataclass(frozen=True)
class Census:
    t: float
    iterations_are: str
    iteration: int  # at an error: the last iteration boundary before it
    data: dict[str, Any]
    at: str = ""  # "" between iterations, OOM at an out-of-memory error
    exc_id: int | None = None  # at an error: the `exception` event's exc_id

    @property
    def at_error(self) -> bool:
        return self.at == OOM


def censuses(profile: Profile) -> list[Census]:
    """The censuses the agent took (`census` events), in time order."""
    out = []
    for event in profile.events_of("census"):
        data = event.get("census")
        iteration = event.get("iteration")
        if isinstance(data, dict) and isinstance(iteration, int):
            at = OOM if event.get("at") == OOM else ""
            exc_id = event.get("exc_id")
            exc_id = exc_id if isinstance(exc_id, int) and at else None
            out.append(
                Census(event.t, str(event.get("iterations_are")), iteration, data, at, exc_id)
            )
    return out


def holders_by_id(census: Census) -> dict[str, dict[str, Any]]:
    """The holders of one census as the agent wrote them, by their id."""
    found: dict[str, dict[str, Any]] = {}
    for holder in census.data.get("holders") or []:
        if isinstance(holder, dict) and holder.get("id") is not None:
            found[str(holder["id"])] = holder
    return found


def describe(holder: dict[str, Any]) -> str:
    """ "`kept` (list, local of `train()` in train.py)"."""
    name = str(holder.get("name") or "?")
    container = str(holder.get("container") or "object")
    kind = str(holder.get("kind") or "")
    owner = holder.get("owner")
    file = holder.get("file")
    place = f" in {Path(str(file)).name}" if file else ""
    if kind == "local" and owner:
        where = f", local of `{owner}()`{place}"
    elif kind == "global":
        where = f", global of {owner or Path(str(file or '?')).stem}"
    elif kind in ("attribute", "class attribute") and owner:
        where = f", {kind} of {owner}"
    elif kind == "closure" and owner:
        where = f", in the closure of `{owner}()`{place}"
    else:
        where = f", {kind}" if kind else ""
    return f"`{name}` ({container}{where})"


@dataclass(frozen=True)
class ContentsRow:
    holder: str  # in words: "`kept` (list, local of `train()` in train.py)"
    id: str
    kind: str
    count: int
    bytes: int
    graph_bytes: int
    with_graph: int
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    shapes: tuple[str, ...]
    place: str  # file:line where the holder lives, "" when unknown
    file: str = ""  # that file's path as recorded (relative ones are the run's directory's)
    line: int = 0  # that line, 0 when unknown
    file_bytes: int = 0  # of bytes, those in mappings of files (torch.load(mmap=True))

    @property
    def total(self) -> int:
        return self.bytes + self.graph_bytes


@dataclass(frozen=True)
class ChangeRow:
    row: ContentsRow  # as in the later census (or the earlier, for a holder that is gone)
    count_delta: int
    bytes_delta: int  # storages and graph-kept bytes together
    gone: bool = False  # the holder was in the earlier census only

    @property
    def now(self) -> ContentsRow:
        """The holder as at the later census: one that is gone holds nothing (its devices,
        dtypes and shapes stay the earlier census's, to tell what it held)."""
        if not self.gone:
            return self.row
        return replace(self.row, count=0, bytes=0, graph_bytes=0, with_graph=0)


def census_label(census: Census, time: bool = True) -> str:
    """ "optimizer step 40 (3.52 s)"; without `time`, "optimizer step 40"; a census at an
    out-of-memory error: "the out-of-memory error (3.61 s)"; one on the clock: "4.02 s"."""
    if census.at_error:
        return f"the out-of-memory error ({census.t:.2f} s)" if time else "the out-of-memory error"
    if census.iterations_are == "time":  # on the clock: a program without iterations
        return f"{census.t:.2f} s" if time else f"census {census.iteration} on the clock"
    kind = {
        "optimizer steps": "optimizer step",
        "backward passes": "backward pass",
        "forward passes": "forward",
    }.get(census.iterations_are, census.iterations_are)
    return f"{kind} {census.iteration} ({census.t:.2f} s)" if time else f"{kind} {census.iteration}"


PARTIAL = "partial: the census stopped at its time limit"
_STOPPED_BY = {
    "time": "the census stopped at its time limit",
    "objects": "the census stopped at its limit of objects",
    "memory": "the census stopped at its limit of memory",
    "slices": "the census gave up after its most slices",
}


def is_partial(census: Census) -> bool:
    """The census ran out of its budget: some holders may be missing."""
    return bool((census.data.get("cost") or {}).get("partial"))


def partial_text(census: Census) -> str:
    """Why a partial census stopped: "partial: the census stopped at its time limit"."""
    stopped = (census.data.get("cost") or {}).get("stopped_by")
    return "partial: " + _STOPPED_BY.get(str(stopped), _STOPPED_BY["time"])


def _row(holder: dict[str, Any]) -> ContentsRow:
    file, line = holder.get("file"), holder.get("line")
    place = f"{Path(str(file)).name}:{line}" if file and isinstance(line, int) else ""
    return ContentsRow(
        holder=describe(holder),
        id=str(holder.get("id")),
        kind=str(holder.get("kind") or ""),
        count=int(holder.get("count") or 0),
        bytes=int(holder.get("bytes") or 0),
        graph_bytes=int(holder.get("grad_bytes") or 0),
        with_graph=int(holder.get("with_graph") or 0),
        devices=tuple(str(d) for d in holder.get("devices") or ()),
        dtypes=tuple(str(d) for d in holder.get("dtypes") or ()),
        shapes=tuple(_shape(shape) for shape in holder.get("shapes") or ()),
        place=place,
        file=str(file) if place else "",
        line=int(line) if place and isinstance(line, int) else 0,
        file_bytes=int(holder.get("file_bytes") or 0),
    )


def _shape(shape: object) -> str:
    if isinstance(shape, list):
        return "x".join(str(n) for n in shape) if shape else "scalar"
    return str(shape)


def contents(census: Census) -> list[ContentsRow]:
    """The holders of one census, largest first."""
    rows = [_row(h) for h in holders_by_id(census).values()]
    return sorted(rows, key=lambda r: (-r.total, r.id))


def changes(before: Census, after: Census) -> list[ChangeRow]:
    """What each holder gained or lost from `before` to `after`, largest growth first;
    holders that did not change are left out."""
    old = {row.id: row for row in contents(before)}
    new = {row.id: row for row in contents(after)}
    out = []
    for key in old.keys() | new.keys():
        was, now = old.get(key), new.get(key)
        shown = now if now is not None else was
        assert shown is not None
        count = (now.count if now else 0) - (was.count if was else 0)
        size = (now.total if now else 0) - (was.total if was else 0)
        if count or size:
            out.append(ChangeRow(shown, count, size, gone=now is None))
    return sorted(out, key=lambda c: (-c.bytes_delta, c.row.id))


def pick(profile: Profile, which: str) -> Census:
    """A census by what a user types: "first", "last", an index (0, 1, -1), "step:N" (the
    census at iteration N) or "oom" (the one taken at an out-of-memory error). Raises
    ValueError with a one-line message."""
    taken = censuses(profile)
    if not taken:
        raise ValueError("the profile holds no censuses (recorded with --census never?)")
    if which == "first":
        return taken[0]
    if which == "last":
        return taken[-1]
    if which == OOM:
        at_error = [c for c in taken if c.at_error]
        if not at_error:
            raise ValueError("no census was taken at an out-of-memory error in this run")
        return at_error[-1]
    if which.startswith(("step:", "iteration:")):
        number = which.split(":", 1)[1]
        found = [
            c for c in taken if number.isdigit() and c.iteration == int(number) and not c.at_error
        ]
        if not found:
            have = ", ".join(str(c.iteration) for c in taken if not c.at_error)
            raise ValueError(f"no census at iteration {number}; censuses were taken at {have}")
        return found[0]
    try:
        return taken[int(which)]
    except (ValueError, IndexError):
        raise ValueError(
            f"choose a census as first, last, oom, an index from 0 to {len(taken) - 1} or "
            f"step:N, not {which!r}"
        ) from None


def size_text(value: int) -> str:
    """A size in a contents table: "-" for none, so the rows that hold something stand out."""
    return format_bytes(value) if value else "-"


def format_contents(profile: Profile, at: str = "last", since: str | None = None) -> str:
    """The text `memsight report --contents` prints: one line per holder."""
    census = pick(profile, at)
    lines = [f"Memory contents at {census_label(census)}"]
    if is_partial(census):
        lines.append(f"  ({partial_text(census)})")
    if since is None:
        lines.append(f"  {'bytes':>10}  {'graphs':>10}  {'tensors':>7}  holder")
        for row in contents(census):
            lines.append(
                f"  {size_text(row.bytes):>10}  {size_text(row.graph_bytes):>10}  {row.count:>7}  "
                f"{row.holder}{_extra(row)}"
            )
    else:
        earlier = pick(profile, since)
        lines[0] = f"What changed from {census_label(earlier)} to {census_label(census)}"
        lines.append(f"  {'bytes':>11}  {'tensors':>8}  holder")
        for change in changes(earlier, census):
            lines.append(
                f"  {format_signed_bytes(change.bytes_delta):>11}  "
                f"{change.count_delta:>+8}  {change.row.holder}{_extra(change.row)}"
            )
    return "\n".join(lines) + "\n"


def _extra(row: ContentsRow) -> str:
    parts = [", ".join(row.devices), ", ".join(row.dtypes)]
    if row.shapes:
        parts.append("shapes " + ", ".join(row.shapes[:3]))
    if row.with_graph:
        parts.append(f"{row.with_graph} with autograd graphs")
    if row.file_bytes:
        parts.append(f"{format_bytes(row.file_bytes)} mapped from files, not RAM of its own")
    parts = [p for p in parts if p]
    return f"  [{'; '.join(parts)}]" if parts else ""


def contents_json(profile: Profile, at: str = "last", since: str | None = None) -> dict[str, Any]:
    census = pick(profile, at)
    out: dict[str, Any] = {
        "census": {
            "t": round(census.t, 6),
            "iteration": census.iteration,
            "iterations_are": census.iterations_are,
            "at": census.at or None,
        },
        "holders": [_row_json(row) for row in contents(census)],
    }
    if since is not None:
        earlier = pick(profile, since)
        out["since"] = {
            "t": round(earlier.t, 6),
            "iteration": earlier.iteration,
            "iterations_are": earlier.iterations_are,
        }
        out["changes"] = [
            {**_row_json(c.row), "count_delta": c.count_delta, "bytes_delta": c.bytes_delta}
            for c in changes(earlier, census)
        ]
    return out


def _row_json(row: ContentsRow) -> dict[str, Any]:
    return {
        "holder": row.holder,
        "id": row.id,
        "kind": row.kind,
        "count": row.count,
        "bytes": row.bytes,
        "graph_bytes": row.graph_bytes,
        "with_graph": row.with_graph,
        "devices": list(row.devices),
        "dtypes": list(row.dtypes),
        "shapes": list(row.shapes),
        "place": row.place,
        "file": row.file or None,
        "line": row.line or None,
        "file_bytes": row.file_bytes,
    }
