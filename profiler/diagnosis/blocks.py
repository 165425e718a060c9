"""The CUDA caching allocator's block list at an out-of-memory error, as the rules read it.

At a CUDA OOM the agent sums up the allocator's segments and blocks on that device
(`cuda_blocks` event, profiler/agent/snapshots.py): memory reserved, allocated, free inside the
segments and in how many blocks, the largest free block, and the largest allocated blocks with
the Python frames that allocated each when the allocator's history was on (`memsight run
--cuda-history`). A request larger than every free block but smaller than all of them together
failed because the free memory is in pieces: fragmentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memsight.profiler.diagnosis.finding import Location
from memsight.profiler.diagnosis.where import parse_traceback, user_frame
from memsight.profiler.profile.model import Event, Profile
from memsight.profiler.units import format_bytes

MAX_LOCATIONS = 3  # lines named for the largest blocks
AFTER_EXCEPTION_S = 1.0  # an uncaught error's own summary comes this long after it at most


@dataclass(frozen=True)
class BlockList:
    t: float
    device: int | None
    segments: int
    reserved: int
    allocated: int
    free: int  # inside the segments, in inactive blocks
    free_blocks: int
    largest_free: int
    largest: tuple[Mapping[str, Any], ...]  # the largest allocated blocks, largest first
    requested: int | None  # what the failed request asked for, when known
    allocated_blocks: int | None = None  # all of them; `largest` keeps only the largest few

    @property
    def fragmented(self) -> bool:
        """The request would have fit in the free memory, but in no single free block."""
        return self.requested is not None and self.largest_free < self.requested <= self.free


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def oom_blocks(profile: Profile, exception: Event | None = None) -> BlockList | None:
    """The block list taken at the run's CUDA OOM: the one for `exception` (its exc_id), else
    the last one taken before it (or shortly after, for an error that was only seen as it
    ended the script); None when the run has none."""
    events = list(profile.events_of("cuda_blocks"))
    if not events:
        return None
    chosen: Event | None = None
    if exception is not None:
        exc_id = exception.get("exc_id")
        chosen = next((e for e in events if exc_id is not None and e.get("exc_id") == exc_id), None)
        if chosen is None:
            before = [e for e in events if e.t <= exception.t + AFTER_EXCEPTION_S]
            chosen = before[-1] if before else None
    else:
        chosen = events[-1]
    if chosen is None:
        return None
    largest = chosen.get("largest")
    return BlockList(
        t=chosen.t,
        device=_int(chosen.get("device")),
        segments=_int(chosen.get("segments")) or 0,
        reserved=_int(chosen.get("reserved")) or 0,
        allocated=_int(chosen.get("allocated")) or 0,
        free=_int(chosen.get("free")) or 0,
        free_blocks=_int(chosen.get("free_blocks")) or 0,
        largest_free=_int(chosen.get("largest_free")) or 0,
        largest=tuple(b for b in largest if isinstance(b, Mapping))
        if isinstance(largest, list)
        else (),
        requested=_int(chosen.get("requested")),
        allocated_blocks=_int(chosen.get("allocated_blocks")),
    )


def blocks_text(blocks: BlockList, requested: int | None) -> str:
    """The allocator's state in words: "the allocator's 9 segments held 802 MiB: 402 MiB
    allocated, 400 MiB free in 4 blocks, the largest 100 MiB: fragmentation (...)"."""
    requested = requested if requested is not None else blocks.requested
    segments = "segment" if blocks.segments == 1 else "segments"
    text = (
        f"the allocator's {blocks.segments} {segments} held {format_bytes(blocks.reserved)}: "
        f"{format_bytes(blocks.allocated)} allocated, {format_bytes(blocks.free)} free inside "
        f"them in {blocks.free_blocks} block{'' if blocks.free_blocks == 1 else 's'}"
    )
    if blocks.free_blocks:
        text += f", the largest {format_bytes(blocks.largest_free)}"
    if requested is not None and blocks.largest_free < requested <= blocks.free:
        text += (
            f": fragmentation (the request was {format_bytes(requested)}, more than any free "
            "block holds)"
        )
    elif requested is not None:
        text += f" (the request was {format_bytes(requested)})"
    return text


def block_locations(blocks: BlockList, script: str | None) -> tuple[Location, ...]:
    """The lines of the user's code that allocated the largest live blocks, most bytes first.

    Only where the allocator recorded stacks (`--cuda-history`, or a script's own history);
    blocks allocated in backward passes carry no Python frames."""
    found: dict[tuple[str, int], list[Any]] = {}
    for block in blocks.largest:
        size = _int(block.get("size"))
        frame = user_frame(
            [f for f in parse_traceback(block.get("frames")) if f.line is not None], script
        )
        if frame is None or size is None:
            continue
        entry = found.setdefault((frame.file, frame.line or 0), [frame, 0, 0])
        entry[1] += size
        entry[2] += 1
    ranked = sorted(found.values(), key=lambda e: e[1], reverse=True)[:MAX_LOCATIONS]
    device = f" on cuda:{blocks.device}" if blocks.device is not None else ""
    # The agent sends only the largest blocks: say so where there were more, so that "20 live
    # blocks of 800 MiB" is not read as all that line allocated.
    shown, every = len(blocks.largest), blocks.allocated_blocks
    among = f" (of the {shown} largest of {every} live blocks)" if every and every > shown else ""
    out = []
    for frame, total, count in ranked:
        what = "1 live block" if count == 1 else f"{count} live blocks"
        out.append(
            Location(
                file=frame.file,
                line=frame.line or 0,
                function=frame.function or None,
                code=frame.source or None,
                holder=f"allocated {what} of {format_bytes(total)}{device} alive at the OOM{among}",
                bytes=total,
            )
        )
    return tuple(out)
