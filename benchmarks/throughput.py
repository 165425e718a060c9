"""Sampling rate and agent-stream throughput of the recorder.

(a) 1 kHz sampling: `memsight run --interval-ms 1` on a script that keeps a core busy for
    about 10 s (benchmarks/workloads/busy.py). Reports the ram-table rows against
    duration / interval, the recorder's missed_ticks (from the recording_end event) and the
    gaps between consecutive sample timestamps. Target: at least 95 % of the expected rows.

(b) Agent stream: a real profiler.recorder.server.AgentServer, with a handler that does what
    Recording does with each frame (rows into a TableBuffer, events re-framed into a
    ProfileWriter, a flush thread draining every 200 ms), fed over a real loopback socket by
    a client in a separate process that speaks the protocol directly: HELLO with the token,
    the GPU schema, then GPU row batches and EVENTS frames as fast as the socket takes them.
    Every row and event carries a sequence number; the written file is loaded back with
    load_profile and every number must be there, once, in order. Target: no loss, and
    sustained rows/s and events/s each at least --margin (default 10) times the 1,000/s that
    1 kHz sampling plus 1k events/s needs.

The client runs in its own process, as the agent does inside the target, so it does not
share the recorder's GIL.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    WORKLOADS,
    last_json_line,
    memsight_cmd,
    percentile,
    print_table,
    run_process,
    verdict,
    write_result,
)

from memsight.profiler import protocol
from memsight.profiler.profile.storage import load_profile
from memsight.profiler.profile.writer import ProfileWriter
from memsight.profiler.protocol import GPU_TABLE, TableSchema
from memsight.profiler.recorder.blocks import TableBuffer
from memsight.profiler.recorder.server import AgentServer

NAME = "throughput"
SAMPLE_FRACTION_MIN = 0.95
REQUIRED_RATE = 1000.0  # rows/s of 1 kHz sampling; events/s of a busy training loop
FLUSH_S = 0.2  # Recording.FLUSH_S
WORKLOAD = WORKLOADS / "busy.py"
GPU_DTYPE = np.dtype([(name, "<" + code) for name, code in GPU_TABLE.columns])


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--seconds", type=float, default=10.0, help="length of the sampled run in (a) (default 10)"
    )
    p.add_argument(
        "--interval-ms", type=float, default=1.0, help="sampling interval in (a) (default 1)"
    )
    p.add_argument(
        "--stream-seconds",
        type=float,
        default=5.0,
        help="how long the client sends in (b) (default 5)",
    )
    p.add_argument(
        "--batch-rows",
        type=int,
        default=100,
        help="GPU rows per SAMPLES frame in (b) (default 100: the agent's 100 ms flush at 1 kHz)",
    )
    p.add_argument(
        "--batch-events", type=int, default=100, help="events per EVENTS frame in (b) (default 100)"
    )
    p.add_argument(
        "--margin",
        type=float,
        default=10.0,
        help="required multiple of 1,000/s in (b) (default 10)",
    )
    p.add_argument("--only", choices=["a", "b"], help="run one part only")
    p.add_argument(
        "--client", nargs=3, metavar=("PORT", "TOKEN", "SECONDS"), help=argparse.SUPPRESS
    )
    return p.parse_args()


# -- (a) sampling at 1 kHz ------------------------------------------------------------------------


def part_a(opts: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memsight-rate-") as tmp:
        out = Path(tmp) / "rate.memsight"
        proc = run_process(
            memsight_cmd(WORKLOAD, out, ["--seconds", str(opts.seconds)], opts.interval_ms)
        )
        last_json_line(proc.stdout)
        profile = load_profile(out)
    ram = profile.ram
    assert ram is not None and len(ram) > 1, "no ram samples recorded"
    t = ram.t
    span = float(t[-1] - t[0])
    expected = int(span / (opts.interval_ms / 1000.0)) + 1
    gaps = (np.diff(t) * 1000.0).tolist()
    end = next(profile.events_of("recording_end"), None)
    result = {
        "interval_ms": opts.interval_ms,
        "span_s": span,
        "samples": len(ram),
        "expected": expected,
        "fraction": len(ram) / expected,
        "recorder_samples": end.get("samples") if end else None,
        "missed_ticks": end.get("missed_ticks") if end else None,
        "gap_ms_median": percentile(gaps, 50),
        "gap_ms_p99": percentile(gaps, 99),
        "gap_ms_p999": percentile(gaps, 99.9),
        "gap_ms_max": max(gaps),
        "gaps_over_2x": sum(g > 2 * opts.interval_ms for g in gaps),
    }
    result["passed"] = result["fraction"] >= SAMPLE_FRACTION_MIN
    return result


# -- (b) agent stream -----------------------------------------------------------------------------


class CountingRecorder:
    """An AgentHandler doing Recording's work per frame, counting what arrives."""

    def __init__(self, path: Path) -> None:
        self.writer = ProfileWriter(path)
        self.tables: dict[int, TableBuffer] = {}
        self.lock = threading.Lock()
        self.rows = 0
        self.event_frames = 0
        self.row_frames = 0
        self.logs: list[tuple[str, dict[str, Any]]] = []
        self.first_frame: float | None = None
        self.last_frame = 0.0
        self._halt = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="bench-flush", daemon=True)
        self.writer.write(protocol.encode_json_frame(protocol.RUN, {"t0_ns": time.monotonic_ns()}))

    def start(self) -> None:
        self._flusher.start()

    def _seen(self) -> None:
        now = time.perf_counter()
        if self.first_frame is None:
            self.first_frame = now
        self.last_frame = now

    def on_hello(self, hello: dict[str, Any]) -> None:
        self.logs.append(("hello", hello))

    def on_schema(self, schema: TableSchema) -> None:
        with self.lock:
            self.tables[schema.id] = TableBuffer(schema)
        self.writer.write(schema.frame())

    def on_rows(self, schema: TableSchema, rows: list[tuple[int, ...]]) -> None:
        self._seen()
        self.tables[schema.id].extend(rows)
        self.rows += len(rows)
        self.row_frames += 1

    def on_events(self, payload: bytes, events: list[dict[str, Any]] | None = None) -> None:
        self._seen()
        self.writer.write(
            protocol.encode_frame(protocol.EVENTS, payload, compress=len(payload) > 1024)
        )
        self.event_frames += 1

    def on_log(self, kind: str, **data: Any) -> None:
        self.logs.append((kind, data))

    def flush(self) -> None:
        with self.lock:
            tables = list(self.tables.values())
        for table in tables:
            frame = table.drain()
            if frame:
                self.writer.write(frame)
        self.writer.flush()

    def _flush_loop(self) -> None:
        while not self._halt.wait(FLUSH_S):
            self.flush()

    def close(self) -> None:
        self._halt.set()
        self._flusher.join()
        self.flush()
        self.writer.close()


