"""Everything the HTML report shows, as plain data: no markup here, no Jinja2 there.

Numbers are rounded to fixed precision so the same profile always gives the same report.
Charts are decimated keeping each bucket's minimum and maximum (decimate.envelope), so a
spike stays in the chart however long the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memsight.profiler.diagnosis import Diagnosis, get_fix
from memsight.profiler.diagnosis.anatomy import main_anatomy
from memsight.profiler.diagnosis.anatomy_report import (
    OTHER_COLOR,
    PARTIAL_TEXT,
    PARTS,
    anatomy_skipped,
    composition,
    other_text,
    part_bytes,
    title,
)
from memsight.profiler.diagnosis.contents import (
    ContentsRow,
    census_label,
    censuses,
    changes,
    contents,
    is_partial,
    partial_text,
    size_text,
)
from memsight.profiler.diagnosis.finding import SEVERITY_LABELS, Location
from memsight.profiler.diagnosis.fit import module_groups
from memsight.profiler.diagnosis.signals import final_exception, gpu_devices, gpu_rows, ram_capacity
from memsight.profiler.diagnosis.where import is_user_frame, parse_traceback, script_path
from memsight.profiler.profile.model import Profile
from memsight.profiler.profile.series import (
    DEVICE_USED,
    GPU_ALLOCATED_PEAK,
    GPU_RESERVED_PEAK,
    MAIN_PEAK,
    PROCESS_TREE,
    WORKERS,
    Series,
    memory_name,
    process_tree_bytes,
)
from memsight.profiler.profile.summary import (
    damage_read_text,
    judged_nothing,
    process_row,
    sampling_behind_text,
    sampling_pace,
    summarize,
    summarize_processes,
    unrecorded_output,
)
from memsight.profiler.protocol import STDERR
from memsight.profiler.report.decimate import envelope
from memsight.profiler.units import format_bytes, format_duration, format_signed_bytes

CHART_BUCKETS = 1500  # points per series: 2 per bucket, about one per pixel of a wide chart
MAX_MARKERS = 2000  # iteration ticks drawn; beyond that every k-th step
OUTPUT_TAIL_LINES = 200


def chart_series(series: Series, t: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    tt, yy = envelope(t, y, CHART_BUCKETS)
    return {
        "name": series.label,
        "color": series.color,
        "dash": series.dashed,
        "t": [round(float(v), 4) for v in tt],
        "y": [int(v) for v in yy],
    }


def _ram_chart(profile: Profile) -> dict[str, Any] | None:
    ram = profile.ram
    if ram is None or not len(ram):
        return None
    series = [
        chart_series(PROCESS_TREE, ram.t, process_tree_bytes(ram)),
        chart_series(MAIN_PEAK, ram.t, ram[MAIN_PEAK.key]),
    ]
    if int(ram[WORKERS.key].max()) > 0:
        series.append(chart_series(WORKERS, ram.t, ram[WORKERS.key]))
    limits = []
    capacity = ram_capacity(profile)
    if capacity is not None:
        limits.append({"label": capacity.label, "y": capacity.bytes})
    return {
        "id": "ram",
        "plot": "ram",
        "title": memory_name("ram", None),
        "series": series,
        "limits": limits,
    }


def memory_charts(profile: Profile) -> list[dict[str, Any]]:
    """The report's charts: RAM, then each GPU's (the HTML report's script and the notebook's
    SVG, profiler/report/svg.py, both draw these)."""
    ram_chart = _ram_chart(profile)
    return ([ram_chart] if ram_chart is not None else []) + _gpu_charts(profile)


def _gpu_charts(profile: Profile) -> list[dict[str, Any]]:
    nvml = profile.table("nvml")
    charts = []
    for device in gpu_devices(profile):
        rows = gpu_rows(profile, device)
        assert rows is not None  # every device listed has rows
        series = [
            chart_series(GPU_RESERVED_PEAK, rows.t, rows[GPU_RESERVED_PEAK.key]),
            chart_series(GPU_ALLOCATED_PEAK, rows.t, rows[GPU_ALLOCATED_PEAK.key]),
        ]
        limits = []
        mine = nvml["device"] == device if nvml is not None and len(nvml) else None
        if nvml is not None and mine is not None and mine.any():
            series.append(chart_series(DEVICE_USED, nvml.t[mine], nvml["used"][mine]))
            limits.append({"label": "device capacity", "y": int(nvml["total"][mine].max())})
        else:
            limits += [
                {"label": "device capacity", "y": d.total_bytes}
                for d in profile.info.devices
                if d.index == device and d.total_bytes
            ]
        charts.append(
            {
                "id": f"gpu{device}",
                "plot": "gpu",
                "title": memory_name("gpu", device),
                "series": series,
                "limits": limits,
            }
        )
    return charts


def _markers(profile: Profile) -> dict[str, Any]:
    steps = profile.steps
    iterations: list[float] = []
    every = 1
    if steps is not None:
        every = max(1, -(-len(steps) // MAX_MARKERS))
        iterations = [round(float(v), 4) for v in steps["end"][::every]]
    epochs = [round(e.t, 4) for e in profile.events_of("epoch")]
    events = []
    for event in profile.events:
        if event.type == "exception" and (event.get("oom") or event.get("uncaught")):
            kind = "OOM" if event.get("oom") else "error"
            name = str(event.get("exc_type", "")).rsplit(".", 1)[-1]
            events.append({"t": round(event.t, 4), "label": f"{kind}: {name}", "kind": "error"})
        elif event.type == "oom_observed":
            events.append({"t": round(event.t, 4), "label": "OOM (allocator)", "kind": "error"})
        elif event.type == "exit":
            label = f"exit: {profile.info.ended_by}"
            events.append({"t": round(event.t, 4), "label": label, "kind": "exit"})
    return {"iterations": iterations, "iteration_every": every, "epochs": epochs, "events": events}


def _location(location: Location) -> dict[str, Any]:
    return {
        "file": location.file,
        "line": location.line,
        "function": location.function
        if location.function and location.function != "<module>"
        else "",
        "code": location.code or "",
        "detail": location.detail,
    }


def _findings(diagnosis: Diagnosis) -> list[dict[str, Any]]:
    out = []
    for number, finding in enumerate(diagnosis.findings, 1):
        e = finding.evidence
        out.append(
            {
                "number": number,
                "rule": finding.rule,
                "severity": finding.severity,
                "severity_label": SEVERITY_LABELS[finding.severity],
                "title": finding.heading,
                "explanation": finding.explanation,
                "evidence": e.text,
                "span": e.where(),
                "start": round(e.start_s, 4),
                "end": round(e.end_s, 4),
                "plot": e.plot,
                "fixes": [get_fix(fix_id) for fix_id in finding.fixes],
                "where": [_location(location) for location in finding.where],
                "where_note": finding.where_note,
            }
        )
    return out


def _processes(profile: Profile) -> list[dict[str, Any]]:
    """The job's per-rank table (summary.summarize_processes); empty for one process."""
    if not profile.subprocesses:
        return []
    return [
        {**process_row(p), "pid": p.process.pid if p.process.pid is not None else ""}
        for p in summarize_processes(profile)
    ]


