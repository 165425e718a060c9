"""The report in a real browser: headless Chromium loads it from disk with no network,
runs its script without a single console message, draws the charts, and screenshots it.

Skipped only where no Chromium is installed (.ci/run installs Debian's chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from memsight.profiler.report import write_html
from tests.factories import sample_profile
from tests.support import run_memsight, write_script

BROWSER = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)
pytestmark = [
    pytest.mark.slow,  # headless Chromium, and a recorded PyTorch run
    pytest.mark.skipif(BROWSER is None, reason="no Chromium installed"),
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    return subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={tmp_path / 'browser-profile'}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )


def check_in_browser(report: Path, tmp_path: Path) -> str:
    dom = chromium(tmp_path, "--dump-dom", report.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console  # no errors, and the page logs nothing else either
    charts = re.search(r'<div id="charts" data-state="(\w+)"', dom.stdout)
    assert charts is not None and charts.group(1) == "ok", dom.stdout[:2000]
    assert dom.stdout.count("<polyline") >= 2
    shot = tmp_path / "report.png"
    screenshot = chromium(
        tmp_path, "--window-size=1280,2000", f"--screenshot={shot}", report.as_uri()
    )
    assert screenshot.returncode == 0 and shot.stat().st_size > 20_000, screenshot.stderr[-2000:]
    return dom.stdout


def test_a_recorded_run_renders_in_chromium(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "leak.py",
        """
        import torch
        model = torch.nn.Linear(64, 64)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        for step in range(30):
            model(torch.randn(16, 64)).sum().backward()
            optimizer.step()
        print("done")
        """,
    )
    result = run_memsight([str(script)], tmp_path)
    assert result.returncode == 0, result.stderr
    report = tmp_path / "report.html"
    write_html(result.profile(), report)
    dom = check_in_browser(report, tmp_path)
    assert "missing-zero-grad" in dom


def test_payloads_stay_text_in_the_browser(tmp_path: Path) -> None:
    payload = (
        '<img src=x onerror="document.title=\'owned\'"><script>document.title="owned"</script>'
    )
    report = tmp_path / "hostile.html"
    write_html(sample_profile(payload), report)
    dom = check_in_browser(report, tmp_path)
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and title.group(1).strip() != "owned"
    assert "memsight report" in title.group(1)
