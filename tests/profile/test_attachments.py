"""Attachments (CUDA memory snapshots) in profile files: stored as bytes, read back in chunks,
kept by compaction, refused when damaged; and the recorder's store that takes them from the
agent's folder without trusting it."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from memsight.profiler import protocol
from memsight.profiler.profile.attachments import choose_snapshot, cuda_snapshots
from memsight.profiler.profile.storage import (
    ProfileError,
    compact_profile,
    load_profile,
    read_attachment,
)
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.recorder.snapshots import SnapshotStore


def _event(type_: str, **data: Any) -> bytes:
    return protocol.encode_json_frame(protocol.EVENTS, [{"t": 5, "type": type_, **data}])


def _write(path: Path, blob: bytes, chunk: int = 1000, mark: bool = True) -> str:
    writer = ProfileWriter(path)
    writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": 1}))
    if mark:
        writer.mark_attachments()
    for offset in range(0, len(blob), chunk):
        writer.write(protocol.attachment_frame(1, offset, blob[offset : offset + chunk]))
    digest = hashlib.sha256(blob).hexdigest()
    writer.write(
        _event(
            "attachment", id=1, kind="cuda_snapshot", snapshot=1, reason="oom", bytes=len(blob),
            sha256=digest,
        )
    )  # fmt: skip
    writer.write(_event("recording_end"))
    writer.close()
    return digest


def test_an_attachment_round_trips_and_the_file_says_version_2(tmp_path: Path) -> None:
    blob = os.urandom(2500) + b"\x80\x04" * 3000  # incompressible and compressible parts
    path = tmp_path / "p.memsight"
    digest = _write(path, blob)
    assert path.read_bytes()[8] == 2
    profile = load_profile(path)
    (snapshot,) = cuda_snapshots(profile)
    assert (snapshot.number, snapshot.reason, snapshot.bytes) == (1, "oom", len(blob))
    assert b"".join(read_attachment(path, 1, len(blob), digest)) == blob
    compact_profile(path)
    assert path.read_bytes()[8] == 2
    assert b"".join(read_attachment(path, 1, len(blob), digest)) == blob
    assert cuda_snapshots(load_profile(path)) == [snapshot]


def test_a_file_without_attachments_stays_version_1_after_compaction(tmp_path: Path) -> None:
    path = tmp_path / "p.memsight"
    _write(path, b"", mark=False)
    compact_profile(path)
    assert path.read_bytes()[8] == 1


def test_damaged_or_incomplete_attachments_are_refused_in_one_line(tmp_path: Path) -> None:
    blob = b"x" * 5000
    path = tmp_path / "p.memsight"
    _write(path, blob)
    with pytest.raises(ProfileError, match="checksum mismatch"):
        b"".join(read_attachment(path, 1, len(blob), "0" * 64))
    with pytest.raises(ProfileError, match="incomplete"):
        b"".join(read_attachment(path, 1, len(blob) + 1))
    with pytest.raises(ProfileError, match="incomplete"):
        b"".join(read_attachment(path, 2, 10))
    with pytest.raises(ProfileError, match="no such file"):
        b"".join(read_attachment(tmp_path / "none.memsight", 1, 1))


def test_the_snapshot_to_export_is_the_oom_one_unless_asked(tmp_path: Path) -> None:
    from memsight.profiler.profile.attachments import CudaSnapshot

    def snap(number: int, reason: str) -> CudaSnapshot:
        return CudaSnapshot(number, number, float(number), reason, 10, None)

    both = [snap(1, "oom"), snap(2, "oom"), snap(3, "exit")]
    assert choose_snapshot(both, None).number == 2  # the last OOM: earlier ones may be recovered
    assert choose_snapshot(both, "oom").number == 2
    assert choose_snapshot(both, "exit").number == 3
    assert choose_snapshot(both, "2").number == 2
    assert choose_snapshot([snap(1, "exit"), snap(2, "exit")], None).number == 2
    with pytest.raises(ValueError, match="no snapshot was taken at an out-of-memory"):
        choose_snapshot([snap(1, "exit")], "oom")
    with pytest.raises(ValueError, match="no snapshot 9"):
        choose_snapshot(both, "9")
    with pytest.raises(ValueError, match="expected oom, exit or a snapshot number"):
        choose_snapshot(both, "peak")


# -- the recorder's store -------------------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.events: list[dict[str, Any]] = []
        self.marked = 0

    def event(self, type_: str, t: int | None = None, **data: Any) -> None:
        self.events.append({"type": type_, "t": t, **data})

    def mark(self) -> None:
        self.marked += 1

    def chunks(self) -> bytes:
        out = b""
        for frame in self.frames:
            _length, kind, _ = protocol.HEADER.unpack_from(frame)
            _, plain = protocol.unpack_payload(kind, frame[protocol.HEADER_SIZE :])
            out += protocol.split_attachment(plain)[2]
        return out


def test_the_store_copies_named_snapshots_in_chunks_and_removes_its_folder() -> None:
    sink = Sink()
    store = SnapshotStore(sink.frames.append, sink.event, sink.mark)
    blob = os.urandom(protocol.ATTACHMENT_CHUNK + 123)
    Path(store.folder, "snapshot-1.pickle").write_bytes(blob)
    store.request({"type": "cuda_snapshot", "t": 7, "file": "snapshot-1.pickle", "reason": "oom"})
    store.request({"type": "cuda_snapshot", "t": 7, "file": "snapshot-1.pickle"})  # once
    Path(store.folder, "snapshot-2.pickle").write_bytes(b"late")  # its event never came
    Path(store.folder, "snapshot-3.pickle.partial").write_bytes(b"unfinished")
    store.finish()
    assert not os.path.exists(store.folder)
    first, second = sink.events
    assert first["id"] == 1 and first["reason"] == "oom" and first["t"] == 7
    assert first["sha256"] == hashlib.sha256(blob).hexdigest()
    assert (second["snapshot"], second["reason"], second["bytes"]) == (2, None, 4)
    assert len(sink.frames) == 3 and sink.marked == 2
    assert sink.chunks() == blob + b"late"


def test_the_store_trusts_nothing_the_target_names(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"not yours")
    sink = Sink()
    store = SnapshotStore(sink.frames.append, sink.event, sink.mark)
    os.symlink(secret, os.path.join(store.folder, "snapshot-1.pickle"))
    os.mkfifo(os.path.join(store.folder, "snapshot-2.pickle"))
    for name in ("snapshot-1.pickle", "snapshot-2.pickle", "../secret", "/etc/passwd", 5):
        store.request({"type": "cuda_snapshot", "t": 1, "file": name})
    deadline = time.monotonic() + 5
    while len(sink.events) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    store.finish()
    assert sink.frames == []
    assert [e["type"] for e in sink.events] == ["warning", "warning"]
    assert "could not be stored" in sink.events[0]["message"]
    assert secret.read_bytes() == b"not yours"


def test_the_agent_may_not_send_attachments_or_their_events() -> None:
    from memsight.profiler.recorder.server import RECORDER_EVENTS

    assert "attachment" in RECORDER_EVENTS