def _contents_row(row: ContentsRow, gone: bool = False) -> dict[str, Any]:
    return {
        "holder": row.holder + (" (gone)" if gone else ""),
        "place": row.place,
        "count": f"{row.count:,}",
        "bytes": size_text(row.bytes),
        "graph_bytes": size_text(row.graph_bytes),
        "with_graph": f"{row.with_graph:,}" if row.with_graph else "-",
        "devices": ", ".join(row.devices),
        "dtypes": ", ".join(row.dtypes),
        "shapes": ", ".join(row.shapes),
    }


def memory_contents(profile: Profile) -> dict[str, Any] | None:
    """What held live tensors at the last census and, when there are two or more, what
    changed since the first (largest growth first); None without censuses."""
    taken = censuses(profile)
    if not taken:
        return None
    first, last = taken[0], taken[-1]
    out: dict[str, Any] = {
        "at": census_label(last),
        "censuses": len(taken),
        "partial": partial_text(last) if is_partial(last) else "",
        "rows": [_contents_row(row) for row in contents(last)],
        "since": None,
        "changes": [],
    }
    if len(taken) >= 2:
        out["since"] = census_label(first)
        out["changes"] = [
            {
                **_contents_row(change.now, change.gone),
                "bytes_delta": format_signed_bytes(change.bytes_delta),
                "count_delta": f"{change.count_delta:+,}",
            }
            for change in changes(first, last)
        ]
    return out


def _exception(profile: Profile) -> dict[str, Any] | None:
    final = final_exception(profile)
    if final is None:
        return None
    script = script_path(profile.info)
    frames = [
        {
            "file": frame.file,
            "line": frame.line if frame.line is not None else "?",
            "function": frame.function,
            "source": frame.source,
            "user": is_user_frame(frame, script),
        }
        for frame in parse_traceback(final.get("traceback"))
    ]
    return {
        "type": str(final.get("exc_type", "")),
        "message": str(final.get("message", "")),
        "t": format_duration(final.t),
        "frames": frames,
    }


def _output_tail(profile: Profile) -> tuple[list[dict[str, Any]], int]:
    lines: list[dict[str, Any]] = []
    for chunk in profile.output:
        stderr = chunk.stream == STDERR
        parts = chunk.text.split("\n")
        for i, part in enumerate(parts):
            if i == 0 and lines and not lines[-1]["done"] and lines[-1]["stderr"] == stderr:
                lines[-1]["text"] += part
            elif part or i < len(parts) - 1:
                lines.append({"text": part, "stderr": stderr, "done": False})
            if i < len(parts) - 1:
                lines[-1]["done"] = True
    total = len(lines)
    return lines[-OUTPUT_TAIL_LINES:], total


ANATOMY_ROWS = 40  # module groups drawn; the rest summed in one row


def _percent(value: int, largest: int) -> float:
    return round(100.0 * value / max(largest, 1), 2)


