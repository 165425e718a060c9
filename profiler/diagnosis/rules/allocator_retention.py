"""allocator-retention: RAM climbs, but by memory malloc keeps after it was freed (info).

glibc's malloc keeps freed chunks in its heaps, and raises its mmap threshold after a large
buffer is freed, so buffers of that size come from the heap afterwards and stay there when
freed. A loop that allocates and frees tensors of a few hundred KiB each iteration can then
climb ~1 MiB per step with no object holding anything (a clean Lightning run on CPU does;
malloc_trim(0) at the end gives all of it back). The agent reads glibc's mallinfo2 (its
`heap` table), and growth-per-iteration stays quiet on a climb that it explains; this rule says
so instead: the level climbs steadily (the same straight-line, still-growing tests), live
malloc allocations did not grow with it, at least
heap_retention_min_share of the climb is free bytes in malloc's heaps, and the rest is too
little to report (Growth.retained_by_allocator).

Evidence numbers: bytes_per_iteration, iterations and iterations_are (or bytes_per_second,
seconds and a null iterations_are over time), r2, growth_bytes, start_bytes, device, and
`heap_in_use_growth_bytes` / `heap_free_growth_bytes`: how the bytes in live malloc
allocations and the bytes malloc keeps free grew over the same span.
"""

from __future__ import annotations

from memsight.profiler.diagnosis.config import DiagnosisConfig
from memsight.profiler.diagnosis.finding import Evidence, Finding
from memsight.profiler.diagnosis.growth import Growth, growths
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import memory_name
from memsight.profiler.units import format_bytes, format_duration, format_signed_bytes

RULE_ID = "allocator-retention"
EXPLANATION = (
    "The process's resident memory climbs steadily, but not because the program holds more: "
    "the C allocator (glibc malloc) keeps memory the program freed, to hand it out again. "
    "After a large buffer is freed, glibc raises the size above which it maps buffers "
    "separately, so later buffers of that size come from its heaps and stay there when freed. "
    "No tensor or object holds this memory and later allocations reuse it, so it is not a "
    "leak; it does count against the machine's RAM. Capping what malloc keeps makes the curve "
    "show what the program really uses."
)
FIXES = ("malloc-trim-threshold",)


def check(profile: Profile, config: DiagnosisConfig) -> list[Finding]:
    return [_finding(g) for g in growths(profile, config) if g.retained_by_allocator(config)]


def _finding(g: Growth) -> Finding:
    assert g.heap is not None  # retained_by_allocator needs the heap readings
    if g.iterations is not None:
        first, last = g.iterations
        span = f"over {last - first} iterations"
        rate = f"{format_bytes(g.fit.slope)} per iteration"
    else:
        span = f"over {format_duration(g.end_s - g.start_s)}"
        rate = f"{format_bytes(g.fit.slope)}/s"
    text = (
        f"{memory_name(g.plot, g.device)} rose {format_bytes(g.growth)} {span} ({rate}, r² "
        f"{g.fit.r2:.2f}); meanwhile the bytes malloc keeps free in its heaps rose "
        f"{format_bytes(g.heap.free)} and its live allocations changed by "
        f"{format_signed_bytes(g.heap.in_use)}"
    )
    return Finding(
        RULE_ID,
        "info",
        "RAM climbs because malloc keeps freed memory, not because of a leak",
        EXPLANATION,
        Evidence(text, g.start_s, g.end_s, "ram", g.iterations, g.numbers()),
        FIXES,
    )
