"""A live recording decodes to the same profile that loading its file gives (DESIGN rule 3)."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import numpy as np
import pytest

from memsight.profiler import protocol
from memsight.profiler.launch.spec import RunSpec
from memsight.profiler.profile.replay import ProfileBuilder
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.protocol import FrameReader
from memsight.profiler.recorder.session import Recording
from tests.support import write_script


def test_the_live_stream_and_the_saved_file_give_the_same_profile(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "live.py",
        """
        import time
        chunks = []
        for i in range(5):
            chunks.append(bytearray(20 * 2**20))
            print("step", i, flush=True)
            time.sleep(0.05)
        """,
    )
    frames: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    spec = RunSpec(target=str(script), cwd=str(tmp_path), interval_ms=5)
    recording = Recording(
        spec, tmp_path / "live.memsight", stdio="capture", new_session=True, live=frames.put
    )
    recording.start()
    status = recording.wait()
    assert status.exit_code == 0

    reader = FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
    live = ProfileBuilder()
    while not frames.empty():
        reader.feed(frames.get())
        for kind, payload in reader.frames():
            live.feed(kind, payload)
    live.flush()
    saved = load_profile(tmp_path / "live.memsight")

    assert live.profile.complete and saved.complete
    assert live.profile.sample_count == saved.sample_count > 10
    for column in ("t", "rss", "rss_peak", "children", "available"):
        assert np.array_equal(live.profile.tables["ram"][column], saved.tables["ram"][column])
    assert [(e.t, e.type) for e in live.profile.events] == [(e.t, e.type) for e in saved.events]
    assert (
        live.profile.output_text()
        == saved.output_text()
        == "".join(f"step {i}\n" for i in range(5))
    )
    assert live.profile.info == saved.info


def test_the_first_sample_is_written_before_the_target_runs(tmp_path: Path) -> None:
    script = write_script(tmp_path, "quick.py", "import time; time.sleep(0.2)\n")
    frames: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    spec = RunSpec(target=str(script), cwd=str(tmp_path))
    recording = Recording(spec, tmp_path / "q.memsight", stdio="capture", live=frames.put)
    recording.start()
    reader = FrameReader(max_payload=protocol.MAX_FILE_PAYLOAD)
    kinds = []
    while not frames.empty():
        reader.feed(frames.get())
        kinds += [kind & ~protocol.COMPRESSED for kind, _ in reader.frames()]
    recording.wait()
    assert protocol.RUN in kinds and protocol.SAMPLES in kinds


def test_sampling_goes_on_while_the_first_flush_is_slow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a busy machine the first flush waits a second or more for numpy and the codec to be
    # imported (blocks.warm_imports): the samplers must already be running meanwhile, or a
    # short script ends before its second sample. Here the first flush waits until the
    # sampler has taken three more samples (or 10 s, when it is not running).
    script = write_script(tmp_path, "short.py", "import time; time.sleep(1.0)\n")
    flush = Recording.flush
    sampled_during_flush: list[int] = []

    def slow_first_flush(self: Recording) -> None:
        if not sampled_during_flush:
            sampler = self.sampler
            assert sampler is not None
            deadline = time.monotonic() + 10.0
            while sampler.samples < 4 and time.monotonic() < deadline:
                time.sleep(0.005)
            sampled_during_flush.append(sampler.samples)
        flush(self)

    monkeypatch.setattr(Recording, "flush", slow_first_flush)
    spec = RunSpec(target=str(script), cwd=str(tmp_path), interval_ms=5)
    recording = Recording(spec, tmp_path / "slow.memsight", stdio="capture")
    recording.start()
    assert recording.wait().exit_code == 0
    assert sampled_during_flush[0] >= 4
