"""The benchmarks' synthetic recording is written through the recorder's own path: when that
path changes (a new table, a new argument), the generator must follow, or load.py, gui_load.py
and report_html.py stop measuring anything."""

from __future__ import annotations

from pathlib import Path

from benchmarks.synthetic_recording import Params, make_profile


def test_the_synthetic_recording_is_written_and_reads_back_as_generated(tmp_path: Path) -> None:
    path = tmp_path / "synthetic.memsight"
    data = make_profile(path, Params(samples=2000, workers=2))  # raises if it does not verify
    assert path.stat().st_size > 0
    assert len(data.steps) > 0