def client_main(port: int, token: str, seconds: float, batch_rows: int, batch_events: int) -> None:
    """The agent's side: send as fast as the socket accepts, each item numbered."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(protocol.hello_frame(token, os.getpid()) + GPU_TABLE.frame())
    rows = np.zeros(batch_rows, dtype=GPU_DTYPE)
    ramp = np.arange(batch_rows, dtype=np.int64)
    sent_rows = sent_events = frames = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        now = time.monotonic_ns()
        rows["t"] = now + ramp * 1000
        rows["allocated"] = sent_rows + ramp  # the sequence number of each row
        rows["reserved"] = 2 << 30
        events = [
            {"t": now + i, "type": "step", "seq": sent_events + i} for i in range(batch_events)
        ]
        sock.sendall(
            GPU_TABLE.rows_frame(rows.tobytes())
            + protocol.encode_json_frame(protocol.EVENTS, events)
        )
        sent_rows += batch_rows
        sent_events += batch_events
        frames += 2
    elapsed = time.perf_counter() - start
    sock.close()
    print(
        json.dumps({"rows": sent_rows, "events": sent_events, "frames": frames, "send_s": elapsed}),
        flush=True,
    )


def part_b(opts: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memsight-stream-") as tmp:
        path = Path(tmp) / "stream.memsight"
        recorder = CountingRecorder(path)
        token = "bench-" + os.urandom(8).hex()
        server = AgentServer(token, recorder)
        recorder.start()
        server.start()
        client = subprocess.run(
            [
                sys.executable,
                __file__,
                "--client",
                str(server.port),
                token,
                str(opts.stream_seconds),
                "--batch-rows",
                str(opts.batch_rows),
                "--batch-events",
                str(opts.batch_events),
            ],
            # A server that stopped reading would leave the client blocked in sendall.
            capture_output=True,
            text=True,
            check=True,
            timeout=opts.stream_seconds + 120,
        )
        sent = last_json_line(client.stdout)
        server.agent_gone.wait(10.0)
        server.close()
        recorder.close()
        received = {"rows": recorder.rows, "event_frames": recorder.event_frames}
        span = recorder.last_frame - (recorder.first_frame or recorder.last_frame)
        profile = load_profile(path)
        file_bytes = path.stat().st_size

    gpu = profile.table("gpu")
    seq_rows = gpu["allocated"] if gpu is not None else np.empty(0, dtype=np.int64)
    steps = [e for e in profile.events if e.type == "step"]
    seq_events = np.fromiter((e.get("seq", -1) for e in steps), dtype=np.int64, count=len(steps))
    rows_ok = len(seq_rows) == sent["rows"] and np.array_equal(seq_rows, np.arange(sent["rows"]))
    events_ok = len(seq_events) == sent["events"] and np.array_equal(
        seq_events, np.arange(sent["events"])
    )
    rejected = [
        data for kind, data in recorder.logs if kind in ("frame_rejected", "connection_rejected")
    ]
    span = max(span, 1e-9)
    result = {
        "sent": sent,
        "received_rows": received["rows"],
        "rows_in_file": len(seq_rows),
        "events_in_file": len(seq_events),
        "rows_in_order": rows_ok,
        "events_in_order": events_ok,
        "rejections": rejected[:10],
        "receive_span_s": span,
        "rows_per_s": len(seq_rows) / span,
        "events_per_s": len(seq_events) / span,
        "mbytes_per_s": (sent["rows"] * GPU_TABLE.row.size) / span / 1e6,
        "file_bytes": file_bytes,
        "batch_rows": opts.batch_rows,
        "batch_events": opts.batch_events,
    }
    needed = opts.margin * REQUIRED_RATE
    result["passed"] = (
        rows_ok
        and events_ok
        and not rejected
        and result["rows_per_s"] >= needed
        and result["events_per_s"] >= needed
    )
    return result


# -- report ---------------------------------------------------------------------------------------


def report_a(a: dict[str, Any]) -> None:
    print_table(
        [
            "interval ms",
            "span s",
            "samples",
            "expected",
            "achieved",
            "missed ticks",
            "gap median ms",
            "gap p99 ms",
            "gap p99.9 ms",
            "gap max ms",
            "gaps > 2x",
        ],
        [
            [
                a["interval_ms"],
                a["span_s"],
                a["samples"],
                a["expected"],
                f"{100 * a['fraction']:.1f} %",
                a["missed_ticks"],
                a["gap_ms_median"],
                a["gap_ms_p99"],
                a["gap_ms_p999"],
                a["gap_ms_max"],
                a["gaps_over_2x"],
            ]
        ],
        title=f"(a) memsight run --interval-ms {a['interval_ms']:g} on a busy {a['span_s']:.1f} s script",
    )


def report_b(b: dict[str, Any], margin: float) -> None:
    print_table(
        ["", "sent", "in file", "in order", "per second", f"needed ({margin:g}x 1k/s)"],
        [
            [
                "GPU rows",
                b["sent"]["rows"],
                b["rows_in_file"],
                b["rows_in_order"],
                b["rows_per_s"],
                margin * REQUIRED_RATE,
            ],
            [
                "events",
                b["sent"]["events"],
                b["events_in_file"],
                b["events_in_order"],
                b["events_per_s"],
                margin * REQUIRED_RATE,
            ],
        ],
        title=f"(b) agent stream through AgentServer over {b['receive_span_s']:.2f} s "
        f"({b['batch_rows']} rows + {b['batch_events']} events per pair of frames)",
    )
    if b["rejections"]:
        print(f"rejections: {b['rejections']}")


def main() -> int:
    opts = parse_args()
    if opts.client:
        port, token, seconds = opts.client
        client_main(int(port), token, float(seconds), opts.batch_rows, opts.batch_events)
        return 0
    result: dict[str, Any] = {
        "target": {
            "a_sample_fraction_min": SAMPLE_FRACTION_MIN,
            "b_no_loss": True,
            "b_rate_min_per_s": opts.margin * REQUIRED_RATE,
        }
    }
    lines = []
    if opts.only in (None, "a"):
        a = part_a(opts)
        report_a(a)
        result["a"] = a
        lines.append(
            verdict(
                "throughput (a) sampling",
                a["passed"],
                f"{a['samples']:,} of {a['expected']:,} expected samples "
                f"({100 * a['fraction']:.1f} %, target >= {100 * SAMPLE_FRACTION_MIN:g} %), "
                f"missed_ticks {a['missed_ticks']}",
            )
        )
    if opts.only in (None, "b"):
        b = part_b(opts)
        report_b(b, opts.margin)
        result["b"] = b
        lines.append(
            verdict(
                "throughput (b) agent stream",
                b["passed"],
                f"{b['rows_per_s']:,.0f} rows/s and {b['events_per_s']:,.0f} events/s, "
                f"loss: {'none' if b['rows_in_order'] and b['events_in_order'] else 'YES'} "
                f"(target: no loss, >= {opts.margin * REQUIRED_RATE:,.0f}/s each)",
            )
        )
    passed = all(result[k]["passed"] for k in ("a", "b") if k in result)
    result.update(
        {
            "passed": passed,
            "verdict": lines,
            "settings": {k: v for k, v in vars(opts).items() if k != "client"},
        }
    )
    write_result(NAME, result)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
