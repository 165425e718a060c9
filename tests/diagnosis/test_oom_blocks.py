"""The out-of-memory and fragmentation rules read the allocator's block list at a CUDA OOM."""

from __future__ import annotations

from typing import Any, cast

from memsight.profiler.diagnosis import diagnose, finding_to_json
from memsight.profiler.diagnosis.blocks import oom_blocks
from memsight.profiler.diagnosis.text import format_findings
from memsight.profiler.profile.model import Event
from tests.factories import GiB, MiB, oom_event, profile, table

TRAIN = "/work/project/train.py"


def _frames(line: int, code: str) -> list[list[Any]]:
    """Outermost first, as the agent sends them: the script, then torch inside it."""
    return [
        [TRAIN, 40, "<module>", "main()"],
        [TRAIN, line, "train", code],
        ["/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward", "x"],
    ]


def _blocks(t: float = 4.9, **changes: Any) -> Event:
    data: dict[str, Any] = {
        "reason": "oom",
        "device": 0,
        "segments": 12,
        "reserved": 3 * GiB,
        "allocated": 2 * GiB,
        "allocated_requested": 2 * GiB,
        "free": 1 * GiB,
        "free_blocks": 40,
        "largest_free": 64 * MiB,
        "pending_free": 0,
        "allocated_blocks": 30,
        "with_frames": 3,
        "requested": 512 * MiB,
        "largest": [
            {"size": 600 * MiB, "frames": _frames(22, "cache.append(model(x))")},
            {"size": 500 * MiB, "frames": _frames(22, "cache.append(model(x))")},
            {"size": 300 * MiB, "frames": _frames(30, "y = model(big)")},
            {"size": 100 * MiB, "frames": []},  # a backward allocation: no Python frames
        ],
    }
    data.update(changes)
    return Event(t, "cuda_blocks", data)


def _run(*events: Event) -> Any:
    gpu = table(
        "gpu", [1.0, 4.0], device=0, allocated=2560 * MiB, reserved=3 * GiB, alloc_retries=0
    )
    p = profile(gpu, events=list(events), devices=[(0, 8 * GiB)])
    p.info.script = TRAIN
    return p, [f for f in diagnose(p).findings if f.rule in ("out-of-memory", "fragmentation")]


def test_the_oom_finding_names_fragmentation_and_the_lines_holding_the_largest_blocks() -> None:
    oom = oom_event("gpu", requested=512 * MiB, total=8 * GiB, device=0)
    p, findings = _run(_blocks(), oom)
    (finding,) = [f for f in findings if f.rule == "out-of-memory"]
    assert (
        "the allocator's 12 segments held 3.00 GiB: 2.00 GiB allocated, 1.00 GiB free inside "
        "them in 40 blocks, the largest 64.00 MiB: fragmentation (the request was 512.0 MiB, "
        "more than any free block holds)"
    ) in finding.evidence.text
    numbers = finding.evidence.numbers
    assert numbers["segment_free_bytes"] == GiB and numbers["largest_free_block_bytes"] == 64 * MiB
    assert numbers["fragmented"] is True
    assert finding.fixes[0] == "allocator-config"
    first, second = finding.where
    assert (first.file, first.line, first.code, first.bytes) == (
        TRAIN,
        22,
        "cache.append(model(x))",
        1100 * MiB,
    )
    assert "2 live blocks" in (first.holder or "") and "cuda:0" in (first.holder or "")
    assert (second.line, second.bytes) == (30, 300 * MiB)
    text = format_findings(diagnose(p))
    assert f"Where: {TRAIN}:22 in train(): cache.append(model(x)) (allocated 2 live blocks" in text
    where = cast("list[dict[str, object]]", finding_to_json(finding)["where"])
    assert where[0]["line"] == 22


def test_the_line_that_raised_also_says_what_it_allocated() -> None:
    """`kept.append(torch.empty(...))` in a loop: the line that ran out of memory is the one
    that allocated the live blocks (seen on an H200); its one `where` line says both."""
    oom = oom_event("gpu", requested=512 * MiB, total=8 * GiB, device=0)
    oom.data["traceback"] = _frames(22, "cache.append(model(x))")[:2]
    _, findings = _run(_blocks(), oom)
    (finding,) = [f for f in findings if f.rule == "out-of-memory"]
    first, second = finding.where
    assert (first.line, first.bytes) == (22, 1100 * MiB)
    assert "2 live blocks" in (first.holder or "")
    # 30 blocks were live; the agent sent the 4 largest.
    assert "(of the 4 largest of 30 live blocks)" in (first.holder or "")
    assert (second.line, second.bytes) == (30, 300 * MiB)
    assert "at train.py:22 in train(): cache.append(model(x))" in finding.evidence.text


def test_a_full_device_is_not_called_fragmented() -> None:
    oom = oom_event("gpu", requested=2 * GiB, device=0)
    _, findings = _run(_blocks(requested=2 * GiB, free=100 * MiB, largest_free=100 * MiB), oom)
    (finding,) = [f for f in findings if f.rule == "out-of-memory"]
    assert "fragmentation" not in finding.evidence.text
    assert "(the request was 2.00 GiB)" in finding.evidence.text
    assert "fragmented" not in finding.evidence.numbers


def test_the_block_list_of_an_earlier_recovered_oom_is_not_this_ones() -> None:
    oom = oom_event("gpu", t=5.0, requested=512 * MiB, device=0)
    later = _blocks(t=9.0)
    p, _ = _run(later, oom)
    assert oom_blocks(p, oom) is None
    # Its own exc_id wins over time.
    own = _blocks(t=9.0, exc_id=3)
    oom.data["exc_id"] = 3
    p, _ = _run(_blocks(t=4.0, free=5), own, oom)
    chosen = oom_blocks(p, oom)
    assert chosen is not None and chosen.free == GiB


def test_the_fragmentation_finding_adds_the_free_blocks_at_the_oom() -> None:
    oom = oom_event("gpu", requested=512 * MiB, device=0, reserved_unallocated=GiB)
    _, findings = _run(_blocks(), oom)
    (finding,) = [f for f in findings if f.rule == "fragmentation"]
    assert "in 40 free blocks, the largest 64.00 MiB" in finding.evidence.text
    assert finding.evidence.numbers["largest_free_block_bytes"] == 64 * MiB


def test_without_a_block_list_the_finding_is_as_before() -> None:
    oom = oom_event("gpu", requested=512 * MiB, device=0)
    _, findings = _run(oom)
    (finding,) = [f for f in findings if f.rule == "out-of-memory"]
    assert "segments" not in finding.evidence.text
    assert finding.where == ()
