"""The HTML report: complete, deterministic, escaped, self-contained, and written safely."""

from __future__ import annotations

import html.parser
import json
import os
import re
from pathlib import Path

import markupsafe
import numpy as np
import pytest

from memsight.profiler.profile.model import Event
from memsight.profiler.report import render_html, write_html
from tests.factories import GiB, MiB, census, holder, sample_profile, table

GOLDEN = Path(__file__).with_name("golden.html")
PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '"><svg onload=alert(3)>',
    "</script><script>alert(4)</script>",
    "{{ 7*7 }}",
    "&amp;<!--",
]


class Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def parse(text: str) -> Tags:
    tags = Tags()
    tags.feed(text)
    return tags


def test_the_report_has_every_section() -> None:
    text = render_html(sample_profile())
    for needle in [
        "train.py --lr 0.1",  # the command
        "/work/project",  # working directory
        "Python 3.11.7",
        "2.13.0",  # torch
        "2026-11-22 10:15:00",  # start time
        "30.0 s",  # duration
        "exit code 1",  # how it ended
        "out-of-memory",  # findings with evidence and fixes
        "growth-per-iteration",
        "+3.00 MiB per iteration",
        "Documented in:",
        "pt_data_worker",  # child processes
        "epoch 1 step 1 loss 2.30",  # output tail
        "main",  # traceback
        'id="chart-data"',
    ]:
        assert needle in text, needle


def test_the_same_profile_gives_the_same_report_and_matches_the_golden_file() -> None:
    first, second = render_html(sample_profile()), render_html(sample_profile())
    assert first == second
    if os.environ.get("MEMSIGHT_UPDATE_GOLDEN"):
        GOLDEN.write_text(first, encoding="utf-8")
    assert first == GOLDEN.read_text(encoding="utf-8"), (
        "report changed: review it, then rerun with MEMSIGHT_UPDATE_GOLDEN=1 to accept"
    )


@pytest.mark.parametrize("payload", PAYLOADS)
def test_every_string_from_the_target_is_escaped(payload: str) -> None:
    text = render_html(sample_profile(payload))
    tags = parse(text)
    assert [t for t, _ in tags.tags].count("script") == 2  # the data and our own script
    assert not [t for t, _ in tags.tags if t in ("img", "svg", "iframe", "object")]
    for tag, attrs in tags.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
    assert text.count("</script") == 2
    assert payload not in text or not re.search(r"[<>\"]", payload)
    assert str(markupsafe.escape(payload)) in text  # shown, as text


def test_the_report_loads_nothing_from_anywhere() -> None:
    text = render_html(sample_profile())
    tags = parse(text)
    for tag, attrs in tags.tags:
        assert "src" not in attrs, tag
        assert tag != "link", attrs
        if tag == "a":
            href = attrs.get("href") or ""
            assert href.startswith(("#", "https://pytorch.org/")), href
    assert "@import" not in text and not re.search(r"url\((?!#)", text)  # local refs only
    assert "fetch(" not in text and "XMLHttpRequest" not in text


def test_writing_replaces_the_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("old report")
    size = write_html(sample_profile(), out)
    assert out.stat().st_size == size > 10_000
    assert out.read_text(encoding="utf-8") == render_html(sample_profile())
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left


