"""The files a profile carries beside its frames: CUDA memory snapshots (`--cuda-history`).

The recorder stores each snapshot's bytes in ATTACHMENT frames and describes it in an
`attachment` event (docs/profile-format.md); the agent's `cuda_snapshot` event with the same
number says what was in it. The model keeps the descriptions only; the bytes are read back
from the file when exported (storage.read_attachment).
"""

from __future__ import annotations

from dataclasses import dataclass

from memsight.profiler.profile.model import Profile
from memsight.profiler.units import format_bytes, format_duration

REASON_WORDS = {
    "oom": "taken at an out-of-memory error",
    "exception": "taken when an out-of-memory error was raised",
    "exit": "taken at exit",
}


@dataclass(frozen=True)
class CudaSnapshot:
    number: int  # the agent's count, 1, 2, ... (as `--at N` names it)
    attachment_id: int
    t: float  # seconds since t0: when it was taken
    reason: str | None  # "oom", "exception", "exit"; None when the agent's event never came
    bytes: int
    sha256: str | None
    device: int | None = None
    trace_entries: int | None = None  # the allocator's history entries in it
    history: str | None = None  # "memsight", "script" or None: who turned history on


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def cuda_snapshots(profile: Profile) -> list[CudaSnapshot]:
    """The profile's stored CUDA memory snapshots, in the order they were taken."""
    taken = {
        number: event
        for event in profile.events_of("cuda_snapshot")
        if (number := _int(event.get("snapshot"))) is not None
    }
    out = []
    for event in profile.events_of("attachment"):
        if event.get("kind") != "cuda_snapshot":
            continue
        attachment_id, size = _int(event.get("id")), _int(event.get("bytes"))
        number = _int(event.get("snapshot"))
        if attachment_id is None or size is None or number is None:
            continue
        agent = taken.get(number)
        reason = event.get("reason")
        sha = event.get("sha256")
        out.append(
            CudaSnapshot(
                number=number,
                attachment_id=attachment_id,
                t=event.t,
                reason=reason if isinstance(reason, str) else None,
                bytes=size,
                sha256=sha if isinstance(sha, str) else None,
                device=_int(event.get("device")),
                trace_entries=_int(agent.get("trace_entries")) if agent is not None else None,
                history=str(agent.get("history")) if agent and agent.get("history") else None,
            )
        )
    out.sort(key=lambda s: s.number)
    return out


def choose_snapshot(snapshots: list[CudaSnapshot], which: str | None) -> CudaSnapshot:
    """The snapshot `--at` names: "oom" (the last one taken at an out-of-memory error: earlier
    ones may be OOMs the allocator recovered from), "exit", a number N; None: "oom" if there is
    one, else the last. ValueError (one line) when there is no such snapshot."""
    if not snapshots:
        raise ValueError("the profile holds no CUDA memory snapshot")
    ooms = [s for s in snapshots if s.reason in ("oom", "exception")]
    if which is None:
        return ooms[-1] if ooms else snapshots[-1]
    text = which.strip().lower()
    have = ", ".join(describe_snapshot(s, short=True) for s in snapshots)
    if text == "oom":
        if ooms:
            return ooms[-1]
        raise ValueError(
            f"no snapshot was taken at an out-of-memory error (the profile has {have})"
        )
    if text == "exit":
        exits = [s for s in snapshots if s.reason == "exit"]
        if exits:
            return exits[-1]
        raise ValueError(f"no snapshot was taken at exit (the profile has {have})")
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"expected oom, exit or a snapshot number, got {which!r}") from None
    for snapshot in snapshots:
        if snapshot.number == number:
            return snapshot
    raise ValueError(f"no snapshot {number} (the profile has {have})")


def describe_snapshot(snapshot: CudaSnapshot, short: bool = False) -> str:
    """`snapshot 1, taken at an out-of-memory error at 3.21 s: 1.20 MiB, 5,120 history entries`."""
    reason = REASON_WORDS.get(snapshot.reason or "", "taken")
    if short:
        return f"{snapshot.number} ({snapshot.reason or 'unknown'})"
    text = f"snapshot {snapshot.number}, {reason} at {format_duration(snapshot.t)}"
    if snapshot.device is not None:
        text += f" on cuda:{snapshot.device}"
    text += f": {format_bytes(snapshot.bytes)}"
    if snapshot.trace_entries is not None:
        text += f", {snapshot.trace_entries:,} history entries"
        if snapshot.history == "script":
            text += " (recorded with the script's own settings)"
    return text
