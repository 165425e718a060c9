"""An agent that collects what the instrumentation sends, in memory: the stand-in the
instrumentation's in-process tests run it with."""

from __future__ import annotations

from typing import Any

from memsight.profiler import protocol


class CollectingAgent:
    """Stands in for the agent: keeps events and table rows (as dicts) in memory."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.rows: dict[str, list[dict[str, int]]] = {"spans": [], "steps": [], "gpu": []}
        self.names: dict[str, int] = {}
        self.errors: list[tuple[str, BaseException]] = []
        self.reader: Any = None

    def event(self, type_: str, t: int | None = None, **data: Any) -> None:
        self.events.append({"type": type_, "t": t, **data})

    def row(self, schema: protocol.TableSchema, values: tuple[int, ...]) -> None:
        schema.row.pack(*values)  # what the real agent does: the row must fit its schema
        self.rows[schema.name].append(
            dict(zip([c for c, _ in schema.columns], values, strict=True))
        )

    def name_id(self, name: str) -> int:
        return self.names.setdefault(name, len(self.names) + 1)

    def error(self, where: str, exc: BaseException) -> None:
        self.errors.append((where, exc))

    def report_exception(self, exc: BaseException, where: str, uncaught: bool = False) -> None:
        self.events.append({"type": "exception", "where": where, "exc": repr(exc)})

    def cuda_reader(self) -> Any:
        return self.reader

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def forwards(self) -> list[dict[str, Any]]:
        names = {v: k for k, v in self.names.items()}
        return [
            {
                **r,
                "module": names[r["module"]],
                "training": bool(r["flags"] & protocol.FLAG_TRAINING),
                "grad": bool(r["flags"] & protocol.FLAG_GRAD),
                "requires_grad": bool(r["flags"] & protocol.FLAG_REQUIRES_GRAD),
            }
            for r in self.rows["spans"]
            if r["kind"] == protocol.SPAN_FORWARD
        ]

    def backwards(self) -> list[dict[str, Any]]:
        spans = self.rows["spans"]
        return [
            {
                **r,
                "forwards": [
                    x["id"] for x in spans if x["kind"] == protocol.SPAN_LINK and x["t"] == r["t"]
                ],
            }
            for r in spans
            if r["kind"] == protocol.SPAN_BACKWARD
        ]

    def steps(self) -> list[dict[str, Any]]:
        return [{**r, "cleared": protocol.CLEARED_NAMES[r["cleared"]]} for r in self.rows["steps"]]