def test_every_cuda_device_gets_its_own_chart() -> None:
    t = np.repeat(np.arange(0, 5, 0.1), 2)
    device = np.tile([0, 1], len(t) // 2)
    gpu = table(
        "gpu",
        t,
        device=device,
        allocated=np.where(device == 0, 2 * GiB, 5 * GiB),
        allocated_peak=np.where(device == 0, 2 * GiB, 5 * GiB),
        reserved=6 * GiB,
        reserved_peak=6 * GiB,
    )
    profile = sample_profile()
    profile.tables["gpu"] = gpu
    text = render_html(profile)
    data = json.loads(re.search(r'id="chart-data">(.*?)</script>', text, re.S).group(1))  # type: ignore[union-attr]
    titles = [c["title"] for c in data["charts"]]
    assert titles == ["RAM", "GPU memory (cuda:0)", "GPU memory (cuda:1)"]
    allocated = {c["title"]: max(c["series"][1]["y"]) for c in data["charts"][1:]}
    assert allocated == {"GPU memory (cuda:0)": 2 * GiB, "GPU memory (cuda:1)": 5 * GiB}


def test_output_that_went_straight_to_a_file_is_said_to_be_unrecorded() -> None:
    # Given a run whose stdout and stderr were a file: the script wrote there, memsight did not
    profile = sample_profile()
    profile.output.clear()
    profile.events.append(Event(1.0, "output_not_recorded", {"streams": ["stdout", "stderr"]}))

    # Then the report says so instead of claiming the script printed nothing
    text = render_html(profile)
    assert "wrote its stdout and stderr straight to a file or pipe" in text
    assert "The script printed nothing" not in text


def test_the_traceback_shows_every_frame_with_the_users_own_highlighted() -> None:
    # Given an out-of-memory raised in the user's model, called through PyTorch, recorded as
    # the agent records tracebacks: [file, line, function, source] lists
    site = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
    profile = sample_profile()
    [exception] = [e for e in profile.events if e.type == "exception"]
    exception.data["traceback"] = [
        ["/work/train.py", 30, "<module>", "loss = model(x).pow(2).mean()"],
        [site, 1778, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"],
        ["/work/model.py", 22, "forward", "return (q @ k.transpose(-2, -1)) @ v"],
    ]

    text = render_html(profile)

    # Then the Exception section has all three frames, each with its source line under it
    section = text[text.index('<section id="exception">') :]
    section = section[: section.index("</section>")]
    frames = re.findall(r'<span class="frame( user)?">  File "([^"]+)", line (\d+)', section)
    assert frames == [
        (" user", "/work/train.py", "30"),
        ("", site, "1778"),
        (" user", "/work/model.py", "22"),
    ]
    assert "    return self._call_impl(*args, **kwargs)\n" in section
    assert "Highlighted: the frames in your own code." in section

    # And the out-of-memory finding's card says where to look: the model's line first
    card = text[text.index('id="finding-1"') :]
    card = card[: card.index("</article>")]
    assert "Where to look" in card
    places = re.findall(r'<code class="place">([^<]+)</code>', card)
    assert places == ["/work/model.py:22"]
    assert "<code>forward()</code>" in card
    assert "return (q @ k.transpose(-2, -1)) @ v" in card


def test_a_findings_holder_is_in_its_card() -> None:
    from dataclasses import replace

    from memsight.profiler.diagnosis import diagnose
    from memsight.profiler.diagnosis.finding import Location

    profile = sample_profile()
    diagnosis = diagnose(profile)
    holder = "kept alive by `kept` (list, local of `train()`): 4 tensors, +3.00 MiB per iteration"
    held = Location("/work/train.py", 41, "train", "kept.append(loss)", holder, 3 << 20)
    diagnosis.findings[0] = replace(diagnosis.findings[0], where=(held,))

    card = render_html(profile, diagnosis)
    card = card[card.index('id="finding-1"') : card.index("</article>")]
    assert '<code class="place">/work/train.py:41</code>' in card
    assert "kept alive by `kept` (list, local of `train()`): 4 tensors, +3.00 MiB" in card


def rows(text: str, table_id: str) -> list[str]:
    """The body of a table as the reader sees it: a row's cell texts joined by " | "."""
    body = text[text.index(f'id="{table_id}"') :]
    body = body[body.index("<tbody>") : body.index("</tbody>")]
    return [
        " | ".join(
            " ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell)).split())
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)
        )
        for row in re.findall(r"<tr>(.*?)</tr>", body)
    ]


def test_memory_contents_at_the_last_census_and_what_changed_since_the_first() -> None:
    # Given a run whose censuses saw `kept` grow, `model` stay and `cache` go
    model = holder("model", "global", 9 * MiB, count=4, shapes=[[512, 256], [512]])
    cache = holder("cache", "global", 2 * MiB, count=2)
    profile = sample_profile()
    profile.events += [
        census(2.0, 5, holder("kept", "local", 5 * MiB, count=5), model, cache),
        census(3.0, 10, holder("kept", "local", 10 * MiB, count=10), model, cache),
        census(9.0, 80, holder("kept", "local", 80 * MiB, count=80, with_graph=80), model),
    ]

    text = render_html(profile)

    # Then a section after the findings, linked from the top, shows the last census
    assert (
        text.index('id="findings"') < text.index('<section id="contents">') < text.index('id="run"')
    )
    assert '<a href="#contents">Memory contents</a>' in text
    assert "What held live tensors at the last census, optimizer step 80 (9.00 s)" in text
    assert rows(text, "contents-last") == [
        "`kept` (list, local of `train()` in train.py) train.py:9 | 80 | 80.00 MiB | - | 80 | cpu | float32 | 256x2048",
        "`model` (Tensor, global of train) train.py:9 | 4 | 9.00 MiB | - | - | cpu | float32 | 512x256, 512",
    ]
    # And what changed since the first, largest growth first, unchanged holders left out
    assert "What changed since optimizer step 5 (2.00 s)" in text
    assert rows(text, "contents-changes") == [
        "`kept` (list, local of `train()` in train.py) train.py:9 | +75.00 MiB | +75 | 80 | 80.00 MiB | cpu | float32 | 256x2048",
        "`cache` (Tensor, global of train) (gone) train.py:9 | -2.00 MiB | -2 | 0 | - | cpu | float32 | 256x2048",
    ]


def test_one_census_has_no_changes_and_none_has_no_section() -> None:
    profile = sample_profile()
    profile.events.append(census(2.0, 5, holder("kept", "local", 5 * MiB, count=5)))
    text = render_html(profile)
    assert rows(text, "contents-last") == [
        "`kept` (list, local of `train()` in train.py) train.py:9 | 5 | 5.00 MiB | - | - | cpu | float32 | 256x2048"
    ]
    assert "What changed" not in text and 'id="contents-changes"' not in text

    # Names come from the target: text, never markup
    profile.events.append(census(3.0, 10, holder("<img src=x onerror=alert(1)>", "global", 4)))
    text = render_html(profile)
    assert "`&lt;img src=x onerror=alert(1)&gt;`" in text and "<img" not in text

    text = render_html(sample_profile())
    assert 'id="contents"' not in text and "Memory contents" not in text
