"""Runs profile files through everything `memsight report` does, in this one process, and writes
what happened to each as JSON: `python -m tests.hostile.check_files LIST OUT [--html-every N]`.

LIST is a JSON list of [name, path]. Each file is loaded, diagnosed, summarised as text and as
the report's JSON, and every Nth one rendered as HTML. A ProfileError is the expected refusal
(its message must be one line that says something); any other exception is a crash, recorded
with where it came from. The caller runs this under an address-space cap (capped.py).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from memsight.profiler.diagnosis import diagnose, finding_to_json
from memsight.profiler.diagnosis.text import format_findings
from memsight.profiler.profile.storage import ProfileError, load_profile
from memsight.profiler.profile.summary import format_text, to_json
from memsight.profiler.report.html import render_html
from tests.hostile.capped import peak_rss_bytes


def check(name: str, path: str, html: bool) -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = {"name": name}
    try:
        profile = load_profile(path)
        diagnosis = diagnose(profile)
        format_text(profile, path) + format_findings(diagnosis)
        data = to_json(profile, [finding_to_json(f) for f in diagnosis.findings])
        data["failed_rules"] = dict(diagnosis.failed)
        json.dumps(data)
        if html:
            render_html(profile, diagnosis)
        result["outcome"] = "loaded"
        result["failed_rules"] = sorted(diagnosis.failed)
    except ProfileError as exc:
        message = str(exc)
        result["outcome"] = "refused"
        result["message"] = message[:300]
        result["bad_message"] = "\n" in message or not exc.problem.strip() or message.endswith(": ")
    except BaseException as exc:
        result["outcome"] = "crashed"
        result["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        result["where"] = traceback.format_exc().splitlines()[-3:]
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def main(argv: list[str]) -> int:
    listing, out = Path(argv[0]), Path(argv[1])
    html_every = int(argv[argv.index("--html-every") + 1]) if "--html-every" in argv else 10
    files = json.loads(listing.read_text())
    results = [check(name, path, n % html_every == 0) for n, (name, path) in enumerate(files)]
    out.write_text(json.dumps({"results": results, "peak_rss_bytes": peak_rss_bytes()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