def memory_anatomy(profile: Profile) -> dict[str, Any] | None:
    """What fills the peak, by module group: a stacked bar each, on one scale."""
    anatomy = main_anatomy(profile)
    if anatomy is None:
        reason = anatomy_skipped(profile)
        return None if reason is None else {"skipped": reason}
    groups = module_groups(anatomy)
    shown, rest = groups[:ANATOMY_ROWS], groups[ANATOMY_ROWS:]
    other = anatomy.other_bytes
    largest = max([g.total for g in shown] + [1])  # the modules' bars: their own scale
    whole = max(sum(value for _, _, value in composition(anatomy)), 1)
    rows = []
    for group in shown:
        rows.append(
            {
                "label": group.label,
                "total": format_bytes(group.total),
                "parts": [
                    {
                        "key": key,
                        "label": label,
                        "color": color,
                        "width": _percent(value, largest),
                        "bytes": format_bytes(value),
                    }
                    for (key, label, color, _), value in zip(PARTS, part_bytes(group), strict=True)
                    if value
                ],
            }
        )
    if rest:
        total = sum(g.total for g in rest)
        rows.append({"label": f"{len(rest)} more", "total": format_bytes(total), "parts": []})
    return {
        "skipped": "",
        "title": title(anatomy),
        "partial": PARTIAL_TEXT if anatomy.partial else "",
        "peak": [
            {
                "label": label,
                "color": color,
                "bytes": format_bytes(value),
                "width": _percent(value, whole),
            }
            for label, color, value in composition(anatomy)
        ],
        "other_text": "" if other is None else other_text(anatomy),
        "rows": rows,
        "legend": [{"label": label, "color": color} for _, label, color, _ in PARTS],
        "other_color": OTHER_COLOR,
    }


def report_context(profile: Profile, diagnosis: Diagnosis, name: str) -> dict[str, Any]:
    s = summarize(profile)
    info = profile.info

    def peak(label: str, p: Any, absent: str) -> dict[str, str]:
        if p is None:
            return {"label": label, "value": absent, "at": ""}
        return {"label": label, "value": format_bytes(p.bytes), "at": format_duration(p.t)}

    no_gpu = "— (the run did not use CUDA)"
    charts = memory_charts(profile)
    output, output_total = _output_tail(profile)
    findings = _findings(diagnosis)
    counts = {sev: sum(f["severity"] == sev for f in findings) for sev in SEVERITY_LABELS}
    return {
        "name": name,
        "run": {
            "target": info.target,
            "script": info.script or "",
            "module": info.module or "",
            "argv": info.argv,
            "cwd": info.cwd,
            "python": info.python,
            "python_version": info.python_version,
            "torch_version": info.torch_version or "",
            "cuda_version": info.cuda_version or "",
            "devices": [
                f"cuda:{d.index} {d.name} ({format_bytes(d.total_bytes)})" for d in info.devices
            ],
            "hostname": info.hostname,
            "start_time": info.start_time.replace("T", " "),
            "duration": format_duration(s.duration_s),
            "ended": info.ended_by,
            "failed": bool(info.signal) or bool(info.exit_code),
            "samples": f"{s.samples:,}",
            "interval_ms": f"{info.interval_ms:g}",
            # The one sentence when the recorder fell behind the interval; "" when it kept up.
            "sampling_text": sampling_behind_text(sampling_pace(profile)) or "",
            "iterations": f"{s.iterations:,}",
            "hooks": info.hooks,
            "memsight_version": info.memsight_version,
            "complete": profile.complete,
            "warnings": list(profile.warnings),
            # A damaged file: what of it was read ("" for a whole file), and whether no sample
            # was, so there is no verdict to give.
            "damage_read": damage_read_text(profile) or "",
            "nothing_judged": judged_nothing(profile),
        },
        "peaks": [
            peak("RAM, main process", s.ram, "no samples"),
            peak("RAM, process tree", s.ram_tree, "no samples"),
            peak("GPU allocated", s.gpu_allocated, no_gpu),
            peak("GPU reserved", s.gpu_reserved, no_gpu),
        ],
        "findings": findings,
        "finding_counts": counts,
        "failed_rules": dict(diagnosis.failed),
        "contents": memory_contents(profile),
        "anatomy": memory_anatomy(profile),
        "children": [
            {
                "pid": c.pid,
                "name": c.name,
                "cmdline": " ".join(c.cmdline),
                "first_seen": format_duration(c.first_seen),
                "exited": format_duration(c.exited) if c.exited is not None else "",
                "peak_uss": format_bytes(c.peak_uss),
                "peak_pss": format_bytes(c.peak_pss),
            }
            for c in s.children
        ],
        "processes": _processes(profile),
        "exception": _exception(profile),
        "output": output,
        "output_total": output_total,
        "output_not_recorded": unrecorded_output(profile),
        "chart_data": {
            "duration": round(max(profile.duration, 1e-3), 4),
            "charts": charts,
            "markers": _markers(profile),
            "findings": [
                {
                    "number": f["number"],
                    "start": f["start"],
                    "end": f["end"],
                    "plot": f["plot"],
                    "severity": f["severity"],
                }
                for f in findings
            ],
        },
    }
